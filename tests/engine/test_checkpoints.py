"""Drafter checkpoints: the three public layouts, .bin loading, optional keys, clear errors, and the EAGLE-3 / 3.1
math checked against an independent re-statement written here with plain torch ops from the state dict."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch
from safetensors.torch import save_file

from playground.engine import (
    CheckpointError,
    DrafterConfig,
    Eagle3Drafter,
    GenerationConfig,
    StepEvent,
    Target,
    load_drafter,
    save_drafter,
    speculative_generate,
)
from playground.engine.checkpoint import config_from_dict
from tests.support.checkpoints import (
    AUX_IDS,
    DRAFTER_NAMES,
    layer_config,
    make_config,
    make_weights,
    source_weights,
    write,
    write_layout,
)

if TYPE_CHECKING:
    from tests.conftest import TinyModels

def load_and_attach(target: Target, folder: Path) -> tuple[Eagle3Drafter, list[int], str]:
    drafter, layout = load_drafter(folder)
    return drafter, target.attach(drafter), layout


def drafting_trace(tiny: TinyModels, drafter: Eagle3Drafter, aux: list[int], prompts=None, k: int = 4) -> list[tuple]:
    trace = []
    for prompt in prompts or tiny.training_prompts[:2]:
        cfg = GenerationConfig(max_new_tokens=24, k=k)
        for e in speculative_generate(tiny.target, drafter, aux, prompt, cfg):
            trace.append((e.drafted, e.accepted, e.emitted, e.draft_probs, e.attention, e.hidden_rms))
    return trace


# --- the three layouts --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", DRAFTER_NAMES)
def test_three_layouts_give_identical_drafts(tiny: TinyModels, tmp_path: Path, name: str) -> None:
    reference = tiny.drafters[name]
    expected = drafting_trace(tiny, reference.drafter, reference.aux_layers)
    assert sum(len(t[0]) for t in expected) > 0 and sum(t[1] for t in expected) > 0
    for layout in ("official", "vllm", "speculators"):
        drafter, aux, detected = load_and_attach(tiny.target, write_layout(tiny, tmp_path / layout, name, layout))
        assert detected == layout
        assert aux == reference.aux_layers == AUX_IDS
        assert drafter.config.variant == ("EAGLE-3.1" if name == "eagle3.1" else "EAGLE-3")
        assert drafter.config.norm_before_residual is False
        state, ref_state = drafter.state_dict(), reference.drafter.state_dict()
        assert set(state) == set(ref_state) and all(torch.equal(state[k], ref_state[k]) for k in state)
        assert drafting_trace(tiny, drafter, aux) == expected, layout


def test_vllm_architecture_name_and_model_prefix(tiny: TinyModels, tmp_path: Path) -> None:
    """vLLM's registry name, and vLLM-internal `model.`-prefixed keys, load the same weights."""
    weights = {("model." + k if not k.startswith("lm_head") else k): v
               for k, v in make_weights(source_weights(tiny, "eagle3"), "vllm").items()}
    config = make_config(tiny, "vllm", False, False, architectures=["Eagle3LlamaForCausalLM"])
    drafter, aux, layout = load_and_attach(tiny.target, write(tmp_path, config, weights))
    assert layout == "vllm"
    ref = tiny.drafters["eagle3"]
    assert drafting_trace(tiny, drafter, aux) == drafting_trace(tiny, ref.drafter, ref.aux_layers)


def test_norm_before_fc_is_read_inside_eagle_config(tiny: TinyModels) -> None:
    """Some public drafters set norm_before_fc inside eagle_config; vLLM reads it there first, then at the top."""
    config = make_config(tiny, "official", False, False)
    config["eagle_config"] = {**config.get("eagle_config", {}), "norm_before_fc": True}
    assert config_from_dict(config).norm_before_fc is True
    assert config_from_dict({**config, "eagle_config": {}, "norm_before_fc": True}).norm_before_fc is True
    assert config_from_dict(make_config(tiny, "official", False, False)).norm_before_fc is False


def test_aux_layers_are_read_in_layer_order(tiny: TinyModels, tmp_path: Path) -> None:
    """vLLM and SafeAILab concatenate aux states in layer order, whatever order the config lists: so do we. A config
    listing the ids out of order drafts exactly like the same drafter listing them in order."""
    reference = tiny.drafters["eagle3"]
    config = make_config(tiny, "official", False, False)
    config["eagle_config"] = {**config.get("eagle_config", {}),
                              "eagle_aux_hidden_state_layer_ids": list(reversed(AUX_IDS))}
    drafter, aux, _ = load_and_attach(tiny.target, write(tmp_path, config, source_weights(tiny, "eagle3")))
    assert aux == AUX_IDS
    assert drafting_trace(tiny, drafter, aux) == drafting_trace(tiny, reference.drafter, reference.aux_layers)


def test_speculators_norm_before_residual_default(tiny: TinyModels) -> None:
    """vLLM reads a speculators config without the key as norm_before_residual=True; the official layout as False."""
    spec = make_config(tiny, "speculators", False, False)
    del spec["norm_before_residual"]
    assert config_from_dict(spec).norm_before_residual is True
    assert config_from_dict({**spec, "norm_before_residual": False}).norm_before_residual is False
    assert config_from_dict(make_config(tiny, "official", False, False)).norm_before_residual is False


def test_bin_checkpoint_loads_with_weights_only(tiny: TinyModels, tmp_path: Path) -> None:
    drafter, aux, layout = load_and_attach(tiny.target,
                                           write_layout(tiny, tmp_path / "bin", "eagle3.1", "official", fmt="bin"))
    assert layout == "official"
    ref = tiny.drafters["eagle3.1"]
    assert drafting_trace(tiny, drafter, aux) == drafting_trace(tiny, ref.drafter, ref.aux_layers)


class _Payload:
    """Unpickling this object creates a file: a stand-in for arbitrary code in a malicious .bin."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_bin_with_pickled_code_is_refused(tiny: TinyModels, tmp_path: Path) -> None:
    marker = tmp_path / "code-ran"
    weights = make_weights(source_weights(tiny, "eagle3"), "official")
    weights["evil"] = _Payload(marker)
    folder = write(tmp_path / "evil", make_config(tiny, "official", False, False), weights, fmt="bin")
    with pytest.raises(CheckpointError, match=r"pytorch_model\.bin.*weights_only=True"):
        load_drafter(folder)
    assert not marker.exists(), "the pickle was executed"


def test_sharded_safetensors(tiny: TinyModels, tmp_path: Path) -> None:
    weights = make_weights(source_weights(tiny, "eagle3"), "official")
    keys = sorted(weights)
    folder = write(tmp_path, make_config(tiny, "official", False, False), None)
    save_file({k: weights[k] for k in keys[:7]}, str(folder / "model-00001-of-00002.safetensors"))
    save_file({k: weights[k] for k in keys[7:]}, str(folder / "model-00002-of-00002.safetensors"))
    drafter, aux, _ = load_and_attach(tiny.target, folder)
    ref = tiny.drafters["eagle3"]
    assert drafting_trace(tiny, drafter, aux) == drafting_trace(tiny, ref.drafter, ref.aux_layers)


# --- optional keys --------------------------------------------------------------------------------------------


def test_embed_tokens_absent_or_present(tiny: TinyModels, tmp_path: Path) -> None:
    target = tiny.target
    shared = target.model.get_input_embeddings()
    ref = tiny.drafters["eagle3"]
    expected = drafting_trace(tiny, ref.drafter, ref.aux_layers)

    absent, _ = load_drafter(write_layout(tiny, tmp_path / "absent", "eagle3", "official"))
    assert absent.embed_tokens is None
    target.attach(absent)
    assert absent.embed_tokens is shared, "a drafter without embed_tokens shares the target's"

    for layout in ("official", "speculators"):
        weights = make_weights(source_weights(tiny, "eagle3"), layout)
        weights["embed_tokens.weight"] = shared.weight.detach().clone()
        config = make_config(tiny, layout, False, False)
        drafter, aux, _ = load_and_attach(target, write(tmp_path / f"same-{layout}", config, weights))
        assert drafter.embed_tokens is not shared and torch.equal(drafter.embed_tokens.weight, shared.weight)
        assert drafting_trace(tiny, drafter, aux) == expected

    # its own (different) embedding is really used
    weights = make_weights(source_weights(tiny, "eagle3"), "official")
    weights["embed_tokens.weight"] = torch.randn_like(shared.weight, generator=torch.Generator().manual_seed(0))
    drafter, aux, _ = load_and_attach(target,
                                      write(tmp_path / "own", make_config(tiny, "official", False, False), weights))
    assert [t[0] for t in drafting_trace(tiny, drafter, aux)] != [t[0] for t in expected]


def test_t2d_is_ignored(tiny: TinyModels, tmp_path: Path) -> None:
    ref = tiny.drafters["eagle3.1"]
    expected = drafting_trace(tiny, ref.drafter, ref.aux_layers)
    source = source_weights(tiny, "eagle3.1")
    for label, t2d in [("absent", None), ("all-false", torch.zeros(361, dtype=torch.bool)),
                       ("odd-shape", torch.ones(7, dtype=torch.bool))]:
        weights = make_weights(source, "official")
        if t2d is None:
            del weights["t2d"]
        else:
            weights["t2d"] = t2d
        drafter, aux, _ = load_and_attach(tiny.target,
                                          write(tmp_path / label, make_config(tiny, "official", True, True), weights))
        assert drafting_trace(tiny, drafter, aux) == expected, label


def test_fc_norm_weights_present_exactly_when_configured(tiny: TinyModels, tmp_path: Path) -> None:
    with_norms = make_weights(source_weights(tiny, "eagle3.1"), "official")
    without = {k: v for k, v in with_norms.items() if not k.startswith("fc_norm.")}
    # fc_norm: true but no fc_norm weights
    with pytest.raises(CheckpointError, match=r"missing key.*fc_norm\.0\.weight"):
        load_drafter(write(tmp_path / "a", make_config(tiny, "official", True, True), without))
    # fc_norm weights but the config does not enable them
    with pytest.raises(CheckpointError, match=r"unexpected key.*fc_norm: false.*fc_norm\.0\.weight"):
        load_drafter(write(tmp_path / "b", make_config(tiny, "official", False, True), with_norms))
    for layout in ("official", "speculators"):
        drafter, _ = load_drafter(write(tmp_path / f"c-{layout}", make_config(tiny, layout, True, True),
                                        make_weights(source_weights(tiny, "eagle3.1"), layout)))
        assert drafter.config.fc_norm and len(drafter.fc_norm) == 3
        drafter, _ = load_drafter(write(tmp_path / f"d-{layout}", make_config(tiny, layout, False, False),
                                        make_weights(source_weights(tiny, "eagle3"), layout)))
        assert not drafter.config.fc_norm and not hasattr(drafter, "fc_norm")


# --- clear errors ---------------------------------------------------------------------------------------------


def _error(folder: Path) -> str:
    with pytest.raises(CheckpointError) as info:
        load_drafter(folder)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_broken_checkpoints_have_clear_errors(tiny: TinyModels, tmp_path: Path) -> None:
    source = source_weights(tiny, "eagle3")
    good = make_weights(source, "official")
    config = make_config(tiny, "official", False, False)

    # keys are named as the checkpoint spells them (midlayer.* in the official layout, layers.0.* otherwise)
    missing = {k: v for k, v in good.items() if k != "midlayer.mlp.down_proj.weight"}
    message = _error(write(tmp_path / "missing", config, missing))
    assert "official layout" in message and "missing key(s): midlayer.mlp.down_proj.weight" in message
    vllm = {k: v for k, v in make_weights(source, "vllm").items() if k != "layers.0.mlp.down_proj.weight"}
    assert "missing key(s): layers.0.mlp.down_proj.weight" in _error(write(tmp_path / "missing-vllm", config, vllm))
    extra = {**good, "midlayer.self_attn.rotary_emb.weight": torch.zeros(4)}
    assert "unexpected key(s): midlayer.self_attn.rotary_emb.weight" in _error(write(tmp_path / "extra", config, extra))
    wrong = {**good, "midlayer.mlp.up_proj.weight": good["midlayer.mlp.up_proj.weight"].T.contiguous()}
    assert "shape mismatch for midlayer.mlp.up_proj.weight" in _error(write(tmp_path / "wrong", config, wrong))

    bad_shape = {**good, "fc.weight": good["fc.weight"][:, :100]}
    message = _error(write(tmp_path / "shape", config, bad_shape))
    assert "shape mismatch for fc.weight" in message and "(64, 100)" in message and "(64, 192)" in message

    message = _error(write(tmp_path / "arch", {**config, "architectures": ["LlamaForCausalLM"]}, good))
    assert "unknown drafter layout" in message and "LlamaForCausalLM" in message
    message = _error(write(tmp_path / "noarch", {k: v for k, v in config.items() if k != "architectures"}, good))
    assert "unknown drafter layout" in message
    spec = make_config(tiny, "speculators", False, False, speculators_model_type="mlp_speculator")
    assert "speculators_model_type" in _error(write(tmp_path / "spec-type", spec, good))
    spec = make_config(tiny, "speculators", False, False)
    del spec["transformer_layer_config"]
    assert "transformer_layer_config" in _error(write(tmp_path / "spec-layer", spec, good))

    message = _error(write(tmp_path / "json", '{"architectures": ["LlamaForCausalLMEagle3"],', good))
    assert "not valid JSON" in message
    assert "no config.json" in _error(write(tmp_path / "noconfig", None, good))
    message = _error(write(tmp_path / "lacks", {k: v for k, v in config.items() if k != "hidden_size"}, good))
    assert "lacks required key 'hidden_size'" in message

    message = _error(write(tmp_path / "noweights", config, None))
    assert "no model.safetensors or pytorch_model.bin" in message
    corrupt = write(tmp_path / "corrupt", config, None)
    (corrupt / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not safetensors at all")
    assert "cannot read model.safetensors" in _error(corrupt)
    truncated = write(tmp_path / "truncated", config, good)
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    assert "cannot read model.safetensors" in _error(truncated)

    # d2t holding absolute target ids instead of offsets (the TorchSpec pitfall in the reference, section 1.4)
    absolute = {**good, "d2t": good["d2t"] + torch.arange(300)}
    assert "d2t maps draft ids outside the target vocabulary" in _error(write(tmp_path / "d2t", config, absolute))
    no_d2t = {k: v for k, v in good.items() if k != "d2t"}
    assert "lacks 'd2t'" in _error(write(tmp_path / "nod2t", config, no_d2t))

    aux = {**config, "num_aux_hidden_states": 3, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 2]}}
    assert ("num_aux_hidden_states is 3 but eagle_aux_hidden_state_layer_ids has 2"
            in _error(write(tmp_path / "aux", aux, good)))
    # two ids and no count: fc would read 2 * 64 features, which the weights contradict
    aux = {**config, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 2]}}
    assert "shape mismatch for fc.weight" in _error(write(tmp_path / "aux2", aux, good))


def _random_drafter(folder: Path, **overrides) -> Path:
    fields = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=361,
                  draft_vocab_size=361, target_hidden_size=64)
    fields.update(overrides)
    torch.manual_seed(0)
    save_drafter(Eagle3Drafter(DrafterConfig(**fields), with_embeddings=False), folder, dtype=torch.float32)
    return folder


@pytest.mark.parametrize("overrides,expected", [
    ({"target_hidden_size": 32}, "drafter expects target hidden size 32, target has 64"),
    ({"vocab_size": 400, "draft_vocab_size": 400}, "drafter vocab_size 400 != target vocab_size 361"),
    ({"aux_layer_ids": [2, 2, 9]}, "aux layer ids [9] are outside the target's 0..4"),
    ({"aux_layer_ids": [-1, 1, 2]}, "aux layer ids [-1] are outside"),
    ({"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1},
     "ships no embed_tokens and its hidden size 32 differs from the target's 64"),
])
def test_attach_rejects_drafters_that_do_not_fit(tiny: TinyModels, tmp_path: Path, overrides: dict,
                                                  expected: str) -> None:
    drafter, _ = load_drafter(_random_drafter(tmp_path, **overrides))
    with pytest.raises(CheckpointError, match="drafter does not fit the target") as info:
        tiny.target.attach(drafter)
    assert expected in str(info.value)


def test_attach_accepts_final_prenorm_layer_id(tiny: TinyModels, tmp_path: Path) -> None:
    drafter, _ = load_drafter(_random_drafter(tmp_path, aux_layer_ids=[1, 2, 4]))
    assert tiny.target.attach(drafter) == [1, 2, 4]
    events = list(speculative_generate(tiny.target, drafter, [1, 2, 4], tiny.training_prompts[0],
                                       GenerationConfig(max_new_tokens=6, k=2)))
    assert sum(len(e.emitted) for e in events) == 6


# --- the math, re-stated independently -------------------------------------------------------------------------


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.double()
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.double()


def _rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """x: [t, heads, d]; rotate-half convention (Llama / HF)."""
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions.double()[:, None] * inv[None]
    cos, sin = torch.cat([angles, angles], -1).cos()[:, None], torch.cat([angles, angles], -1).sin()[:, None]
    rotated = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1)
    return x * cos + rotated * sin


class HandDrafter:
    """One EAGLE-3 / 3.1 drafter written out with torch ops on the raw state dict (float64, no engine code)."""

    def __init__(self, weights: dict[str, torch.Tensor], config: dict, embeddings: torch.Tensor,
                 norm_before_residual: bool = False, swap_feedback: bool = False, skip_fc_norm: bool = False) -> None:
        self.w = {k: v.double() for k, v in weights.items() if v.is_floating_point()}
        self.d2t = weights["d2t"].long()
        self.cfg, self.emb = config, embeddings.double()
        self.eps = config["rms_norm_eps"]
        self.heads, self.kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
        self.head_dim = config["hidden_size"] // self.heads
        self.fc_norm = bool(config.get("fc_norm")) and not skip_fc_norm
        self.norm_output = bool(config.get("norm_output")) != swap_feedback
        self.norm_before_residual = norm_before_residual
        self.keys = self.values = None

    def linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return x @ self.w[name].T

    def fuse(self, aux: torch.Tensor) -> torch.Tensor:
        aux = aux.double()
        if self.fc_norm:
            chunks = aux.chunk(3, dim=-1)
            aux = torch.cat([_rms(c, self.w[f"fc_norm.{i}.weight"], self.eps) for i, c in enumerate(chunks)], -1)
        return self.linear(aux, "fc.weight")

    def step(self, token_ids: list[int], hidden: torch.Tensor, positions: list[int]):
        """Returns (draft logits [t, Vd], feedback [t, H], last query's attention [heads, keys])."""
        t = len(token_ids)
        e = self.emb[torch.tensor(token_ids)]
        normed_hidden = _rms(hidden, self.w["midlayer.hidden_norm.weight"], self.eps)
        x = torch.cat([_rms(e, self.w["midlayer.input_layernorm.weight"], self.eps), normed_hidden], -1)  # 2H
        q = self.linear(x, "midlayer.self_attn.q_proj.weight").view(t, self.heads, self.head_dim)
        k = self.linear(x, "midlayer.self_attn.k_proj.weight").view(t, self.kv_heads, self.head_dim)
        v = self.linear(x, "midlayer.self_attn.v_proj.weight").view(t, self.kv_heads, self.head_dim)
        pos = torch.tensor(positions)
        q, k = _rope(q, pos, 10000.0), _rope(k, pos, 10000.0)
        self.keys = k if self.keys is None else torch.cat([self.keys, k])
        self.values = v if self.values is None else torch.cat([self.values, v])
        n_keys, group = self.keys.shape[0], self.heads // self.kv_heads
        outs, last_probs = [], []
        for h in range(self.heads):
            kh, vh = self.keys[:, h // group], self.values[:, h // group]
            scores = q[:, h] @ kh.T / math.sqrt(self.head_dim)  # [t, keys]
            query_index = torch.arange(n_keys - t, n_keys)[:, None]
            scores = scores.masked_fill(torch.arange(n_keys)[None] > query_index, float("-inf"))
            probs = scores.softmax(-1)
            outs.append(probs @ vh)
            last_probs.append(probs[-1])
        attn = self.linear(torch.cat(outs, -1), "midlayer.self_attn.o_proj.weight")
        h = (normed_hidden if self.norm_before_residual else hidden.double()) + attn
        m = _rms(h, self.w["midlayer.post_attention_layernorm.weight"], self.eps)
        gate, up = self.linear(m, "midlayer.mlp.gate_proj.weight"), self.linear(m, "midlayer.mlp.up_proj.weight")
        h = h + self.linear(torch.nn.functional.silu(gate) * up, "midlayer.mlp.down_proj.weight")
        normed = _rms(h, self.w["norm.weight"], self.eps)
        logits = self.linear(normed, "lm_head.weight")
        return logits, (normed if self.norm_output else h), torch.stack(last_probs)

    def to_target(self, draft_id: int) -> int:
        return draft_id + int(self.d2t[draft_id])


def hand_chain(hand: HandDrafter, target: Target, prompt: list[int], first: int, k: int):
    """Greedy chain of k drafts after `prompt` + `first`, with the aux features from HF's output_hidden_states."""
    with torch.no_grad():
        states = target.model(input_ids=torch.tensor([prompt]), output_hidden_states=True).hidden_states
    aux = torch.cat([states[i][0] for i in AUX_IDS], -1)  # input of layer i == hidden_states[i]
    context = len(prompt)
    hidden, ids, positions = hand.fuse(aux), prompt[1:] + [first], list(range(context))
    drafted, probs, attention, rms = [], [], [], []
    for depth in range(k):
        rms.append(float(hidden[-1].pow(2).mean().sqrt()))
        logits, feedback, last = hand.step(ids, hidden, positions)
        choice = int(logits[-1].argmax())
        probs.append(float(logits[-1].softmax(-1)[choice]))
        row = last.mean(0)
        attention.append((float(row[0]), float(row[:context].sum()), float(row[context:].sum())))
        drafted.append(hand.to_target(choice))
        hidden, ids, positions = feedback[-1:], [drafted[-1]], [context + depth]
    return drafted, probs, attention, rms, aux


def _first_drafting_event(tiny: TinyModels, drafter, aux, prompt, k) -> tuple[StepEvent, StepEvent]:
    events = list(speculative_generate(tiny.target, drafter, aux, prompt, GenerationConfig(max_new_tokens=k + 2, k=k)))
    return events[0], events[1]


@pytest.mark.parametrize("name", DRAFTER_NAMES)
@pytest.mark.parametrize("prompt_index", [0, 2])
def test_drafter_math_matches_independent_restatement(tiny: TinyModels, name: str, prompt_index: int) -> None:
    k = 4
    weights = source_weights(tiny, name)
    config = json.loads((tiny.root / name / "config.json").read_text())
    assert bool(config["fc_norm"]) == bool(config["norm_output"]) == (name == "eagle3.1")
    embeddings = tiny.target.model.get_input_embeddings().weight.detach()
    loaded = tiny.drafters[name]
    prompt = tiny.training_prompts[prompt_index]
    prefill, step = _first_drafting_event(tiny, loaded.drafter, loaded.aux_layers, prompt, k)

    hand = HandDrafter(weights, config, embeddings)
    drafted, probs, attention, rms, aux = hand_chain(hand, tiny.target, prompt, prefill.emitted[0], k)
    assert step.drafted == drafted
    assert step.draft_probs == pytest.approx(probs, abs=1e-5)
    got = [x for a in step.attention for x in (a.sink, a.context, a.draft)]
    assert got == pytest.approx([x for row in attention for x in row], abs=1e-5)
    assert step.hidden_rms == pytest.approx(rms, rel=1e-5)

    # module level: the fused features and one step's logits and feedback
    drafter = loaded.drafter
    with torch.no_grad():
        fused = drafter.project(aux.float())
        assert torch.allclose(fused.double(), HandDrafter(weights, config, embeddings).fuse(aux), atol=1e-5)
        ids = prompt[1:] + prefill.emitted
        out = drafter(torch.tensor([ids]), fused[None], torch.arange(len(prompt)))
    fresh = HandDrafter(weights, config, embeddings)
    logits, feedback, _ = fresh.step(ids, fresh.fuse(aux), list(range(len(prompt))))
    assert torch.allclose(out.logits[0].double(), logits, atol=1e-4)
    assert torch.allclose(out.feedback[0].double(), feedback, atol=1e-5)
    if name == "eagle3.1":
        assert torch.allclose(out.feedback, out.normed) and not torch.allclose(out.feedback, out.hidden)
    else:
        assert torch.allclose(out.feedback, out.hidden) and not torch.allclose(out.feedback, out.normed)

    # the comparison discriminates: the other variant's feedback (and, for 3.1, dropping fc_norm) changes drafts
    variants = [HandDrafter(weights, config, embeddings, swap_feedback=True)]
    if name == "eagle3.1":
        variants.append(HandDrafter(weights, config, embeddings, skip_fc_norm=True))
    for wrong in variants:
        w_drafted, w_probs, _, w_rms, _ = hand_chain(wrong, tiny.target, prompt, prefill.emitted[0], k)
        assert w_drafted != drafted or max(abs(a - b) for a, b in zip(w_probs, probs)) > 1e-3
        if wrong.norm_output != hand.norm_output:
            assert max(abs(a - b) for a, b in zip(w_rms[1:], rms[1:])) > 1e-3


def test_norm_before_residual_math(tiny: TinyModels, tmp_path: Path) -> None:
    """A speculators config without the key means norm_before_residual=True: residual = hidden_norm(h)."""
    config = make_config(tiny, "speculators", False, False)
    del config["norm_before_residual"]
    folder = write(tmp_path, config, make_weights(source_weights(tiny, "eagle3"), "speculators"))
    drafter, aux, _ = load_and_attach(tiny.target, folder)
    assert drafter.config.norm_before_residual
    prompt = tiny.training_prompts[1]
    prefill, step = _first_drafting_event(tiny, drafter, aux, prompt, 3)
    flat = {**layer_config(tiny), "fc_norm": False, "norm_output": False}
    embeddings = tiny.target.model.get_input_embeddings().weight.detach()
    hand = HandDrafter(source_weights(tiny, "eagle3"), flat, embeddings, norm_before_residual=True)
    drafted, probs, _, _, _ = hand_chain(hand, tiny.target, prompt, prefill.emitted[0], 3)
    assert step.drafted == drafted and step.draft_probs == pytest.approx(probs, abs=1e-5)
    plain = HandDrafter(source_weights(tiny, "eagle3"), flat, embeddings, norm_before_residual=False)
    assert hand_chain(plain, tiny.target, prompt, prefill.emitted[0], 3)[1] != pytest.approx(probs, abs=1e-4)
