"""vLLM's speculative-decoding counters: Prometheus text in and out, diffs, and the run metrics they give.

Names are vLLM's (`vllm/v1/spec_decode/metrics.py`, SpecDecodingProm); on `/metrics` counters carry the suffix
`_total`, in-process snapshots (`vllm.v1.metrics.reader`) do not. Both are read here. Positions are 0-based.
Definitions match playground.engine.trace: mean acceptance length = 1 + accepted / drafts, per-position rate =
accepted at position i / drafts, draft acceptance rate = accepted / draft tokens.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Iterable

from playground.engine.trace import StepEvent

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


@dataclass(frozen=True)
class Sample:
    """One line of Prometheus text exposition: name{labels} value."""

    name: str
    labels: dict[str, str]
    value: float


_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def _parse_labels(line: str, i: int) -> tuple[dict[str, str], int]:
    """Parse `{a="x",b="y"}` starting at line[i] == '{'; return the labels and the index after '}'."""
    labels: dict[str, str] = {}
    i += 1
    while True:
        while i < len(line) and line[i] in " ,":
            i += 1
        if i < len(line) and line[i] == "}":
            return labels, i + 1
        match = _NAME.match(line, i)
        if not match:
            raise ValueError(f"bad label name at column {i}: {line!r}")
        key, i = match.group(), match.end()
        while i < len(line) and line[i] == " ":
            i += 1
        if line[i : i + 2] != '="':
            raise ValueError(f"expected =\" after label {key!r}: {line!r}")
        i += 2
        value = []
        while i < len(line) and line[i] != '"':
            if line[i] == "\\" and i + 1 < len(line):
                value.append(_ESCAPES.get(line[i + 1], "\\" + line[i + 1]))
                i += 2
            else:
                value.append(line[i])
                i += 1
        if i >= len(line):
            raise ValueError(f"unterminated label value: {line!r}")
        labels[key] = "".join(value)
        i += 1


def parse_prometheus(text: str) -> list[Sample]:
    """Parse Prometheus text format (version 0.0.4): comments skipped, timestamps ignored, NaN/±Inf read."""
    samples = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _NAME.match(line)
        if not match:
            raise ValueError(f"bad metric line: {raw!r}")
        name, i = match.group(), match.end()
        labels: dict[str, str] = {}
        if i < len(line) and line[i] == "{":
            labels, i = _parse_labels(line, i)
        fields = line[i:].split()
        if not fields:
            raise ValueError(f"metric line without a value: {raw!r}")
        samples.append(Sample(name, labels, float(fields[0])))  # float() reads NaN, +Inf, -Inf
    return samples


@dataclass
class SpecCounters:
    """Cumulative spec-decode counters (or the difference of two snapshots)."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    def _combine(self, other: "SpecCounters", sign: int) -> "SpecCounters":
        n = max(len(self.accepted_per_pos), len(other.accepted_per_pos))
        pad = lambda xs: list(xs) + [0] * (n - len(xs))  # noqa: E731
        return SpecCounters(
            self.drafts + sign * other.drafts,
            self.draft_tokens + sign * other.draft_tokens,
            self.accepted_tokens + sign * other.accepted_tokens,
            [a + sign * b for a, b in zip(pad(self.accepted_per_pos), pad(other.accepted_per_pos), strict=True)],
        )

    def __add__(self, other: "SpecCounters") -> "SpecCounters":
        return self._combine(other, 1)

    def __sub__(self, before: "SpecCounters") -> "SpecCounters":
        return self._combine(before, -1)

    def add_step(self, event: StepEvent, k: int) -> None:
        """Count one engine step the way vLLM's SpecDecodingStats.observe_draft does (plain steps count nothing)."""
        if not event.drafted:
            return
        if len(self.accepted_per_pos) < k:
            self.accepted_per_pos += [0] * (k - len(self.accepted_per_pos))
        self.drafts += 1
        self.draft_tokens += len(event.drafted)
        self.accepted_tokens += event.accepted
        for i in range(event.accepted):
            self.accepted_per_pos[i] += 1

    @classmethod
    def from_events(cls, events: Iterable[StepEvent], k: int) -> "SpecCounters":
        counters = cls(accepted_per_pos=[0] * k)
        for event in events:
            counters.add_step(event, k)
        return counters

    @classmethod
    def from_samples(cls, samples: Iterable[Sample], model_name: str | None = None) -> "SpecCounters | None":
        """Sum the spec-decode counters over engines (and over models unless `model_name` is given).

        None when the text has no spec-decode counters at all (a server started without speculation)."""
        totals: dict[str, float] = {}
        per_pos: dict[int, float] = {}
        found = False
        for s in samples:
            if model_name is not None and s.labels.get("model_name", model_name) != model_name:
                continue
            base = s.name.removesuffix("_total")
            if base == ACCEPTED_PER_POS and "position" in s.labels:
                per_pos[int(s.labels["position"])] = per_pos.get(int(s.labels["position"]), 0) + s.value
                found = True
            elif base in (DRAFTS, DRAFT_TOKENS, ACCEPTED):
                totals[base] = totals.get(base, 0) + s.value
                found = True
        if not found:
            return None
        positions = [int(per_pos.get(i, 0)) for i in range(max(per_pos) + 1)] if per_pos else []
        return cls(int(totals.get(DRAFTS, 0)), int(totals.get(DRAFT_TOKENS, 0)), int(totals.get(ACCEPTED, 0)),
                   positions)

    @property
    def mean_acceptance_length(self) -> float | None:
        return 1 + self.accepted_tokens / self.drafts if self.drafts else None

    @property
    def per_position_acceptance(self) -> list[float] | None:
        return [c / self.drafts for c in self.accepted_per_pos] if self.drafts else None

    @property
    def draft_acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None


def _number(value: float) -> str:
    return "NaN" if math.isnan(value) else repr(float(value))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_prometheus(counters: SpecCounters | None, labels: dict[str, str],
                      extra_counters: dict[str, tuple[str, float]] | None = None) -> str:
    """Counters as vLLM's server exposes them: `# TYPE name counter` then `name_total{labels} value`.
    `counters` None = a server without speculation (no spec-decode metrics at all, as in vLLM)."""
    label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    lines: list[str] = []

    def counter(name: str, help_text: str, rows: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP {name}_total {help_text}")
        lines.append(f"# TYPE {name} counter")
        for extra_labels, value in rows:
            inner = ",".join(x for x in (label_text, extra_labels) if x)
            lines.append(f"{name}_total{{{inner}}} {_number(value)}")

    if counters is not None:
        counter(DRAFTS, "Number of spec decoding drafts.", [("", counters.drafts)])
        counter(DRAFT_TOKENS, "Number of draft tokens.", [("", counters.draft_tokens)])
        counter(ACCEPTED, "Number of accepted tokens.", [("", counters.accepted_tokens)])
        counter(ACCEPTED_PER_POS, "Accepted tokens per draft position.",
                [(f'position="{i}"', c) for i, c in enumerate(counters.accepted_per_pos)])
    for name, (help_text, value) in (extra_counters or {}).items():
        counter(name, help_text, [("", value)])
    return "\n".join(lines) + "\n"


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
