"""Step costs written by hand, for tests of k auto's choice: timed on a shared machine, the costs move with its
load (a busy neighbour once made k auto choose plain decoding for a drafter that accepted every draft), so a test
that asserts the choice gives `pair_profile` these in place of a measurement. The costs make one k the fastest for a
drafter that accepts nearly every draft: drafting a chain of up to CHOSEN_K is cheap, one step longer is dear."""

from __future__ import annotations

import pytest

from playground.engine import cost_measure
from playground.engine.costs import CHAIN_KS, VERIFY_ROWS, Cost, CostProfile

CHOSEN_K = 3
PLAIN_MS = 10.0


def verify_ms(rows: int) -> float:
    return PLAIN_MS + rows


def chain_ms(k: int) -> float:
    return 2.0 * k if k <= CHOSEN_K else 40.0


def predicted(rate: float, k: int) -> float:
    """The speedup these costs give a chain of k whose every position is accepted at `rate`, worked out by hand:
    a step's tokens (1 + k × rate) at the plain step's cost, over drafting k and verifying k + 1 rows."""
    return (1 + k * rate) * PLAIN_MS / (chain_ms(k) + verify_ms(k + 1))


def hand_profile(names: tuple[str, str], context: int) -> CostProfile:
    """These costs as a profile (no rounds: the prediction's range is the point itself), its load not read."""
    exact = lambda ms: Cost(ms, ms, ms)  # noqa: E731
    return CostProfile({"cpu": "written by hand"}, names[0], names[1], context, exact(PLAIN_MS),
                       {rows: exact(verify_ms(rows)) for rows in VERIFY_ROWS},
                       {k: exact(chain_ms(k)) for k in CHAIN_KS})


def use_hand_costs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every profile `pair_profile` measures from now on (for the test) is `hand_profile`, kept as a measured one."""
    def measure(target, drafter, aux_layers, context_ids, names, trees=(), rounds=7, load=None) -> CostProfile:
        return hand_profile(names, len(context_ids) - 1)

    monkeypatch.setattr(cost_measure, "measure", measure)
