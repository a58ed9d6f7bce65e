"""GPU memory of the vLLM engines the app starts, from their arguments alone (no engine starts, no GPU): each engine
kind's explicit share of the GPU, the shares of the engines held at once within the budget, a preset's own share
refused in one line where it adds above it, the weights estimated from config.json against a GPU's size (one engine
at a time where the GPU has room for one), tensor parallelism counted per GPU, and the CPU's arguments unchanged."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest

from playground.backends.vllm import VllmBackend, VllmError, memory_setting, pool, serve_command
from playground.backends.vllm.args import engine_kwargs
from playground.backends.vllm.memory import (
    CPU_ENGINE_ARGS,
    GPU_MEMORY_BUDGET,
    GPU_SHARES,
    MAX_ENGINES,
    GpuMemoryError,
    GpuPlan,
    engines_to_stop,
    gpu_plan,
    gpu_shares,
    kv_bytes_per_token,
    memory_need,
    parameter_count,
)
from playground.engine.checkpoint import CheckpointError
from playground.presets import Preset, get_preset
from playground.request.fit import stored_parameters

GiB = 2**30
ROOT = Path(__file__).resolve().parents[2]
# config.json values of meta-llama/Llama-3.1-8B-Instruct and yuhuili/EAGLE3-LLaMA3.1-Instruct-8B (their model cards)
LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
            "vocab_size": 128256, "max_position_embeddings": 131072, "tie_word_embeddings": False,
            "rms_norm_eps": 1e-5, "rope_theta": 500000.0}
LLAMA_8B_EAGLE3 = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096,
                   "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
                   "num_hidden_layers": 1, "vocab_size": 128256, "draft_vocab_size": 32000,
                   "max_position_embeddings": 2048, "tie_word_embeddings": False}
# DeepSeek-V3's published config (671B parameters, the MTP module aside); Kimi K2 is the same architecture with 384
# experts, one dense layer, 64 heads and a 163840-token vocabulary (1T parameters); K2.6 wraps it in text_config
DEEPSEEK_V3 = {"hidden_size": 7168, "num_hidden_layers": 61, "first_k_dense_replace": 3, "n_routed_experts": 256,
               "n_shared_experts": 1, "moe_intermediate_size": 2048, "intermediate_size": 18432, "vocab_size": 129280,
               "num_attention_heads": 128, "num_key_value_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512,
               "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "moe_layer_freq": 1,
               "max_position_embeddings": 163840}
KIMI_K2 = {**DEEPSEEK_V3, "first_k_dense_replace": 1, "n_routed_experts": 384, "num_attention_heads": 64,
           "num_key_value_heads": 64, "vocab_size": 163840, "max_position_embeddings": 262144}
KIMI_K26_NVFP4 = {"architectures": ["KimiK25ForConditionalGeneration"], "text_config": KIMI_K2,
                  "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}
H100 = 80 * GiB  # NVML reports ~79.6 GiB for an H100 80GB; round figures keep the arithmetic readable
L4 = 22 * GiB
V100 = 16 * GiB
GB200 = 184 * GiB


def _llama() -> Preset:
    return get_preset("llama-3.1-8b-vllm")


def _kimi() -> Preset:
    return get_preset("kimi-k2.6")


def _share(kwargs: dict) -> float:
    return kwargs["gpu_memory_utilization"]


# --- the shares -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["llama-3.1-8b-vllm", "kimi-k2.6"])
def test_every_gpu_engine_gets_an_explicit_share(name: str) -> None:
    preset = get_preset(name)
    assert preset.device == "cuda"
    plain = engine_kwargs(preset, None, 3)
    drafter = engine_kwargs(preset, preset.drafters["eagle3"], 3)
    assert _share(plain) == GPU_SHARES["plain"] and _share(drafter) == GPU_SHARES["drafter"]
    # plain decoding's engine holds no drafter, so it gets less; neither takes vLLM's one-engine default (0.92)
    assert 0 < _share(plain) < _share(drafter) < GPU_MEMORY_BUDGET / 2
    assert "kv_cache_memory_bytes" not in drafter  # the CPU's sizing stays on the CPU
    # a script's offline LLM, or a GPU with room for one engine: the only engine there, the whole budget
    assert _share(engine_kwargs(preset, None, 3, alone=True)) == GPU_MEMORY_BUDGET


def _lifecycle(on_gpu: bool, starts: tuple) -> list[list]:
    """The live engines after each start, as VllmBackend.engine keeps them (least recently used first)."""
    live: list = []
    states = []
    for key in starts:
        if key in live:
            live.remove(key)
        else:
            for victim in engines_to_stop(live, key, on_gpu):
                live.remove(victim)
        live.append(key)
        states.append(list(live))
    return states


KEYS = [(None, 0), ("eagle3", 3), ("eagle3", 4), ("eagle3.1", 3), ("eagle3.1", 4)]


def test_the_engines_held_at_once_fit_the_budget_whatever_the_order() -> None:
    """Every order of five starts over plain decoding and four (drafter, k) engines: the engines alive together
    never ask for more than GPU_MEMORY_BUDGET of a GPU, for the built-in presets' shares and for a preset's own."""
    presets = [_llama(), _kimi(), replace(_llama(), engine_options={"max_model_len": 8192,
                                                                    "gpu_memory_utilization": 0.3})]
    worst = 0.0
    for starts in itertools.product(KEYS, repeat=5):
        for live in _lifecycle(True, starts):
            assert len(live) <= MAX_ENGINES
            for preset in presets:
                total = sum(_share(engine_kwargs(preset, source, k)) for source, k in live)
                assert total <= GPU_MEMORY_BUDGET + 1e-9, (preset.name, live)
                worst = max(worst, total)
    assert worst == pytest.approx(GPU_MEMORY_BUDGET)  # the full set (plain + two drafter engines) is reached


def test_on_a_gpu_a_third_drafter_engine_replaces_one_on_the_cpu_it_is_kept() -> None:
    drafters = [("eagle3", 3), ("eagle3", 4), ("eagle3.1", 3)]
    assert _lifecycle(False, tuple(drafters))[-1] == drafters  # the CPU's LRU over MAX_ENGINES, as before
    assert _lifecycle(True, tuple(drafters))[-1] == drafters[1:]  # three drafter shares would add to 0.93
    # plain decoding's engine is never what a drafter engine replaces
    assert (None, 0) in _lifecycle(True, ((None, 0), *drafters))[-1]
    assert engines_to_stop([(None, 0), ("eagle3", 3)], ("eagle3", 4), on_gpu=True, alone=True) == [
        (None, 0), ("eagle3", 3)]


def test_tensor_parallel_presets_count_per_gpu() -> None:
    """Kimi K2.6's engines span 4 GPUs each; every one takes its share of each of them, so the shares are those of
    a one-GPU preset, and the memory each engine needs is counted per GPU."""
    kimi = _kimi()
    assert kimi.tensor_parallel_size == 4
    assert [_share(engine_kwargs(kimi, d, 3)) for d in (None, kimi.drafters["eagle3.1"])] == [
        _share(engine_kwargs(_llama(), d, 3)) for d in (None, "d")]
    one = memory_need(replace(kimi, tensor_parallel_size=1), KIMI_K26_NVFP4)
    four = memory_need(kimi, KIMI_K26_NVFP4)
    # weights split over the 4 GPUs; MLA's latent KV cache is kept whole on each
    cache = 61 * (512 + 64) * 2 * 32768
    assert four.plain - cache == pytest.approx((one.plain - cache) / 4, rel=1e-6)
    assert "on each of 4 GPUs" in four.what
    # GQA's KV heads are split over the GPUs too: Llama-3.1-8B's 8 KV heads over 2 GPUs, 64 KiB a token on each
    llama_one, llama_two = (memory_need(replace(_llama(), tensor_parallel_size=n), LLAMA_8B) for n in (1, 2))
    assert llama_two.plain == pytest.approx(llama_one.plain / 2, rel=1e-6)


# --- a preset's own share ---------------------------------------------------------------------------------------


def test_a_preset_may_set_its_own_share_within_the_budget() -> None:
    own = replace(_llama(), engine_options={"max_model_len": 8192, "gpu_memory_utilization": 0.3})
    assert {_share(engine_kwargs(own, d, 3)) for d in (None, "d")} == {0.3}
    assert gpu_shares(own) == {"plain": 0.3, "drafter": 0.3}


@pytest.mark.parametrize("share, alone", [(0.45, False), (0.31, False), (0.95, True)])
def test_a_preset_share_above_the_budget_is_refused_in_one_line(share: float, alone: bool) -> None:
    greedy = replace(_llama(), engine_options={"max_model_len": 8192, "gpu_memory_utilization": share})
    with pytest.raises(GpuMemoryError) as refused:
        engine_kwargs(greedy, "d", 3, alone=alone)
    message = str(refused.value)
    assert "\n" not in message and f"gpu_memory_utilization {share:g}" in message and "above 0.9" in message
    assert ("at most 0.90" if alone else "at most 0.30") in message
    with pytest.raises(GpuMemoryError):
        VllmBackend(greedy).memory_plan()  # before any engine would start


@pytest.mark.parametrize("share", [0, 1.5, "0.3", True])
def test_a_preset_share_that_is_no_fraction_is_refused(share) -> None:
    with pytest.raises(GpuMemoryError, match="fraction"):
        gpu_shares(replace(_llama(), engine_options={"gpu_memory_utilization": share}))


def test_a_vllm_serve_command_owns_its_gpus() -> None:
    """`vllm serve` runs one engine: the app's shares are not added, and a preset's own share passes through."""
    kimi = _kimi()
    assert "--gpu-memory-utilization" not in serve_command(kimi, kimi.drafters["eagle3.1"], 3)
    server = replace(kimi, engine_options={**kimi.engine_options, "gpu_memory_utilization": 0.95})
    command = serve_command(server, kimi.drafters["eagle3.1"], 3)
    assert command[command.index("--gpu-memory-utilization") + 1] == "0.95"


# --- the CPU ----------------------------------------------------------------------------------------------------


def test_cpu_engine_arguments_are_unchanged() -> None:
    smollm2 = get_preset("smollm2-135m-vllm")
    assert engine_kwargs(smollm2, "d", 4, model="/m") == {
        "model": "/m", "dtype": "float32", "tensor_parallel_size": 1, "trust_remote_code": False,
        "disable_log_stats": False, "kv_cache_memory_bytes": 512 * 1024**2,
        "speculative_config": {"model": "d", "method": "eagle3", "num_speculative_tokens": 4},
        "per_request_spec_decode_metrics": "detailed"}
    for preset in (smollm2, get_preset("kimi-tiny-vllm")):
        for drafter in (None, "d"):
            for alone in (False, True):
                kwargs = engine_kwargs(preset, drafter, 3, alone=alone)
                assert "gpu_memory_utilization" not in kwargs
                assert kwargs["kv_cache_memory_bytes"] == CPU_ENGINE_ARGS["kv_cache_memory_bytes"]
    backend = VllmBackend(smollm2)
    assert backend.memory_plan() == GpuPlan()  # no GPU reads, no estimate, no single-engine mode
    assert backend.missing_fields == pool.MISSING_FIELDS and "baseline" not in backend.missing_fields


def test_the_bench_records_what_sizes_the_engines() -> None:
    """bench-engines' environment record: the KV cache vLLM's CPU build actually gets, and what set it."""
    smollm2 = get_preset("smollm2-135m-vllm")
    assert memory_setting(smollm2, {}) == {"kv_cache_memory_bytes": 512 * 1024**2, "set_by": "CPU_ENGINE_ARGS"}
    # vLLM's CPU platform lets its legacy variable win over the engine argument (whole GiB)
    assert memory_setting(smollm2, {"VLLM_CPU_KVCACHE_SPACE": "2"}) == {
        "kv_cache_memory_bytes": 2 * GiB, "set_by": "VLLM_CPU_KVCACHE_SPACE=2"}
    assert memory_setting(smollm2, {"VLLM_CPU_KVCACHE_SPACE": ""})["set_by"] == "CPU_ENGINE_ARGS"
    own = replace(smollm2, engine_options={"kv_cache_memory_bytes": 3 * 1024**2})
    assert memory_setting(own, {})["kv_cache_memory_bytes"] == 3 * 1024**2
    assert memory_setting(_llama(), {}) == {"gpu_memory_utilization": GPU_SHARES}


def test_bench_engines_writes_the_memory_setting_into_its_record(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("vllm")  # engine_info reads vLLM's version
    from types import SimpleNamespace

    from playground.bench.engines import engine_info

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    backend = SimpleNamespace(preset=get_preset("smollm2-135m-vllm"), memory_plan=GpuPlan)
    info = engine_info("vllm", backend)
    assert info["kv_cache_memory_bytes"] == GiB and info["set_by"] == "VLLM_CPU_KVCACHE_SPACE=1"
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE")
    assert engine_info("vllm", backend)["kv_cache_memory_bytes"] == CPU_ENGINE_ARGS["kv_cache_memory_bytes"]


# --- the weights against the GPU ---------------------------------------------------------------------------------


def test_parameter_counts_from_config_match_the_models() -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    with torch.device("meta"):
        llama = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in LLAMA_8B.items() if k != "architectures"}))
    assert parameter_count(LLAMA_8B) == pytest.approx(sum(p.numel() for p in llama.parameters()), rel=1e-3)
    assert parameter_count(DEEPSEEK_V3) == pytest.approx(671e9, rel=5e-3)  # MLA and MoE, dense first layers
    assert parameter_count(KIMI_K26_NVFP4) == pytest.approx(1.03e12, rel=2e-2)  # through text_config
    # the shipped kimi-tiny MLA/MoE pair and SmolLM2 drafters, against their safetensors headers
    for folder, drafter in [("kimi-tiny/target", False), ("kimi-tiny/eagle3.1", True),
                            ("smollm2-135m/eagle3.1", True)]:
        path = ROOT / "assets" / "models" / folder
        real = sum(stored_parameters(str(path)).values())
        assert parameter_count(json.loads((path / "config.json").read_text()), drafter) == pytest.approx(real,
                                                                                                        rel=0.03)


def test_weights_are_counted_from_the_checkpoint_headers_where_they_can_be_read(tmp_path: Path) -> None:
    """A local checkpoint's weights are counted from its safetensors headers, exactly: at the engine's dtype (the
    shipped kimi-tiny target is stored in bf16; a float32 preset doubles it), integer tensors (a drafter's vocabulary
    maps) as stored, a quantized checkpoint's packed weights as stored; without a checkpoint, the config estimate."""
    target = ROOT / "assets" / "models" / "kimi-tiny" / "target"
    drafter = ROOT / "assets" / "models" / "kimi-tiny" / "eagle3.1"
    config, drafter_config = (json.loads((f / "config.json").read_text()) for f in (target, drafter))
    stored, drafter_stored = stored_parameters(str(target)), stored_parameters(str(drafter))
    assert set(stored) == {"BF16"} and {"F16", "I64", "BOOL"} <= set(drafter_stored)
    preset = replace(get_preset("kimi-tiny-vllm"), device="cuda", dtype="float32", tensor_parallel_size=1)
    counted = memory_need(preset, config, [drafter_config], stored, [drafter_stored])
    estimated = memory_need(preset, config, [drafter_config])
    cache = counted.plain - 4 * stored["BF16"]
    assert estimated.plain - cache == pytest.approx(4 * parameter_count(config), rel=1e-9)
    assert "counted from the checkpoint" in counted.what and "estimated from config.json" in estimated.what
    positions = cache / kv_bytes_per_token(config, 4.0)
    assert positions == int(preset.engine_options.get("max_model_len") or config["max_position_embeddings"])
    maps = 8 * drafter_stored["I64"] + drafter_stored["BOOL"]  # kept as stored, not widened to float32
    assert counted.drafter - counted.plain == pytest.approx(
        4 * drafter_stored["F16"] + maps + kv_bytes_per_token(drafter_config, 4.0) * positions, abs=1)
    packed = memory_need(_kimi(), KIMI_K26_NVFP4, [], {"U8": 500 * 10**9, "BF16": 20 * 10**9, "F8_E4M3": 60 * 10**9})
    assert not packed.lower_bound and "weights as stored" in packed.what
    assert packed.plain - memory_need(_kimi(), KIMI_K26_NVFP4, []).plain == pytest.approx(
        (500e9 + 40e9 + 60e9) / 4 - parameter_count(KIMI_K26_NVFP4) * 0.5 / 4, rel=1e-6)
    (tmp_path / "broken.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}")
    with pytest.raises(CheckpointError, match="safetensors header"):
        stored_parameters(str(tmp_path))
    assert stored_parameters(str(tmp_path / "empty")) is None and stored_parameters("no-such/repo") is None


def test_llama_8b_on_an_80_gb_gpu_runs_its_three_engines() -> None:
    need = memory_need(_llama(), LLAMA_8B, [LLAMA_8B_EAGLE3])
    # bf16 weights ~15 GiB, an 8192-token cache (the preset's max_model_len) of 128 KiB a token: 1 GiB
    assert need.plain == pytest.approx(8.03e9 * 2 + 8192 * 131072, rel=1e-2)
    assert need.plain < need.drafter < need.plain + 2 * GiB
    assert gpu_plan(_llama(), need, H100) == GpuPlan()


def test_a_gpu_with_room_for_one_engine_says_so_with_both_figures() -> None:
    need = memory_need(_llama(), LLAMA_8B, [LLAMA_8B_EAGLE3])
    plan = gpu_plan(_llama(), need, L4)
    assert plan.alone and plan.note is not None and "\n" not in plan.note
    assert "room for one vLLM engine" in plan.note
    assert f"{need.plain / GiB:.1f} GiB" in plan.note  # what the model needs
    assert f"{GPU_SHARES['plain'] * L4 / GiB:.1f} GiB" in plan.note  # what the share gives
    assert _share(engine_kwargs(_llama(), "d", 3, alone=plan.alone)) == GPU_MEMORY_BUDGET


def test_a_model_too_big_for_the_gpu_or_for_the_preset_share_is_refused() -> None:
    need = memory_need(_llama(), LLAMA_8B, [LLAMA_8B_EAGLE3])
    with pytest.raises(GpuMemoryError, match="too big for this 16.0 GiB GPU") as refused:
        gpu_plan(_llama(), need, V100)
    assert f"{need.drafter / GiB:.1f} GiB per GPU in a drafter engine" in str(refused.value)
    assert "\n" not in str(refused.value)
    own = replace(_llama(), engine_options={"max_model_len": 8192, "gpu_memory_utilization": 0.3})
    with pytest.raises(GpuMemoryError, match="gpu_memory_utilization 0.3 gives each vLLM engine 6.6 GiB"):
        gpu_plan(own, need, L4)  # the preset asked for that share: no silent single-engine mode


def test_kimi_on_four_gb200_has_room_for_one_engine() -> None:
    """NVFP4 weights counted at 4 bits (a lower bound: such checkpoints keep some layers in 16 bits): ~120 GiB per
    GPU of 4, above plain decoding's 0.28 of a GB200, within 0.9 of it."""
    need = memory_need(_kimi(), KIMI_K26_NVFP4, [])
    assert need.lower_bound and 100 * GiB < need.plain < 130 * GiB
    plan = gpu_plan(_kimi(), need, GB200)
    assert plan.alone and "at least" in plan.note and "on each of 4 GPUs" in plan.note


def test_without_an_estimate_the_shares_stand() -> None:
    assert gpu_plan(_llama(), None, L4) == GpuPlan()
    assert gpu_plan(_llama(), memory_need(_llama(), LLAMA_8B), None) == GpuPlan()


# --- the backend, with stand-in engines -----------------------------------------------------------------------


class FakeEngine:
    def __init__(self, kwargs: dict) -> None:
        self.kwargs, self.stopped = kwargs, False

    def shutdown(self, timeout=None) -> None:
        self.stopped = True


@pytest.fixture
def gpu_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The Llama-3.1-8B vLLM preset on folders holding its and its drafter's config.json, with engines that only
    record their arguments, on a GPU of the size the test sets (`backend.gpu_bytes`)."""
    folders = {}
    for name, config in [("target", LLAMA_8B), ("eagle3", LLAMA_8B_EAGLE3), ("eagle3.1", {
            **LLAMA_8B_EAGLE3, "fc_norm": True, "norm_output": True})]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
        folders[name] = str(tmp_path / name)
    preset = replace(_llama(), target=folders["target"], drafters={"eagle3": folders["eagle3"],
                                                                   "eagle3.1": folders["eagle3.1"]})
    sizes = {"gpu": H100}
    monkeypatch.setattr(pool, "gpu_total_bytes", lambda devices: sizes["gpu"])

    async def start(self, drafter, k, settings=()):
        return FakeEngine(self.engine_kwargs(drafter, k, settings=settings))

    monkeypatch.setattr(VllmBackend, "_start", start)

    def make(gpu_bytes: int) -> VllmBackend:
        sizes["gpu"] = gpu_bytes
        return VllmBackend(preset)

    backends = []
    yield lambda gpu_bytes: backends.append(make(gpu_bytes)) or backends[-1]
    for backend in backends:
        backend.shutdown()


def _live_shares(backend: VllmBackend) -> dict:
    return {key: engine.kwargs["gpu_memory_utilization"] for key, engine in backend._engines.items()}


def test_the_backend_keeps_plain_and_two_drafter_engines_within_the_budget(gpu_backend) -> None:
    backend = gpu_backend(H100)
    assert "baseline" not in backend.missing_fields
    first = []
    for drafter, k in [("eagle3", 4), ("eagle3.1", 4), ("eagle3", 5), ("eagle3.1", 2)]:
        backend.prepare(drafter, k)
        first = first or list(backend._engines.values())
        shares = _live_shares(backend)
        assert sum(shares.values()) <= GPU_MEMORY_BUDGET + 1e-9
        assert shares[(None, 0, ())] == GPU_SHARES["plain"]
    assert len(backend._engines) == MAX_ENGINES
    assert first[0].stopped and not first[1].stopped  # a drafter engine made room; plain decoding's stayed


def test_the_backend_runs_one_engine_at_a_time_where_the_gpu_has_room_for_one(gpu_backend) -> None:
    backend = gpu_backend(L4)
    assert "room for one vLLM engine" in backend.missing_fields["baseline"]  # no live baseline, and why
    assert "One engine at a time" in backend.starting("eagle3", 4)
    backend.prepare("eagle3", 4)
    assert list(_live_shares(backend).values()) == [GPU_MEMORY_BUDGET]  # its own engine only, the whole budget
    drafter_engine = next(iter(backend._engines.values()))
    backend.prepare("none", 0)
    assert drafter_engine.stopped and list(backend._engines) == [(None, 0, ())]
    with pytest.raises(VllmError, match="room for one vLLM engine"):
        backend.plain_probe()


def test_the_backend_refuses_at_preload_what_no_share_can_hold(gpu_backend) -> None:
    backend = gpu_backend(V100)
    with pytest.raises(GpuMemoryError, match="too big"):
        backend.memory_plan()
    with pytest.raises(GpuMemoryError):
        backend.engine("eagle3", 4)
    assert not backend._engines


def test_engines_unused_for_the_idle_limit_are_stopped_and_one_in_use_is_not(gpu_backend, monkeypatch) -> None:
    """PLAYGROUND_VLLM_IDLE_S: an engine nobody has asked for that long is stopped (its memory freed), never one a
    request is reading from; the next request starts it again. Every host gets IDLE_DEFAULT_S by default."""
    import time

    monkeypatch.setenv("PLAYGROUND_VLLM_IDLE_S", "100")
    backend = gpu_backend(H100)
    assert backend.idle_s == 100
    backend.prepare("eagle3", 4)
    engines = dict(backend._engines)
    now = time.monotonic()
    assert backend.release_idle(now + 50) == [] and not any(e.stopped for e in engines.values())
    with backend.holding("eagle3", 4):
        assert backend.release_idle(now + 1000) == [(None, 0, ())]  # plain decoding's went; the one in use stayed
        assert engines[(None, 0, ())].stopped and not any(e.stopped for k, e in engines.items() if k != (None, 0, ()))
    later = time.monotonic()
    assert backend.release_idle(later + 50) == [] and len(backend._engines) == 1  # let go just now: not idle yet
    assert len(backend.release_idle(later + 1000)) == 1 and not backend._engines
    backend.prepare("eagle3", 4)
    assert len(backend._engines) == 2  # started again on demand
    asked = backend._key("eagle3", 4)
    assert backend.release_idle(time.monotonic() + 1000, keep=asked) == [(None, 0, ())]  # never the one being asked for
    assert asked in backend._engines
    monkeypatch.setenv("PLAYGROUND_VLLM_IDLE_S", "0")
    assert pool.idle_limit_s() is None
    monkeypatch.delenv("PLAYGROUND_VLLM_IDLE_S")
    for public in ("0", "1"):
        monkeypatch.setenv("PLAYGROUND_PUBLIC", public)
        assert pool.idle_limit_s() == pool.IDLE_DEFAULT_S == 300


def test_an_engine_stopped_for_idling_says_so_when_the_next_run_starts_it_again(gpu_backend, monkeypatch) -> None:
    """The status line of the run that needs an engine the idle release stopped: how long it had sat unused, and that
    it starts again (before the start and while it runs); a start that was never stopped says nothing of the kind."""
    import time

    monkeypatch.delenv("PLAYGROUND_VLLM_IDLE_S", raising=False)
    backend = gpu_backend(H100)
    assert "again" not in backend.starting("eagle3.1", 4)
    backend.prepare("eagle3.1", 4)
    assert backend.starting("eagle3.1", 4) is None
    assert set(backend.release_idle(time.monotonic() + 312.4)) == {(None, 0, ()), backend._key("eagle3.1", 4)}
    before = backend.starting("eagle3.1", 4)
    assert before.startswith("vLLM's EAGLE-3.1 k=4 engine was stopped after 312 s idle; starting it again. "
                             "vLLM's plain decoding engine was stopped after 312 s idle; starting it again. "
                             "starting vLLM for EAGLE-3.1 k=4 ("), before
    seen = []
    original = pool.VllmBackend._start

    async def start_and_look(self, drafter, k, settings=()):
        seen.append(self.start_progress())
        return await original(self, drafter, k, settings)

    monkeypatch.setattr(pool.VllmBackend, "_start", start_and_look)
    backend.prepare("eagle3.1", 4)
    assert seen[0].startswith("vLLM's EAGLE-3.1 k=4 engine was stopped after 312 s idle; starting vLLM for EAGLE-3.1 "
                              "k=4 (1 of 2): 0 s so far ("), seen
    assert seen[1].startswith("vLLM's plain decoding engine was stopped after 312 s idle; starting vLLM for "
                              "plain"), seen
    assert backend.starting("eagle3.1", 4) is None
    backend.shutdown()
    assert "again" not in backend.starting("eagle3.1", 4)  # stopped at shutdown, not for idling


def test_what_the_engines_hold_is_named_and_measured_from_their_processes(gpu_backend, monkeypatch) -> None:
    """`held()` names the live engines and reads the memory of the app's child processes (vLLM's engine cores and
    workers; here a stand-in child holding 300 MB, since the stand-in engines start no process)."""
    import subprocess
    import sys

    monkeypatch.setenv("PLAYGROUND_VLLM_IDLE_S", "600")
    backend = gpu_backend(H100)
    assert backend.held() is None  # nothing started
    backend.prepare("eagle3.1", 4)
    child = subprocess.Popen([sys.executable, "-c", "import sys, time; x = bytearray(300 * 10**6); x[::4096] = "
                              "b'1' * len(x[::4096]); print('ready', flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        held = backend.held()
    finally:
        child.kill()
        child.wait()
    assert held.startswith("vLLM holds 2 engines (EAGLE-3.1 k=4, plain decoding): "), held
    size, where = held.split(": ")[1].split(";")[0].split(" GB in ")
    assert float(size) >= 0.3 and where.endswith("process" if where.startswith("1 ") else "processes"), held
    assert held.endswith("each is stopped after 10 min unused (PLAYGROUND_VLLM_IDLE_S)"), held
    monkeypatch.setenv("PLAYGROUND_VLLM_IDLE_S", "0")
    kept = gpu_backend(H100)
    kept.prepare("eagle3.1", 4)
    assert kept.held().endswith("kept while the app runs (PLAYGROUND_VLLM_IDLE_S=0)"), kept.held()



def test_shutdown_while_an_engine_starts_kills_its_processes_instead_of_waiting(gpu_backend, monkeypatch) -> None:
    """At exit (atexit; SIGTERM in app.py) an engine still starting holds the pool's lock until its start ends, minutes
    on a small CPU: shutdown kills the processes its start began (here a stand-in engine core that would sleep ten
    minutes; the stand-in start, like vLLM's, fails once its process is gone), then stops the engines already up.
    A process alive before the start began is left alone."""
    import asyncio
    import subprocess
    import sys
    import threading

    backend = gpu_backend(H100)
    backend.prepare("eagle3", 4)  # two engines up: EAGLE-3's and plain decoding's
    up = dict(backend._engines)
    older = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    cores, failures = [], []

    async def slow_start(self, drafter, k, settings=()):
        cores.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]))
        while cores[-1].poll() is None:
            await asyncio.sleep(0.05)
        raise RuntimeError("Engine core initialization failed")

    def run() -> None:
        try:
            backend.prepare("eagle3.1", 4)
        except RuntimeError as err:
            failures.append(err)

    monkeypatch.setattr(VllmBackend, "_start", slow_start)
    starting = threading.Thread(target=run, daemon=True)
    starting.start()
    try:
        while not cores:
            starting.join(0.05)
        assert "EAGLE-3.1 k=4" in backend.start_progress()
        stopping = threading.Thread(target=backend.shutdown, daemon=True)
        stopping.start()
        stopping.join(60)  # a guard against a hang, not a timing: the start it would wait for lasts ten minutes
        starting.join(60)
        assert not stopping.is_alive() and not starting.is_alive()
        assert cores[0].poll() is not None and older.poll() is None  # the start's process killed, the older kept
        assert failures and not backend._engines and all(engine.stopped for engine in up.values())
        assert backend.start_progress() is None
    finally:
        for process in [older, *cores]:
            process.kill()
            process.wait()


def test_engines_a_run_waited_for_are_not_idle_when_their_starts_end(gpu_backend, monkeypatch) -> None:
    """A start takes minutes (longer than the idle time, cold on 2 cores): the engine it brought up, and the run's own
    engine that waited through plain decoding's start, count as just used when the run can read from them, not as
    unused since the run asked (the idle release would stop them under the run)."""
    import asyncio
    import time

    async def slow_start(self, drafter, k, settings=()):
        await asyncio.sleep(0.4)
        return FakeEngine(self.engine_kwargs(drafter, k))

    monkeypatch.setattr(VllmBackend, "_start", slow_start)
    backend = gpu_backend(H100)
    backend.idle_s = 0.3  # its own release thread sleeps a minute first: only the calls here release
    backend.prepare("eagle3", 4)
    assert backend.release_idle() == [] and len(backend._engines) == 2
    time.sleep(0.4)
    assert len(backend.release_idle()) == 2  # unused since: now they are idle
