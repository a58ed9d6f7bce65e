"""playground.playback: the runs behind the UI (chat turns, regenerate, comparisons, stop, timing, exports, bad
requests), on real models and without Gradio."""

from __future__ import annotations

import csv
import json
import shutil
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from playground.backends import shared_backend
from playground.engine import StepEvent
from playground.playback import (
    CSV_COLUMNS,
    Conversation,
    RequestError,
    RunSettings,
    StopSwitches,
    chat_turn,
    compare,
    export_runs,
    regenerate_turn,
)
from playground.playback.run import _ActiveTimeEvents
from playground.presets import get_preset
from tests.support.appserver import long_answer_prompt
from tests.support.step_costs import CHOSEN_K, predicted, use_hand_costs

PROMPT = long_answer_prompt()
NEVER = lambda: False  # noqa: E731


def answer(conversation: Conversation, prompt: str = PROMPT, **settings) -> list:
    """Every Run snapshot one chat turn yields."""
    run_settings = RunSettings(**{"max_new_tokens": 40, **settings})
    return [replace(run, events=list(run.events)) for run in chat_turn(conversation, prompt, run_settings, NEVER)]


def test_chat_keeps_plain_text_history(pair_models: Path) -> None:
    conversation = Conversation()
    snapshots = answer(conversation)
    run = snapshots[-1]
    assert run.finished and run.baseline.groups >= 3 and run.baseline.tokens_per_second > 0
    backend = shared_backend(get_preset("smollm2-135m"))
    assert run.text == backend.decode(run.token_ids) and run.text
    assert run.view().metrics.generated_tokens == len(run.token_ids)
    engine_rate, seen_rate = run.view().metrics.tokens_per_second, run.seen_tokens_per_second
    assert 0 < seen_rate <= engine_rate * 1.001  # what the user saw includes the pauses the engine rate leaves out
    answer(conversation, "And then?", chat_template="llama3", system="Be brief.")
    messages = conversation.messages("Be brief.", "next")
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert messages[2]["content"] == run.text
    assert not any("<span" in m["content"] or "tok-" in m["content"] for m in messages)


def test_regenerate_replaces_the_last_answer(pair_models: Path) -> None:
    conversation = Conversation()
    answer(conversation)
    first = conversation.exchanges[0].run
    runs = list(regenerate_turn(conversation, RunSettings(drafter="none", max_new_tokens=12), NEVER))
    assert len(conversation.exchanges) == 1 and conversation.exchanges[0].run is runs[-1] is not first
    assert conversation.exchanges[0].user == PROMPT and runs[-1].settings.drafter == "none"
    with pytest.raises(RequestError, match="k "):
        list(regenerate_turn(conversation, RunSettings(k=0), NEVER))
    assert len(conversation.exchanges) == 1  # a failed regenerate keeps the answer it would have replaced
    with pytest.raises(RequestError, match="nothing to regenerate"):
        list(regenerate_turn(Conversation(), RunSettings(), NEVER))


def test_clear_during_a_run_leaves_no_hidden_context(pair_models: Path) -> None:
    """Clear takes the conversation from the run that is writing it: the run stops without another word, and the
    next turn's prompt is a fresh one's, token for token."""
    conversation = Conversation()
    turn = chat_turn(conversation, PROMPT, RunSettings(max_new_tokens=1024), NEVER)
    for run in turn:
        if run.events and run.events[-1].total_tokens >= 5:
            break
    conversation.clear()
    assert list(turn) == [] and not conversation.exchanges  # nothing more is yielded, nor written back
    assert run.finish_reason == "cancelled"  # it lost the conversation, so it stopped
    again, fresh = answer(conversation, "hi")[-1], answer(Conversation(), "hi")[-1]
    assert again.prompt_tokens == fresh.prompt_tokens and [ex.user for ex in conversation.exchanges] == ["hi"]
    with pytest.raises(RequestError, match="nothing to regenerate"):
        conversation.clear()
        list(regenerate_turn(conversation, RunSettings(), NEVER))


def test_a_newer_turn_takes_the_conversation_over(pair_models: Path) -> None:
    conversation = Conversation()
    older = chat_turn(conversation, PROMPT, RunSettings(max_new_tokens=1024), NEVER)
    next(older)
    answer(conversation, "hi")
    assert list(older) == []  # the superseded run stops and writes nothing after the newer turn
    superseded = conversation.exchanges[0].run
    assert [ex.user for ex in conversation.exchanges] == [PROMPT, "hi"] and superseded.finish_reason == "cancelled"
    assert len(superseded.token_ids) < 1024


def test_stop_ends_the_run_between_steps(pair_models: Path) -> None:
    switches = StopSwitches()
    stop = switches.arm("session", "chat", time.monotonic())
    conversation = Conversation()
    for run in chat_turn(conversation, PROMPT, RunSettings(max_new_tokens=1024), stop.is_set):
        if run.events and run.events[-1].total_tokens >= 10:
            switches.trip("session", "chat")
    assert run.finish_reason == "cancelled" and run.status.split(";")[0] == "stopped"  # a busy machine adds a note
    assert run.events[-1].total_tokens < 1024
    assert not switches.arm("session", "chat", time.monotonic()).is_set()  # a later run starts with a fresh switch
    switches.forget("session")


def test_stop_counts_for_a_run_still_queued() -> None:
    switches = StopSwitches()
    queued_at = time.monotonic()
    switches.trip("session", "chat")  # pressed while the run waited in the queue
    assert switches.arm("session", "chat", queued_at).is_set()
    assert not switches.arm("session", "chat", time.monotonic()).is_set()  # a run sent after Stop runs
    assert (not switches.arm("other", "chat", queued_at).is_set()
            and not switches.arm("session", "compare", queued_at).is_set())


def test_compare_interleaves_both_runs(pair_models: Path) -> None:
    left = RunSettings(drafter="eagle3", k=3, max_new_tokens=40)
    right = RunSettings(drafter="eagle3.1", k=5, max_new_tokens=40)
    both_running = False
    for comparison in compare(PROMPT, left, right, NEVER):
        runs = (comparison.left, comparison.right)
        both_running |= all(run.events and not run.finished for run in runs)
    assert both_running, "the two runs should advance together, not one after the other"
    assert comparison.left.finished and comparison.right.finished
    assert comparison.left.baseline.groups >= 3 and comparison.right.baseline.groups >= 3  # each timed beside it
    assert comparison.left.view().label == "EAGLE-3, k=3" and comparison.right.view().label == "EAGLE-3.1, k=5"


def test_compare_fixed_against_adaptive_drafting(pair_models: Path) -> None:
    """The same drafter and k on both sides, one adaptive: labels tell them apart, the answers are the same."""
    fixed = RunSettings(drafter="eagle3.1", k=4, max_new_tokens=40)
    adaptive = RunSettings(drafter="eagle3.1", k=4, max_new_tokens=40, min_draft_prob=0.5)
    for comparison in compare(PROMPT, fixed, adaptive, NEVER):  # noqa: B007 - the last one is read below
        pass
    assert comparison.left.view().label == "EAGLE-3.1, k=4"
    assert comparison.right.view().label == "EAGLE-3.1 adaptive 0.5, k=4"
    assert comparison.left.token_ids == comparison.right.token_ids
    steps = [e for e in comparison.right.events if e.drafted]
    assert sum(len(e.drafted) for e in steps) < sum(len(e.drafted) for e in comparison.left.events if e.drafted)


def test_paused_time_is_not_counted() -> None:
    def stream():
        start = time.perf_counter()
        for step in range(3):
            yield StepEvent(step=step, drafted=[], accepted=0, emitted=[step],
                            elapsed_ms=(time.perf_counter() - start) * 1000)

    events = []
    for event in _ActiveTimeEvents(stream()):
        events.append(event)
        time.sleep(0.05)  # the UI rendering, or the other side of a comparison
    assert events[-1].elapsed_ms < 20


@pytest.mark.parametrize("change, message", [
    ({"k": 0}, "k .* between 1 and 16"), ({"k": 17}, "k .* between 1 and 16"),
    ({"drafter": "medusa"}, "unknown drafter"), ({"chat_template": "chatml"}, "unknown chat template"),
    ({"temperature": -1.0}, "temperature"), ({"max_new_tokens": 0}, "max new tokens"),
    ({"preset": "nope"}, "unknown preset"), ({"min_draft_prob": 1.0}, "minimum draft probability"),
])
def test_bad_settings_say_what_is_wrong(change: dict, message: str) -> None:
    with pytest.raises(RequestError, match=message):
        RunSettings(**change).checked_preset()


def test_bad_prompts_say_what_is_wrong(pair_models: Path) -> None:
    with pytest.raises(RequestError, match="empty"):
        list(chat_turn(Conversation(), "   ", RunSettings(), NEVER))
    conversation = Conversation()
    with pytest.raises(ValueError, match="the prompt has .* tokens"):
        list(chat_turn(conversation, "word " * 6000, RunSettings(), NEVER))
    assert not conversation.exchanges  # the failed question is not kept


def test_missing_or_misfit_drafters_say_so(pair_models: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "target").symlink_to(pair_models / "target")
    shutil.copytree(pair_models / "eagle3", tmp_path / "eagle3")
    config = json.loads((tmp_path / "eagle3" / "config.json").read_text())
    config["vocab_size"] += 1  # no longer the target's vocabulary
    (tmp_path / "eagle3" / "config.json").write_text(json.dumps(config))
    monkeypatch.setenv("PLAYGROUND_MODELS_DIR", str(tmp_path))  # eagle3.1/ is missing here
    with pytest.raises(ValueError, match="eagle3.1"):
        list(chat_turn(Conversation(), PROMPT, RunSettings(drafter="eagle3.1"), NEVER))
    with pytest.raises(ValueError, match="vocab"):
        list(chat_turn(Conversation(), PROMPT, RunSettings(drafter="eagle3"), NEVER))


def test_export_writes_json_and_csv(pair_models: Path, tmp_path: Path) -> None:
    conversation = Conversation()
    run = answer(conversation)[-1]
    json_path, csv_path = export_runs({"turn 1": run}, conversation.messages(""), tmp_path, "run")
    payload = json.loads(json_path.read_text())
    record = payload["runs"][0]
    assert payload["messages"][-1] == {"role": "assistant", "content": run.text}
    assert record["text"] == run.text and record["settings"]["drafter"] == "eagle3.1"
    assert len(record["steps"]) == len(run.events) and record["metrics"]["generated_tokens"] == len(run.token_ids)
    assert record["speedup"] == pytest.approx(run.view().speedup)
    assert record["health"]["status"] == "not checked" and "no fingerprint" in record["health"]["text"]  # tiny pair
    with csv_path.open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == CSV_COLUMNS and len(rows) == len(run.events)
    assert "".join(r["emitted_text"] for r in rows) == run.text
    with pytest.raises(RequestError, match="nothing to export"):
        export_runs({}, [], tmp_path, "empty")


class ForwardClock:
    """Time that passes only inside the target's forwards, each costing 1 ms plus 2 µs per position it attends to: a
    plain step is then worth the same wherever it is timed, yet a later one costs more, as on a real machine. The
    engine's steps, the probe's samples, the sampler's share of the decode time and the pauses taken out of a run's
    times all read it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from playground.engine.target import Target
        from playground.playback import baseline, run

        self.now, forward = 0.0, Target.forward

        def timed_forward(target, input_ids, cache, *args, **kwargs):
            self.now += 1e-3 + 2e-6 * (cache.length + len(input_ids))
            return forward(target, input_ids, cache, *args, **kwargs)

        monkeypatch.setattr(Target, "forward", timed_forward)
        monkeypatch.setattr(Target, "clock", lambda target: self.now)
        for module in (baseline, run):
            monkeypatch.setattr(module, "time", SimpleNamespace(perf_counter=lambda: self.now))


def test_plain_against_its_live_baseline_reads_one_on_a_clock_of_forwards(pair_models: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain decoding read against the plain baseline measured alongside it reads 1.00×, on a clock that only counts
    the target's forwards (a wall clock is no test: a busy machine moved the reading from 0.37× to 2.28×). It catches a
    baseline that times the wrong work (its catch-up forward too: about 0.5×) or the wrong positions (timed once at
    the start: about 0.7×; topped up at the answer's last position only, as it was: 1.24×), which the wall clock hid
    in noise. The range is wide here by design: this clock makes the answer's last steps twice as dear as its first."""
    ForwardClock(monkeypatch)
    run = answer(Conversation(), max_new_tokens=1000, drafter="none")[-1]
    view = run.view()
    assert run.baseline.timing == "alongside the runs" and view.too_few_steps is None
    assert len(run.token_ids) > 400  # long enough for a later step to cost clearly more than an early one
    assert view.speedup == pytest.approx(1.0, abs=0.03), view.speedup
    low, high = view.speedup_range
    assert low < 1.0 < high and low <= view.speedup <= high, (low, high)


class ScriptedProbe:
    """A probe that records the contexts it was asked to time and spends 30 ms of untimed work per 20 ms step."""

    def __init__(self) -> None:
        self.contexts = []

    def time_step(self, context: list[int]) -> float:
        self.contexts.append(list(context))
        time.sleep(0.03)  # the catch-up forward: spent, not timed
        return 0.02


def scripted_step(i: int, elapsed_ms: float) -> StepEvent:
    return StepEvent(step=i, drafted=[], accepted=0, emitted=[10 + i], elapsed_ms=elapsed_ms)


def test_a_baseline_alongside_takes_its_share_one_step_at_a_time_at_the_runs_position() -> None:
    """Alongside the runs (a comparison): at most one timed step between two rounds of steps, at the first run's
    current context (prompt + its tokens), its spend near its share, both runs reading the one baseline, finishing
    tops up to a spread at positions over the whole answer, and a stopped run is not topped up."""
    from playground.playback.baseline import GROUP_SECONDS, GROUP_STEPS, MIN_SPEEDUP_GROUPS, SHARE, BaselineSampler

    run = SimpleNamespace(events=[scripted_step(0, 0.0)], token_ids=[10], baseline=None)
    other = SimpleNamespace(events=[scripted_step(0, 0.0)], token_ids=[10], baseline=None)
    probe = ScriptedProbe()
    sampler = BaselineSampler(probe, [([1, 2, 3], run), ([4, 5], other)], NEVER, share_alongside=SHARE)
    sampler.keep_up()
    assert probe.contexts == [] and run.baseline is None  # no decode time yet: nothing owed
    for i in range(1, 41):  # 40 run steps of 100 ms
        run.events.append(scripted_step(i, i * 100.0))
        run.token_ids = [10 + j for j in range(i + 1)]
        calls = len(probe.contexts)
        sampler.keep_up()
        assert len(probe.contexts) - calls <= 1
        if len(probe.contexts) > calls:
            assert probe.contexts[-1] == [1, 2, 3, *run.token_ids]
    assert SHARE * 4.0 <= sampler.spent_s <= SHARE * 4.0 + 0.1  # 4 s of decoding
    assert run.baseline.tokens == len(probe.contexts) and run.baseline.tokens_per_second == pytest.approx(50.0)
    assert run.baseline.groups == len(probe.contexts) // max(GROUP_STEPS, round(GROUP_SECONDS / 0.02))
    assert other.baseline is run.baseline and run.baseline.timing == "alongside the runs"
    assert run.baseline.measuring_s == pytest.approx(sampler.spent_s)

    short = SimpleNamespace(events=[scripted_step(0, 0.0), scripted_step(1, 10.0)], token_ids=[10, 11], baseline=None)
    top_up_probe = ScriptedProbe()
    topped_up = BaselineSampler(top_up_probe, [([1, 2, 3], short)], NEVER, share_alongside=SHARE)
    topped_up.keep_up()
    assert short.baseline.tokens == 1  # 10 ms of run: one step is already past the share
    list(topped_up.finish())
    assert short.baseline.groups == MIN_SPEEDUP_GROUPS
    assert {len(context) for context in top_up_probe.contexts[1:]} == {4, 5}  # spread over the answer, not its end
    stopped = SimpleNamespace(events=[scripted_step(0, 0.0), scripted_step(1, 10.0)], token_ids=[10, 11],
                              baseline=None)
    list(BaselineSampler(ScriptedProbe(), [([1, 2, 3], stopped)], lambda: True, share_alongside=SHARE).finish())
    assert stopped.baseline is None
    # a run that ended before any step was owed alongside it (a short answer, or Stop at once): sized by one step
    untimed = SimpleNamespace(events=[scripted_step(0, 0.0)], token_ids=[10, 11, 12], baseline=None)
    untimed_probe = ScriptedProbe()
    list(BaselineSampler(untimed_probe, [([1, 2, 3], untimed)], NEVER, share_alongside=SHARE).finish())
    assert untimed.baseline.groups == MIN_SPEEDUP_GROUPS and 3 < len(untimed_probe.contexts[0]) < 6  # mid-answer


def test_a_baseline_after_the_answer_times_nothing_during_it_then_its_share_spread_over_the_answer() -> None:
    """After the answer (Chat): no timed step while the run decodes; afterwards its share of the decode time, at
    positions from the answer's end back to its start (descending, so the probe only rolls back), with the page given
    a turn between groups; a stopped run gets none."""
    from playground.playback.baseline import MIN_SPEEDUP_GROUPS, SHARE, BaselineSampler

    prompt = [1, 2, 3]
    run = SimpleNamespace(events=[scripted_step(0, 0.0)], token_ids=[10], baseline=None)
    probe = ScriptedProbe()
    sampler = BaselineSampler(probe, [(prompt, run)], NEVER)
    for i in range(1, 81):  # 80 run steps of 100 ms: 8 s of decoding
        run.events.append(scripted_step(i, i * 100.0))
        run.token_ids = [10 + j for j in range(i + 1)]
        sampler.keep_up()
    assert probe.contexts == [] and run.baseline is None
    turns = sum(1 for _ in sampler.finish())
    steps = round(SHARE * 8.0 / 0.02)  # the share of the decode time, in timed steps the size of the first one
    # the first step's wall time (catch-up included) comes off the budget: a step or two fewer
    assert steps - 3 <= len(probe.contexts) <= steps and run.baseline.tokens == len(probe.contexts)
    assert run.baseline.timing == "after the answer"
    assert run.baseline.groups >= MIN_SPEEDUP_GROUPS and turns >= run.baseline.groups - 1
    ends = [len(c) for c in probe.contexts]
    full = len(prompt) + len(run.token_ids)
    assert ends[0] == full and ends == sorted(ends, reverse=True)  # from the end, backwards only
    assert all(c == (prompt + run.token_ids)[: len(c)] for c in probe.contexts)  # prefixes of the run's own text
    assert min(ends) == len(prompt) + 1  # reaches back to the answer's start

    stopped = SimpleNamespace(events=[scripted_step(0, 0.0), scripted_step(1, 10.0)], token_ids=[10, 11],
                              baseline=None)
    assert list(BaselineSampler(ScriptedProbe(), [(prompt, stopped)], lambda: True).finish()) == []
    assert stopped.baseline is None


def test_chats_baseline_takes_a_smaller_share_alongside_the_answer() -> None:
    """Chat gives its baseline SHARE_IN_CHAT of the answer's decode time, between its steps (so that the answer streams
    at nearly the engine's speed), and tops it up to a spread after it only where that gave too few groups."""
    from playground.playback.baseline import MIN_SPEEDUP_GROUPS, SHARE_IN_CHAT, BaselineSampler

    run = SimpleNamespace(events=[scripted_step(0, 0.0)], token_ids=[10], baseline=None)
    probe = ScriptedProbe()
    sampler = BaselineSampler(probe, [([1, 2, 3], run)], NEVER, share_alongside=SHARE_IN_CHAT)
    for i in range(1, 81):  # 8 s of decoding
        run.events.append(scripted_step(i, i * 100.0))
        run.token_ids = [10 + j for j in range(i + 1)]
        sampler.keep_up()
    assert SHARE_IN_CHAT * 8.0 <= sampler.spent_s <= SHARE_IN_CHAT * 8.0 + 0.06
    during = len(probe.contexts)
    list(sampler.finish())
    assert run.baseline.timing == "alongside the runs" and run.baseline.groups >= MIN_SPEEDUP_GROUPS
    assert len(probe.contexts) == during  # ~26 samples of 20 ms already make 6 groups: nothing to top up


@pytest.mark.parametrize("steps, groups", [
    ([0.02] * 10, [[0.02] * 4] + [[0.02] * 6]),  # 3 groups of 4 would leave the last one short: it joins
    ([0.01] * 12, [[0.01] * 5, [0.01] * 7]),  # a group needs 50 ms as well as 4 steps
    ([0.5], [[0.5]]),  # a single step is one group
])
def test_timed_steps_pool_into_groups_of_enough_steps_and_time(steps: list[float], groups: list[list[float]]) -> None:
    from playground.playback.baseline import pool

    baseline = pool(steps)
    rates = [len(g) / sum(g) for g in groups]
    assert baseline.groups == len(groups) and baseline.tokens == len(steps)
    assert baseline.tokens_per_second == pytest.approx(len(steps) / sum(steps))
    assert (baseline.slowest, baseline.fastest) == (pytest.approx(min(rates)), pytest.approx(max(rates)))


def test_plain_probe_times_a_plain_step_on_the_runs_own_text(tiny) -> None:
    """The probe's timed step feeds the run's next token and its catch-up feeds the rest, so its cache holds exactly
    the run's text: the next token's logits equal a fresh forward's. When the run has not moved, the last position is
    timed again."""
    import torch

    from playground.engine import PlainProbe

    target = tiny.target
    probe = PlainProbe(target)
    context = tiny.training_prompts[0] + [5, 6, 7]
    assert probe.time_step(context) > 0 and probe._cache.length == len(context)
    longer = context + [8, 9, 10, 11]
    probe.time_step(longer)  # times longer[len(context)], then catches up to longer[:-1]
    assert probe._cache.length == len(longer) - 1
    probe.time_step(longer)
    probe.time_step(longer)  # nothing new: the last position again
    assert probe._cache.length == len(longer)
    fresh = target.forward(longer, target.new_cache(), last_only=True).logits[-1]
    probe._fed -= 1  # feed the last token once more, by hand, on the probe's cache
    probe._cache.rollback(probe._fed)
    again = target.forward([longer[-1]], probe._cache, last_only=True).logits[-1]
    torch.testing.assert_close(again, fresh, rtol=1e-4, atol=1e-4)


def test_k_auto_learns_from_the_sessions_earlier_answers_replayed(pair_models: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """k auto in a chat with earlier greedy answers: the shipped acceptance by position updated with those answers
    replayed under the drafter — which counts exactly what a live run at that k accepted (replay is exact) — and the
    record saying so; a sampled answer is left out."""
    from playground.auto_k import PRIOR_STEPS, updated_acceptance

    for name in ("target", "eagle3", "eagle3.1"):
        (tmp_path / "models" / name).parent.mkdir(exist_ok=True)
        (tmp_path / "models" / name).symlink_to(pair_models / name)
    monkeypatch.setenv("PLAYGROUND_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path / "cache"))
    shipped = [0.5] * 8
    (tmp_path / "models" / "evaluation.json").write_text(json.dumps(
        {"acceptance": {"eagle3.1": {"8": {"per_position_acceptance": shipped}}}}))
    conversation = Conversation()
    first = answer(conversation, k=8)[-1]  # live EAGLE-3.1 at k = 8: what its replay must count
    drafted = [e for e in first.events if e.drafted]
    live = (len(drafted), [sum(e.accepted >= i for e in drafted) for i in range(1, 9)])
    answer(conversation, "And in one word?", temperature=0.8, seed=1)  # sampled: not replayed
    run = answer(conversation, "Say it again.", k_auto=True)[-1]
    assert list(run.auto_k.acceptance) == pytest.approx(updated_acceptance(shipped, [live]))
    assert f"updated with this session's last 1 answer replayed ({live[0]} drafting steps)" in run.auto_k.why
    assert run.record("turn 3", with_steps=False)["auto_k"]["acceptance_by_position"] == [
        round(a, 3) for a in run.auto_k.acceptance]
    assert updated_acceptance([0.5], [(PRIOR_STEPS, [PRIOR_STEPS])]) == [0.75]  # as many steps as the prior: halfway


def test_k_auto_runs_the_k_predicted_fastest_or_plain_decoding_and_says_so(pair_models: Path, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A chat turn with k auto: the k chosen at its start from the drafter's acceptance by position (evaluation.json
    beside the drafters) and the pair's step costs (written by hand: timed here they move with the machine's load),
    or plain decoding where none pays — the answer as plain decoding's either way, the status and the record saying
    what was chosen; a tree, or a drafter without an acceptance by position, refused in one line."""
    use_hand_costs(monkeypatch)
    for name in ("target", "eagle3", "eagle3.1"):
        (tmp_path / "models" / name).parent.mkdir(exist_ok=True)
        (tmp_path / "models" / name).symlink_to(pair_models / name)
    monkeypatch.setenv("PLAYGROUND_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path / "cache"))
    plain = answer(Conversation(), drafter="none")[-1].token_ids
    with pytest.raises(RequestError, match="k auto needs eagle3.1's acceptance by position"):
        answer(Conversation(), k_auto=True)
    evaluation = tmp_path / "models" / "evaluation.json"
    for rate, drafter in ((0.01, "none"), (0.99, "eagle3.1")):
        evaluation.write_text(json.dumps({"acceptance": {"eagle3.1": {"8": {"per_position_acceptance": [rate] * 8}}}}))
        run = answer(Conversation(), k_auto=True)[-1]
        assert run.settings.drafter == drafter and run.token_ids == plain, run.auto_k
        assert run.auto_k.k == (None if drafter == "none" else CHOSEN_K) and run.settings.k_auto
        assert run.auto_k.predicted[CHOSEN_K] == pytest.approx(predicted(rate, CHOSEN_K))
        chosen = ("plain decoding: no k is predicted to pay" if drafter == "none" else
                  f"k={CHOSEN_K}, predicted {predicted(rate, CHOSEN_K):.2f}×")
        assert f"k auto chose {chosen} on this machine (step costs measured on a machine whose load was not read" \
            in run.status, run.status
        assert run.record("turn 1", with_steps=False)["auto_k"]["k"] == run.auto_k.k
    with pytest.raises(RequestError, match="k auto chooses a chain's k"):
        answer(Conversation(), k_auto=True, tree_nodes=8)
