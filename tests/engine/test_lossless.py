"""Greedy speculative decoding is lossless: token-identical to plain decoding, for every k and both drafters.

A float32 greedy mismatch is only tolerated where it is provably a near-tie of the target (top-2 logit gap below
1e-4, checked with a fresh full forward at the first differing position); it is reported, never hidden. Also
covered: stop conditions inside accepted chains, the cancel hook, and the StepEvent contract.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest
import torch

from playground.engine import GenerationConfig, StepEvent, Target, plain_generate, speculative_generate
from tests.support.lossless import assert_same_or_near_tie

if TYPE_CHECKING:
    from tests.conftest import TinyModels

DRAFTER_NAMES = ("eagle3", "eagle3.1")

NEW_TOKENS = 40


@dataclass
class Case:
    label: str
    prompt: list[int]
    tokens: list[int]  # plain greedy output
    finish_reason: str | None


def flat(events: list[StepEvent]) -> list[int]:
    return [t for e in events for t in e.emitted]


def run_spec(tiny: TinyModels, name: str, prompt: list[int], should_stop=None, **cfg) -> list[StepEvent]:
    loaded = tiny.drafters[name]
    config = GenerationConfig(**{"max_new_tokens": NEW_TOKENS, **cfg})
    return list(speculative_generate(tiny.target, loaded.drafter, loaded.aux_layers, prompt, config, should_stop))


def run_plain(target: Target, prompt: list[int], **cfg) -> list[StepEvent]:
    return list(plain_generate(target, prompt, GenerationConfig(**{"max_new_tokens": NEW_TOKENS, **cfg})))


@pytest.fixture(scope="module")
def cases(tiny: TinyModels) -> list[Case]:
    g = torch.Generator().manual_seed(1234)
    prompts = [(f"random-{n}", torch.randint(8, tiny.target.vocab_size, (n,), generator=g).tolist())
               for n in (3, 40, 150)]
    prompts += [(f"training-{i}", p) for i, p in enumerate(tiny.training_prompts[:3])]
    out = []
    for label, prompt in prompts:
        events = run_plain(tiny.target, prompt)
        out.append(Case(label, prompt, flat(events), events[-1].finish_reason))
    return out


@pytest.mark.parametrize("k", range(1, 9))
@pytest.mark.parametrize("name", DRAFTER_NAMES)
def test_greedy_output_is_token_identical(tiny: TinyModels, cases: list[Case], name: str, k: int) -> None:
    seen: Counter[str] = Counter()
    for case in cases:
        events = run_spec(tiny, name, case.prompt, k=k)
        what = f"{name} k={k} prompt {case.label} ({len(case.prompt)} tokens)"
        if assert_same_or_near_tie(tiny.target, case.prompt, flat(events), case.tokens, what):
            assert events[-1].finish_reason == case.finish_reason, what
        for e in events[1:]:
            if len(e.drafted) == k:  # a step with the full chain (not shortened by the token budget)
                seen["full" if e.accepted == k else "none" if e.accepted == 0 else "partial"] += 1
    # Not vacuous: the chains were accepted whole, rejected at once, and (k > 1) rejected mid-chain.
    assert seen["full"] > 0, f"no step accepted all {k} drafts: {seen}"
    assert seen["none"] > 0, f"no step rejected the first draft: {seen}"
    if k > 1:
        assert seen["partial"] > 0, f"no step rejected a draft mid-chain: {seen}"


def test_long_accepted_chains_happen(tiny: TinyModels, cases: list[Case]) -> None:
    """On the training prompts whole chains of 8 get accepted, so the k=8 losslessness check covers them."""
    accepted = [e.accepted for c in cases if c.label.startswith("training")
                for e in run_spec(tiny, "eagle3", c.prompt, k=8)]
    assert max(accepted) == 8 and sum(accepted) >= 20, accepted


# --- stop conditions ------------------------------------------------------------------------------------------


def _inside_chain_positions(events: list[StepEvent]) -> list[tuple[int, int]]:
    """(generated position, event index) of accepted drafts that are followed by another accepted draft."""
    out, position = [], 0
    for index, e in enumerate(events):
        for j in range(len(e.emitted)):
            if e.drafted and j <= e.accepted - 2:
                out.append((position + j, index))
        position += len(e.emitted)
    return out


@pytest.mark.parametrize("name", DRAFTER_NAMES)
def test_eos_inside_accepted_chain_truncates_after_eos(tiny: TinyModels, cases: list[Case], name: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    case = next(c for c in cases if c.label == "training-0")
    events = run_spec(tiny, name, case.prompt, k=8)
    out = flat(events)
    assert out == case.tokens
    # Declare as EOS a token whose first occurrence is an accepted draft with more accepted drafts after it.
    candidates = [(pos, idx) for pos, idx in _inside_chain_positions(events) if out.index(out[pos]) == pos]
    assert candidates, "setup: no accepted chain of length >= 2 on the training prompt"
    pos, idx = candidates[0]
    eos = out[pos]
    monkeypatch.setattr(tiny.target, "eos_ids", {eos})

    spec = run_spec(tiny, name, case.prompt, k=8)
    plain = run_plain(tiny.target, case.prompt)
    assert flat(spec) == flat(plain) == out[: pos + 1]
    assert spec[-1].finish_reason == plain[-1].finish_reason == "eos" and spec[-1].finished
    last = spec[-1]
    assert len(spec) == idx + 1 and last.emitted[-1] == eos
    assert len(last.emitted) < last.accepted + 1, "EOS inside the chain must cut the accepted drafts after it"
    assert last.emitted == last.drafted[: len(last.emitted)]
    assert last.total_tokens == pos + 1


@pytest.mark.parametrize("k", [3, 8])
@pytest.mark.parametrize("limit", [1, 2, 3, 5, 9, 13])
def test_max_new_tokens_is_exact(tiny: TinyModels, cases: list[Case], k: int, limit: int) -> None:
    case = next(c for c in cases if c.label == "training-1")
    assert len(case.tokens) == NEW_TOKENS  # no EOS in this reference
    events = run_spec(tiny, "eagle3.1", case.prompt, k=k, max_new_tokens=limit)
    assert flat(events) == case.tokens[:limit]
    assert events[-1].finish_reason == "length" and events[-1].total_tokens == limit
    assert all(not e.finished for e in events[:-1])
    produced = 0
    for e in events:
        # never drafts past the budget: drafts + bonus fit in what is left
        assert len(e.drafted) <= max(0, limit - produced - 1), (e.step, len(e.drafted), limit, produced)
        produced += len(e.emitted)


def _first_completion(target: Target, ids: list[int], stop: str) -> int | None:
    """Length of the shortest prefix of `ids` whose text contains `stop`."""
    return next((m for m in range(1, len(ids) + 1) if stop in target.decode(ids[:m])), None)


@pytest.mark.parametrize("name", DRAFTER_NAMES)
def test_stop_string_inside_accepted_chain(tiny: TinyModels, cases: list[Case], name: str) -> None:
    target = tiny.target
    found = 0
    for case in (c for c in cases if c.label.startswith("training")):
        events = run_spec(tiny, name, case.prompt, k=8)
        out = flat(events)
        for pos, _ in _inside_chain_positions(events):
            # the text of two tokens ending at `pos` (spans a token boundary), if plain ASCII and new at `pos`
            stop = target.decode(out[max(0, pos - 1) : pos + 1]).strip()
            if len(stop) < 2 or not stop.isascii() or not stop.isprintable():
                continue
            if _first_completion(target, out, stop) != pos + 1:
                continue
            spec = run_spec(tiny, name, case.prompt, k=8, stop_strings=(stop,))
            plain = run_plain(target, case.prompt, stop_strings=(stop,))
            assert flat(spec) == flat(plain) == out[: pos + 1], stop
            assert spec[-1].finish_reason == plain[-1].finish_reason == "stop"
            assert stop in target.decode(flat(spec)) and stop not in target.decode(out[:pos])
            found += 1
            break
    assert found >= 2, "setup: no usable stop string inside an accepted chain"
    # a stop string that never appears changes nothing
    case = next(c for c in cases if c.label == "training-1")
    events = run_spec(tiny, name, case.prompt, k=4, stop_strings=("\u2603never",))
    assert flat(events) == case.tokens and events[-1].finish_reason == "length"


# --- cancel hook ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("after", [0, 1, 3])
def test_cancel_stops_between_steps(tiny: TinyModels, cases: list[Case], after: int) -> None:
    case = next(c for c in cases if c.label == "training-0")
    consumed: list[StepEvent] = []
    calls: list[int] = []

    def should_stop() -> bool:
        calls.append(len(consumed))  # how many events the consumer had seen when asked
        return len(calls) > after

    loaded = tiny.drafters["eagle3"]
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, k=4)
    for event in speculative_generate(tiny.target, loaded.drafter, loaded.aux_layers, case.prompt, config, should_stop):
        consumed.append(event)
    # asked once before every step, after the previous step's event was delivered
    assert calls == list(range(1, after + 2))
    assert len(consumed) == after + 2  # prefill, `after` drafting steps, the cancel event
    last = consumed[-1]
    assert last.finished and last.finish_reason == "cancelled" and last.emitted == [] and last.drafted == []
    assert all(not e.finished for e in consumed[:-1])
    out = flat(consumed)
    assert out == case.tokens[: len(out)] and last.total_tokens == len(out)


# --- the StepEvent contract -----------------------------------------------------------------------------------


def check_events(events: list[StepEvent], k: int, instrument: bool) -> None:
    first = events[0]
    assert first.step == 0 and first.drafted == [] and first.accepted == 0 and len(first.emitted) == 1
    assert first.verify_ms is not None and first.verify_ms >= 0
    total, elapsed = 0, 0.0
    for index, e in enumerate(events):
        assert e.step == index
        total += len(e.emitted)
        assert e.total_tokens == total, "total_tokens must be the running count"
        assert e.elapsed_ms >= elapsed
        elapsed = e.elapsed_ms
        assert e.finished == (index == len(events) - 1)
        if index == 0:
            continue
        n = len(e.drafted)
        assert e.draft_ms is not None and e.draft_ms >= 0 and e.verify_ms is not None and e.verify_ms >= 0
        if n == 0:  # only when a single token was left in the budget: verify alone, nothing to instrument
            assert e.finished and e.accepted == 0 and len(e.emitted) == 1 and e.attention is None
            continue
        assert 1 <= n <= k and 0 <= e.accepted <= n
        if not e.finished:
            assert len(e.emitted) == e.accepted + 1
        assert 1 <= len(e.emitted) <= e.accepted + 1
        m = min(len(e.emitted), e.accepted)
        assert e.emitted[:m] == e.drafted[:m], "emitted must start with the accepted drafts"
        if len(e.emitted) == e.accepted + 1 and e.accepted < n:
            assert e.emitted[-1] != e.drafted[e.accepted], "greedy bonus replaces the rejected draft"
        if not instrument:
            assert e.attention is None and e.hidden_rms is None and e.draft_probs is None
            continue
        assert e.draft_probs is not None and len(e.draft_probs) == n
        assert all(0 < p <= 1 for p in e.draft_probs)
        assert e.attention is not None and len(e.attention) == n
        assert e.hidden_rms is not None and len(e.hidden_rms) == n
        assert all(math.isfinite(r) and r > 0 for r in e.hidden_rms)
        for depth, mass in enumerate(e.attention, start=1):
            assert mass.context + mass.draft == pytest.approx(1.0, abs=1e-5)
            assert 0 < mass.sink <= mass.context + 1e-6 and mass.draft >= 0
            if depth == 1:
                assert mass.draft == 0.0, "depth 1 sees no drafts of this chain"
            else:
                assert mass.draft > 0


@pytest.mark.parametrize("k", [4, 8])
@pytest.mark.parametrize("name", DRAFTER_NAMES)
def test_step_events(tiny: TinyModels, cases: list[Case], name: str, k: int) -> None:
    for case in (c for c in cases if c.label in ("training-0", "random-40")):
        events = run_spec(tiny, name, case.prompt, k=k)
        assert flat(events) == case.tokens
        check_events(events, k, instrument=True)
        bare = run_spec(tiny, name, case.prompt, k=k, instrument=False)
        check_events(bare, k, instrument=False)
        assert flat(bare) == flat(events)
        assert ([(e.drafted, e.accepted, e.emitted) for e in bare]
                == [(e.drafted, e.accepted, e.emitted) for e in events])


@pytest.mark.parametrize("name", DRAFTER_NAMES)
def test_adaptive_draft_length_is_lossless(tiny: TinyModels, cases: list[Case], name: str) -> None:
    """Ending the chain after an unlikely draft changes how many tokens are verified, never the output."""
    threshold, k = 0.5, 8
    ended_early = full = 0
    for case in cases:
        events = run_spec(tiny, name, case.prompt, k=k, min_draft_prob=threshold)
        what = f"{name} adaptive, prompt {case.label}"
        if assert_same_or_near_tie(tiny.target, case.prompt, flat(events), case.tokens, what):
            assert events[-1].finish_reason == case.finish_reason, what
        check_events(events, k, instrument=True)
        for e in events[1:]:
            if not e.drafted:
                continue
            assert all(p >= threshold for p in e.draft_probs[:-1]), "the chain goes on only past a likely draft"
            ended_early += e.draft_probs[-1] < threshold and len(e.drafted) < k
            full += len(e.drafted) == k
        bare = run_spec(tiny, name, case.prompt, k=k, min_draft_prob=threshold, instrument=False)
        assert [(e.drafted, e.accepted) for e in bare] == [(e.drafted, e.accepted) for e in events]
    assert ended_early > 0 and full > 0, (ended_early, full)  # both kinds of chain happened


def test_context_limit(tiny: TinyModels) -> None:
    """Near the end of the target's context, both loops stop at max_position_embeddings, identically."""
    target = tiny.target
    assert target.max_positions == 512
    prompt = torch.randint(8, target.vocab_size, (500,), generator=torch.Generator().manual_seed(3)).tolist()
    plain = run_plain(target, prompt)
    assert len(flat(plain)) == 12 and plain[-1].finish_reason == "length"
    for name in DRAFTER_NAMES:
        spec = run_spec(tiny, name, prompt, k=8)
        assert_same_or_near_tie(target, prompt, flat(spec), flat(plain), f"{name} at the context limit")
        assert spec[-1].finish_reason == "length"
    with pytest.raises(ValueError, match="context"):
        run_spec(tiny, "eagle3", prompt + prompt[:12])


def test_plain_generate_events(tiny: TinyModels, cases: list[Case]) -> None:
    case = cases[0]
    events = run_plain(tiny.target, case.prompt, max_new_tokens=5)
    assert [e.step for e in events] == list(range(5)) and all(len(e.emitted) == 1 for e in events)
    assert [e.total_tokens for e in events] == [1, 2, 3, 4, 5]
    assert all(e.drafted == [] and e.attention is None for e in events)
    assert events[-1].finish_reason == "length"


def test_invalid_settings_are_rejected(tiny: TinyModels, cases: list[Case]) -> None:
    prompt = cases[0].prompt
    for bad in ({"k": 0}, {"k": 17}, {"max_new_tokens": 0}, {"temperature": -1.0}, {"top_p": 0.0},
                {"min_draft_prob": -0.1}, {"min_draft_prob": 1.0}):
        with pytest.raises(ValueError):
            run_spec(tiny, "eagle3", prompt, **bad)
    with pytest.raises(ValueError, match="empty"):
        run_spec(tiny, "eagle3", [])
