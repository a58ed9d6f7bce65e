"""Which run was faster, said only when the measurement can tell: a faster side is named only where the speedup
ranges the cards show do not overlap; otherwise the sentence says "within noise on this machine" and names what did
differ beyond noise — counts of drafts and acceptances, which timing noise cannot move.

The same rule as the benchmark's findings (`bench.findings`, passes whose ranges overlap are "within noise"), here for
a comparison's two sides and for a Chat run against plain decoding (whose own speedup is 1.00×)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from playground.engine.trace import MIN_SPEEDUP_GROUPS, window_rates

from .summary import WITHIN_NOISE, length_text, percent_text, range_text, rate_text, times_text
from .view import RunView


@dataclass(frozen=True)
class Verdict:
    faster: str | None  # the faster side's label; None when the ranges overlap or nothing was measured yet
    sentence: str
    measured: bool  # both speedups (and their ranges) were measured

    def to_dict(self) -> dict:
        return asdict(self)


def ranges_overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two speedup ranges share any value: then neither side is called faster (here and in bench.findings)."""
    return a[0] <= b[1] and b[0] <= a[1]


def _speedup_words(view: RunView) -> str:
    return f"{times_text(view.speedup)} ({range_text(view.speedup_range)})"


def count_differences(left: RunView, right: RunView) -> list[str]:
    """What differs between two runs beyond timing noise: mean acceptance length, verified tokens per step and
    acceptance by position, where both have them and they differ."""
    out = []
    a, b = left.metrics, right.metrics
    if a.mean_acceptance_length is not None and b.mean_acceptance_length is not None and \
            length_text(a.mean_acceptance_length) != length_text(b.mean_acceptance_length):
        out.append(f"mean acceptance length {length_text(a.mean_acceptance_length)} vs "
                   f"{length_text(b.mean_acceptance_length)}")
    va, vb = a.verified_per_step, b.verified_per_step  # a tree's nodes + 1, as the target verified them
    if va is not None and vb is not None and f"{va:.2f}" != f"{vb:.2f}":
        out.append(f"verified tokens per step {va:.2f} vs {vb:.2f}")
    pa, pb = a.per_position_acceptance or [], b.per_position_acceptance or []
    positions = [i for i in range(min(len(pa), len(pb), 3)) if percent_text(pa[i]) != percent_text(pb[i])]
    if positions:
        out.append("accepted at position " + ", ".join(f"{i + 1}: {percent_text(pa[i])} vs {percent_text(pb[i])}"
                                                       for i in positions))
    return out


def comparison_verdict(left: RunView, right: RunView, shared_baseline: bool) -> Verdict:
    """Left against right: the faster side where their speedup ranges do not overlap, else within noise."""
    if left.plain or right.plain:  # plain decoding is the baseline, never rated against itself
        other = right if left.plain else left
        if other.plain:
            return Verdict(None, "Both sides are plain decoding: the baseline itself, nothing to rate.", False)
        return plain_verdict(other)
    basis = "against one plain baseline timed alongside both" if shared_baseline else \
        "each against its own engine's plain decoding"
    missing = [v.label for v in (left, right) if v.speedup_range is None]
    differences = count_differences(left, right)
    beyond = f" Beyond noise: {'; '.join(differences)} ({left.label} vs {right.label})." if differences else ""
    if missing:
        return Verdict(None, f"No verdict: the speedup of {' and '.join(missing)} is not measured.{beyond}", False)
    if ranges_overlap(left.speedup_range, right.speedup_range):
        return Verdict(None, f"Speed: {WITHIN_NOISE} — {left.label} {_speedup_words(left)} and {right.label} "
                             f"{_speedup_words(right)} overlap ({basis}).{beyond}", True)
    fast, slow = (left, right) if left.speedup > right.speedup else (right, left)
    return Verdict(fast.label, f"Faster: {fast.label}, {_speedup_words(fast)} against {slow.label}'s "
                               f"{_speedup_words(slow)}; the ranges do not overlap ({basis}).{beyond}", True)


def rate_range(view: RunView) -> tuple[float, float] | None:
    """The run's decode rate over its stretches (as many as a speedup's groups): its slowest and fastest, or None
    with too few steps to tell."""
    rates = window_rates(view.events, MIN_SPEEDUP_GROUPS)
    return (min(rates), max(rates)) if len(rates) >= MIN_SPEEDUP_GROUPS else None


def engine_verdict(left: RunView, right: RunView, left_engine: str, right_engine: str) -> Verdict:
    """One configuration on two engines: the question is which engine decodes faster, so their decode rates are set
    side by side, each with its spread over the answer's stretches; a faster engine is named only where the two
    ranges do not overlap. (Each side's speedup over its own engine's plain decoding answers another question.)"""
    ranges = {left_engine: rate_range(left), right_engine: rate_range(right)}
    rates = {left_engine: left.metrics.decode_tokens_per_second, right_engine: right.metrics.decode_tokens_per_second}
    differences = count_differences(left, right)
    beyond = f" Beyond noise: {'; '.join(differences)} ({left_engine} vs {right_engine})." if differences else ""
    missing = [engine for engine, span in ranges.items() if span is None]
    if missing:
        return Verdict(None, f"No verdict: too few steps to measure the decode rate of {' and '.join(missing)}."
                             f"{beyond}", False)

    def words(engine: str) -> str:
        low, high = ranges[engine]
        return f"{rate_text(rates[engine])} tok/s ({rate_text(low)}–{rate_text(high)})"

    basis = f"{left.label} on both engines; each rate's range spans the answer's stretches"
    if ranges_overlap(ranges[left_engine], ranges[right_engine]):
        return Verdict(None, f"Engines: {WITHIN_NOISE} — {left_engine} {words(left_engine)} and {right_engine} "
                             f"{words(right_engine)} overlap ({basis}).{beyond}", True)
    fast, slow = sorted(ranges, key=lambda engine: rates[engine], reverse=True)
    return Verdict(fast, f"Faster engine: {fast}, {words(fast)} against {slow}'s {words(slow)}; the ranges do not "
                         f"overlap ({basis}).{beyond}", True)


def plain_verdict(view: RunView) -> Verdict | None:
    """A speculative run against plain decoding: faster or slower only where its range leaves out 1.00× (None for a
    plain run)."""
    if view.plain:
        return None
    if view.speedup_range is None:
        return Verdict(None, "No verdict yet: the speedup over plain decoding is not measured.", False)
    low, high = view.speedup_range
    if low > 1:
        return Verdict(view.label, f"Faster than plain decoding on this machine: {_speedup_words(view)}.", True)
    if high < 1:
        return Verdict("plain decoding", f"Slower than plain decoding on this machine: {_speedup_words(view)}.",
                       True)
    return Verdict(None, f"Against plain decoding: {WITHIN_NOISE} ({_speedup_words(view)} includes 1.00×).", True)
