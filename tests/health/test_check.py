"""The health check's statistics and verdicts on steps whose acceptance is known: runs drawn from the fingerprint's
own spread are rarely flagged, runs far from it are flagged on the side they left it, and each difference from the
fingerprint's conditions is named."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from playground.engine import StepEvent
from playground.health import Fingerprint, RunFacts, Section, check_health
from playground.health.check import differences
from playground.health.stats import LOOKS, BetaBinomial


def steps(accepted: list[int], k: int = 4) -> list[StepEvent]:
    """Chain steps of k drafts that accepted these many each."""
    return [StepEvent(step=i, drafted=list(range(k)), accepted=a, emitted=[1] * (a + 1))
            for i, a in enumerate(accepted)]


def accepted_in_one_step(rng: random.Random, rate: float, k: int = 4) -> int:
    """Drafts accepted in one step where each next draft is accepted with probability `rate`."""
    accepted = 0
    while accepted < k and rng.random() < rate:
        accepted += 1
    return accepted


def answers_at(rates: list[float], length: int, rng: random.Random, k: int = 4) -> list[list[int]]:
    """Fingerprint rows [steps, ≥1, …, ≥k] of answers whose depth-d acceptance is rate ** d."""
    rows = []
    for rate in rates:
        accepted = [accepted_in_one_step(rng, rate, k) for _ in range(length)]
        rows.append([length, *(sum(a >= d for a in accepted) for d in range(1, k + 1))])
    return rows


def fingerprint(rows: list[list[int]], **changes) -> Fingerprint:
    fields = dict(drafter="d", target="t", target_digest="aaaa", chat_template="default", chat_template_sha256="tmpl",
                  trained_context_tokens=4096, measured_context_tokens=600, draft_coverage=0.9,
                  greedy=Section(0.0, 1.0, {4: rows}), sampled=Section(0.7, 1.0, {4: rows}))
    return Fingerprint(**{**fields, **changes})


def facts(**changes) -> RunFacts:
    return RunFacts(**{**dict(k=4, target_digest="aaaa", chat_template_sha256="tmpl", context_tokens=300,
                              draft_coverage=0.95), **changes})


@pytest.fixture(scope="module")
def usual() -> tuple[Fingerprint, list[float]]:
    """A fingerprint of 40 answers whose depth-1 rates spread over 0.55–0.85, and those rates."""
    rng = random.Random(0)
    rates = [rng.uniform(0.55, 0.85) for _ in range(40)]
    return fingerprint(answers_at(rates, 50, rng)), rates


def test_the_beta_binomial_fits_the_spread_and_its_tails_are_probabilities() -> None:
    rng = random.Random(1)
    narrow = BetaBinomial.fit([(100, sum(rng.random() < 0.7 for _ in range(100))) for _ in range(30)])
    wide = BetaBinomial.fit([(100, sum(rng.random() < p for _ in range(100))) for p in
                             [rng.uniform(0.3, 0.95) for _ in range(30)]])
    assert narrow.mean == pytest.approx(0.7, abs=0.03) and wide.mean == pytest.approx(0.62, abs=0.06)
    assert wide.a + wide.b < narrow.a + narrow.b  # more spread between answers: a smaller Beta concentration
    assert sum(wide.pmf(200)) == pytest.approx(1.0)
    low, high = wide.tails(200, 124)
    assert low + high == pytest.approx(1.0 + wide.pmf(200)[124])
    assert wide.rate_range(200)[0] < wide.mean < wide.rate_range(200)[1]
    assert wide.rate_range(200)[1] - wide.rate_range(200)[0] > narrow.rate_range(200)[1] - narrow.rate_range(200)[0]
    with pytest.raises(ValueError, match="two answers"):
        BetaBinomial.fit([(10, 5)])


def test_runs_like_the_fingerprints_answers_are_rarely_flagged(usual) -> None:
    """400 runs of 30 to 400 steps, each at a rate drawn from the fingerprint's own spread: at most 1 % flagged
    (the design's bound where the model holds)."""
    fp, rates = usual
    rng = random.Random(2)
    flagged = 0
    for _ in range(400):
        rate, length = rng.choice(rates), rng.randint(30, 400)
        accepted = [accepted_in_one_step(rng, rate) for _ in range(length)]
        health = check_health(fp, facts(), steps(accepted))
        assert health.status in ("in range", "flagged")
        flagged += health.flagged
    print(f"{flagged} of 400 flagged")
    assert flagged <= 4, flagged


@pytest.mark.parametrize("rate, direction", [(0.2, "low"), (0.995, "high")])
def test_a_run_far_from_its_fingerprint_is_flagged_on_its_side(usual, rate: float, direction: str) -> None:
    fp, _ = usual
    rng = random.Random(3)
    accepted = [4 if rng.random() < rate else 0 for _ in range(120)]
    health = check_health(fp, facts(), steps(accepted))
    assert health.flagged and health.direction == direction and health.flagged_at in LOOKS
    assert health.expected[0] < fp.greedy.depth_one(4).mean < health.expected[1]
    assert not health.expected[0] <= health.depth_one_rate <= health.expected[1]
    line = health.text()
    assert line.startswith(f"drafter out of range ({direction}): acceptance at depth 1 is {health.depth_one_rate:.2f}")
    assert line.endswith("unknown: nothing known about this run differs from the fingerprint's")
    assert health.to_dict()["text"] == line


def test_short_plain_tree_and_unfingerprinted_runs_are_not_judged(usual) -> None:
    fp, _ = usual
    few = check_health(fp, facts(), steps([0] * (LOOKS[0] - 1)))
    assert few.status == "too few steps" and not few.flagged and "checked from 16" in few.text()
    assert check_health(fp, facts(), steps([0] * 40), drafting=False).why_not == "plain decoding has no drafter"
    assert "trees" in check_health(fp, facts(tree=True), steps([0] * 40)).why_not
    assert "no fingerprint" in check_health(None, facts(), steps([0] * 40)).text()


def test_each_difference_from_the_fingerprint_is_named_most_likely_first(usual) -> None:
    fp, _ = usual
    assert differences(fp, facts()) == []
    assert differences(fp, facts(chat_template_sha256=None, target_digest=None)) == []  # not known: not blamed
    found = differences(fp, facts(target_digest="bbbb", chat_template="llama3", chat_template_sha256="other",
                                  context_tokens=5000, temperature=1.5, draft_coverage=0.7))
    assert [line.split(" ")[1] for line in found] == ["target's", "chat", "context", "1.5"]
    assert differences(fp, facts(draft_coverage=0.7))[0].startswith("only 70% of this answer's tokens")
    assert "digest bbbb, fingerprint aaaa" in found[0] and "(llama3)" in found[1] and "trained on (4096)" in found[2]
    assert differences(replace(fp, trained_context_tokens=None), facts(context_tokens=5000)) == []  # not known
    assert differences(fp, facts(temperature=0.9)) == []  # near the sampled section's 0.7
    assert differences(fp, facts(draft_coverage=0.87)) == []  # within the slack of the fingerprint's lowest 0.9
    assert differences(fp, facts(draft_coverage=0.7, temperature=0.7)) == []  # measured on greedy answers only
    assert differences(fp, facts(weights="float32")) == [] and fp.weights == "float32"
    assert differences(fp, facts(weights="int4")) == [
        "the target ran its int4 weights; the drafter was measured on its float32 ones"]
    assert differences(replace(fp, weights="int4"), facts(weights="int4")) == []  # a fingerprint of the fast path
    rng = random.Random(4)
    low = check_health(fp, facts(target_digest="bbbb"), steps([0 if rng.random() < 0.8 else 1 for _ in range(64)]))
    assert low.flagged and low.causes[0].startswith("the target's weights differ")
    in_range = check_health(fp, facts(chat_template="llama3", chat_template_sha256="other"),
                            steps([4 if rng.random() < 0.7 else 0 for _ in range(64)]))
    assert in_range.status == "in range" and in_range.text().endswith(
        "(note: the chat template (llama3) differs from the one the drafter was measured with (default))")


def test_a_fingerprint_round_trips_through_json(usual) -> None:
    fp, _ = usual
    again = Fingerprint.from_dict(fp.to_dict())
    assert again == fp
    with pytest.raises(ValueError, match="format"):
        Fingerprint.from_dict({**fp.to_dict(), "format": 99})
    by_position = fp.greedy.by_position(4)
    assert len(by_position) == 4 and all(low <= mean <= high for mean, low, high in by_position)
    assert by_position[0][0] > by_position[3][0]  # deeper drafts are accepted less often
    assert fp.greedy.nearest_k(7) == 4 and fp.section(0.0) is fp.greedy and fp.section(0.7) is fp.sampled


def test_the_badge_is_quiet_in_range_marked_when_flagged_and_escaped(usual) -> None:
    from playground.viz import health_badge

    fp, _ = usual
    assert health_badge(None) == ""
    quiet = check_health(fp, facts(chat_template="<b>x</b>", chat_template_sha256="other"), steps([4] * 10 + [0] * 6))
    assert 'class="health-badge quiet"' in health_badge(quiet) and "&lt;b&gt;x&lt;/b&gt;" in health_badge(quiet)
    flagged = check_health(fp, facts(), steps([0] * 64))
    assert flagged.flagged and 'class="health-badge flagged"' in health_badge(flagged)


def test_a_finished_run_is_looked_at_on_its_last_step_too(usual) -> None:
    """62 steps that leave the range only after the 32-step look: judged at the 62nd, where the run ended."""
    fp, _ = usual
    accepted = [4 if i % 2 else 0 for i in range(32)] + [0] * 30
    running = check_health(fp, facts(), steps(accepted))
    finished = check_health(fp, facts(), [*steps(accepted)[:-1], replace(steps(accepted)[-1], finished=True)])
    assert running.status == "in range" and finished.flagged and finished.flagged_at == 62


def finished(events: list[StepEvent]) -> list[StepEvent]:
    return [*events[:-1], replace(events[-1], finished=True)]


def test_a_session_that_sags_under_one_difference_is_flagged_pooled_and_alike_answers_are_not(usual) -> None:
    """Answers each in range alone, but all below the fingerprint's spread (0.50 against 0.55–0.85) on a target
    whose weights differ: held together (check.pooled) the session leaves the range of that many answers, and the
    flag names the weights. The same answers with nothing known to differ are never pooled; 200 sessions of five
    answers drawn from the fingerprint's own spread under the same difference: at most 2 % of answers flagged."""
    fp, rates = usual
    rng = random.Random(4)
    other = facts(target_digest="bbbb")
    answers = [finished(steps([accepted_in_one_step(rng, 0.50) for _ in range(80)])) for _ in range(5)]
    assert not any(check_health(fp, other, events).flagged for events in answers)  # each alone: in range
    sessions = {"weights": [], "none": []}
    for events in answers:
        for name, run_facts in (("weights", other), ("none", facts())):
            sessions[name].append(check_health(fp, run_facts, events, earlier=sessions[name]))
    assert not any(h.flagged for h in sessions["none"])
    flagged = [h for h in sessions["weights"] if h.flagged]
    assert flagged and flagged[-1] is sessions["weights"][-1], [h.text() for h in sessions["weights"]]
    last = flagged[-1]
    assert last.pooled_answers >= 2 and last.direction == "low" and last.pooled_rate < last.pooled_expected[0]
    assert f"over {last.pooled_answers} answers under the same difference" in last.text()
    assert "the target's weights differ" in last.text()
    usual_flags = 0
    for _ in range(200):
        earlier = []
        for _ in range(5):
            rate = rng.choice(rates)
            health = check_health(fp, other, finished(steps([accepted_in_one_step(rng, rate) for _ in range(60)])),
                                  earlier=earlier)
            earlier.append(health)
            usual_flags += health.flagged
    print(f"{usual_flags} of 1000 answers flagged")
    assert usual_flags <= 20, usual_flags
