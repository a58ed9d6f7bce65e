"""What a measurement was taken on: CPU, cores, threads and library versions, for every committed result file; and
giving the memory a run freed back to the system (`release_freed_memory`)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import platform
import re

import torch
import transformers

from playground.blas import first_processor


def machine_info(device: str) -> dict:
    cpu = first_processor().get("model name") or platform.processor()
    info = {"cpu": cpu or "unknown", "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "platform": platform.platform(), "device": device,
            "mkl_cbwr": os.environ.get("MKL_CBWR")}
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def cpu_name(machine: dict) -> str:
    """A result file's CPU as prose: 'Intel(R) Xeon(R) Processor' -> 'Intel Xeon'."""
    return re.sub(r"\((R|TM)\)| (CPU|Processor)\b.*", "", machine["cpu"]).strip()


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
