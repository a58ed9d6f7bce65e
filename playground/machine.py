"""What a measurement was taken on: CPU, its kind, cores, threads and library versions, for every committed result
file; and giving the memory a run freed back to the system (`release_freed_memory`).

A CPU's *kind* (`cpu_kind`) is what decides how our kernels run on it: the vendor, the core generation where the
family and model say it (AMD), and the vector and matrix units the kernels can use (AVX2, AVX-512, AVX-512 BF16,
AMX). It is a short key, safe as a file name ("amd-zen4-avx512-bf16"); `kind_words` says it in prose, and
`nearest_kind` picks, among committed kinds, the one whose figures best stand for another machine.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import platform
import re

import torch
import transformers

from playground.blas import cpu_flags, first_processor

VENDORS = {"AuthenticAMD": "amd", "GenuineIntel": "intel"}
AMD_FAMILIES = {"zen2": 23, "zen3": 25, "zen4": 25, "zen5": 26}  # Zen / Zen+ share family 23 with Zen 2
ZEN4_MODELS = (range(0x10, 0x20), range(0x60, 0x80), range(0xA0, 0xB0))  # family 25's Zen 4 parts; the rest Zen 3
UNITS = ("avx2", "avx512", "bf16", "amx")
# the instruction-set flags our kernels and the libraries' can use, as /proc/cpuinfo names them: a result file records
# those its machine has (`cpu_flags`), beside the kind they sum up
KERNEL_FLAGS = ("avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16")
UNIT_WORDS = {"avx2": "AVX2", "avx512": "AVX-512", "bf16": "AVX-512 BF16", "amx": "AMX"}


def machine_info(device: str) -> dict:
    fields = first_processor()
    cpu = fields.get("model name") or platform.processor()
    flags = cpu_flags(fields)[1]
    info = {"cpu": cpu or "unknown", "cpu_kind": cpu_kind(fields),
            "cpu_flags": [flag for flag in KERNEL_FLAGS if flag in flags], "cpu_family": fields.get("cpu family"),
            "cpu_model": fields.get("model"), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "platform": platform.platform(), "device": device,
            "mkl_cbwr": os.environ.get("MKL_CBWR")}
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def cpu_name(machine: dict) -> str:
    """A result file's CPU as prose: 'Intel(R) Xeon(R) Processor' -> 'Intel Xeon'."""
    return re.sub(r"\((R|TM)\)| (CPU|Processor)\b.*", "", machine["cpu"]).strip()


def _number(text: str | None) -> int | None:
    return int(text) if text and text.strip().isdigit() else None


def _generation(vendor: str, family: int | None, model: int | None, flags: set[str]) -> str | None:
    """AMD's core generation from family and model ('zen4'); None where the numbers do not say it (Intel's family 6
    spans a decade of cores: its units say more)."""
    if vendor != "amd" or family is None:
        return None
    if family == 25:
        zen4 = any(model in r for r in ZEN4_MODELS) if model is not None else "avx512f" in flags
        return "zen4" if zen4 else "zen3"
    return {23: "zen2", 26: "zen5"}.get(family)


def _units(flags: set[str]) -> list[str]:
    units = []
    if "avx2" in flags:
        units.append("avx2")
    if "avx512f" in flags:
        units = ["avx512"]  # AVX-512 implies AVX2 here: the key names the widest
        if "avx512_bf16" in flags:
            units.append("bf16")
    if "amx_tile" in flags:
        units.append("amx")
    return units


def cpu_kind(fields: dict[str, str] | None = None) -> str:
    """The kind of the CPU whose /proc/cpuinfo fields are given (this machine's by default): vendor, generation where
    known, widest vector units, bf16 and AMX ('amd-zen4-avx512-bf16', 'intel-avx512-bf16-amx', 'amd-zen3-avx2')."""
    fields = first_processor() if fields is None else fields
    vendor_id, flags = cpu_flags(fields)
    vendor = VENDORS.get(vendor_id) or ("arm" if "CPU implementer" in fields else vendor_id.lower() or "unknown")
    generation = _generation(vendor, _number(fields.get("cpu family")), _number(fields.get("model")), flags)
    units = _units(flags) or ["noavx2"]
    return "-".join([re.sub(r"[^a-z0-9]+", "", vendor) or "unknown", *([generation] if generation else []), *units])


def _parts(kind: str) -> tuple[str, str | None, set[str]]:
    vendor, *rest = kind.split("-")
    generation = rest.pop(0) if rest and rest[0].startswith("zen") else None
    return vendor, generation, set(rest)


def kind_words(kind: str) -> str:
    """'amd-zen4-avx512-bf16' -> 'AMD Zen 4, family 25: AVX-512, AVX-512 BF16, no AMX'."""
    vendor, generation, units = _parts(kind)
    name = {"amd": "AMD", "intel": "Intel"}.get(vendor, vendor)
    if generation:
        name += f" Zen {generation[3:]}, family {AMD_FAMILIES[generation]}"
    if "noavx2" in units:
        return f"{name}: no AVX2"
    has = [UNIT_WORDS[u] for u in UNITS if u in units]
    return f"{name}: {', '.join(has)}" + ("" if "amx" in units else ", no AMX")


def recorded_kind(machine: dict) -> str | None:
    """The kind a result file's machine record names; None where it was written before kinds were recorded."""
    return machine.get("cpu_kind")


def nearest_kind(kind: str, committed: list[str]) -> str | None:
    """Of the committed kinds, the one nearest to `kind`: same widest vector units and AMX or not (what decides our
    kernels' speed), then bf16, vendor and generation alike; None where none shares the vector and matrix units."""
    vendor, generation, units = _parts(kind)

    def core(u: set[str]) -> tuple[bool, bool, bool]:
        return "avx512" in u, "avx2" in u, "amx" in u

    alike = [c for c in committed if core(_parts(c)[2]) == core(units)]
    if not alike:
        return None
    return max(alike, key=lambda c: (c == kind, ("bf16" in _parts(c)[2]) == ("bf16" in units),
                                     _parts(c)[0] == vendor, _parts(c)[1] == generation))


@functools.cache
def _malloc_trim():
    """glibc's malloc_trim, or None where the C library has none (musl, macOS)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def release_freed_memory() -> bool:
    """Give the system back the heap pages freed since the last call (glibc's malloc_trim); whether it could. glibc
    keeps freed small allocations (a run's tensors and Python objects below its mmap threshold) in its arenas for
    reuse, so the app's resident size only rose: in one app process here, two chats left 138 MiB that a trim
    returned. Called after the weights load (app.py) and once the model is idle after a run, a replay or a benchmark
    (ui.line.release_memory_when_idle)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
