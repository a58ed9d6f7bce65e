"""The step event: the one contract shared by the engine, backends, UI, bench and exports.

Metric definitions (vLLM's, so numbers match the engines people deploy) live here and nowhere else:

- mean acceptance length = 1 + accepted / drafting steps   (the +1 is the target's bonus token)
- per-position acceptance rate[i] = drafts accepted at position i / drafting steps
- draft acceptance rate = accepted draft tokens / drafted tokens
- tokens per second = emitted tokens / wall time of the decode loop (prefill included)

A field a backend cannot provide is None, never zero, so that the UI can say why it is missing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class AttentionMass:
    """Share of the drafter's attention (averaged over heads) at one draft depth.

    `sink` is the first position; `context` is prompt + accepted output *including* the sink;
    `draft` is the drafter's own drafts of this chain. context + draft == 1.
    """

    sink: float
    context: float
    draft: float


@dataclass
class StepEvent:
    """One verification step of the decode loop (or one plain-decoding token)."""

    step: int
    drafted: list[int]  # token ids the drafter proposed (length k; empty for plain decoding)
    accepted: int  # how many of `drafted` the target accepted (a prefix)
    emitted: list[int]  # tokens appended: drafted[:accepted] + the target's bonus token (may be cut at a stop)
    draft_probs: list[float] | None = None  # drafter's probability of each drafted token
    attention: list[AttentionMass] | None = None  # per depth 1..k
    hidden_rms: list[float] | None = None  # RMS of the hidden state carried into depth 1..k
    draft_ms: float | None = None
    verify_ms: float | None = None
    # running totals since the start of the request
    total_tokens: int = 0
    elapsed_ms: float = 0.0
    finished: bool = False
    finish_reason: str | None = None  # "eos" | "stop" | "length" | "cancelled" | None while running

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class RunMetrics:
    """Run-level metrics computed from step events (definitions in the module docstring)."""

    k: int
    steps: int
    drafting_steps: int
    drafted_tokens: int
    accepted_tokens: int
    generated_tokens: int
    mean_acceptance_length: float | None
    per_position_acceptance: list[float] | None
    draft_acceptance_rate: float | None
    tokens_per_second: float | None
    elapsed_ms: float
    attention_by_depth: list[AttentionMass] | None = None
    hidden_rms_by_depth: list[float] | None = None
    per_position_counts: list[int] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _mean_by_depth(rows: list[list[float]], k: int) -> list[float | None]:
    out: list[float | None] = []
    for d in range(k):
        values = [row[d] for row in rows if len(row) > d]
        out.append(sum(values) / len(values) if values else None)
    return out


def summarize(events: list[StepEvent], k: int) -> RunMetrics:
    """Aggregate step events into run-level metrics."""
    drafting = [e for e in events if e.drafted]
    n_draft_steps = len(drafting)
    drafted = sum(len(e.drafted) for e in drafting)
    accepted = sum(e.accepted for e in drafting)
    generated = sum(len(e.emitted) for e in events)
    elapsed_ms = events[-1].elapsed_ms if events else 0.0

    counts = [0] * k
    for e in drafting:
        for i in range(min(e.accepted, k)):
            counts[i] += 1

    attention = hidden = None
    with_attention = [e.attention for e in drafting if e.attention]
    if with_attention:
        sink = _mean_by_depth([[a.sink for a in row] for row in with_attention], k)
        ctx = _mean_by_depth([[a.context for a in row] for row in with_attention], k)
        own = _mean_by_depth([[a.draft for a in row] for row in with_attention], k)
        attention = [AttentionMass(s, c, d) for s, c, d in zip(sink, ctx, own) if s is not None]
    with_rms = [e.hidden_rms for e in drafting if e.hidden_rms]
    if with_rms:
        hidden = [v for v in _mean_by_depth(with_rms, k) if v is not None]

    return RunMetrics(
        k=k,
        steps=len(events),
        drafting_steps=n_draft_steps,
        drafted_tokens=drafted,
        accepted_tokens=accepted,
        generated_tokens=generated,
        mean_acceptance_length=1 + accepted / n_draft_steps if n_draft_steps else None,
        per_position_acceptance=[c / n_draft_steps for c in counts] if n_draft_steps else None,
        draft_acceptance_rate=accepted / drafted if drafted else None,
        tokens_per_second=generated / (elapsed_ms / 1000) if elapsed_ms > 0 else None,
        elapsed_ms=elapsed_ms,
        attention_by_depth=attention,
        hidden_rms_by_depth=hidden,
        per_position_counts=counts,
    )
