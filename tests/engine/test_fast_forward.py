"""The fast decode forward (engine/llama.py) computes what transformers computes, and decoding through either is
lossless; its caches roll back by length and grow past their first capacity; its packed products, and one-row
products through a transposed weight, agree with the plain ones. The models are the session's tiny Llama pair
(tests/support/tiny.py), loaded from disk."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, MistralConfig, MistralForCausalLM

from playground.engine import (
    GenerationConfig,
    Target,
    emitted_ids,
    load_drafter,
    plain_generate,
    speculative_generate,
)
from playground.engine.cache import FIRST_CAPACITY, KVCache
from playground.engine.llama import MAX_EXACT_ROWS, Projection, native_bfloat16, rows_independent
from playground.engine.tree import tree_generate
from playground.engine.tree_shape import TreeShape


def load_target(root: Path, fast: bool, dtype: torch.dtype = torch.float32) -> Target:
    return Target.load(str(root / "target"), dtype=dtype, fast=fast)


def ids(n: int, vocab: int, seed: int) -> list[int]:
    return torch.randint(8, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.fixture(scope="module")
def targets(tiny_root: Path) -> tuple[Target, Target]:
    fast, slow = load_target(tiny_root, fast=True), load_target(tiny_root, fast=False)
    assert (fast.forward_path, slow.forward_path) == ("fast", "transformers")
    assert isinstance(fast.new_cache(), KVCache) and not isinstance(slow.new_cache(), KVCache)
    return fast, slow


def test_same_logits_and_aux_states_as_transformers(targets: tuple[Target, Target]) -> None:
    fast, slow = targets
    aux = [0, 2, fast.num_layers]  # the input of layers 0 and 2, and the final pre-norm state
    prompt = ids(300, fast.vocab_size, 0)  # longer than a new cache holds: it grows once
    assert len(prompt) > FIRST_CAPACITY
    caches = fast.new_cache(), slow.new_cache()
    feeds = [prompt, prompt[:5], prompt[5:6], prompt[6:13]]
    rollback_to = [None, 300 + 2, None, None]  # keep 2 of the 5: the rest is overwritten by the next feed
    for feed, back in zip(feeds, rollback_to):
        a, b = (t.forward(feed, c, aux) for t, c in zip(targets, caches))
        torch.testing.assert_close(a.logits, b.logits, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(a.aux, b.aux, rtol=1e-5, atol=1e-5)
        if back is not None:
            for c in caches:
                c.rollback(back)
    assert caches[0].length == caches[1].length == 300 + 2 + 1 + 7
    last = fast.forward(prompt[:1], caches[0], last_only=True).logits
    assert last.shape == (1, fast.vocab_size)


def test_both_caches_keep_a_tree_path_as_if_it_alone_had_been_fed(targets: tuple[Target, Target]) -> None:
    """A tree of 5 new tokens (0 the root; 1 and 2 its children; 3 under 1, 4 under 2), verified in one forward;
    `keep` of the path 0-2-4 leaves each cache as a fresh one fed the prompt and those three tokens."""
    prompt, new = ids(20, targets[0].vocab_size, 3), ids(5, targets[0].vocab_size, 4)
    parents = [-1, 0, 0, 1, 2]
    sees = torch.eye(5, dtype=torch.bool)
    for row, parent in enumerate(parents):
        if parent >= 0:
            sees[row] |= sees[parent]
    positions = torch.tensor([20, 21, 21, 22, 22])
    path = [0, 2, 4]
    for target in targets:
        cache, fresh = target.new_cache(), target.new_cache()
        target.forward(prompt, cache)
        target.forward(new, cache, tree=(positions, sees))
        cache.keep(len(prompt), torch.tensor(path))
        assert cache.length == len(prompt) + len(path)
        target.forward(prompt + [new[i] for i in path], fresh)
        after, expected = (target.forward([7], c, last_only=True).logits for c in (cache, fresh))
        torch.testing.assert_close(after, expected, rtol=1e-5, atol=1e-5)
        cache.rollback(cache.length + 3)  # longer than the cache: nothing to drop
        assert cache.length == len(prompt) + len(path) + 1


def unpacked(target: Target) -> Target:
    """The target with no oneDNN packs (taken at load wherever PyTorch has oneDNN)."""
    for projection in target.fast.projections():
        projection.onednn = None
    target.fast.onednn_roles = []
    return target


def a_step_in_plain_products(tiny_root: Path, seed: int) -> tuple[Target, list[int], KVCache, torch.Tensor]:
    """An unpacked target, a 5-token step after a 40-token prompt in its cache (rolled back to the prompt), and the
    step's logits through plain products: what a packed layout must agree with."""
    target = unpacked(load_target(tiny_root, fast=True))
    prompt, step = ids(40, target.vocab_size, seed), ids(5, target.vocab_size, seed + 1)
    cache = target.new_cache()
    target.forward(prompt, cache)
    plain = target.forward(step, cache).logits
    cache.rollback(len(prompt))
    return target, step, cache, plain


def test_packed_products_agree_with_plain_ones(tiny_root: Path) -> None:
    target, step, cache, plain = a_step_in_plain_products(tiny_root, 1)
    target.expect_rows(len(step))
    if not torch.backends.mkl.is_available():
        pytest.skip("this torch build has no MKL: float32 products are never packed")
    assert target.fast.kernels.startswith("mkl-packed")
    packed = target.forward(step, cache).logits
    torch.testing.assert_close(packed, plain, rtol=1e-4, atol=1e-4)
    assert target.fast.forward(torch.tensor(step[:3]), cache, [], False)[0].shape[0] == 3  # other counts: unpacked


def test_one_row_products_through_the_transposed_weight_agree_with_plain_ones() -> None:
    """`Projection.columns` serves one-row products only."""
    generator = torch.Generator().manual_seed(5)
    weight, bias = torch.randn(300, 48, generator=generator), torch.randn(300, generator=generator)
    projection = Projection(weight, bias)
    projection.use_columns()
    assert projection.columns.is_contiguous() and projection.columns.equal(weight.t())
    one, three = torch.randn(1, 48, generator=generator), torch.randn(3, 48, generator=generator)
    torch.testing.assert_close(projection(one), torch.nn.functional.linear(one, weight, bias))
    projection.columns = torch.zeros_like(projection.columns)  # a wrong copy shows which rows read it
    assert projection(one).equal(bias[None])
    assert projection(three).equal(torch.nn.functional.linear(three, weight, bias))


def test_float32_layouts_are_fixed_by_the_machine_not_timed(tiny_root: Path) -> None:
    """A float32 target on a CPU takes the transposed one-row layout for qkv, gate_up and the head, and oneDNN's packs
    where PyTorch has oneDNN, at every load: no timing decides what it computes."""
    kernels = {load_target(tiny_root, fast=True).fast.kernels for _ in range(2)}
    assert len(kernels) == 1
    assert next(iter(kernels)).endswith("+ transposed one-row qkv, gate_up, lm_head")
    assert next(iter(kernels)).startswith("onednn-packed" if torch.backends.mkldnn.is_available() else "plain")


def test_float32_products_packed_by_onednn_agree_and_stay_lossless(tiny_root: Path) -> None:
    """oneDNN's float32 packs (on every product here) serve every product of several rows, a one-row product keeps its
    own layout; the logits agree with plain products, and chains and trees verified through them stay token-identical
    to plain decoding."""
    if not torch.backends.mkldnn.is_available():
        pytest.skip("this torch build has no oneDNN")
    target, step, cache, plain = a_step_in_plain_products(tiny_root, 11)
    for projection in target.fast.projections():
        projection.onednn = torch.ops.mkldnn._reorder_linear_weight(projection.weight.detach(), 8)
    target.fast.onednn_roles = ["qkv", "o", "gate_up", "down", "lm_head"]
    assert target.fast.kernels.startswith("onednn-packed qkv")
    torch.testing.assert_close(target.forward(step, cache).logits, plain, rtol=1e-4, atol=1e-4)
    target.expect_rows(len(step) + 1)
    assert all(p.mkl is None for p in target.fast.projections())  # nothing left for MKL to pack
    drafter, _ = load_drafter(tiny_root / "eagle3.1")
    assert drafts_equal_plain(target, drafter, seed=13) == (True, True)


def drafts_equal_plain(target: Target, drafter, seed: int) -> tuple[bool, bool]:
    """Whether a chain and a tree drafted by `drafter` each give plain decoding's 40 greedy tokens."""
    aux = target.attach(drafter)
    question, cfg = ids(20, target.vocab_size, seed), GenerationConfig(max_new_tokens=40, k=4)
    reference = emitted_ids(list(plain_generate(target, question, cfg)))
    chain = emitted_ids(list(speculative_generate(target, drafter, aux, question, cfg)))
    tree = emitted_ids(list(tree_generate(target, drafter, aux, question, cfg, TreeShape(depth=4, topk=3, nodes=12))))
    return chain == reference, tree == reference


def test_a_layer_group_in_the_transposed_layout_keeps_one_copy_and_the_same_numbers(tiny_root: Path) -> None:
    """`use_columns` on a target's layer projections changes their layout in place: the fused weight becomes a view of
    W^T, the Hugging Face modules' weights views of it (no second copy), and every forward, one row or several, on the
    fast path or through transformers, computes what it computed before (forced here for every role)."""
    target, reference = load_target(tiny_root, fast=True), load_target(tiny_root, fast=False)
    prompt = ids(9, target.vocab_size, 21)
    before = target.forward(prompt, target.new_cache()).logits
    for group in target.fast.layer_groups().values():
        for projection in group:
            projection.use_columns()
    layer = target.fast.layers[0]
    attn = target.model.model.layers[0].self_attn
    assert layer.qkv.weight.data_ptr() == layer.qkv.columns.data_ptr() == attn.q_proj.weight.data_ptr()
    assert attn.k_proj.weight.equal(layer.qkv.columns.t()[attn.q_proj.weight.shape[0]:][: attn.k_proj.weight.shape[0]])
    cache = target.new_cache()
    torch.testing.assert_close(target.forward(prompt, cache).logits, before, rtol=1e-5, atol=1e-5)
    one_row = target.forward(prompt[:1], target.new_cache()).logits
    torch.testing.assert_close(one_row, before[:1], rtol=1e-5, atol=1e-5)
    moved = Target(target.model, target.tokenizer, fast=False)  # the modules' transposed views, through transformers
    torch.testing.assert_close(moved.forward(prompt, moved.new_cache()).logits,
                               reference.forward(prompt, reference.new_cache()).logits, rtol=1e-4, atol=1e-4)


class _RowMixingProjection(Projection):
    """A stand-in for a kernel whose rounding of a row depends on the rows beside it (no kernel on this machine can
    be relied on to do that): each row gets a trace of the others."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return super().__call__(x) + 1e-3 * (x.sum(0) - x).sum(-1, keepdim=True)


class _RowByRowProjection(Projection):
    """A stand-in for a row-independent kernel: every row multiplied alone."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([super(_RowByRowProjection, self).__call__(row[None]) for row in x])


def test_row_exactness_is_measured_not_assumed() -> None:
    """`FastLlama.row_exact` (bfloat16) comes from this probe of every product shape, not from the CPU's flags."""
    weight = torch.randn(64, 32, generator=torch.Generator().manual_seed(7))
    assert not rows_independent(_RowMixingProjection(weight, None), 5)
    assert rows_independent(_RowByRowProjection(weight, None), 5)


def test_drafts_through_a_transposed_head_stay_lossless(tiny_root: Path) -> None:
    """A drafter prepared for decoding scores only the rows asked for, through lm_head's transposed copy (forced
    here): its logits agree with lm_head's, and chains and trees drafted with it stay token-identical to plain."""
    target = load_target(tiny_root, fast=True)
    drafter, _ = load_drafter(tiny_root / "eagle3.1")
    aux = target.attach(drafter)
    hidden, positions = torch.randn(1, 3, drafter.config.hidden_size), torch.arange(3)
    with torch.inference_mode():
        full = drafter(torch.tensor([[5, 6, 7]]), hidden, positions).logits
        drafter.head = Projection(drafter.lm_head.weight.detach(), None)
        drafter.head.columns = drafter.lm_head.weight.detach().t().contiguous()
        last = drafter(torch.tensor([[5, 6, 7]]), hidden, positions, logits_rows=1).logits
        assert drafter(torch.tensor([[5]]), hidden[:, :1], positions[:1], logits_rows=0).logits is None
    assert last.shape == (1, 1, drafter.config.draft_vocab_size)
    torch.testing.assert_close(last[0, 0], full[0, -1], rtol=1e-5, atol=1e-5)
    prompt = ids(20, target.vocab_size, 6)
    cfg = GenerationConfig(max_new_tokens=32, k=4)
    plain = [t for e in plain_generate(target, prompt, cfg) for t in e.emitted]
    assert [t for e in speculative_generate(target, drafter, aux, prompt, cfg) for t in e.emitted] == plain
    tree = [t for e in tree_generate(target, drafter, aux, prompt, cfg, TreeShape(depth=4, topk=3, nodes=10))
            for t in e.emitted]
    assert tree == plain


def test_a_drafter_in_the_transposed_layout_drafts_the_same(tiny_root: Path) -> None:
    """The drafter's fc and layer products in the W^T layout (forced for every one here): the modules' weights are views
    of W^T, the logits agree, and the drafts stay lossless."""
    target = load_target(tiny_root, fast=True)
    drafter, _ = load_drafter(tiny_root / "eagle3.1")
    target.attach(drafter)
    hidden, positions = torch.randn(1, 3, drafter.config.hidden_size), torch.arange(3)
    with torch.inference_mode():
        before = drafter(torch.tensor([[5, 6, 7]]), hidden, positions).logits
        for module in [drafter.fc, *(m for m in drafter.layers.modules() if isinstance(m, torch.nn.Linear))]:
            Projection(module.weight.detach(), None, [(module, 0)]).use_columns()
            assert not module.weight.is_contiguous() and module.weight.t().is_contiguous()
        after = drafter(torch.tensor([[5, 6, 7]]), hidden, positions).logits
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)
    assert drafts_equal_plain(target, drafter, seed=8) == (True, True)


def test_decoding_through_transformers_stays_lossless(tiny_root: Path) -> None:
    """The fallback path (any model the fast forward does not take): speculative equals plain, and equals the fast
    path's output."""
    fast, slow = load_target(tiny_root, fast=True), load_target(tiny_root, fast=False)
    drafter, _ = load_drafter(tiny_root / "eagle3.1")
    aux = slow.attach(drafter)
    prompt = ids(20, slow.vocab_size, 3)
    cfg = GenerationConfig(max_new_tokens=40, k=4)
    plain = [t for e in plain_generate(slow, prompt, cfg) for t in e.emitted]
    spec = [t for e in speculative_generate(slow, drafter, aux, prompt, cfg) for t in e.emitted]
    assert spec == plain
    assert [t for e in plain_generate(fast, prompt, cfg) for t in e.emitted] == plain


def test_models_it_does_not_know_take_transformers_path(tiny_root: Path) -> None:
    config = MistralConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           num_key_value_heads=1, vocab_size=64, sliding_window=16)
    target = Target(MistralForCausalLM(config).eval(), AutoTokenizer.from_pretrained(tiny_root / "target"))
    assert target.forward_path == "transformers" and "mistral" in target.fast_problem
    out = target.forward([1, 2, 3], target.new_cache(), aux_layers=[1])
    assert out.logits.shape == (3, 64) and out.aux.shape == (3, 32)


@pytest.mark.skipif(not native_bfloat16(), reason="this CPU has no bfloat16 instructions (AVX-512 BF16 or AMX)")
def test_bfloat16_uses_packed_kernels_and_stays_close(tiny_root: Path) -> None:
    fast, slow = load_target(tiny_root, True, torch.bfloat16), load_target(tiny_root, False, torch.bfloat16)
    assert fast.fast.kernels == "onednn-packed" and fast.dtype == torch.bfloat16
    prompt = ids(60, fast.vocab_size, 4)
    a, b = (t.forward(prompt, t.new_cache(), [1]) for t in (fast, slow))
    assert a.aux.dtype == torch.bfloat16
    # bfloat16 keeps 8 bits of mantissa; the two paths round in different places
    assert (a.logits.argmax(-1) == b.logits.argmax(-1)).float().mean() > 0.9


@pytest.mark.skipif(not native_bfloat16(), reason="this CPU has no bfloat16 instructions (AVX-512 BF16 or AMX)")
@pytest.mark.parametrize("name", ["eagle3", "eagle3.1"])
def test_bfloat16_speculation_is_token_identical_to_bfloat16_plain(tiny, tiny_root: Path, name: str) -> None:
    """Row-exact verification: each verified row is computed bit for bit as a one-token step computes it, so even
    bfloat16's coarse logits give the same greedy tokens (no near-tie tolerance here, unlike float32's test)."""
    target = load_target(tiny_root, True, torch.bfloat16)
    if not target.fast.row_exact:
        pytest.skip("this CPU's bf16 products round a row differently among several (measured at load): "
                    "no row-exact verification here, and the run says so")
    drafter, _ = load_drafter(tiny_root / name)  # float32, as the local backend keeps drafters on the CPU
    aux = target.attach(drafter)
    prompts = [ids(n, target.vocab_size, 10 + n) for n in (3, 40, 150)] + tiny.training_prompts[:3]
    accepted = 0
    for prompt in prompts:
        plain = [t for e in plain_generate(target, prompt, GenerationConfig(max_new_tokens=40)) for t in e.emitted]
        for k in range(1, 9):
            events = list(speculative_generate(target, drafter, aux, prompt, GenerationConfig(max_new_tokens=40, k=k)))
            assert [t for e in events for t in e.emitted] == plain, f"{name} k={k}, {len(prompt)}-token prompt"
            accepted += sum(e.accepted for e in events[1:])
        for shape in (TreeShape(depth=4, topk=3, nodes=10), TreeShape(depth=5, topk=4, nodes=MAX_EXACT_ROWS + 8)):
            events = list(tree_generate(target, drafter, aux, prompt, GenerationConfig(max_new_tokens=40), shape))
            assert [t for e in events for t in e.emitted] == plain, f"{name} {shape}, {len(prompt)}-token prompt"
    assert accepted > 0, "no draft accepted: the test would not have verified a single chain"
