"""`k auto`: the k predicted fastest for a preset drafter on this machine — its acceptance by position (the
evaluation.json shipped beside the drafters, updated with the session's own earlier answers replayed, where there
are any) priced at this machine's step costs for the pair (engine/costs.py, measured once per machine, pair,
context and load, then kept) — or plain decoding where no k pays. One home for the choice `generate`, `serve`, the
bench and the app make."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from playground.backends.local import LocalBackend
from playground.engine import SpecCounters
from playground.engine.costs import AutoK, CostProfile, choose_k, pair_profile
from playground.engine.replay import replay, teacher_force
from playground.presets import repo_relative
from playground.request.check import shipped_rates
from playground.smollm2 import cache_root

PRIOR_STEPS = 64  # the shipped acceptance weighs as much as this many drafting steps of the session's own answers
SESSION_ANSWERS = 4  # the session's latest greedy answers replayed, at most (each costs a target pass over it)
Answer = tuple[Sequence[int], Sequence[int]]  # (prompt ids, answer ids) of a finished greedy answer
_replayed: OrderedDict[tuple, tuple[int, list[int]]] = OrderedDict()  # (pair, drafter, k, answer) -> counts


def replayed_counts(backend: LocalBackend, drafter: str, k: int, answer: Answer) -> tuple[int, list[int]]:
    """(drafting steps, accepted at positions 1..k) of a greedy answer replayed under `drafter` at k
    (engine/replay.py: the steps a live run would have taken); each answer replayed once (the last 256 kept)."""
    prompt_ids, answer_ids = answer
    key = (backend.preset.name, backend.preset.target, drafter, k, tuple(prompt_ids), tuple(answer_ids))
    if key not in _replayed:
        loaded = backend.drafter(drafter)
        forced = teacher_force(backend.target, loaded.aux_layers, list(prompt_ids), list(answer_ids))
        counts = SpecCounters.from_events(replay(forced, backend.target, loaded.drafter, k), k)
        _replayed[key] = (counts.drafts, counts.accepted_per_pos)
        while len(_replayed) > 256:
            _replayed.popitem(last=False)
    _replayed.move_to_end(key)
    return _replayed[key]


def updated_acceptance(shipped: list[float], counts: list[tuple[int, list[int]]]) -> list[float]:
    """The shipped acceptance by position updated with the session's replayed answers: at each position, their
    accepted drafts and drafting steps added to the shipped rate weighted as PRIOR_STEPS steps."""
    steps = sum(n for n, _ in counts)
    return [(rate * PRIOR_STEPS + sum(accepted[i] for _, accepted in counts)) / (PRIOR_STEPS + steps)
            for i, rate in enumerate(shipped)]


def auto_k(backend: LocalBackend, drafter: str, context_ids: list[int], tokens: int,
           announce: Callable[[str], None] | None = None, profile: CostProfile | None = None,
           session: Sequence[Answer] = ()) -> AutoK:
    """The choice for `drafter` of the backend's preset at a context of `tokens` (its step costs measured over
    `context_ids` repeated to that length, or `profile` where the caller measured them), its acceptance updated with
    the latest SESSION_ANSWERS of `session` (the session's earlier greedy answers on this pair) replayed; ValueError
    where it cannot choose (a drafter given as a folder, or one without an acceptance by position), worded to follow
    k's name ("--k " + message, "k " + message)."""
    preset = backend.preset
    per_position, evaluation = shipped_rates(preset, drafter)
    source = repo_relative(evaluation)
    answers = [a for a in session if len(a[1]) > 1][-SESSION_ANSWERS:]
    if answers:
        counts = [replayed_counts(backend, drafter, len(per_position), a) for a in answers]
        per_position = updated_acceptance(per_position, counts)
        source += (f", updated with this session's last {len(answers)} answer{'s' * (len(answers) > 1)} replayed "
                   f"({sum(n for n, _ in counts)} drafting steps)")
    since = time.time()
    if profile is None:
        loaded = backend.drafter(drafter)
        profile = pair_profile(backend.target, loaded.drafter, loaded.aux_layers, (preset.target, loaded.source),
                               context_ids, tokens, cache_root(), announce=announce)
    return choose_k(profile, per_position, source, since=since)
