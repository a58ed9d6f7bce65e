"""MLA drafters (DeepSeek-V3 / Kimi K2 targets): the attention against transformers' own DeepseekV3Attention, the
checkpoint layout vLLM's deepseek_eagle3 reads, the fit check, and lossless speculation beside a DeepSeek-V3 target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention, DeepseekV3RotaryEmbedding

from playground.engine import (
    CheckpointError,
    DrafterConfig,
    Eagle3Drafter,
    GenerationConfig,
    Target,
    load_drafter,
    save_drafter,
)
from playground.engine.decode import plain_generate, speculative_generate
from playground.engine.drafter import MLAttention
from playground.request.fit import drafter_fit
from playground.train.drafter import DrafterTrainConfig, DraftVocab, new_drafter
from playground.train.tokenizer import train_tokenizer
from tests.support.tiny import SAMPLE_TEXT

MLA = dict(q_lora_rank=24, kv_lora_rank=40, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12)


def deepseek_config(rope: dict | None = None, **extra) -> DeepseekV3Config:
    return DeepseekV3Config(vocab_size=400, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                            num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4,
                            num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1,
                            max_position_embeddings=512, rope_interleave=True,
                            rope_parameters=rope or {"rope_type": "default", "rope_theta": 10000.0}, **MLA, **extra)


def drafter_config(rope_scaling: dict | None = None) -> DrafterConfig:
    return DrafterConfig(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=4,
                         vocab_size=400, draft_vocab_size=400, target_hidden_size=64, max_position_embeddings=512,
                         rms_norm_eps=1e-6, rope_scaling=rope_scaling, **MLA)


YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 128,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}


@pytest.mark.parametrize("rope", [None, YARN], ids=["default-rope", "yarn"])
def test_mla_attention_matches_transformers(rope: dict | None) -> None:
    """Same weights, same input: our MLAttention (full sequence, and token by token through its cache) computes
    transformers' DeepseekV3Attention (interleaved RoPE, latent KV, YaRN's mscale in the softmax scale)."""
    torch.manual_seed(0)
    config = deepseek_config(rope)
    config._attn_implementation = "eager"
    theirs = DeepseekV3Attention(config, layer_idx=0).eval()
    cfg = drafter_config({k: v for k, v in YARN.items() if k != "rope_theta"} if rope else None)
    drafter = Eagle3Drafter(cfg)
    ours = MLAttention(cfg, in_features=64).eval()
    for module in (theirs.q_a_layernorm, theirs.kv_a_layernorm):
        module.weight.data.uniform_(0.5, 1.5)
    ours.load_state_dict(theirs.state_dict())
    t = 9
    x = torch.randn(1, t, 64)
    positions = torch.arange(t)
    cos, sin = DeepseekV3RotaryEmbedding(config)(x, positions[None])
    causal = torch.full((t, t), float("-inf")).triu(1)[None, None]
    with torch.no_grad():
        expected, _ = theirs(x, (cos, sin), causal)
        full, probs = ours(x, drafter.rope(positions, x), None, None, probs_rows=1)
        cache = drafter.new_cache().layers[0]
        stepped = torch.cat([ours(x[:, i : i + 1], drafter.rope(positions[i : i + 1], x), cache, None, 0)[0]
                             for i in range(t)], dim=1)
    torch.testing.assert_close(full, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(stepped, expected, rtol=1e-5, atol=1e-5)
    assert probs.shape == (1, 4, 1, t)
    torch.testing.assert_close(probs.sum(-1), torch.ones(1, 4, 1))


def test_mla_softmax_scale_follows_yarn_mscale() -> None:
    plain = drafter_config()
    assert plain.attention_scale == pytest.approx(24**-0.5)
    yarn = drafter_config({"rope_type": "yarn", "factor": 64.0, "mscale_all_dim": 1.0})
    assert yarn.attention_scale == pytest.approx(24**-0.5 * (0.1 * torch.log(torch.tensor(64.0)).item() + 1) ** 2)


@pytest.fixture(scope="module")
def deepseek_target(tmp_path_factory) -> Target:
    folder = tmp_path_factory.mktemp("deepseek")
    tokenizer = train_tokenizer(SAMPLE_TEXT, vocab_size=400)
    torch.manual_seed(0)
    model = DeepseekV3ForCausalLM(deepseek_config(bos_token_id=tokenizer.bos_token_id,
                                                  eos_token_id=tokenizer.eos_token_id))
    with torch.no_grad():
        model.lm_head.weight.mul_(40)  # sharp greedy choices, rarely near-ties
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return Target.load(str(folder))


def mla_drafter(target: Target, variant: str) -> Eagle3Drafter:
    vocab = DraftVocab.of(torch.arange(target.vocab_size), target.vocab_size)
    drafter = new_drafter(target, variant, DrafterTrainConfig(steps=1), vocab)
    target.attach(drafter)
    return drafter.eval()


@pytest.mark.parametrize("variant", ["eagle3", "eagle3.1"])
def test_mla_checkpoint_round_trip_in_vllms_layout(deepseek_target: Target, tmp_path: Path, variant: str) -> None:
    drafter = mla_drafter(deepseek_target, variant)
    assert drafter.config.mla and isinstance(drafter.layers[0].self_attn, MLAttention)
    save_drafter(drafter, tmp_path / variant, dtype=torch.float32)
    config = json.loads((tmp_path / variant / "config.json").read_text())
    assert config["architectures"] == ["Eagle3DeepseekV2ForCausalLM"] and config["model_type"] == "kimi_k2"
    assert (config["fc_norm"], config["norm_output"]) == ((variant == "eagle3.1",) * 2)
    assert {k: config[k] for k in MLA} == MLA
    weights = load_file(str(tmp_path / variant / "model.safetensors"))
    assert weights["midlayer.self_attn.q_a_proj.weight"].shape == (24, 128)  # the first layer reads 2H
    assert weights["midlayer.self_attn.kv_a_proj_with_mqa.weight"].shape == (40 + 8, 128)
    assert weights["midlayer.self_attn.kv_b_proj.weight"].shape == (4 * (16 + 12), 40)
    loaded, layout = load_drafter(tmp_path / variant)
    deepseek_target.attach(loaded)
    assert layout == "official" and loaded.config.variant == drafter.config.variant
    ids, hidden = torch.randint(0, 400, (1, 5)), torch.randn(1, 5, 64)
    with torch.no_grad():
        a, b = drafter(ids, hidden, torch.arange(5)), loaded(ids, hidden, torch.arange(5))
    torch.testing.assert_close(a.logits, b.logits)


def test_broken_mla_checkpoints_have_clear_errors(deepseek_target: Target, tmp_path: Path) -> None:
    save_drafter(mla_drafter(deepseek_target, "eagle3.1"), tmp_path / "good", dtype=torch.float32)
    config = json.loads((tmp_path / "good" / "config.json").read_text())
    weights = load_file(str(tmp_path / "good" / "model.safetensors"))

    def error(config: dict, weights: dict) -> str:
        folder = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config))
        save_file(weights, str(folder / "model.safetensors"))
        with pytest.raises(CheckpointError) as err:
            load_drafter(folder)
        return str(err.value)

    assert "lacks 'kv_lora_rank'" in error({k: v for k, v in config.items() if k != "kv_lora_rank"}, weights)
    assert "MLA fields (kv_lora_rank) but architectures ['LlamaForCausalLMEagle3']" in error(
        {**config, "architectures": ["LlamaForCausalLMEagle3"]}, weights)
    assert "missing key(s): midlayer.self_attn.kv_b_proj.weight" in error(
        config, {k: v for k, v in weights.items() if "kv_b_proj" not in k})
    assert "shape mismatch for midlayer.self_attn.kv_a_proj_with_mqa.weight: checkpoint (48, 128), config implies " \
        "(40, 128)" in error({**config, "kv_lora_rank": 32}, weights)


def test_fit_check_reads_mla_configs(deepseek_target: Target, tmp_path: Path) -> None:
    save_drafter(mla_drafter(deepseek_target, "eagle3.1"), tmp_path / "d", dtype=torch.float32)
    drafter = json.loads((tmp_path / "d" / "config.json").read_text())
    target = deepseek_target.config.to_dict()
    report = drafter_fit(target, drafter)
    assert report.problems == [] and "vLLM's MLA kernels take 320, 512, 576" in report.warnings[0]  # 40 + 8 here
    assert drafter_fit(target, {**drafter, "kv_lora_rank": 512, "qk_rope_head_dim": 64}).warnings == []
    llama = {k: v for k, v in target.items() if k != "kv_lora_rank"}
    assert "the target is not an MLA model" in drafter_fit(llama, drafter).problems[0]


@pytest.mark.parametrize("variant", ["eagle3", "eagle3.1"])
def test_mla_speculation_is_lossless_beside_a_deepseek_v3_target(deepseek_target: Target, variant: str) -> None:
    """Through transformers' DeepSeek-V3 (MoE, latent KV cache, rollback by crop): greedy speculative output is
    plain greedy decoding's, and drift is recorded at every depth."""
    assert deepseek_target.forward_path == "transformers"
    drafter = mla_drafter(deepseek_target, variant)
    aux = deepseek_target.attach(drafter)
    prompt = [5, 17, 33, 2, 90, 41]
    cfg = GenerationConfig(max_new_tokens=24, k=3)
    plain = [t for e in plain_generate(deepseek_target, prompt, cfg) for t in e.emitted]
    events = list(speculative_generate(deepseek_target, drafter, aux, prompt, cfg))
    assert [t for e in events for t in e.emitted] == plain
    drafting = [e for e in events if e.drafted]
    assert drafting and all(len(e.attention) == len(e.drafted) for e in drafting)
