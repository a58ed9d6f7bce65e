"""vLLM's speculative-decoding counters on the wire: Prometheus text in (a vLLM server's `/metrics`, or vLLM's
in-process metric snapshots) and out (our own server's `/metrics`), and vLLM's per-request metrics.

The counting itself is `playground.engine.trace.SpecCounters`; this module only names and moves the numbers.
Names are vLLM's (`vllm/v1/spec_decode/metrics.py`, SpecDecodingProm): on `/metrics` counters carry the suffix
`_total`, in-process snapshots (`vllm.v1.metrics.reader`) do not; both are read. Positions are 0-based.
The text format is prometheus_client's (exposition and parser), as vLLM's server uses it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from playground.engine.trace import SpecCounters, StepEvent

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
PROMPT_TOKENS = "vllm:prompt_tokens"
GENERATION_TOKENS = "vllm:generation_tokens"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"


def parse_prometheus(text: str) -> list[Sample]:
    """Every sample of a Prometheus text exposition (comments skipped, timestamps kept but unused)."""
    try:
        return [sample for family in text_string_to_metric_families(text) for sample in family.samples]
    except (ValueError, IndexError, KeyError) as err:
        raise ValueError(f"not Prometheus text: {err}") from None


def counters_from_samples(samples: Iterable[Sample], model_name: str | None = None) -> SpecCounters | None:
    """Sum the spec-decode counters over engines (and over models unless `model_name` is given).

    None when there are no spec-decode counters at all (a server started without speculation)."""
    totals: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    found = False
    for s in samples:
        if model_name is not None and s.labels.get("model_name", model_name) != model_name:
            continue
        base = s.name.removesuffix("_total")
        if base == ACCEPTED_PER_POS and "position" in s.labels:
            position = int(s.labels["position"])
            per_pos[position] = per_pos.get(position, 0) + s.value
            found = True
        elif base in (DRAFTS, DRAFT_TOKENS, ACCEPTED):
            totals[base] = totals.get(base, 0) + s.value
            found = True
    if not found:
        return None
    positions = [int(per_pos.get(i, 0)) for i in range(max(per_pos) + 1)] if per_pos else []
    return SpecCounters(int(totals.get(DRAFTS, 0)), int(totals.get(DRAFT_TOKENS, 0)), int(totals.get(ACCEPTED, 0)),
                        positions)


@dataclass
class ServedSnapshot:
    """What a server has served so far, and what it is doing now."""

    spec: SpecCounters | None  # None when not speculating: no spec-decode metrics at all, as vLLM
    prompt_tokens: int
    generation_tokens: int
    running: int
    waiting: int


class ServedCounters:
    """A prometheus_client collector exposing, with vLLM's names, whatever `snapshot()` returns at scrape time:
    the spec-decode counters, the prompt / generation token counters, and the running / waiting request gauges."""

    def __init__(self, labels: dict[str, str], snapshot: Callable[[], ServedSnapshot]) -> None:
        self.labels, self.snapshot = labels, snapshot

    def _family(self, kind: type, name: str, help_text: str, rows: list[tuple[dict[str, str], float]]) -> Metric:
        extra = sorted({key for more, _ in rows for key in more})
        family = kind(name, help_text, labels=[*self.labels, *extra])
        for more, value in rows:
            family.add_metric([*self.labels.values(), *(more[key] for key in extra)], value)
        return family

    def collect(self) -> Iterable[Metric]:
        now = self.snapshot()
        if now.spec is not None:
            spec = now.spec
            yield self._family(CounterMetricFamily, DRAFTS, "Number of spec decoding drafts.", [({}, spec.drafts)])
            yield self._family(CounterMetricFamily, DRAFT_TOKENS, "Number of draft tokens.",
                               [({}, spec.draft_tokens)])
            yield self._family(CounterMetricFamily, ACCEPTED, "Number of accepted tokens.",
                               [({}, spec.accepted_tokens)])
            yield self._family(CounterMetricFamily, ACCEPTED_PER_POS, "Accepted tokens per draft position.",
                               [({"position": str(i)}, c) for i, c in enumerate(spec.accepted_per_pos)])
        yield self._family(CounterMetricFamily, PROMPT_TOKENS, "Number of prefill tokens processed.",
                           [({}, now.prompt_tokens)])
        yield self._family(CounterMetricFamily, GENERATION_TOKENS, "Number of generation tokens processed.",
                           [({}, now.generation_tokens)])
        yield self._family(GaugeMetricFamily, RUNNING, "Number of requests decoding now.", [({}, now.running)])
        yield self._family(GaugeMetricFamily, WAITING, "Number of requests waiting to decode.", [({}, now.waiting)])


def render_prometheus(collector: ServedCounters) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry).decode()


def request_metrics(events: Iterable[StepEvent], k: int) -> dict:
    """vLLM's per-request `metrics.speculative_decoding` ('detailed'), computed from one request's step events."""
    drafting = [e for e in events if e.drafted]
    counters = SpecCounters.from_events(drafting, k)
    histogram = [0] * (k + 1)
    for e in drafting:
        histogram[min(e.accepted, k)] += 1
    return {
        "mean_acceptance_length": counters.mean_acceptance_length,
        "draft_acceptance_rate": counters.draft_acceptance_rate,
        "acceptance_histogram": histogram,
        "num_spec_steps": counters.drafts,
        "num_accepted_draft_tokens": counters.accepted_tokens,
        "num_draft_tokens": counters.draft_tokens,
        "num_spec_tokens": k,
        "per_step_accepted": [e.accepted for e in drafting],
        "per_step_drafted": [len(e.drafted) for e in drafting],
    }
