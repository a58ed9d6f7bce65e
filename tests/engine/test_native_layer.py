"""The int4 path's small layer steps in C (engine/native.py, native_layer.c): compiled here with the machine's C
compiler, they compute nearly what PyTorch's steps compute, each verified row bit for bit what a one-row step gives
it (chains and trees), so speculation stays token-identical to plain decoding; where the library cannot be had, one
line says why and PyTorch's steps run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from playground.engine import Target, load_drafter, native
from playground.engine.tree_shape import TreeShape
from tests.support.int4 import assert_chains_and_trees_decode_plainly, ids

pytestmark = pytest.mark.skipif(not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"),
                                reason="this PyTorch has no int4 CPU kernel")


@pytest.fixture(scope="module")
def native_target(tiny_root: Path) -> Target:
    """The tiny int4 target with its C steps forced on (at load they are kept only where measured faster)."""
    lib, problem = native.load()
    if lib is None:
        pytest.skip(f"no C layer steps here: {problem}")
    target = Target.load(str(tiny_root / "target"), weights="int4")
    target.fast.take_native_steps(measure=False)
    assert target.fast.native is not None and "C layer steps" in target.fast.kernels
    if target.fast.lm_head.int8 is not None:  # the int8 head in the same library, its input in float32
        assert target.fast.lm_head.int8_in_c is not None and "C layer steps and head" in target.fast.kernels
    return target


def forward(target: Target, lib, tokens: list[int], cache, aux: list[int], tree=None):
    target.fast.use_native(lib)
    return target.fast.forward(torch.tensor(tokens), cache, aux, False, tree)


def test_a_verifications_rows_are_bit_for_bit_one_row_steps_chain_and_tree(native_target: Target) -> None:
    fast, lib = native_target.fast, native_target.fast.native
    assert fast.row_exact
    aux = [1, native_target.num_layers]  # a layer's input and the final pre-norm state
    prompt, new = ids(37, native_target.vocab_size, 1), ids(5, native_target.vocab_size, 2)
    cache = native_target.new_cache()
    forward(native_target, lib, prompt, cache, [])
    steps = [forward(native_target, lib, [token], cache, aux) for token in new]
    cache.rollback(len(prompt))
    logits, states = forward(native_target, lib, new, cache, aux)
    for i, (one_logits, one_states) in enumerate(steps):
        assert torch.equal(one_logits[0], logits[i])
        assert all(torch.equal(one[0], many[i]) for one, many in zip(one_states, states))
    # a tree: token 0, then two children of it (1 and 2), and a child of 1; node 3 must equal the chain 0, 1, 3
    cache.rollback(len(prompt))
    start = len(prompt)
    positions = torch.tensor([start, start + 1, start + 1, start + 2])
    sees = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    tree_logits, _ = forward(native_target, lib, [new[0], new[1], new[4], new[2]], cache, [], (positions, sees))
    assert torch.equal(tree_logits[0], logits[0]) and torch.equal(tree_logits[1], logits[1])
    assert torch.equal(tree_logits[3], logits[2])
    cache.rollback(start)
    forward(native_target, lib, [new[0]], cache, [])
    alone = forward(native_target, lib, [new[4]], cache, [])[0]
    assert torch.equal(tree_logits[2], alone[0])


def test_the_c_steps_compute_nearly_what_pytorchs_steps_compute(native_target: Target) -> None:
    fast, lib = native_target.fast, native_target.fast.native
    prompt, new = ids(30, native_target.vocab_size, 3), ids(4, native_target.vocab_size, 4)
    outputs = []
    for library in (lib, None):
        cache = native_target.new_cache()
        forward(native_target, lib, prompt, cache, [])
        outputs.append(forward(native_target, library, new, cache, [2])[0])
    fast.use_native(lib)
    c_steps, pytorch_steps = outputs
    assert torch.corrcoef(torch.stack([c_steps.flatten(), pytorch_steps.flatten()]))[0, 1] > 0.999
    assert not torch.equal(c_steps, pytorch_steps)  # another arithmetic: its own plain decoding is its baseline


def test_speculation_with_c_steps_is_token_identical_to_plain_decoding(tiny_root: Path, native_target: Target) -> None:
    drafter, _ = load_drafter(tiny_root / "eagle3.1")
    aux = native_target.attach(drafter)
    drafter.prepare_for_decoding()
    assert_chains_and_trees_decode_plainly(native_target, drafter, aux, seeds=range(30, 34), ks=range(2, 6),
                                           tree=TreeShape(depth=4, topk=3, nodes=12))


def test_without_the_library_one_line_says_why_and_pytorchs_steps_run(tiny_root: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    assert native._load(enabled=False) == (None, "turned off (PLAYGROUND_NATIVE=0)")
    monkeypatch.setenv("CC", "/bin/false")
    lib, problem = native._load(cache=tmp_path)
    assert lib is None and problem.startswith("/bin/false failed") and "\n" not in problem
    monkeypatch.setattr(native, "_loaded", (None, problem))
    target = Target.load(str(tiny_root / "target"), weights="int4")
    assert target.fast.native is None and target.fast.native_why == f"C layer steps: {problem}"
    assert target.fast.kernels.endswith(f" head; C layer steps: {problem}")  # what ran, and why not the C steps
    prompt = ids(20, target.vocab_size, 5)
    assert target.forward(prompt, target.new_cache()).logits.shape[0] == len(prompt)


def test_a_folder_it_cannot_write_is_one_line_too(tmp_path: Path) -> None:
    if native.load()[0] is None:
        pytest.skip(f"no C layer steps here: {native.load()[1]}")
    blocked = tmp_path / "a file, not a folder"
    blocked.write_text("")
    lib, problem = native._load(cache=blocked / "native")
    assert lib is None and problem.startswith(f"cannot build it in {blocked / 'native'}: ") and "\n" not in problem


def test_the_library_is_built_once_per_machine_and_source(tmp_path: Path) -> None:
    if native.load()[0] is None:
        pytest.skip(f"no C layer steps here: {native.load()[1]}")
    first, problem = native._load(cache=tmp_path)
    assert problem is None and first is not None
    built = list(tmp_path.glob("native_layer-*.so"))
    assert len(built) == 1
    stamp = built[0].stat().st_mtime_ns
    assert native._load(cache=tmp_path)[1] is None and built[0].stat().st_mtime_ns == stamp  # found, not built again


def test_a_compiler_without_openmp_builds_it_on_one_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where `-fopenmp` fails (a compiler without OpenMP), the file builds without it: the same answers, on the
    calling thread whatever `threads` asks for."""
    if native.load()[0] is None:
        pytest.skip(f"no C layer steps here: {native.load()[1]}")
    monkeypatch.setattr(native, "OPENMP", "-fno-such-option-here")
    lib, problem = native._load(cache=tmp_path)
    assert problem is None and lib is not None
    g = torch.Generator().manual_seed(3)
    codes = torch.randint(-127, 128, (21, 48), generator=g, dtype=torch.int8)
    scales, x = torch.rand(21, generator=g), torch.randn(3, 48, generator=g)
    out = torch.empty(3, 21)
    lib.int8_product(x.data_ptr(), 3, 48, 21, codes.data_ptr(), scales.data_ptr(), out.data_ptr(), 2)
    assert torch.allclose(out, x @ (codes.float() * scales[:, None]).T, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("march", ["native", "x86-64-v3", "x86-64"])
def test_each_instruction_path_is_row_exact_and_close_to_pytorch(march: str, tmp_path: Path) -> None:
    """The file's AVX-512, AVX2 and plain-C paths (whichever -march selects; built into a scratch cache): attention,
    the norm and the head's int8 product computed for several rows at once on two threads equal each row computed
    alone on one, and near PyTorch's."""
    import platform

    import torch.nn.functional as F

    from playground.engine.llama import rotate

    if march != "native" and platform.machine() != "x86_64":
        pytest.skip("x86-64 instruction sets")
    lib, problem = native._load(march, cache=tmp_path)
    if lib is None:
        pytest.skip(f"no C layer steps here: {problem}")
    g = torch.Generator().manual_seed(7)
    heads, kv_heads, dim, capacity, start, rows = 6, 2, 40, 64, 23, 4  # 40: vector blocks and a scalar tail
    qkv = torch.randn(rows, (heads + 2 * kv_heads) * dim, generator=g).to(torch.bfloat16)
    cos, signed_sin = torch.randn(128, dim, generator=g), torch.randn(128, dim, generator=g)
    cached = torch.randn(2, kv_heads, capacity, dim, generator=g)

    keys, values = cached[0].clone(), cached[1].clone()
    together = torch.empty(rows, heads * dim, dtype=torch.bfloat16)
    assert lib.attend(qkv.data_ptr(), rows, heads, kv_heads, dim, cos.data_ptr(), signed_sin.data_ptr(), None,
                      keys.data_ptr(), values.data_ptr(), capacity, start, None, 0.125, together.data_ptr(), 2) == 0
    for r in range(rows):
        alone = torch.empty(rows, heads * dim, dtype=torch.bfloat16)
        k, v = cached[0].clone(), cached[1].clone()
        for j in range(r + 1):
            lib.attend(qkv[j:].data_ptr(), 1, heads, kv_heads, dim, cos.data_ptr(), signed_sin.data_ptr(), None,
                       k.data_ptr(), v.data_ptr(), capacity, start + j, None, 0.125, alone[j:].data_ptr(), 1)
        assert torch.equal(alone[r], together[r]), r
    q = qkv.float().view(rows, heads + 2 * kv_heads, dim).transpose(0, 1)
    rotated = rotate(q[: heads + kv_heads], cos[None, start : start + rows], signed_sin[None, start : start + rows])
    assert torch.allclose(keys[:, start : start + rows], rotated[heads:], atol=1e-5)
    mask = torch.cat([torch.ones(rows, start, dtype=torch.bool), torch.ones(rows, rows, dtype=torch.bool).tril()], 1)
    expected = F.scaled_dot_product_attention(rotated[None, :heads], keys[None, :, : start + rows],
                                              values[None, :, : start + rows], attn_mask=mask, scale=0.125,
                                              enable_gqa=True)[0].transpose(0, 1).reshape(rows, -1)
    assert torch.allclose(together.float(), expected, atol=2e-2, rtol=1e-2)
    x, weight = torch.randn(rows, 72, generator=g), torch.rand(72, generator=g)
    normed, one = torch.empty(rows, 72, dtype=torch.bfloat16), torch.empty(1, 72, dtype=torch.bfloat16)
    every, third = x.clone(), x[2:3].clone()  # held: the C code writes into them (the residual stream)
    lib.add_norm(every.data_ptr(), None, weight.data_ptr(), rows, 72, 1e-5, 0, normed.data_ptr(), None)
    lib.add_norm(third.data_ptr(), None, weight.data_ptr(), 1, 72, 1e-5, 0, one.data_ptr(), None)
    assert torch.equal(one[0], normed[2])
    assert torch.allclose(normed.float(), F.rms_norm(x, (72,), weight, 1e-5), atol=2e-2, rtol=1e-2)
    outputs, many = 37, 5  # 72 inputs: vector blocks and a scalar tail; 5 rows: a block of 4 and one more
    codes = torch.randint(-127, 128, (outputs, 72), generator=g, dtype=torch.int8)
    scales, x = torch.rand(outputs, generator=g) / 100, torch.randn(many, 72, generator=g)
    together = torch.empty(many, outputs)
    lib.int8_product(x.data_ptr(), many, 72, outputs, codes.data_ptr(), scales.data_ptr(), together.data_ptr(), 2)
    for r in range(many):
        alone = torch.empty(1, outputs)
        lib.int8_product(x[r:].data_ptr(), 1, 72, outputs, codes.data_ptr(), scales.data_ptr(), alone.data_ptr(), 1)
        assert torch.equal(alone[0], together[r]), r
    assert torch.allclose(together, x @ (codes.float() * scales[:, None]).T, atol=1e-4, rtol=1e-4)


def test_the_entry_points_hand_the_engine_its_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PLAYGROUND_NATIVE=0 and PLAYGROUND_CACHE_DIR reach the engine through `flags.apply_engine_settings` (the CLI's
    and app.py's), the engine reading no setting itself."""
    from playground import flags

    monkeypatch.setattr(native, "_settings", dict(native._settings))
    monkeypatch.setattr(native, "_loaded", None)
    monkeypatch.setenv("PLAYGROUND_NATIVE", "0")
    flags.apply_engine_settings()
    assert native.load() == (None, "turned off (PLAYGROUND_NATIVE=0)")
    monkeypatch.setenv("PLAYGROUND_NATIVE", "1")
    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path))
    flags.apply_engine_settings()
    lib, problem = native.load()
    if lib is None:
        pytest.skip(f"no C layer steps here: {problem}")
    assert list((tmp_path / "native").glob("native_layer-*.so"))
    monkeypatch.setattr(native, "_loaded", None)  # the next test's loads build their own again
