"""EAGLE Playground: speculative decoding with EAGLE-3 and EAGLE-3.1 drafters, shown live."""

from playground.blas import bound_openmp_spin, prefer_avx2_kernels

prefer_avx2_kernels()  # before any matrix multiply (MKL reads its dispatch setting once)
bound_openmp_spin()  # before torch loads GNU OpenMP, which reads it once
