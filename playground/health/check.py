"""Is this run's drafter in its usual form? Its depth-1 acceptance held against its fingerprint, and a cause named.

`check_health(fingerprint, facts, events)` reads a run's steps (so far, or all of them) and answers with a `Health`:
"in range", "flagged" (the run's depth-1 acceptance left the range of the fingerprint's answers at one of the looks
of health/stats.py, or at its last step; low, or high: high acceptance is a symptom too, of an answer caught in a
repeating loop), "too few steps" (before the first look) or "not checked" (no fingerprint, plain decoding, trees).
A finished run in range on its own is also held, with the session's earlier answers under the same known
difference (`earlier`), as one sample of answers: a sag too small to leave one answer's range (a perturbed target
accepting 0.2 where prose answers accept 0.3-0.8) leaves the range of several answers' pooled rate.
Whatever the verdict it lists what differs from the fingerprint's conditions (`differences`); a flag names them as
its likely causes, most likely first, or "unknown" where nothing known differs. A pure function of the steps: every
entry point (generate, the app and its exports, the server) gets the same answer from the same run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from itertools import accumulate

from playground.engine import SpecCounters, StepEvent

from .fingerprint import Fingerprint
from .stats import ALPHA_PER_LOOK, LOOKS, BetaBinomial

SAMPLED_TEMPERATURE_SLACK = 0.3  # a sampled run this far from the fingerprint's temperature is "far"
COVERAGE_SLACK = 0.05  # below the fingerprint's lowest coverage by more than this: a coverage gap
POOLED = 8  # answers held together at most (the latest), this one included


@dataclass(frozen=True)
class RunFacts:
    """What the run was: the conditions a departure from the fingerprint may be blamed on."""

    k: int
    temperature: float = 0.0
    top_p: float = 1.0
    tree: bool = False
    target_digest: str | None = None  # None: not known (a remote server)
    chat_template: str = "default"
    chat_template_sha256: str | None = None  # "raw" for no template; None: not known
    context_tokens: int = 0  # prompt + answer so far
    draft_coverage: float | None = None  # the share of the answer's tokens inside the draft vocabulary
    weights: str | None = None  # what the target's products multiplied ("float32", "int4"); None: not known


@dataclass(frozen=True)
class Health:
    status: str  # "in range" | "flagged" | "too few steps" | "not checked"
    drafting_steps: int = 0  # so far, or (flagged) at the look that flagged it
    depth_one_rate: float | None = None  # the run's acceptance at depth 1 over those steps
    expected: tuple[float, float] | None = None  # where a run that long lands unless flagged (stats.RANGE_QUANTILES)
    direction: str | None = None  # "low" | "high" when flagged
    flagged_at: int | None = None  # the look (drafting steps) that flagged it
    causes: list[str] = field(default_factory=list)  # when flagged: the likely causes, most likely first
    differences: list[str] = field(default_factory=list)  # what differs from the fingerprint, flagged or not
    why_not: str | None = None  # why it was not checked
    pooled_answers: int = 0  # flagged over this many answers under the same difference (this one and earlier ones)
    pooled_rate: float | None = None  # their pooled depth-1 acceptance, and where answers that fit pool
    pooled_expected: tuple[float, float] | None = None
    usual_by_position: list[tuple[float, float, float]] | None = None  # the fingerprint at this k, for the charts
    usual_drift: dict[str, list[tuple[float, float, float]]] | None = None  # its drift by depth ("draft", "rms")

    @property
    def flagged(self) -> bool:
        return self.status == "flagged"

    def text(self) -> str:
        """One line for a status bar or a terminal."""
        if self.status == "not checked":
            return f"drafter health not checked: {self.why_not}"
        if self.status == "too few steps":
            return f"drafter health: {self.drafting_steps} drafting steps so far, checked from {LOOKS[0]}"
        low, high = self.expected
        expected = ("any rate in range after so few steps (the fingerprint's range is 0.00–1.00 here)"
                    if low < 0.005 and high > 0.995 else f"expected {low:.2f}–{high:.2f}")
        numbers = (f"acceptance at depth 1 is {self.depth_one_rate:.2f} after {self.drafting_steps} steps, "
                   f"{expected}")
        if self.flagged and self.pooled_answers:
            return (f"drafter out of range ({self.direction}) over {self.pooled_answers} answers under the same "
                    f"difference (this one and those before it): acceptance at depth 1 is {self.pooled_rate:.2f} "
                    f"across them, "
                    f"expected {self.pooled_expected[0]:.2f}–{self.pooled_expected[1]:.2f} (this answer alone: "
                    f"{self.depth_one_rate:.2f} after {self.drafting_steps} steps, in range): {self.causes[0]}")
        if self.flagged:
            return f"drafter out of range ({self.direction}): {numbers}: {self.causes[0]}"
        note = f" (note: {'; '.join(self.differences)})" if self.differences else ""
        return f"drafter in range: {numbers}{note}"

    def to_dict(self) -> dict:
        return {**asdict(self), "text": self.text()}


def depth_counts(events: list[StepEvent]) -> list[int]:
    """[drafting steps, accepted at depth ≥ 1, ≥ 2, …] over steps with at least one draft: the engine's own counts
    (`SpecCounters`), not counted again here."""
    counters = SpecCounters.from_events(events, 0)
    return [counters.drafts, *counters.accepted_per_pos]


def differences(fingerprint: Fingerprint, facts: RunFacts) -> list[str]:
    """What differs from the fingerprint's conditions, most likely cause of a departure first."""
    found = []
    if facts.target_digest and fingerprint.target_digest and facts.target_digest != fingerprint.target_digest:
        found.append(f"the target's weights differ from those the drafter was measured with (digest "
                     f"{facts.target_digest}, fingerprint {fingerprint.target_digest})")
    if facts.weights is not None and facts.weights != fingerprint.weights:
        found.append(f"the target ran its {facts.weights} weights; the drafter was measured on its "
                     f"{fingerprint.weights} ones")
    if facts.chat_template_sha256 is not None and facts.chat_template_sha256 != fingerprint.chat_template_sha256:
        found.append(f"the chat template ({facts.chat_template}) differs from the one the drafter was measured with "
                     f"({fingerprint.chat_template})")
    trained = fingerprint.trained_context_tokens  # unknown (no training log): never blamed
    if trained and facts.context_tokens > max(trained, fingerprint.measured_context_tokens):
        found.append(f"the context ({facts.context_tokens} tokens) is longer than any the drafter was trained on "
                     f"({trained})")
    section = fingerprint.section(facts.temperature)
    if facts.temperature > 0 and (abs(facts.temperature - section.temperature) > SAMPLED_TEMPERATURE_SLACK
                                  or facts.top_p < section.top_p - 0.2):
        found.append(f"temperature {facts.temperature:g} / top-p {facts.top_p:g} is far from the fingerprint's "
                     f"{section.temperature:g} / {section.top_p:g}")
    if (facts.temperature == 0 and facts.draft_coverage is not None and fingerprint.draft_coverage is not None
            and facts.draft_coverage < fingerprint.draft_coverage - COVERAGE_SLACK):  # measured on greedy answers:
        #   sampled ones reach rarer tokens (kimi-tiny's: 90-93 % against its greedy answers' 100 %)
        found.append(f"only {facts.draft_coverage:.0%} of this answer's tokens are in the drafter's vocabulary "
                     f"(at least {fingerprint.draft_coverage:.0%} on the fingerprint's answers)")
    return found


def check_health(fingerprint: Fingerprint | None, facts: RunFacts, events: list[StepEvent],
                 drafting: bool = True, earlier: Sequence[Health] = ()) -> Health:
    """The run's health so far (see the module's docstring); `earlier`: the session's earlier answers' health with
    the same drafter, k and way of decoding (those checked under the same differences are pooled with this one)."""
    if not drafting:
        return Health("not checked", why_not="plain decoding has no drafter")
    if fingerprint is None:
        return Health("not checked", why_not="this drafter has no fingerprint (python -m playground fingerprint)")
    if facts.tree:
        return Health("not checked", why_not="the fingerprint measures chains; trees accept more at each depth")
    known = differences(fingerprint, facts)
    section = fingerprint.section(facts.temperature)
    usual = section.by_position(facts.k) if section.nearest_k(facts.k) == facts.k else None
    drift = {m: section.drift_by_depth(m) for m in ("draft", "rms")} if section.drift else None
    shown = {"usual_by_position": usual, "usual_drift": drift}
    accepted = list(accumulate(e.accepted >= 1 for e in events if e.drafted))  # after each drafting step
    steps = len(accepted)
    if steps < LOOKS[0]:
        return Health("too few steps", drafting_steps=steps, differences=known, **shown)
    model = section.depth_one(facts.k)
    looks = [n for n in LOOKS if n <= steps] + ([steps] if events[-1].finished and steps not in LOOKS else [])
    for look in looks:
        low, high = model.tails(look, accepted[look - 1])
        if min(low, high) < ALPHA_PER_LOOK:
            return Health("flagged", look, accepted[look - 1] / look, model.rate_range(look),
                          "low" if low < high else "high", look,
                          known or ["unknown: nothing known about this run differs from the fingerprint's"], known,
                          **shown)
    health = Health("in range", steps, accepted[-1] / steps, model.rate_range(steps), differences=known, **shown)
    return pooled(health, model, earlier) if events[-1].finished else health


def pooled(health: Health, model: BetaBinomial, earlier: Sequence[Health]) -> Health:
    """A finished in-range run held with the earlier answers under the same leading difference (the last POOLED,
    this one included): flagged where their pooled depth-1 acceptance leaves the range of that many answers' (one
    more look at ALPHA_PER_LOOK a side). Only under a known difference: without one a session of alike prompts (five
    proofs) pools far from the fingerprint's mix of prompts with nothing to blame."""
    same = [h for h in earlier if h.differences[:1] == health.differences[:1] and h.depth_one_rate is not None
            and h.status in ("in range", "flagged")][-(POOLED - 1):]  # the leading (most likely) cause in common
    if not health.differences or not same:
        return health
    answers = [*same, health]
    steps = [h.drafting_steps for h in answers]
    accepted = sum(round(h.depth_one_rate * h.drafting_steps) for h in answers)
    low, high = model.sum_tails(steps, accepted)
    if min(low, high) >= ALPHA_PER_LOOK:
        return health
    return replace(health, status="flagged", direction="low" if low < high else "high",
                   flagged_at=health.drafting_steps, causes=health.differences, pooled_answers=len(answers),
                   pooled_rate=accepted / sum(steps), pooled_expected=model.sum_rate_range(steps))


def health_summary(healths: list[Health]) -> dict:
    """Many runs' health at once (a bench row's answers): how many were checked and flagged, each flag's line, and
    every difference from the fingerprint noted."""
    checked = [h for h in healths if h.status in ("in range", "flagged")]
    return {"checked": len(checked), "flagged": sum(h.flagged for h in checked),
            "flags": [h.text() for h in checked if h.flagged],
            "differences": sorted({d for h in healths for d in h.differences}),
            "not_checked": next((h.why_not for h in healths if h.status == "not checked"), None)}
