"""Replay (engine/replay.py) against live runs on the tiny pair: the steps a replay of one greedy answer gives for a
drafter and k (or a tree) are those a live greedy run of that configuration takes over the same prompt — drafted
tokens, accepted counts and emitted tokens, step by step — for both drafters, every k tried and several trees; and
an answer the target would not have written is refused."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import torch

from playground.engine import GenerationConfig, TreeShape, speculative_generate, tree_generate
from playground.engine.replay import replay, teacher_force

if TYPE_CHECKING:
    from tests.conftest import TinyModels

KS = (1, 2, 3, 4, 6, 8)
TREES = (TreeShape(depth=3, topk=2, nodes=4), TreeShape(depth=4, topk=4, nodes=12))


def steps(events) -> list[tuple]:
    return [(e.drafted, e.accepted, e.emitted, e.finished) for e in events]


def prompts(tiny: TinyModels) -> list[list[int]]:
    g = torch.Generator().manual_seed(7)
    return tiny.training_prompts[:2] + [torch.randint(8, tiny.target.vocab_size, (20,), generator=g).tolist()]


def live(tiny: TinyModels, name: str, prompt: list[int], k: int, tree: TreeShape | None = None,
         max_new_tokens: int = 40) -> list:
    loaded = tiny.drafters[name]
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, k=k, instrument=False)
    if tree is not None:
        return list(tree_generate(tiny.target, loaded.drafter, loaded.aux_layers, prompt, cfg, tree))
    return list(speculative_generate(tiny.target, loaded.drafter, loaded.aux_layers, prompt, cfg))


def test_a_replayed_answer_steps_as_live_runs_of_every_drafter_and_k(tiny: TinyModels) -> None:
    """One EAGLE-3.1 k = 4 answer per prompt, replayed under both drafters at every k, equals their live runs."""
    compared = 0
    for prompt in prompts(tiny):
        answer = [t for e in live(tiny, "eagle3.1", prompt, 4) for t in e.emitted]
        forced = teacher_force(tiny.target, tiny.drafters["eagle3.1"].aux_layers, prompt, answer)
        for name, loaded in tiny.drafters.items():
            for k in KS:
                want = steps(live(tiny, name, prompt, k))
                got = steps(replay(forced, tiny.target, loaded.drafter, k, max_new_tokens=40))
                assert got == want, (name, k, prompt)
                compared += 1
    assert compared == len(KS) * 2 * 3


def test_a_replayed_answer_steps_as_live_tree_runs(tiny: TinyModels) -> None:
    for prompt in prompts(tiny):
        answer = [t for e in live(tiny, "eagle3", prompt, 2) for t in e.emitted]  # written by another configuration
        forced = teacher_force(tiny.target, tiny.drafters["eagle3"].aux_layers, prompt, answer)
        for name, loaded in tiny.drafters.items():
            for tree in TREES:
                want = live(tiny, name, prompt, tree.depth, tree)
                got = replay(forced, tiny.target, loaded.drafter, tree.depth, tree, max_new_tokens=40)
                assert steps(got) == steps(want), (name, tree)
                assert [e.tree_path for e in got] == [e.tree_path for e in want]
                assert [e.tree_tokens for e in got] == [e.tree_tokens for e in want]


def test_the_budget_ends_drafting_where_the_live_loop_does(tiny: TinyModels) -> None:
    """A run cut by max_new_tokens drafts fewer tokens on its last steps; the replay, told the same budget, too."""
    prompt = tiny.training_prompts[0]
    want = live(tiny, "eagle3.1", prompt, 6, max_new_tokens=13)
    answer = [t for e in want for t in e.emitted]
    forced = teacher_force(tiny.target, tiny.drafters["eagle3.1"].aux_layers, prompt, answer)
    got = replay(forced, tiny.target, tiny.drafters["eagle3.1"].drafter, 6, max_new_tokens=13)
    assert steps(got) == steps(want)
    assert len(want[-1].drafted) < 6 or len(answer) < 13  # the budget did shorten a chain (or the answer ended first)


def test_an_answer_the_target_would_not_write_is_refused(tiny: TinyModels) -> None:
    prompt = tiny.training_prompts[0]
    answer = [t for e in live(tiny, "eagle3.1", prompt, 4) for t in e.emitted]
    changed = answer[:3] + [(answer[3] + 1) % tiny.target.vocab_size] + answer[4:]
    with pytest.raises(ValueError, match="at answer token 3"):
        teacher_force(tiny.target, tiny.drafters["eagle3.1"].aux_layers, prompt, changed)
