"""How much memory vLLM's engines get and need: the KV cache on the CPU; on a GPU each engine kind's share
of it, and whether the weights (counted from the checkpoints' safetensors headers, or where none can be read estimated
from config.json files) fit that share, the whole budget, or nothing.

GPU memory: every engine the app starts on a GPU gets an explicit share of each of its GPUs
(`gpu_memory_utilization`, GPU_SHARES: 0.28 for plain decoding's, 0.31 for each of two drafter engines), so that
the engines held at once sum to GPU_MEMORY_BUDGET (0.9), where vLLM's default gave each engine the whole GPU (0.92
in vLLM 0.32) and the second could not start. A preset's own engine_options["gpu_memory_utilization"] sets every
engine's share, and is refused in one line where the engines held at once would add above the budget. Before the
first engine starts, the weights (and one max_model_len sequence of KV cache) are counted or estimated
(`memory_need`) against the GPU's total memory (NVML): where a share is too small but the whole budget is not, the
GPU has room for one engine and the backend runs one engine at a time with the whole budget, without a live plain
baseline (`gpu_plan`, one line says so); where even the budget is too small, it refuses. On the CPU nothing
changes (CPU_ENGINE_ARGS).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable

from playground.presets import Preset

MAX_ENGINES = 3  # plain decoding and two drafters: a comparison and its live baselines, with no restart
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
STORED_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
                "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1}  # a safetensors dtype's bytes
FLOAT_KINDS = {"F64", "F32", "F16", "BF16"}  # loaded at the engine's dtype (unless the checkpoint is quantized)


class GpuMemoryError(ValueError):
    """The engines cannot have the GPU memory they would need; the message says why in one line."""


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


@dataclasses.dataclass(frozen=True)
class MemoryNeed:
    """What one engine needs on each of its GPUs at the least, from the checkpoints or their configs: weights and one
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


def _quantized(config: dict) -> bool:
    return bool(config.get("quantization_config") or _layer_config(config).get("quantization_config"))


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


def weight_bytes(config: dict, dtype: str, stored: dict[str, int] | None = None,
                 drafter: bool = False) -> tuple[float, bool, bool]:
    """(bytes the weights take, whether that is a lower bound, whether they were counted from the checkpoint).
    Counted from the checkpoint's safetensors headers where given (`stored`, parameters by stored dtype): at the
    engine's dtype, or for a quantized checkpoint as stored (vLLM keeps the packed weights, scales and 16-bit parts
    as they are; integer tensors, such as a drafter's vocabulary maps, are always kept as stored); else estimated from
    config.json (parameter_count, bytes_per_parameter)."""
    if stored and all(kind in STORED_BYTES for kind in stored):
        as_stored = _quantized(config)
        engine_bytes = DTYPE_BYTES.get(dtype, 2)
        return float(sum(n * (engine_bytes if kind in FLOAT_KINDS and not as_stored else STORED_BYTES[kind])
                         for kind, n in stored.items())), False, True
    per_parameter, lower = bytes_per_parameter(config, dtype)
    return parameter_count(config, drafter) * per_parameter, lower, False


def memory_need(preset: Preset, target_config: dict, drafter_configs: Iterable[dict] = (),
                target_stored: dict[str, int] | None = None,
                drafters_stored: Iterable[dict[str, int] | None] = ()) -> MemoryNeed:
    """Per GPU, what each engine kind needs at the least: the target's weights (split over tensor_parallel_size
    GPUs) and one max_model_len sequence of KV cache (the preset's max_model_len, else the model's positions; vLLM
    refuses to start an engine that cannot hold one), plus, for a drafter engine, the largest drafter's. The weights
    are counted from the checkpoints' headers where given (`target_stored`, `drafters_stored` in the drafters'
    order: `fit.stored_parameters`), else estimated from the configs."""
    tp = preset.tensor_parallel_size
    weights, lower, counted = weight_bytes(target_config, preset.dtype, target_stored)
    weights /= tp
    kv_dtype = 1.0 if str(preset.engine_options.get("kv_cache_dtype", "auto")).startswith("fp8") \
        else float(DTYPE_BYTES.get(preset.dtype, 2))
    positions = int(preset.engine_options.get("max_model_len")
                    or _layer_config(target_config).get("max_position_embeddings") or 4096)
    cache = kv_bytes_per_token(target_config, kv_dtype, tp) * positions
    extra = 0.0
    drafter_configs = list(drafter_configs)
    for config, stored in zip(drafter_configs, list(drafters_stored) or [None] * len(drafter_configs), strict=True):
        drafter_weights, _, _ = weight_bytes(config, preset.dtype, stored, drafter=True)
        extra = max(extra, drafter_weights / tp + kv_bytes_per_token(config, kv_dtype, tp) * positions)
    if lower:
        name = f"weights at {8 * bytes_per_parameter(target_config, preset.dtype)[0]:g} bits or more"
    else:
        name = "weights as stored" if counted and _quantized(target_config) else f"{preset.dtype} weights"
    source = "counted from the checkpoint" if counted else "estimated from config.json"
    per_gpu = f"on each of {tp} GPUs: " if tp > 1 else ""
    what = f"{per_gpu}{name} {_gib(weights)} ({source}) + a KV cache of {positions} tokens {_gib(cache)}"
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


# (a drafter's source, a method needing no checkpoint or None: plain; k; the method's settings, as args.Settings)
EngineKey = tuple[str | None, int, tuple[tuple[str, int | float], ...]]


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
