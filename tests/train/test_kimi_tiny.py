"""The shipped tiny Kimi-architecture pair (`assets/models/kimi-tiny`): a real DeepSeek-V3 target with Kimi K2's MLA
geometry and a MoE, and MLA EAGLE-3 / EAGLE-3.1 drafters in vLLM's deepseek_eagle3 layout, on our engine. vLLM on
the same pair: tests/backends/test_vllm_mla.py."""

from __future__ import annotations

import json

import pytest

from playground.engine import GenerationConfig, Target, load_drafter, plain_generate, speculative_generate
from playground.engine.templates import encode_chat
from playground.presets import KIMI_TINY, get_preset
from playground.request.fit import drafter_fit

pytestmark = pytest.mark.slow

VARIANTS = ("eagle3", "eagle3.1")
QUESTIONS = ["Explain how the gears of a bicycle work.", "Write a Python function that returns the median of a list."]


@pytest.fixture(scope="module")
def target() -> Target:
    return Target.load(str(KIMI_TINY / "target"))


def test_target_has_kimi_k2s_architecture(target: Target) -> None:
    cfg = target.config
    assert cfg.model_type == "deepseek_v3" and cfg.architectures == ["DeepseekV3ForCausalLM"]
    assert (cfg.kv_lora_rank, cfg.qk_rope_head_dim) == (512, 64)  # Kimi K2's latent width, which vLLM's MLA needs
    assert cfg.q_lora_rank and cfg.rope_interleave and cfg.topk_method == "noaux_tc"
    assert cfg.n_routed_experts > cfg.num_experts_per_tok > 1 and cfg.n_shared_experts == 1
    assert 0 < cfg.first_k_dense_replace < cfg.num_hidden_layers
    assert target.forward_path == "transformers" and target.vocab_size == 49152  # SmolLM2's tokenizer
    size = (KIMI_TINY / "target" / "model.safetensors").stat().st_size
    assert size <= 80 * 2**20


def test_drafters_are_mla_in_vllms_layout_and_differ_only_in_the_eagle31_flags(target: Target) -> None:
    configs = {v: json.loads((KIMI_TINY / v / "config.json").read_text()) for v in VARIANTS}
    for variant, config in configs.items():
        assert config["architectures"] == ["Eagle3DeepseekV2ForCausalLM"] and config["model_type"] == "kimi_k2"
        assert (config["fc_norm"], config["norm_output"]) == ((variant == "eagle3.1",) * 2)
        assert config["kv_lora_rank"] + config["qk_rope_head_dim"] == 576
        report = drafter_fit(target.config.to_dict(), config)
        assert report.problems == [] and report.warnings == []
        drafter, layout = load_drafter(KIMI_TINY / variant)
        assert layout == "official" and drafter.config.mla and target.attach(drafter) == target.default_aux_layer_ids()
    rest = [{k: v for k, v in c.items() if k not in ("fc_norm", "norm_output")} for c in configs.values()]
    assert rest[0] == rest[1]


@pytest.mark.parametrize("variant", VARIANTS)
def test_greedy_speculative_equals_plain(target: Target, variant: str) -> None:
    drafter, _ = load_drafter(KIMI_TINY / variant)
    aux = target.attach(drafter)
    for question in QUESTIONS:
        prompt = encode_chat(target.tokenizer, [{"role": "user", "content": question}])
        cfg = GenerationConfig(max_new_tokens=32)
        plain = [t for e in plain_generate(target, prompt, cfg) for t in e.emitted]
        for k in (1, 3):
            events = list(speculative_generate(target, drafter, aux, prompt, GenerationConfig(max_new_tokens=32, k=k)))
            assert [t for e in events for t in e.emitted] == plain, (question, k)
        assert sum(e.accepted for e in events) > 0
        assert all(e.attention and e.hidden_rms for e in events if e.drafted)  # drift and RMS by depth


def test_presets_name_the_pair_on_both_engines() -> None:
    local, vllm = get_preset("kimi-tiny"), get_preset("kimi-tiny-vllm")
    assert (local.backend, vllm.backend) == ("local", "vllm")
    assert local.target == vllm.target and local.drafters == vllm.drafters and local.dtype == vllm.dtype == "float32"
    assert not local.requires_gpu and not vllm.requires_gpu
