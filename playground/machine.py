"""What a measurement was taken on: CPU, cores, threads and library versions, for every committed result file."""

from __future__ import annotations

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
