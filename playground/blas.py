"""CPU runtime settings that must precede torch: MKL's kernels on AMD processors, and how long OpenMP threads spin.

`bound_openmp_spin`: GNU OpenMP (PyTorch's CPU wheels) keeps an idle thread spinning for 300,000 iterations before
it sleeps, so after each multi-threaded product the helper thread holds its core while the next, one-threaded phase
runs, competing with a neighbour process or the page the app renders. Bounded to 10,000 iterations it sleeps 30 times
sooner; a verification of 5 rows on two threads was as fast either way here (49.2 against 47.6 ms, inside the
noise), while 1,000 iterations slowed it (60 ms). engine/threads.py samples the machine's load between products and
counts a still-spinning helper as this process's own. libgomp reads the variable when it loads, so this runs on
`import playground`.

`prefer_avx2_kernels`:

PyTorch's CPU wheel multiplies float32 matrices with Intel MKL, which on a non-Intel processor picks generic
kernels. For the skinny products of decoding (1 to 9 rows against a weight matrix) that makes verifying k + 1
tokens cost ~1.7x a single-token step on an AVX2 AMD EPYC; with MKL's AVX2 code path (`MKL_CBWR=AVX2`) it costs
~1.2x, which is what lets a speculative step pay on a CPU. Plain decoding runs the same kernels, so the measured
speedup compares like with like. MKL reads the variable at its first call, so this must run before any matmul.
"""

from __future__ import annotations

import os
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")


def first_processor(cpuinfo_path: Path = CPUINFO) -> dict[str, str]:
    """The fields of the first processor in /proc/cpuinfo (vendor_id, model name, flags, …); {} where there is none."""
    if not cpuinfo_path.is_file():
        return {}
    fields: dict[str, str] = {}
    for line in cpuinfo_path.read_text(errors="replace").splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_flags(fields: dict[str, str]) -> tuple[str, set[str]]:
    """(vendor id, feature flags) from `first_processor`'s fields."""
    return fields.get("vendor_id", ""), set(fields.get("flags", "").split())


def prefer_avx2_kernels(environ=os.environ, cpuinfo_path: Path = CPUINFO) -> bool:
    """Set MKL_CBWR=AVX2 on an AMD processor with AVX2 unless the user set it; True when this call set it."""
    if "MKL_CBWR" in environ:
        return False
    vendor, flags = cpu_flags(first_processor(cpuinfo_path))
    if vendor != "AuthenticAMD" or not {"avx2", "fma"} <= flags:
        return False
    environ["MKL_CBWR"] = "AVX2"
    return True


SPIN_COUNT = "10000"


def bound_openmp_spin(environ=os.environ) -> bool:
    """Set GOMP_SPINCOUNT unless the user chose a wait policy or a spin count; True when this call set it."""
    if "GOMP_SPINCOUNT" in environ or "OMP_WAIT_POLICY" in environ:
        return False
    environ["GOMP_SPINCOUNT"] = SPIN_COUNT
    return True
