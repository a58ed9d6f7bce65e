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


def test_a_sampled_answers_expected_first_acceptance_is_what_rejection_sampling_accepts(tiny: TinyModels) -> None:
    """expected_first_acceptance: Σ min(p, q) at each position of a sampled answer, with p and q computed afresh over
    the prefix (one forward, the drafter fed every feature at once), and against a Monte-Carlo estimate: drafts drawn
    from q and kept or not by the engine's own rejection sampling, 3,000 times at three positions."""
    import math

    from playground.engine import emitted_ids, plain_generate
    from playground.engine.decode import ChainDrafter
    from playground.engine.loop import Pending
    from playground.engine.replay import expected_first_acceptance
    from playground.engine.sampling import accept_sampled, probabilities, sample

    loaded, target, temperature = tiny.drafters["eagle3.1"], tiny.target, 0.8
    prompt = tiny.training_prompts[0]
    answer = emitted_ids(list(plain_generate(target, prompt, GenerationConfig(max_new_tokens=24,
                                                                              temperature=temperature, seed=3))))
    expected = expected_first_acceptance(target, loaded.aux_layers, loaded.drafter, prompt, answer, temperature)
    assert len(expected) == len(answer) - 1 and all(0 <= a <= 1 for a in expected)
    generator = torch.Generator().manual_seed(0)
    for i in (0, len(expected) // 2, len(expected) - 1):
        tokens = prompt + answer[: i + 1]
        out = target.forward(tokens, target.new_cache(), loaded.aux_layers)
        p = probabilities(out.logits[-1].float(), temperature)
        cfg = GenerationConfig(max_new_tokens=2, k=1, temperature=temperature, instrument=False)
        chain = ChainDrafter(loaded.drafter, cfg, target, generator).draft(tokens, Pending(out.aux[:-1], 0), 1)
        q = chain.draft_probs[0]
        assert float(torch.minimum(p, q).sum()) == pytest.approx(expected[i], abs=1e-4)
        trials = 3000
        kept = sum(accept_sampled(sample(q, generator).view(1), q[None], torch.stack([p, p]), generator)[0]
                   for _ in range(trials))
        spread = math.sqrt(expected[i] * (1 - expected[i]) / trials)
        assert abs(kept / trials - expected[i]) < 4 * spread + 1e-3, (i, kept / trials, expected[i])
        print(f"position {i}: Σ min(p, q) {expected[i]:.3f}, Monte-Carlo {kept / trials:.3f}")
    with pytest.raises(ValueError, match="replays exactly"):
        expected_first_acceptance(target, loaded.aux_layers, loaded.drafter, prompt, answer, 0.0)
