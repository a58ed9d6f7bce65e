"""CPU matrix-multiply dispatch: let MKL use its AVX2 kernels on AMD processors.

PyTorch's CPU wheel multiplies float32 matrices with Intel MKL, which on a non-Intel processor picks generic
kernels. For the skinny products of decoding (1 to 9 rows against a weight matrix) that makes verifying k + 1
tokens cost ~1.7x a single-token step on an AVX2 AMD EPYC; with MKL's AVX2 code path (`MKL_CBWR=AVX2`) it costs
~1.2x, which is what lets a speculative step pay on a CPU. Plain decoding runs the same kernels, so the measured
speedup compares like with like. MKL reads the variable at its first call, so this must run before any matmul.
"""

from __future__ import annotations

import os
from pathlib import Path


def cpu_flags(cpuinfo: str) -> tuple[str, set[str]]:
    """(vendor id, feature flags) of the first processor in a /proc/cpuinfo text."""
    vendor, flags = "", set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id" and not vendor:
            vendor = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    return vendor, flags


def prefer_avx2_kernels(environ=os.environ, cpuinfo_path: Path = Path("/proc/cpuinfo")) -> bool:
    """Set MKL_CBWR=AVX2 on an AMD processor with AVX2 unless the user set it; True when this call set it."""
    if "MKL_CBWR" in environ or not cpuinfo_path.is_file():
        return False
    vendor, flags = cpu_flags(cpuinfo_path.read_text(errors="replace"))
    if vendor != "AuthenticAMD" or not {"avx2", "fma"} <= flags:
        return False
    environ["MKL_CBWR"] = "AVX2"
    return True
