"""The step event: the one contract shared by the engine, backends, UI, bench and exports.

Metric definitions (vLLM's, so numbers match the engines people deploy) live here and nowhere else. Acceptance is
counted by one accumulator, `SpecCounters.observe` (vLLM's `SpecDecodingStats.observe_draft`), which feeds run
summaries, the server's `/metrics` and per-request usage, and reads back vLLM's own counters:

- mean acceptance length = 1 + accepted / drafting steps   (the +1 is the target's bonus token)
- per-position acceptance rate[i] = drafts accepted at position i / drafting steps
- draft acceptance rate = accepted draft tokens / drafted tokens
- tokens per second = emitted tokens / wall time of the decode loop (prefill included)
- decode tokens per second = the same after the first step (which holds the prefill): the steady rate
- live speedup = decode tokens per second of the run / the `Baseline`'s (plain decode steps at the run's position
  on the same machine, timed one at a time between the run's steps, pooled into groups). Its range is its 95 %
  interval: the run's rate uncertain by its stretches' spread (`window_rates`), the baseline's by its groups'
  (`Baseline.relative_error`), combined; more timed steps narrow it

A field a backend cannot provide is None, never zero, so that the UI can say why it is missing.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
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
    drafted: list[int]  # token ids the drafter proposed (k, fewer when adaptive or near the end; none when plain)
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
    # Draft trees (engine/tree.py), None for chains and plain steps. Then `drafted` is the tree's branch through the
    # accepted path (the accepted nodes, then the best-scored kept child at each further depth), so `accepted`,
    # `emitted` and acceptance length keep their chain meaning: tokens per step.
    tree_tokens: list[int] | None = None  # every verified node, in depth order
    tree_parents: list[int] | None = None  # index of each node's parent in tree_tokens; -1 = the last emitted token
    tree_depths: list[int] | None = None  # 1 = a child of the last emitted token
    tree_probs: list[float] | None = None  # the drafter's probability of each node given its parent
    tree_path: list[int] | None = None  # the accepted nodes (indices into tree_tokens), shallowest first
    # The machine while the step ran (engine/threads.py): the CPU threads its target forward ran on and the other
    # runnable tasks sampled just before it; None on a GPU, from other backends, or where the system does not say
    threads: int | None = None
    others_running: int | None = None
    cores_taken: float | None = None  # other processes' CPU time in cores over the load sample before the step

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
    decode_tokens_per_second: float | None
    elapsed_ms: float
    attention_by_depth: list[AttentionMass] | None = None
    hidden_rms_by_depth: list[float] | None = None
    per_position_counts: list[int] = field(default_factory=list)
    busy_share: float | None = None  # share of steps that began with another task runnable (the thread policy's view)
    cores_taken: float | None = None  # other processes' CPU time over the steps, in cores: threads.busy_text's rule
    threads: list[int] | None = None  # the CPU thread counts the steps' target forwards ran on
    verified_per_step: float | None = None  # rows the target verified per drafting step: drafts (a tree: nodes) + 1

    def to_dict(self) -> dict:
        return asdict(self)


MIN_SPEEDUP_GROUPS = 5  # a speedup needs this many groups of plain steps, and as many decode steps of the run
SPREAD_STRETCHES = 20  # a run's rate is cut into at most this many stretches to size its noise
RANGE_CONFIDENCE = 0.95  # a speedup's range is its interval at this confidence (Student's t below)
_T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23, 15: 2.13, 20: 2.09,
        30: 2.04}  # Student's t, two-sided 95 %, by degrees of freedom


def t_quantile(degrees: int) -> float:
    """Student's t for a two-sided 95 % interval with `degrees` of freedom (the nearest tabled below; 1.96 past 30)."""
    if degrees < 1:
        return float("inf")
    return 1.96 if degrees > 30 else _T95[max(d for d in _T95 if d <= degrees)]


@dataclass(frozen=True)
class Baseline:
    """Plain decoding of a run's target on the run's own text: decode steps timed one at a time, pooled into groups
    for the spread."""

    tokens_per_second: float  # pooled: timed steps / their time
    slowest: float  # tokens/s of the slowest group
    fastest: float
    groups: int
    tokens: int  # timed steps (one token each)
    measuring_s: float = 0.0  # wall time the measurement took, untimed catch-up forwards included: its cost
    timing: str = "after the answer"  # or "alongside the runs" (playback.baseline says how each works)
    relative_error: float = 0.0  # the pooled rate's standard error over its value, from its groups' spread

    def speedup(self, tokens_per_second: float | None) -> float | None:
        return tokens_per_second / self.tokens_per_second if tokens_per_second else None

    def too_few_steps(self, events: list[StepEvent]) -> str | None:
        """Why a speedup against this baseline would not be a measurement yet, or None when it is one: below
        MIN_SPEEDUP_GROUPS groups of plain steps, or as many decode steps of the run, a ratio and its range are a
        point estimate of noise (a stopped run's 2 plain steps once read 1.75× (1.75–1.75))."""
        run_steps = max(len(events) - 1, 0)
        if self.groups >= MIN_SPEEDUP_GROUPS and run_steps >= MIN_SPEEDUP_GROUPS:
            return None
        return (f"too few steps to measure: {self.tokens} plain steps in {self.groups} of {MIN_SPEEDUP_GROUPS} "
                f"groups, {run_steps} decode steps of the run (needs {MIN_SPEEDUP_GROUPS})")

    def speedup_range(self, events: list[StepEvent]) -> tuple[float, float] | None:
        """The speedup's 95 % interval: its run's and its baseline's rates each uncertain by their standard error (the
        run's from its stretches of decode time, as many as the baseline's groups, at most SPREAD_STRETCHES), the two
        combined, with Student's t for the fewer of the two counts. It narrows as more steps are timed, and holds
        1.00× where the machine's noise could have made the difference. The errors are relative, so the interval is
        taken on the ratio's log (speedup × e^±spread): never below zero however noisy, and ±spread where small."""
        rates = window_rates(events, min(self.groups, SPREAD_STRETCHES))
        run_rate = decode_rate(events)
        if len(rates) < 2 or not run_rate:
            return None
        run_error = statistics.stdev(rates) / statistics.mean(rates) / math.sqrt(len(rates))
        spread = t_quantile(min(len(rates), self.groups) - 1) * math.hypot(run_error, self.relative_error)
        speedup = run_rate / self.tokens_per_second
        return speedup * math.exp(-spread), speedup * math.exp(spread)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class SpecCounters:
    """Cumulative speculative-decoding counters (or the difference of two snapshots). Positions are 0-based."""

    drafts: int = 0  # drafting steps
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    def observe(self, event: StepEvent) -> None:
        """Count one engine step; plain steps (nothing drafted, e.g. the prefill) count nothing."""
        if not event.drafted:
            return
        k = len(event.drafted)
        self.accepted_per_pos += [0] * (k - len(self.accepted_per_pos))
        self.drafts += 1
        self.draft_tokens += k
        self.accepted_tokens += event.accepted
        for i in range(event.accepted):
            self.accepted_per_pos[i] += 1

    @classmethod
    def from_events(cls, events: Iterable[StepEvent], k: int) -> SpecCounters:
        counters = cls(accepted_per_pos=[0] * k)
        for event in events:
            counters.observe(event)
        return counters

    def _combine(self, other: SpecCounters, sign: int) -> SpecCounters:
        n = max(len(self.accepted_per_pos), len(other.accepted_per_pos))
        mine, theirs = (xs + [0] * (n - len(xs)) for xs in (self.accepted_per_pos, other.accepted_per_pos))
        return SpecCounters(self.drafts + sign * other.drafts, self.draft_tokens + sign * other.draft_tokens,
                            self.accepted_tokens + sign * other.accepted_tokens,
                            [a + sign * b for a, b in zip(mine, theirs, strict=True)])

    def __add__(self, other: SpecCounters) -> SpecCounters:
        return self._combine(other, 1)

    def __sub__(self, before: SpecCounters) -> SpecCounters:
        return self._combine(before, -1)

    @property
    def mean_acceptance_length(self) -> float | None:
        return 1 + self.accepted_tokens / self.drafts if self.drafts else None

    @property
    def per_position_acceptance(self) -> list[float] | None:
        return [c / self.drafts for c in self.accepted_per_pos] if self.drafts else None

    @property
    def draft_acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None


def emitted_ids(events: Iterable[StepEvent]) -> list[int]:
    """A run's output token ids, in order: every step's emitted tokens."""
    return [t for e in events for t in e.emitted]


def decode_seconds(events: list[StepEvent]) -> float:
    """A run's decode-loop time after its first step (which holds the prefill)."""
    return (events[-1].elapsed_ms - events[0].elapsed_ms) / 1000 if events else 0.0


def decode_rate(events: list[StepEvent]) -> float | None:
    """A run's decode rate: the tokens after its first step over the decode-loop time after it (RunMetrics')."""
    seconds = decode_seconds(events)
    return sum(len(e.emitted) for e in events[1:]) / seconds if seconds > 0 else None


def window_rates(events: list[StepEvent], windows: int) -> list[float]:
    """Decode rates of the run cut, after its first step, into `windows` consecutive stretches of about equal time
    (fewer when there are fewer steps)."""
    steps = events[1:]
    if not steps or windows < 1:
        return []
    start, end = events[0].elapsed_ms, events[-1].elapsed_ms
    rates, tokens, since = [], 0, start
    for event in steps:
        tokens += len(event.emitted)
        if event.elapsed_ms - start >= (end - start) * (len(rates) + 1) / windows and event.elapsed_ms > since:
            rates.append(tokens / ((event.elapsed_ms - since) / 1000))
            tokens, since = 0, event.elapsed_ms
    return rates


@dataclass
class _DepthMeans:
    """Running means by draft depth, of rows that may be shorter than the deepest (a step drafted fewer tokens)."""

    sums: list[list[float]] = field(default_factory=list)  # [depth][component]
    counts: list[int] = field(default_factory=list)

    def add(self, row: list[tuple[float, ...]]) -> None:
        for depth, values in enumerate(row):
            if depth == len(self.counts):
                self.sums.append([0.0] * len(values))
                self.counts.append(0)
            self.sums[depth] = [total + v for total, v in zip(self.sums[depth], values, strict=True)]
            self.counts[depth] += 1

    def means(self, k: int) -> list[tuple[float, ...]] | None:
        if not self.counts:
            return None
        return [tuple(total / n for total in sums) for sums, n in zip(self.sums[:k], self.counts[:k], strict=True)]


@dataclass
class RunTally:
    """A run's totals, kept as its events arrive, so that a live view reads them instead of re-reading every event:
    `observe` each step once, then `metrics()` whenever a view needs them (definitions in the module docstring)."""

    k: int
    counters: SpecCounters = field(default_factory=SpecCounters)
    steps: int = 0
    generated: int = 0
    first_step_tokens: int = 0  # the first step holds the prefill: decode rates leave it out
    first_ms: float = 0.0
    last_ms: float = 0.0
    attention: _DepthMeans = field(default_factory=_DepthMeans)
    hidden_rms: _DepthMeans = field(default_factory=_DepthMeans)
    load_samples: int = 0
    busy_steps: int = 0
    cpu_samples: int = 0
    cores_taken_sum: float = 0.0
    verified_rows: int = 0  # over the drafting steps: a chain's drafts or a tree's nodes, and the last token
    threads: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.counters.accepted_per_pos += [0] * (self.k - len(self.counters.accepted_per_pos))

    @classmethod
    def of(cls, events: Iterable[StepEvent], k: int) -> RunTally:
        tally = cls(k)
        for event in events:
            tally.observe(event)
        return tally

    def observe(self, event: StepEvent) -> None:
        if self.steps == 0:
            self.first_step_tokens, self.first_ms = len(event.emitted), event.elapsed_ms
        self.steps += 1
        self.generated += len(event.emitted)
        self.last_ms = event.elapsed_ms
        self.counters.observe(event)
        if event.drafted or event.tree_tokens:
            self.verified_rows += len(event.tree_tokens if event.tree_tokens is not None else event.drafted) + 1
        if event.drafted and event.attention:
            self.attention.add([(a.sink, a.context, a.draft) for a in event.attention])
        if event.drafted and event.hidden_rms:
            self.hidden_rms.add([(v,) for v in event.hidden_rms])
        if event.others_running is not None:
            self.load_samples += 1
            self.busy_steps += event.others_running > 0
        if event.cores_taken is not None:
            self.cpu_samples += 1
            self.cores_taken_sum += event.cores_taken
        if event.threads is not None:
            self.threads.add(event.threads)

    def metrics(self) -> RunMetrics:
        counters, decode_s = self.counters, (self.last_ms - self.first_ms) / 1000
        attention, hidden = self.attention.means(self.k), self.hidden_rms.means(self.k)
        return RunMetrics(
            k=self.k,
            steps=self.steps,
            drafting_steps=counters.drafts,
            drafted_tokens=counters.draft_tokens,
            accepted_tokens=counters.accepted_tokens,
            generated_tokens=self.generated,
            mean_acceptance_length=counters.mean_acceptance_length,
            per_position_acceptance=counters.per_position_acceptance,
            draft_acceptance_rate=counters.draft_acceptance_rate,
            tokens_per_second=self.generated / (self.last_ms / 1000) if self.last_ms > 0 else None,
            decode_tokens_per_second=(self.generated - self.first_step_tokens) / decode_s if decode_s > 0 else None,
            elapsed_ms=self.last_ms,
            attention_by_depth=[AttentionMass(*means) for means in attention] if attention is not None else None,
            hidden_rms_by_depth=[means[0] for means in hidden] if hidden is not None else None,
            per_position_counts=list(counters.accepted_per_pos),
            busy_share=self.busy_steps / self.load_samples if self.load_samples else None,
            cores_taken=max(self.cores_taken_sum / self.cpu_samples, 0.0) if self.cpu_samples else None,
            threads=sorted(self.threads) or None,
            verified_per_step=self.verified_rows / counters.drafts if counters.drafts else None,
        )


def summarize(events: list[StepEvent], k: int) -> RunMetrics:
    """Aggregate step events into run-level metrics."""
    return RunTally.of(events, k).metrics()


GROUP_STEPS = 4  # a group pools at least this many timed steps…
GROUP_SECONDS = 0.05  # …and at least this long, so that a fast model's groups are not timer and scheduler noise


def pool(steps: list[float], measuring_s: float = 0.0, timing: str = "after the answer") -> Baseline | None:
    """The baseline of timed steps (seconds each, in time order): their pooled rate and their groups' spread. A last
    group too small to stand alone joins the one before it."""
    if not steps:
        return None
    groups: list[list[float]] = [[]]
    for seconds in steps:
        if len(groups[-1]) >= GROUP_STEPS and sum(groups[-1]) >= GROUP_SECONDS:
            groups.append([])
        groups[-1].append(seconds)
    if len(groups) > 1 and (len(groups[-1]) < GROUP_STEPS or sum(groups[-1]) < GROUP_SECONDS):
        last = groups.pop()
        groups[-1] += last
    rates = [len(g) / sum(g) for g in groups]
    error = statistics.stdev(rates) / statistics.mean(rates) / math.sqrt(len(rates)) if len(rates) > 1 else 0.0
    return Baseline(len(steps) / sum(steps), min(rates), max(rates), len(groups), len(steps), measuring_s, timing,
                    error)
