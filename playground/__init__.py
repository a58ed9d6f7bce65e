"""EAGLE Playground: speculative decoding with EAGLE-3 and EAGLE-3.1 drafters, shown live."""

from playground.blas import prefer_avx2_kernels

prefer_avx2_kernels()  # before any matrix multiply (MKL reads its dispatch setting once)
