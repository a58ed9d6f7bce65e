"""What the pictures need to know about one run (live or finished): its events, metrics and measured baseline."""

from __future__ import annotations

from dataclasses import dataclass, field

from playground.engine import Baseline, RunMetrics, StepEvent, summarize


@dataclass
class RunView:
    drafter: str  # display name, e.g. "EAGLE-3.1"
    plain: bool  # plain decoding: no drafter, so no drafts, acceptance or drift to show
    k: int
    events: list[StepEvent]
    metrics: RunMetrics
    baseline: Baseline | None = None  # plain decoding measured alongside; None until its first timed step
    missing: dict[str, str] = field(default_factory=dict)  # StepEvent fields (and "baseline") the backend cannot
    # provide, and why: a backend's `missing_fields`
    seen_tokens_per_second: float | None = None  # wall clock, rendering pauses included: what the user saw
    usual_by_position: list[tuple[float, float, float]] | None = None  # the drafter's fingerprint at this k: per
    # position, its answers' pooled acceptance and 10th-90th percentile (health.Section.by_position)
    usual_drift: dict[str, list[tuple[float, float, float]]] | None = None  # its drift by depth: "draft" (attention
    # to its own drafts) and "rms", mean and 10th-90th percentile (health.Section.drift_by_depth)
    features: bool = True  # drafts from the target's hidden states (drafting.Method.features): attention, drift and
    # hidden-state RMS apply; False for a method that proposes from something else, `proposes_from`
    proposes_from: str = "the text alone"  # drafting.Method.proposes_from

    @classmethod
    def from_events(cls, drafter: str, plain: bool, k: int, events: list[StepEvent],
                    baseline: Baseline | None = None, missing: dict[str, str] | None = None,
                    seen_tokens_per_second: float | None = None) -> RunView:
        return cls(drafter, plain, k, events, summarize(events, k), baseline, dict(missing or {}),
                   seen_tokens_per_second)

    @property
    def label(self) -> str:
        return self.drafter if self.plain else f"{self.drafter}, k={self.k}"

    @property
    def too_few_steps(self) -> str | None:
        """Why the speedup is not shown yet although a baseline is being measured (Baseline.too_few_steps)."""
        return self.baseline.too_few_steps(self.events) if self.baseline else None

    @property
    def speedup(self) -> float | None:
        """Measured decode rate over the plain baseline's (never derived from acceptance length); None until there
        are enough steps on both sides for it to be a measurement."""
        if self.baseline is None or self.too_few_steps:
            return None
        return self.baseline.speedup(self.metrics.decode_tokens_per_second)

    @property
    def speedup_range(self) -> tuple[float, float] | None:
        return self.baseline.speedup_range(self.events) if self.speedup is not None else None
