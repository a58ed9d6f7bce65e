"""k auto among methods (`--drafter auto` or a list, auto_k.py): the (method, k) predicted fastest from each
candidate's predicted speedups by k, by `choose_k`'s rule (engine/costs.py), or plain decoding; and the sentence that
says why, naming every candidate."""

from __future__ import annotations

from dataclasses import dataclass

from playground.drafting import method_of

from .costs import AutoK, paying


@dataclass(frozen=True)
class Candidate:
    """A drafting method k auto may choose (`choose_method`): its predicted speedup by k and what it read."""

    method: str
    ranged: dict[int, tuple[float, float, float]]  # k -> (speedup, low, high) over plain decoding
    evidence: str  # where its acceptance came from, for the choice's sentence
    plain_ms: float  # the plain step's cost its profile measured (predicted tokens/s = speedup x 1000 / plain_ms)
    acceptance: tuple[float, ...] = ()  # the acceptance by position it read (EAGLE drafters)


def choose_method(candidates: list[Candidate], costs: str, margin: float = 1.05) -> AutoK:
    """The method and k predicted fastest among `candidates` (each as `choose_k` would price it), or plain decoding
    where none pays by `choose_k`'s rule; the sentence gives each candidate's best k, its speedup and range and the
    tokens/s that predicts, and where its acceptance came from."""
    best = {c.method: max(c.ranged, key=lambda k, c=c: c.ranged[k][0]) for c in candidates if c.ranged}
    table = "; ".join(_candidate_words(c, best[c.method]) for c in candidates if c.method in best)
    tables = {c.method: {k: point for k, (point, _, _) in c.ranged.items()} for c in candidates}
    options = [(c.ranged[k][0], c, k) for c in candidates for k in paying(c.ranged, margin)]
    if not options:
        return AutoK(None, {}, f"no method and k is predicted to beat plain decoding by {margin - 1:.0%} with its "
                               f"range above 1x on this machine ({table}; {costs}): plain decoding", (), costs, None,
                     tables)
    point, chosen, k = max(options, key=lambda option: option[0])
    label = method_of(chosen.method).label
    return AutoK(k, tables[chosen.method], f"{label} at k={k} is predicted fastest on this machine ({table}; "
                                           f"{costs})", chosen.acceptance, costs, chosen.method, tables)


def _candidate_words(c: Candidate, k: int) -> str:
    point, low, high = c.ranged[k]
    return (f"{method_of(c.method).label} k={k} {point:.2f}x ({low:.2f}-{high:.2f}), ~{point * 1000 / c.plain_ms:.0f} "
            f"tok/s, acceptance from {c.evidence}")
