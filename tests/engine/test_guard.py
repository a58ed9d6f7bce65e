"""What makes k auto's answers cheap to check and hard to lose: the drafting guard (engine/guard.py) drafts only while
drafting measures faster than plain steps, and pauses keep every token; a chain's drafter reads the features that
plain steps left it as one read; k auto's replay of acceptance stops a chain at its first rejection and counts the
same; and a plain probe's cache is continued by the run that goes on from its text, computing what a fresh prefill
would (int4, row-exact)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from playground.engine import GenerationConfig, SpecCounters, Target, load_drafter, plain_generate
from playground.engine import guard as guard_module
from playground.engine.decode import ChainDrafter
from playground.engine.guard import Guarded
from playground.engine.loop import Pending, speculate
from playground.engine.replay import replay, teacher_force
from playground.engine.target import KeptPrefix
from tests.support.int4 import ids


class ScriptedClock:
    """Seconds that pass as a scripted machine would run the guarded steps: `drafting_ms` for a step that drafts,
    `plain_ms` for one that does not (the guard reads the clock at a step's start and end)."""

    def __init__(self, drafting_ms: float, plain_ms: float) -> None:
        self.now, self.drafting_ms, self.plain_ms = 0.0, drafting_ms, plain_ms
        self.guard: Guarded | None = None
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        if self.reads % 2 == 0:  # a step's end
            self.now += (self.drafting_ms if self.guard.drafts_now else self.plain_ms) / 1000
        return self.now


def guarded_run(tiny, prompt: list[int], clock: ScriptedClock, tokens: int = 120):
    drafter = tiny.drafters["eagle3.1"]
    cfg = GenerationConfig(max_new_tokens=tokens, k=3, instrument=False)

    def speculator(generator):
        clock.guard = Guarded(ChainDrafter(drafter.drafter, cfg, tiny.target, generator, drafter.aux_layers), clock)
        return clock.guard

    return list(speculate(tiny.target, prompt, cfg, speculator)), clock.guard


def test_drafting_that_measures_slower_pauses_and_every_token_is_plain_decodings(tiny) -> None:
    prompt = tiny.training_prompts[0]
    plain = [t for e in plain_generate(tiny.target, prompt, GenerationConfig(max_new_tokens=120)) for t in e.emitted]
    # a drafting step as dear as 20 plain ones: it never pays, whatever the drafter accepts
    events, guard = guarded_run(tiny, prompt, ScriptedClock(drafting_ms=20.0, plain_ms=1.0))
    assert [t for e in events for t in e.emitted] == plain
    drafted = [bool(e.drafted) for e in events[1:]]
    assert guard.judgements and not any(guard.judgements)
    assert drafted[: guard_module.PLAIN_STEPS] == [False] * guard_module.PLAIN_STEPS
    window = guard_module.PLAIN_STEPS + guard_module.FIRST_JUDGEMENT
    assert all(drafted[guard_module.PLAIN_STEPS: window])
    assert not any(drafted[window: window + guard_module.FIRST_PAUSE]), "drafting went on after it lost"
    assert sum(drafted) < len(drafted) / 2


def test_drafting_that_measures_faster_goes_on(tiny) -> None:
    prompt = tiny.training_prompts[1]
    plain = [t for e in plain_generate(tiny.target, prompt, GenerationConfig(max_new_tokens=120)) for t in e.emitted]
    events, guard = guarded_run(tiny, prompt, ScriptedClock(drafting_ms=0.5, plain_ms=1.0))
    assert [t for e in events for t in e.emitted] == plain
    assert guard.judgements and all(guard.judgements)
    assert all(e.drafted for e in events[1 + guard_module.PLAIN_STEPS: -1])


def test_a_guarded_config_is_greedy_chains_only() -> None:
    from playground.engine.tree_shape import TreeShape

    assert GenerationConfig(guard=True).guard
    for asked in (dict(temperature=0.7), dict(tree=TreeShape(depth=3, topk=2, nodes=6))):
        with pytest.raises(ValueError, match="the drafting guard watches greedy chains"):
            GenerationConfig(guard=True, **asked)


def test_features_left_by_steps_that_drafted_nothing_are_read_as_one(tiny) -> None:
    """A chain after three steps that drafted nothing reads their features with its own, and drafts what a drafter
    given them all at once drafts."""
    drafter = tiny.drafters["eagle3.1"]
    prompt = tiny.training_prompts[2]
    answer = [t for e in plain_generate(tiny.target, prompt, GenerationConfig(max_new_tokens=12)) for t in e.emitted]
    forced = teacher_force(tiny.target, drafter.aux_layers, prompt, answer)
    cfg = GenerationConfig(k=4, instrument=False)
    stepwise = ChainDrafter(drafter.drafter, cfg, tiny.target, None)
    at_once = ChainDrafter(drafter.drafter, cfg, tiny.target, None)
    context = len(prompt) + 3
    cuts = [0, len(prompt), len(prompt) + 1, len(prompt) + 2, context]
    tokens = forced.ids[: context + 1]
    for a, b in zip(cuts[:-2], cuts[1:-1]):
        assert not len(stepwise.draft(forced.ids[: b + 1], Pending(forced.aux[a:b], a), 0).drafted)
    chain = stepwise.draft(tokens, Pending(forced.aux[cuts[-2]: context], cuts[-2]), 4)
    assert chain.drafted.tolist() == at_once.draft(tokens, Pending(forced.aux[:context], 0), 4).drafted.tolist()


def test_acceptance_only_replay_counts_what_the_full_replay_counts(tiny) -> None:
    drafter = tiny.drafters["eagle3.1"]
    for prompt in tiny.training_prompts[:3]:
        answer = [t for e in plain_generate(tiny.target, prompt, GenerationConfig(max_new_tokens=48))
                  for t in e.emitted]
        forced = teacher_force(tiny.target, drafter.aux_layers, prompt, answer)
        full = replay(forced, tiny.target, drafter.drafter, 6)
        short = replay(forced, tiny.target, drafter.drafter, 6, acceptance_only=True)
        assert [(e.accepted, e.emitted) for e in full] == [(e.accepted, e.emitted) for e in short]
        a, b = SpecCounters.from_events(full, 6), SpecCounters.from_events(short, 6)
        assert (a.drafts, a.accepted_per_pos) == (b.drafts, b.accepted_per_pos)
        assert b.draft_tokens <= a.draft_tokens


@pytest.fixture(scope="module")
def int4_target(tiny_root: Path, lib) -> Target:
    return Target.load(str(tiny_root / "target"), weights="int4")


def test_a_run_that_goes_on_from_a_kept_probe_computes_what_a_fresh_one_does(tiny_root: Path,
                                                                              int4_target: Target) -> None:
    """int4 (row-exact): a plain probe's cache, kept with its features, is taken by the run whose prompt goes on from
    its text, which then forwards the tail alone and answers token for token as a run from scratch; a warm-up cannot
    take it; a prompt that does not go on from it leaves it."""
    drafter, _ = load_drafter(tiny_root / "eagle3.1")
    aux = int4_target.attach(drafter)
    drafter.prepare_for_decoding(int8=True)
    prompt = ids(30, int4_target.vocab_size, 41)
    cfg = GenerationConfig(max_new_tokens=40, k=3, instrument=False)
    fresh = [t for e in speculate(int4_target, prompt, cfg, lambda g: ChainDrafter(drafter, cfg, int4_target, g, aux))
             for t in e.emitted]
    kept: list[KeptPrefix] = []
    probe = [t for e in plain_generate(int4_target, prompt, GenerationConfig(max_new_tokens=8), aux_layers=aux,
                                       keep=kept.append) for t in e.emitted]
    assert kept[0].ids == tuple(prompt + probe[:-1]) and kept[0].aux.shape[0] == len(prompt) + len(probe) - 1
    int4_target.keep_prefix(kept[0])
    assert int4_target.take_prefix(ids(30, int4_target.vocab_size, 42), aux) is None  # another prompt: left
    with int4_target.prefix_set_aside():
        assert int4_target.take_prefix(prompt + probe, aux) is None
    rest_cfg = GenerationConfig(max_new_tokens=40 - len(probe), k=3, instrument=False)
    rest = list(speculate(int4_target, prompt + probe, rest_cfg,
                          lambda g: ChainDrafter(drafter, rest_cfg, int4_target, g, aux)))
    assert int4_target.take_prefix(prompt + probe, aux) is None, "the kept cache was not taken"
    assert probe + [t for e in rest for t in e.emitted] == fresh
    forced = teacher_force(int4_target, aux, prompt, probe)
    assert torch.equal(kept[0].aux, forced.aux[: len(prompt) + len(probe) - 1])


def test_a_float_target_keeps_no_cache(tiny) -> None:
    """Where rows are not computed alike in any number (float32 here), a run starts from its own prefill."""
    kept: list[KeptPrefix] = []
    list(plain_generate(tiny.target, tiny.training_prompts[0], GenerationConfig(max_new_tokens=4), keep=kept.append))
    tiny.target.keep_prefix(kept[0])
    assert tiny.target.take_prefix(list(kept[0].ids) + [5, 6], []) is None
