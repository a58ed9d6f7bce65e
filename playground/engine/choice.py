"""k auto's choices: a drafter's k (`choose_k`: the k predicted fastest from its acceptance by position and this
machine's step costs, engine/costs.py, or plain decoding where none pays) and the method and k among several
(`choose_method`, for `--drafter auto` or a list, auto_k.py), each with the sentence that says why (`AutoK`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from playground.drafting import method_of

from .costs import CostProfile


def shipped_acceptance(folder: Path, drafter: str) -> list[float]:
    """The drafter's acceptance by position from `folder`/evaluation.json (`train evaluate`: its rows by k; the
    largest k's), or ValueError saying there is none."""
    source = folder / "evaluation.json"
    try:
        rows = json.loads(source.read_text())["acceptance"][drafter]
        return rows[str(max(int(k) for k in rows))]["per_position_acceptance"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ValueError(f"none in {source} (written by `train evaluate`)") from None


def expected_tokens(per_position: list[float], k: int) -> float:
    """Tokens a chain of k emits per step on average: the target's own, plus each position's acceptance (the share
    of drafting steps whose draft there was accepted, vLLM's per-position rate, which already counts a rejection
    before it)."""
    return 1 + sum(per_position[:k])


@dataclass(frozen=True)
class AutoK:
    """What `--k auto` chose and why (with the method, where it chose among methods: choice.choose_method)."""

    k: int | None  # None: plain decoding
    predicted: dict[int, float]  # k -> predicted speedup over plain decoding (the chosen method's)
    why: str
    acceptance: tuple[float, ...] = ()  # the acceptance by position the prediction read
    costs: str = ""  # which step costs it read: their load and when (CostProfile.load_text)
    method: str | None = None  # the method chosen among several (None: the one asked, or plain decoding)
    candidates: dict[str, dict[int, float]] = field(default_factory=dict)  # method -> k -> predicted speedup
    # the answer's first steps, decoded plainly (greedy) to choose among methods: the answer goes on from them
    # (auto_k.answer_stream) instead of decoding them again; not part of the record (they are the run's own steps)
    probe: tuple = field(default=(), repr=False, compare=False)

    def to_dict(self) -> dict:
        data = {"k": self.k, "predicted_speedup": {str(k): round(v, 3) for k, v in self.predicted.items()},
                "why": self.why, "acceptance_by_position": [round(a, 3) for a in self.acceptance],
                "step_costs": self.costs}
        if self.candidates:
            data["method"] = self.method
            data["predicted_by_method"] = {name: {str(k): round(v, 3) for k, v in table.items()}
                                           for name, table in self.candidates.items()}
        return data

    def short(self) -> str:
        """One clause for a status line."""
        read = f" ({self.costs})" if self.costs else ""
        if self.k is None:
            what = "method and k" if self.candidates else "k"
            return f"k auto chose plain decoding: no {what} is predicted to pay on this machine{read}"
        chose = f"{method_of(self.method).label} at k={self.k}" if self.method else f"k={self.k}"
        return f"k auto chose {chose}, predicted {self.predicted[self.k]:.2f}× on this machine{read}"


def paying(ranged: dict[int, tuple[float, float, float]], margin: float) -> list[int]:
    """The ks predicted to beat plain decoding by `margin` at the median costs and at all at the low end of their
    range."""
    return [k for k, (point, low, _) in ranged.items() if point >= margin and low > 1.0]


def choose_k(profile: CostProfile, per_position: list[float], source: str, most: int = 8,
             margin: float = 1.05, since: float | None = None) -> AutoK:
    """The k predicted fastest from the drafter's acceptance by position and this machine's step costs; plain
    decoding where none is predicted to pay: to beat it by `margin` at the median costs and to beat it at all at the
    low end of its range (a speedup inside the prediction's error is not one; on a noisy machine the range widens and
    the choice falls back to plain decoding rather than to a k that noise made look fast). The choice names the step
    costs it read (`since`: a profile measured then or later was measured for it)."""
    ranged = {k: profile.expected_speedup(expected_tokens(per_position, k), k)
              for k in range(1, min(most, len(per_position), max(profile.chain)) + 1)}
    predicted = {k: point for k, (point, _, _) in ranged.items()}
    costs = profile.load_text(since)
    if not predicted:
        return AutoK(None, {}, f"no acceptance by position in {source}: plain decoding", costs=costs)
    table = ", ".join(f"k={k} {point:.2f}x ({low:.2f}-{high:.2f})" for k, (point, low, high) in ranged.items())
    rates = tuple(per_position)
    pays = paying(ranged, margin)
    if not pays:
        return AutoK(None, predicted, f"no k is predicted to beat plain decoding by {margin - 1:.0%} with its range "
                                      f"above 1x on this machine ({table}; acceptance from {source}; {costs}): plain "
                                      "decoding", rates, costs)
    best = max(pays, key=predicted.__getitem__)
    return AutoK(best, predicted, f"k={best} is predicted fastest on this machine ({table}; acceptance from {source}; "
                                  f"{costs})", rates, costs)


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
