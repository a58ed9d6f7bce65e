"""int4 weights on the fast path (engine/llama.py): GGUF Q4_1's groups come back exactly from their dequantised
float32 values; a target loaded with weights="int4" holds a fraction of float32's bytes, computes nearly float32's
logits, and, where its products are row-exact (probed at load), speculates token-identically to its own plain
decoding, chains and trees, with no near-tie tolerance; a shape the kernel cannot take is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from playground.engine import GenerationConfig, Target, load_drafter, native, plain_generate, speculative_generate
from playground.engine.drafter import Int8Linear
from playground.engine.llama import QUANT_GROUP, Int8Embedding, int4_eligible, int4_groups, int8_rows
from playground.engine.target import TargetError
from playground.engine.tree_shape import TreeShape
from tests.support.int4 import assert_chains_and_trees_decode_plainly, ids

pytestmark = pytest.mark.skipif(not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"),
                                reason="this PyTorch has no int4 CPU kernel")


def dequantised(groups: tuple[torch.Tensor, torch.Tensor], out: int, inputs: int) -> torch.Tensor:
    """The weight the int4 kernel multiplies, read back through it: identity rows in bf16 select its columns."""
    eye = torch.eye(inputs, dtype=torch.bfloat16)
    return torch.ops.aten._weight_int4pack_mm_for_cpu(eye, groups[0], QUANT_GROUP, groups[1]).float().t()


def test_q4_1_codes_come_back_from_their_dequantised_weights() -> None:
    """Weights made as a Q4_1 file's are (code * d + m per group of 32, d and m in fp16): int4_groups finds the same
    codes, so the kernel's weight differs from them only by bf16 rounding (its scales', and the read-back's: within
    2^-7 of each group's range plus the value), where a weight quantised from arbitrary values is off by up to half a
    step."""
    g = torch.Generator().manual_seed(0)
    out, inputs = 48, 96
    codes = torch.randint(0, 16, (out, inputs // QUANT_GROUP, QUANT_GROUP), generator=g).float()
    codes[..., 0], codes[..., 1] = 0, 15  # each group spans its range, as llama.cpp's quantiser makes it
    d = (torch.rand(out, inputs // QUANT_GROUP, 1, generator=g) * 0.01 + 0.001).half().float()
    m = (-torch.rand(out, inputs // QUANT_GROUP, 1, generator=g) * 0.05).half().float()
    weight = (codes * d + m).reshape(out, inputs)
    back = dequantised(int4_groups(weight), out, inputs)
    span = (15 * d).expand(-1, -1, QUANT_GROUP).reshape(out, inputs)
    assert ((back - weight).abs() <= (span + weight.abs()) * 2**-7).all()
    arbitrary = torch.randn(out, inputs, generator=g)  # a control: values off the grid lose what it cannot hold
    groups = arbitrary.reshape(out, -1, QUANT_GROUP)
    span = (groups.amax(-1) - groups.amin(-1))[..., None].expand(-1, -1, QUANT_GROUP).reshape(out, inputs)
    off = (dequantised(int4_groups(arbitrary), out, inputs) - arbitrary).abs()
    assert not (off <= (span + arbitrary.abs()) * 2**-7).all()
    assert int4_eligible(weight) and not int4_eligible(torch.zeros(40, 96)) and not int4_eligible(torch.zeros(48, 40))


def test_int8_rows_hold_each_weight_within_half_a_step_and_the_embedding_reads_them() -> None:
    """The int8 head's rows: each weight within half its row's step (max |w| / 127), read back through the kernel;
    the embedding built from the same codes gives those rows (a tied table held once)."""
    weight = torch.randn(64, 96, generator=torch.Generator().manual_seed(3))
    codes, scales = int8_rows(weight)
    assert codes.dtype == torch.int8 and scales.shape == (64,)
    eye = torch.eye(96, dtype=torch.bfloat16)
    back = torch.ops.aten._weight_int8pack_mm(eye, codes, scales).float().t()
    step = weight.abs().amax(dim=1, keepdim=True) / 127
    assert ((back - weight).abs() <= step / 2 + weight.abs() * 2**-7).all()
    ids = torch.tensor([0, 5, 63])
    assert torch.allclose(Int8Embedding(codes, scales, torch.float32)(ids), back[ids], rtol=2**-7, atol=0)


@pytest.fixture(scope="module")
def int4_target(tiny_root: Path) -> Target:
    return Target.load(str(tiny_root / "target"), weights="int4")


def test_int4_target_holds_less_and_computes_nearly_float32s_logits(tiny_root: Path, int4_target: Target) -> None:
    full = Target.load(str(tiny_root / "target"))
    assert (int4_target.weights, full.weights) == ("int4", "float32") and int4_target.quantised
    assert int4_target.fast.kernels.startswith(f"int4 groups of {QUANT_GROUP}")
    if int4_target.fast.lm_head.int8 is not None:  # the head in 8 bits; a tied table read by the embedding too
        assert "int8 rows head" in int4_target.fast.kernels
        tied = int4_target.model.config.tie_word_embeddings
        assert isinstance(int4_target.model.get_input_embeddings(), Int8Embedding) == tied
    assert int4_target.fast.resident_bytes() < 0.8 * full.fast.resident_bytes()
    prompt = ids(40, full.vocab_size, 1)
    a = int4_target.forward(prompt, int4_target.new_cache()).logits
    b = full.forward(prompt, full.new_cache()).logits
    assert a.dtype == torch.float32
    assert torch.corrcoef(torch.stack([a.flatten(), b.flatten()]))[0, 1] > 0.9  # the same model, 4-bit
    assert not torch.equal(a, b)  # ... and a different target: the engine says which it ran
    with pytest.raises(TargetError, match="int4"):
        int4_target.features(torch.tensor([prompt]), [0])


def test_int4_speculation_is_token_identical_to_int4_plain_decoding(tiny_root: Path, int4_target: Target) -> None:
    if not int4_target.fast.row_exact:
        pytest.skip("this CPU's int4 products are not row-exact: speculation on them is refused (tested below)")
    drafter, _ = load_drafter(tiny_root / "eagle3.1")
    aux = int4_target.attach(drafter)
    drafter.prepare_for_decoding()
    assert_chains_and_trees_decode_plainly(int4_target, drafter, aux, seeds=range(10, 14), ks=range(3, 7),
                                           tree=TreeShape(depth=4, topk=3, nodes=12))


def test_an_int8_drafter_beside_int4_layers_speculates_token_identically(tiny_root: Path, int4_target: Target) -> None:
    """A drafter's products in int8 rows (`use_int8_products`, forced here: on this machine it is chosen by timing)
    hold no float32 product any more, draft nearly what its float32 self drafts, and change only the drafts: chains
    and trees on the int4 target still give its plain decoding's tokens."""
    if not int4_target.fast.row_exact:
        pytest.skip("this CPU's int4 products are not row-exact: speculation on them is refused (tested below)")
    from torch import nn

    full, _ = load_drafter(tiny_root / "eagle3.1")
    int8, _ = load_drafter(tiny_root / "eagle3.1")
    aux = int4_target.attach(full)
    int4_target.attach(int8)
    assert int8.use_int8_products(gain=0.0) and int8.weights == "int8" and full.weights == "float32"
    assert not any(isinstance(m, nn.Linear) for m in int8.modules())
    in_c = native.load()[0] is not None  # where the C library builds, its int8 kernel multiplies (float32 inputs)
    assert all((m.projection.int8_in_c is not None) == in_c for m in int8.modules() if isinstance(m, Int8Linear))
    hidden = torch.randn(1, 6, 3 * int8.config.target_hidden_size, generator=torch.Generator().manual_seed(5))
    tokens, positions = torch.tensor([ids(6, int4_target.vocab_size, 4)]), torch.arange(6)
    with torch.inference_mode():
        a = full(tokens, full.project(hidden), positions).logits
        b = int8(tokens, int8.project(hidden), positions).logits
    assert torch.corrcoef(torch.stack([a.flatten(), b.flatten()]))[0, 1] > 0.99 and not torch.equal(a, b)
    assert_chains_and_trees_decode_plainly(int4_target, int8, aux, seeds=range(20, 23), ks=range(2, 5),
                                           tree=TreeShape(depth=3, topk=2, nodes=8))


def test_weights_int4_is_refused_in_one_line_where_the_kernel_cannot_take_a_shape(tiny_root: Path) -> None:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_root / "target")
    config = LlamaConfig(hidden_size=40, intermediate_size=80, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, vocab_size=len(tokenizer))
    with pytest.raises(TargetError) as refused:
        Target(LlamaForCausalLM(config).eval(), tokenizer, weights="int4")
    assert "not multiples of 16 outputs by 32 inputs" in str(refused.value) and "\n" not in str(refused.value)
    auto = Target(LlamaForCausalLM(config).eval(), tokenizer, weights="auto")
    assert auto.weights == "float32" and "not multiples" in auto.fast.weights_why


def test_auto_weights_are_chosen_on_one_thread_and_the_threads_given_back(tiny_root: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """weights="auto" times int4 against float32 on one thread, each one's fastest run: a choice the process keeps,
    which a busy core must not skew (on both threads beside one busy loop it kept float32 on a load in three)."""
    from playground.engine import llama

    seen = []

    def recording(plain, other, gain, reps, fastest=False):
        seen.append((gain, torch.get_num_threads(), fastest))
        return True
    monkeypatch.setattr(llama, "measured_faster", recording)
    threads = torch.get_num_threads()
    target = Target.load(str(tiny_root / "target"), weights="auto")
    assert target.fast.weights == "int4" and (llama.INT4_GAIN, 1, True) in seen
    assert torch.get_num_threads() == threads


def test_a_local_backend_refuses_speculation_on_int4_that_is_not_row_exact(tiny_root: Path) -> None:
    from playground.backends.local import LocalBackend
    from playground.presets import Preset
    from playground.request import RequestError

    backend = LocalBackend(Preset(name="t", title="t", target=str(tiny_root / "target"),
                                  drafters={"eagle3.1": str(tiny_root / "eagle3.1")}, weights="int4"))
    backend.target.fast.row_exact = False  # as a CPU whose int4 kernel mixes rows would measure it
    prompt = ids(10, backend.target.vocab_size, 3)
    with pytest.raises(RequestError, match="not be token-identical"):
        list(backend.stream(prompt, "eagle3.1", GenerationConfig(max_new_tokens=8, k=2)))
    assert list(backend.stream(prompt, "none", GenerationConfig(max_new_tokens=8)))  # plain decoding still runs


def test_replay_on_a_row_exact_int4_target_steps_exactly_as_live_runs(tiny_root: Path, int4_target: Target) -> None:
    """On a row-exact target the teacher-forced pass reads the answer a verification at a time (replay._read_through),
    so every plain answer is taken as the target's own and a replay's steps equal a live run's at every k: drafts,
    acceptance and tokens. Prompts and answers longer than MAX_EXACT_ROWS, so the answer spans several reads."""
    from playground.engine.llama import MAX_EXACT_ROWS
    from playground.engine.replay import replay, teacher_force

    if not int4_target.fast.row_exact:
        pytest.skip("this CPU's int4 products are not row-exact: replay there is up to rounding, as for float32")
    drafter, _ = load_drafter(tiny_root / "eagle3.1")
    aux = int4_target.attach(drafter)
    drafter.prepare_for_decoding()
    for seed in range(20, 24):
        prompt = ids(30, int4_target.vocab_size, seed)
        cfg = GenerationConfig(max_new_tokens=48, instrument=False)
        answer = [t for e in plain_generate(int4_target, prompt, cfg) for t in e.emitted]
        assert len(answer) > MAX_EXACT_ROWS
        forced = teacher_force(int4_target, aux, prompt, answer)
        for k in (1, 3, 5):
            live = list(speculative_generate(int4_target, drafter, aux, prompt, GenerationConfig(
                max_new_tokens=48, k=k, instrument=False)))
            replayed = replay(forced, int4_target, drafter, k)
            assert [(e.drafted, e.accepted, e.emitted) for e in replayed] == \
                [(e.drafted, e.accepted, e.emitted) for e in live], (seed, k)


def test_the_default_targets_int4_answers_replay_where_one_forward_reads_them_otherwise() -> None:
    """SmolLM2's int4 target (the preset smollm2-135m-int4): its plain answers to two held-out prompts are taken as
    its own by the teacher-forced pass and replay as live EAGLE-3.1 runs step; one forward over prompt + answer read
    a near-tie the other way in 15 of 18 such answers on a Zen 4 (2026-12-06), which made replay, k auto's session
    evidence and the fingerprint leave them out."""
    from playground.backends.local import LocalBackend
    from playground.engine.replay import replay, teacher_force
    from playground.presets import get_preset
    from playground.prompt_sets import load_prompt_set

    backend = LocalBackend(get_preset("smollm2-135m-int4"))
    target, loaded = backend.target, backend.drafter("eagle3.1")
    if not target.fast.row_exact:
        pytest.skip("this CPU's int4 products are not row-exact: replay there is up to rounding, as for float32")
    for record in load_prompt_set("held-out", 5).records[2::2]:
        prompt = backend.encode(record.messages([]))
        answer = [t for e in plain_generate(target, prompt, GenerationConfig(max_new_tokens=64, instrument=False))
                  for t in e.emitted]
        forced = teacher_force(target, loaded.aux_layers, prompt, answer)
        live = speculative_generate(target, loaded.drafter, loaded.aux_layers, prompt,
                                    GenerationConfig(max_new_tokens=64, k=2, instrument=False))
        assert [(e.drafted, e.accepted) for e in replay(forced, target, loaded.drafter, 2)] == \
            [(e.drafted, e.accepted) for e in live], record.question_id
