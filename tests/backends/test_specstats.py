"""vLLM's spec-decode counters: counted once (engine.trace.SpecCounters), read from and written as Prometheus text."""

from __future__ import annotations

import math

import pytest
from prometheus_client.samples import Sample

from playground.engine import SpecCounters, StepEvent, summarize
from playground.specstats import (
    ServedCounters,
    ServedSnapshot,
    counters_from_samples,
    parse_prometheus,
    render_prometheus,
    request_metrics,
)

VLLM_TEXT = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="llama-8b"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="llama-8b"} 2.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="llama-8b"} 1.7e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="llama-8b"} 40.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="llama-8b"} 8.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="llama-8b"} 25.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="llama-8b"} 3.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="llama-8b",position="0"} 9.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="llama-8b",position="1"} 7.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="llama-8b",position="3"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="llama-8b",position="2"} 5.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="llama-8b",position="0"} 2.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="llama-8b",position="1"} 1.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama-8b"} 0.0
"""


def test_parse_prometheus_text() -> None:
    text = (
        '# a comment\n\n'
        'http_requests_total{method="post",path="/a \\"quoted\\", b\\\\c\\nd"} 1027 1395066363000\n'
        'weird_gauge NaN\n'
        'big{le="+Inf"} +Inf\n'
    )
    samples = parse_prometheus(text)
    assert (samples[0].name, samples[0].labels, samples[0].value) == (
        "http_requests_total", {"method": "post", "path": '/a "quoted", b\\c\nd'}, 1027.0)
    assert math.isnan(samples[1].value)
    assert (samples[2].labels, samples[2].value) == ({"le": "+Inf"}, math.inf)


@pytest.mark.parametrize("line", ["9bad 1", 'x{a=1} 2', 'x{a="1" 2', "x_total"])
def test_parse_prometheus_rejects_malformed_lines(line: str) -> None:
    with pytest.raises(ValueError, match="not Prometheus text"):
        parse_prometheus(line)


def test_counters_sum_engines_and_read_positions() -> None:
    counters = counters_from_samples(parse_prometheus(VLLM_TEXT))
    assert counters == SpecCounters(drafts=12, draft_tokens=48, accepted_tokens=28, accepted_per_pos=[11, 8, 5, 4])
    assert counters.mean_acceptance_length == pytest.approx(1 + 28 / 12)
    assert counters.per_position_acceptance == pytest.approx([11 / 12, 8 / 12, 5 / 12, 4 / 12])
    assert counters.draft_acceptance_rate == pytest.approx(28 / 48)
    assert counters_from_samples(parse_prometheus(VLLM_TEXT), model_name="other") is None
    assert counters_from_samples(parse_prometheus("vllm:num_requests_running 0")) is None  # not speculating
    in_process = [Sample("vllm:spec_decode_num_drafts", {}, 3), Sample("vllm:spec_decode_num_accepted_tokens", {}, 2)]
    assert counters_from_samples(in_process) == SpecCounters(3, 0, 2, [])  # reader names carry no _total


def test_exposition_round_trips_and_diffs() -> None:
    before = SpecCounters(4, 16, 6, [3, 2, 1, 0])
    after = SpecCounters(9, 36, 15, [8, 4, 2, 1])
    text = render_prometheus(ServedCounters({"engine": "0", "model_name": 'my "model"'},
                                            lambda: ServedSnapshot(after, 11, 7, running=2, waiting=1)))
    labels = 'engine="0",model_name="my \\"model\\"",position="3"'
    assert f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels}}} 1.0" in text
    assert 'vllm:prompt_tokens_total{engine="0",model_name="my \\"model\\""} 11.0' in text
    assert 'vllm:num_requests_waiting{engine="0",model_name="my \\"model\\""} 1.0' in text
    assert counters_from_samples(parse_prometheus(text)) == after
    assert after - before == SpecCounters(5, 20, 9, [5, 2, 1, 1])
    assert (after - before) + before == after and before + SpecCounters() == SpecCounters(4, 16, 6, [3, 2, 1, 0])
    plain = render_prometheus(ServedCounters({}, lambda: ServedSnapshot(None, 3, 4, running=0, waiting=0)))
    assert counters_from_samples(parse_prometheus(plain)) is None and "vllm:generation_tokens_total 4.0" in plain


def test_vllm_definitions_on_a_hand_counted_run() -> None:
    k = 3
    events = [
        StepEvent(step=0, drafted=[], accepted=0, emitted=[5]),
        StepEvent(step=1, drafted=[1, 2, 3], accepted=2, emitted=[1, 2, 9]),
        StepEvent(step=2, drafted=[4, 4, 4], accepted=0, emitted=[7]),
        StepEvent(step=3, drafted=[6, 6, 6], accepted=3, emitted=[6, 6, 6, 1]),
        StepEvent(step=4, drafted=[], accepted=0, emitted=[2], finished=True, finish_reason="length"),
    ]
    run = summarize(events, k)
    counters = SpecCounters.from_events(events, k)
    assert counters == SpecCounters(3, 9, 5, [2, 2, 1])
    assert run.mean_acceptance_length == pytest.approx(1 + 5 / 3)  # the prefill and the plain last step: no drafts
    assert run.per_position_acceptance == pytest.approx([2 / 3, 2 / 3, 1 / 3])
    assert run.draft_acceptance_rate == pytest.approx(5 / 9) and run.generated_tokens == 10
    metrics = request_metrics(events, k)
    assert metrics["acceptance_histogram"] == [1, 0, 1, 1]
    assert metrics["per_step_accepted"] == [2, 0, 3] and metrics["per_step_drafted"] == [3, 3, 3]
    assert (metrics["num_spec_steps"], metrics["num_draft_tokens"], metrics["num_accepted_draft_tokens"]) == (3, 9, 5)
    assert metrics["mean_acceptance_length"] == run.mean_acceptance_length
