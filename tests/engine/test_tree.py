"""Draft trees (playground/engine/tree.py) are lossless: greedy output token-identical to plain decoding, on the fast
and the transformers target path, for several shapes, with GQA and MLA (kimi-tiny) drafters; a tree of topk 1 is a
chain of k = depth; the StepEvent carries the tree; sampling's tree has the fixed rank template's shape (its
distribution is tested in tests/engine/test_sampling.py). A wrong tree mask (a helper, never production code) makes
output differ, so the checks can fail."""

from __future__ import annotations

import pickle
from dataclasses import astuple
from typing import TYPE_CHECKING

import pytest
import torch

from playground.engine import (
    GenerationConfig,
    StepEvent,
    Target,
    TreeShape,
    plain_generate,
    speculative_generate,
    tree_generate,
)
from playground.engine.llama import MAX_EXACT_ROWS
from playground.engine.tree import DraftTree, rank_template
from tests.support.lossless import assert_same_or_near_tie

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest import TinyModels

NEW_TOKENS = 40
SHAPES = [TreeShape(depth=4, topk=2, nodes=8), TreeShape(depth=5, topk=4, nodes=16),
          TreeShape(depth=6, topk=3, nodes=32), TreeShape(depth=3, topk=8, nodes=32)]


def flat(events: list[StepEvent]) -> list[int]:
    return [t for e in events for t in e.emitted]


def prompts(tiny: TinyModels) -> list[list[int]]:
    g = torch.Generator().manual_seed(99)
    randoms = [torch.randint(8, tiny.target.vocab_size, (n,), generator=g).tolist() for n in (3, 60)]
    return randoms + tiny.training_prompts[:3]


def run_tree(target: Target, tiny: TinyModels, name: str, prompt: list[int], shape: TreeShape, **cfg
             ) -> list[StepEvent]:
    loaded = tiny.drafters[name]
    config = GenerationConfig(**{"max_new_tokens": NEW_TOKENS, **cfg})
    return list(tree_generate(target, loaded.drafter, loaded.aux_layers, prompt, config, shape))


@pytest.fixture(scope="module")
def slow_target(tiny_root: Path, tiny: TinyModels) -> Target:
    target = Target.load(str(tiny_root / "target"), fast=False)
    assert target.forward_path == "transformers"
    for loaded in tiny.drafters.values():
        target.attach(loaded.drafter)
    return target


@pytest.fixture(scope="module")
def plain(tiny: TinyModels) -> list[list[int]]:
    return [flat(plain_generate(tiny.target, p, GenerationConfig(max_new_tokens=NEW_TOKENS))) for p in prompts(tiny)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"d{s.depth}-k{s.topk}-n{s.nodes}")
@pytest.mark.parametrize("name", ("eagle3", "eagle3.1"))
def test_greedy_tree_is_token_identical_fast(tiny: TinyModels, plain: list[list[int]], name: str, shape: TreeShape
                                             ) -> None:
    assert tiny.target.forward_path == "fast"
    longest = 0
    for prompt, want in zip(prompts(tiny), plain):
        events = run_tree(tiny.target, tiny, name, prompt, shape)
        assert_same_or_near_tie(tiny.target, prompt, flat(events), want, f"{name} {shape} fast")
        longest = max([longest] + [e.accepted for e in events])
        for e in events[1:]:
            if e.tree_tokens:
                assert len(e.tree_tokens) <= shape.nodes and max(e.tree_depths) <= shape.depth
    assert longest >= 3, "no step accepted a path of 3: the check would be vacuous"


@pytest.mark.parametrize("shape", SHAPES[:3], ids=lambda s: f"d{s.depth}-k{s.topk}-n{s.nodes}")
def test_greedy_tree_is_token_identical_transformers(tiny: TinyModels, plain: list[list[int]], slow_target: Target,
                                                     shape: TreeShape) -> None:
    for prompt, want in zip(prompts(tiny), plain):
        events = run_tree(slow_target, tiny, "eagle3.1", prompt, shape)
        assert_same_or_near_tie(tiny.target, prompt, flat(events), want, f"{shape} transformers")


def test_row_exact_tree_verification(tiny: TinyModels, plain: list[list[int]]) -> None:
    """The bfloat16 row-exact branch (each query alone over the keys plain decoding caches) also takes trees, those
    of more rows than row independence is probed for too (their products in groups of at most MAX_EXACT_ROWS)."""
    fast = tiny.target.fast
    fast.row_exact = True
    try:
        for prompt, want in zip(prompts(tiny), plain):
            for shape in (TreeShape(depth=4, topk=3, nodes=12), TreeShape(depth=4, topk=4, nodes=MAX_EXACT_ROWS + 6)):
                events = run_tree(tiny.target, tiny, "eagle3", prompt, shape)
                assert_same_or_near_tie(tiny.target, prompt, flat(events), want, f"row-exact tree {shape}")
    finally:
        fast.row_exact = False


@pytest.mark.parametrize("depth", (1, 3, 6))
def test_topk_one_is_a_chain(tiny: TinyModels, depth: int) -> None:
    loaded = tiny.drafters["eagle3"]
    for prompt in prompts(tiny):
        chain = list(speculative_generate(tiny.target, loaded.drafter, loaded.aux_layers, prompt,
                                          GenerationConfig(max_new_tokens=NEW_TOKENS, k=depth)))
        tree = run_tree(tiny.target, tiny, "eagle3", prompt, TreeShape(depth=depth, topk=1, nodes=depth))
        assert [(e.drafted, e.accepted, e.emitted) for e in tree] == [(e.drafted, e.accepted, e.emitted) for e in chain]
        # instrumented (the default): the same drift and RMS per depth, measured on the same queries
        for t, c in zip(tree, chain):
            assert (t.attention is None) == (c.attention is None) and (t.hidden_rms is None) == (c.hidden_rms is None)
            if c.attention:
                torch.testing.assert_close([astuple(a) for a in t.attention], [astuple(a) for a in c.attention],
                                           rtol=1e-4, atol=1e-5)
                torch.testing.assert_close(t.hidden_rms, c.hidden_rms, rtol=1e-4, atol=1e-5)


def test_a_wide_tree_reports_drift_along_its_branch(tiny: TinyModels) -> None:
    """Each drafted depth of a tree's branch carries the attention of the query that drafted it (context and draft
    shares summing to one; depth 1 reads the context alone) and the RMS of the state fed to that query."""
    for temperature in (0.0, 0.8):
        events = run_tree(tiny.target, tiny, "eagle3.1", tiny.training_prompts[1], TreeShape(depth=4, topk=3,
                                                                                              nodes=12),
                          temperature=temperature, seed=1)
        drafting = [e for e in events if e.drafted]
        assert drafting and all(len(e.attention) == len(e.hidden_rms) == len(e.drafted) for e in drafting)
        for e in drafting:
            assert all(abs(a.context + a.draft - 1) < 1e-4 and 0 <= a.sink <= a.context for a in e.attention)
            assert e.attention[0].draft < 1e-6  # depth 1: no draft before it
            assert all(a.draft > 0 for a in e.attention[1:]) and all(r > 0 for r in e.hidden_rms)
        quiet = run_tree(tiny.target, tiny, "eagle3.1", tiny.training_prompts[1], TreeShape(depth=4, topk=3, nodes=12),
                         temperature=temperature, seed=1, instrument=False)
        assert all(e.attention is None and e.hidden_rms is None for e in quiet)


def test_step_event_carries_the_tree(tiny: TinyModels) -> None:
    shape = TreeShape(depth=4, topk=3, nodes=10)
    events = run_tree(tiny.target, tiny, "eagle3.1", tiny.training_prompts[0], shape)
    assert events[0].tree_tokens is None  # the prefill drafts nothing
    for e in events[1:]:
        if not e.drafted:
            continue
        n = len(e.tree_tokens)
        assert len(e.tree_parents) == len(e.tree_depths) == len(e.tree_probs) == n <= shape.nodes
        depths = e.tree_depths
        assert all(p < i and (p == -1 or depths[p] == depths[i] - 1) for i, p in enumerate(e.tree_parents))
        assert all(0 < p <= 1 for p in e.tree_probs)
        # the accepted path is a root-to-node branch, and `drafted` / `emitted` follow it
        assert [e.tree_depths[i] for i in e.tree_path] == list(range(1, e.accepted + 1))
        assert all(e.tree_parents[b] == a for a, b in zip([-1] + e.tree_path, e.tree_path))
        assert e.drafted[: e.accepted] == [e.tree_tokens[i] for i in e.tree_path] == e.emitted[: e.accepted]
        assert len(e.draft_probs) == len(e.drafted) <= shape.depth
        again = pickle.loads(pickle.dumps(e))
        assert again == e and again.to_dict()["tree_path"] == e.tree_path
    old = StepEvent(step=1, drafted=[5], accepted=1, emitted=[5, 6])  # consumers that know nothing of trees
    assert old.tree_tokens is None and old.to_dict()["tree_parents"] is None


def test_the_sampling_template_is_fixed_and_closed() -> None:
    """The rank template (sampling's tree shape): `nodes` paths, each with its parent and its earlier siblings, no
    deeper than `depth` nor wider than `topk`."""
    for shape in SHAPES + [TreeShape(depth=2, topk=3, nodes=7), TreeShape(depth=1, topk=2, nodes=16),
                           TreeShape(depth=3, topk=2, nodes=16)]:
        template = rank_template(shape)
        every_path = sum(shape.topk**depth for depth in range(1, shape.depth + 1))
        assert len(template) == min(shape.nodes, every_path) and template == rank_template(shape)
        for path in template:
            assert 1 <= len(path) <= shape.depth and max(path) < shape.topk
            assert len(path) == 1 or path[:-1] in template
            assert path[-1] == 0 or path[:-1] + (path[-1] - 1,) in template
    assert rank_template(TreeShape(depth=2, topk=3, nodes=7)) == {(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 2)}


def test_a_sampled_tree_run_is_well_formed_and_repeats_with_its_seed(tiny: TinyModels) -> None:
    prompt, shape = tiny.training_prompts[0], TreeShape(depth=4, topk=3, nodes=12)
    runs = [run_tree(tiny.target, tiny, "eagle3.1", prompt, shape, temperature=0.8, top_p=0.95, seed=seed)
            for seed in (5, 5, 6)]
    assert flat(runs[0]) == flat(runs[1]) and runs[0][1].tree_tokens == runs[1][1].tree_tokens
    assert flat(runs[0]) != flat(runs[2])
    template = rank_template(shape)
    for e in (e for e in runs[0] if e.tree_tokens):
        assert len(e.tree_tokens) <= len(template) and len(e.tree_path) == e.accepted
        assert all(e.tree_parents[b] == a for a, b in zip([-1] + e.tree_path, e.tree_path))
        assert e.emitted[: e.accepted] == [e.tree_tokens[i] for i in e.tree_path]
        for node, parent in enumerate(e.tree_parents):  # siblings are distinct: drawn without replacement
            siblings = [e.tree_tokens[i] for i, p in enumerate(e.tree_parents) if p == parent]
            assert len(set(siblings)) == len(siblings), (node, siblings)


def test_trees_refuse_bad_settings(tiny: TinyModels) -> None:
    prompt = tiny.training_prompts[0]
    with pytest.raises(ValueError, match="chains"):
        run_tree(tiny.target, tiny, "eagle3", prompt, TreeShape(), min_draft_prob=0.2)
    with pytest.raises(ValueError, match="nodes"):
        run_tree(tiny.target, tiny, "eagle3", prompt, TreeShape(nodes=0))


# --- negative control: a wrong tree mask must show ------------------------------------------------------------


def _sees_everything(tree: DraftTree, device: torch.device) -> torch.Tensor:
    """A broken mask: every node sees every other node, siblings and cousins included."""
    return torch.ones(len(tree) + 1, len(tree) + 1, dtype=torch.bool, device=device)


def test_a_wrong_tree_mask_changes_the_output(tiny: TinyModels, plain: list[list[int]],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DraftTree, "sees", _sees_everything)
    differ = sum(flat(run_tree(tiny.target, tiny, "eagle3", prompt, TreeShape(depth=4, topk=4, nodes=16))) != want
                 for prompt, want in zip(prompts(tiny), plain))
    assert differ > 0, "a tree mask that leaks siblings went unnoticed"


@pytest.mark.parametrize("variant", ("eagle3", "eagle3.1"))
def test_mla_drafter_trees_on_the_kimi_tiny_pair(variant: str) -> None:
    """MLA drafters take the tree mask too; the DeepSeek-V3 target verifies through transformers."""
    from playground.engine import load_drafter
    from playground.presets import KIMI_TINY

    target = Target.load(str(KIMI_TINY / "target"))
    drafter, _ = load_drafter(KIMI_TINY / variant)
    aux = target.attach(drafter)
    accepted = 0
    for prompt in ([1, 500, 300, 20, 77], list(range(100, 140))):
        cfg = GenerationConfig(max_new_tokens=32)
        events = list(tree_generate(target, drafter, aux, prompt, cfg, TreeShape(depth=4, topk=3, nodes=12)))
        assert flat(events) == flat(plain_generate(target, prompt, cfg))
        accepted += sum(e.accepted for e in events)
    assert target.forward_path == "transformers" and accepted > 0
