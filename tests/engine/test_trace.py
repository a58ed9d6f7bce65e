"""Run metrics from step events: the totals a live run keeps as events arrive equal the ones computed by hand."""

from __future__ import annotations

import pytest

from playground.engine import AttentionMass, RunTally, StepEvent, summarize
from playground.playback.run import Run
from playground.playback.run_settings import RunSettings


def _events() -> list[StepEvent]:
    """A prefill step, two full k=3 drafts and one adaptive draft of 1 token; the third step reports no
    instrumentation (a backend may leave it out)."""
    mass = AttentionMass
    return [
        StepEvent(0, [], 0, [11], total_tokens=1, elapsed_ms=100.0),
        StepEvent(1, [1, 2, 3], 2, [1, 2, 9], attention=[mass(0.5, 0.9, 0.1), mass(0.3, 0.6, 0.4), mass(0.1, 0.2, 0.8)],
                  hidden_rms=[1.0, 2.0, 3.0], total_tokens=4, elapsed_ms=150.0),
        StepEvent(2, [4, 5, 6], 0, [7], total_tokens=5, elapsed_ms=180.0),
        StepEvent(3, [8], 1, [8, 10], attention=[mass(0.1, 0.5, 0.5)], hidden_rms=[3.0], total_tokens=7,
                  elapsed_ms=300.0, finished=True, finish_reason="eos"),
    ]


@pytest.mark.unit
def test_metrics_equal_the_definitions_worked_by_hand() -> None:
    m = summarize(_events(), k=3)
    assert (m.steps, m.drafting_steps, m.drafted_tokens, m.accepted_tokens, m.generated_tokens) == (4, 3, 7, 3, 7)
    assert m.mean_acceptance_length == pytest.approx(1 + 3 / 3)
    assert m.per_position_acceptance == pytest.approx([2 / 3, 1 / 3, 0.0])
    assert m.per_position_counts == [2, 1, 0]
    assert m.draft_acceptance_rate == pytest.approx(3 / 7)
    assert m.tokens_per_second == pytest.approx(7 / 0.3)
    assert m.decode_tokens_per_second == pytest.approx((7 - 1) / 0.2)  # the first step (prefill) is left out
    # depth 1 averages the two instrumented steps; depths 2 and 3 only the one step that drafted that deep
    assert [v for a in m.attention_by_depth for v in (a.sink, a.context, a.draft)] == pytest.approx(
        [0.3, 0.7, 0.3, 0.3, 0.6, 0.4, 0.1, 0.2, 0.8])
    assert m.hidden_rms_by_depth == pytest.approx([2.0, 2.0, 3.0])
    assert summarize(_events(), k=2).hidden_rms_by_depth == pytest.approx([2.0, 2.0])  # depths past k are not shown


@pytest.mark.unit
def test_a_live_run_keeps_its_totals_as_events_arrive() -> None:
    """The live Run's view reads the totals it kept; after every step they equal the metrics of the events so far."""
    run, events = Run(RunSettings(k=3), prompt_tokens=5), _events()
    assert run.view().metrics == summarize([], 3)
    for n, event in enumerate(events, start=1):
        run.add(event)
        assert run.view().metrics == summarize(events[:n], 3)
    kept = run.view().metrics
    assert kept.per_position_counts is not run.tally.counters.accepted_per_pos  # a view's numbers do not move later
    run.add(StepEvent(4, [1, 2, 3], 3, [1, 2, 3, 4], total_tokens=11, elapsed_ms=400.0))
    assert kept.per_position_counts == [2, 1, 0] and run.view().metrics.per_position_counts == [3, 2, 1]


@pytest.mark.unit
def test_an_empty_tally_has_no_rates() -> None:
    m = RunTally(4).metrics()
    assert (m.steps, m.mean_acceptance_length, m.tokens_per_second, m.decode_tokens_per_second) == (0, None, None, None)
    assert m.attention_by_depth is None and m.hidden_rms_by_depth is None and m.per_position_counts == [0, 0, 0, 0]
