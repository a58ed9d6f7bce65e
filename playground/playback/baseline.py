"""The plain-decoding baseline of a run, or of a comparison's two sides: plain decode steps of the same target, timed
one at a time on the run's own text.

A baseline measured once and reused goes stale as the machine's load changes, and a speedup against it can read
0.7× for plain decoding against itself. So the steps are timed in the same run, on the same prompt and answer, at
the positions the answer passed through (`engine.PlainProbe`), in one of two ways:

- **Alongside the runs** (our engine): one sample between two rounds of the runs' steps, at the position the first
  run has reached, so the runs and the baseline meet the same moments of machine load. A comparison's two sides
  share one baseline (a faster engine rate then always means a larger speedup) and give it `SHARE` of their decode
  time; Chat gives it `SHARE_IN_CHAT`, so that the answer streams at nearly the engine's speed (with a quarter, the
  samples and their catch-up forwards cut the visible rate to about half on a busy 2-core machine). Fewer samples
  give fewer groups and a wider range, never a point estimate: below `MIN_SPEEDUP_GROUPS` groups the baseline is
  topped up after the runs, at positions spread over the first run's answer.
- **After the answer** (vLLM, whose engine decodes on while we sample: samples taken during it would share the CPU
  with it): `SHARE` of the decode time, at positions spread over the answer from its end back to its start (the
  probe's cache only moves its end back, so after one untimed forward over the answer this costs exactly the timed
  steps), the page rendering between groups as it did between the answer's steps.

Each sample is a single step between other work, because the conditions a step meets depend on what ran just before
it: in the app, plain steps timed back to back ran ~5 % faster than the run's own, and timed after the answer on
the tests' tiny models plain decoding read 0.88-1.05× against itself, outside its range. Consecutive samples are
pooled into groups (at least `GROUP_STEPS` steps and `GROUP_SECONDS`) whose spread, with the run's own stretches,
says how noisy the figure is.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable, Iterator

from playground.engine import Baseline, PlainProbe
from playground.engine.trace import GROUP_SECONDS, GROUP_STEPS, MIN_SPEEDUP_GROUPS, decode_seconds, pool

SHARE = 0.25  # of the runs' decode time: a comparison's baseline, and vLLM's after the answer
SHARE_IN_CHAT = 0.1  # Chat's, so that the answer streams at nearly the engine's speed
AFTER, ALONGSIDE = "after the answer", "alongside the runs"  # Baseline.timing
# How the plain steps are sampled, worded from the constants above: the exports' timing note and the About tab
# render it beside viz/summary.py's speedup help.
SAMPLING_HELP = (f"In Chat the plain steps take at most {SHARE_IN_CHAT:.0%} of the answer's decode time, so the "
                 f"answer itself streams at nearly the engine's speed; in Compare both sides and plain decoding take "
                 f"turns step by step, the plain steps taking {SHARE:.0%} of the sides' decode time, and both sides "
                 f"read that one baseline, so machine noise hits them all alike; on vLLM, whose engine decodes on "
                 f"while we sample, {SHARE:.0%} of the decode time after the answer, at positions spread over it. "
                 f"The timed steps are pooled into groups of at least {GROUP_STEPS} steps and "
                 f"{GROUP_SECONDS * 1000:.0f} ms.")


POOL_STEPS = 512  # a session's plain steps kept for later answers' baselines, the newest
POOL_CONTEXT = 0.3  # an earlier step joins a baseline where its context was within this share of the run's


class PlainPool:
    """A session's timed plain steps (seconds, context tokens), for one target and settings (`key`): a later answer's
    baseline pools those taken at a context near its own with its own steps, so a chat's speedup ranges narrow as it
    goes on instead of resting on the few dozen steps one answer can spare. A new key (another preset, weights or
    threads) starts it afresh; Clear empties it. Bounded: the newest POOL_STEPS."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.steps: list[tuple[float, int]] = []
        self._lock = threading.Lock()

    def near(self, key: tuple, context: int) -> list[float]:
        """The kept steps of `key` taken within POOL_CONTEXT of `context` tokens."""
        with self._lock:
            if key != self.key:
                return []
            return [seconds for seconds, at in self.steps if abs(at - context) <= POOL_CONTEXT * max(context, 1)]

    def add(self, key: tuple, steps: list[tuple[float, int]]) -> None:
        with self._lock:
            if key != self.key:
                self.key, self.steps = key, []
            self.steps = (self.steps + steps)[-POOL_STEPS:]

    def clear(self) -> None:
        with self._lock:
            self.key, self.steps = None, []


class BaselineSampler:
    """The baseline of one or more runs of one target (anything with `events`, `token_ids` and a `baseline` to fill),
    given as (prompt ids, run) pairs; the probe follows the first run's text."""

    def __init__(self, probe: PlainProbe, runs: list[tuple[list[int], object]], should_stop: Callable[[], bool],
                 share_alongside: float = 0.0, earlier: list[float] = ()) -> None:
        self._probe, self._runs, self._should_stop = probe, runs, should_stop
        self._share = share_alongside or SHARE  # of the decode time; 0 alongside: all of SHARE after the runs
        self.timing = ALONGSIDE if share_alongside else AFTER
        self._earlier = list(earlier)  # the session's earlier steps near this context (PlainPool), pooled first
        self._steps: list[float] = []  # seconds of each timed plain step
        self.timed: list[tuple[float, int]] = []  # (seconds, context tokens) of this run's steps: for the pool
        self.spent_s = 0.0  # wall time spent on the baseline, catch-up forwards included

    @property
    def _prompt_ids(self) -> list[int]:
        return self._runs[0][0]

    @property
    def _run(self):
        return self._runs[0][1]

    def _budget_s(self) -> float:
        return self._share * max(decode_seconds(run.events) for _, run in self._runs)

    def keep_up(self) -> None:
        """Called between rounds of the runs' steps: one timed step, when sampling alongside and the baseline is
        behind its share of the runs' decode time."""
        if self.timing == ALONGSIDE and self._can_sample() and self.spent_s < self._budget_s():
            self._sample(self._prompt_ids + self._run.token_ids)

    def finish(self) -> Iterator[None]:
        """After the runs: the rest of the baseline (see _finish), the runs marked `measuring` meanwhile."""
        for _, run in self._runs:
            run.measuring = True
        try:
            yield from self._finish()
        finally:
            for _, run in self._runs:
                run.measuring = False

    def _finish(self) -> Iterator[None]:
        """After the runs: the rest of the baseline, yielding after each group's worth of steps (so the page can show
        its progress), until it is enough for a spread, unless it was stopped."""
        if self.timing == ALONGSIDE:
            # topped up at positions spread over the answer: at its last position alone, the top-up (most of a short
            # answer's baseline) would time only its dearest steps, and read plain decoding 1.2× against itself
            context = self._prompt_ids + self._run.token_ids
            if self._earlier and not self._steps and self._can_sample():
                self._sample(self._prompt_ids + self._run.token_ids)  # one of its own, beside the session's
                yield
            while self._can_sample() and not _has_groups(self._run.baseline):
                if not self._steps:  # nothing timed alongside (the run ended first): one step, mid-answer, to size it
                    self._sample(context[: (len(self._prompt_ids) + len(context) + 1) // 2])
                    yield
                    continue
                missing = self._least_steps(statistics.median(self._steps)) - len(self._steps)
                for position in _spread(len(self._prompt_ids), len(context) - 1, max(GROUP_STEPS, missing)):
                    if not self._can_sample():
                        return
                    self._sample(context[: position + 1])
                    yield
            return
        if not self._can_sample():
            return
        context = self._prompt_ids + self._run.token_ids
        first_step = self._sample(context)  # at the end of the answer: also the estimate of a step's cost
        positions = _spread(len(self._prompt_ids), len(context) - 1, self._planned_steps(first_step) - 1)
        since_yield = 1
        try:
            for position in positions:
                if not self._can_sample():
                    return
                self._sample(context[: position + 1], publish=False)  # pooled where the page looks, not per step
                since_yield += 1
                if since_yield >= GROUP_STEPS and since_yield * first_step >= GROUP_SECONDS:
                    since_yield = 0
                    self._publish()
                    yield
        finally:
            self._publish()
        while self._can_sample() and not _has_groups(self._run.baseline):  # an estimate that fell short
            self._sample(context)
            yield

    def _planned_steps(self, step_s: float) -> int:
        """Steps for what is left of the share of the decode time (in timed steps: after the first, nothing else is
        spent but the loop around them), and at least enough for MIN_SPEEDUP_GROUPS groups."""
        return max(self._least_steps(step_s), round((self._budget_s() - self.spent_s) / max(step_s, 1e-6)))

    @staticmethod
    def _least_steps(step_s: float) -> int:
        """Timed steps of `step_s` seconds enough for MIN_SPEEDUP_GROUPS groups."""
        return max(MIN_SPEEDUP_GROUPS * GROUP_STEPS, math.ceil(MIN_SPEEDUP_GROUPS * GROUP_SECONDS / max(step_s, 1e-6)))

    def _can_sample(self) -> bool:
        return bool(self._run.events) and not self._should_stop()

    def _sample(self, context: list[int], publish: bool = True) -> float:
        started = time.perf_counter()
        seconds = self._probe.time_step(context)
        self._steps.append(seconds)
        self.timed.append((seconds, len(context)))
        self.spent_s += time.perf_counter() - started
        if publish:
            self._publish()
        return seconds

    def _publish(self) -> None:
        baseline = pool(self._earlier + self._steps, self.spent_s, self.timing)
        for _, run in self._runs:
            run.baseline = baseline


def _has_groups(baseline: Baseline | None) -> bool:
    return baseline is not None and baseline.groups >= MIN_SPEEDUP_GROUPS


def _spread(first: int, last: int, count: int) -> list[int]:
    """`count` positions from near `last` (already timed) down to `first`, evenly spaced, and repeated in place where
    the answer is shorter than `count`: descending, so the probe's cache only ever moves its end back."""
    span = last - first + 1
    if count <= 0 or span <= 0:
        return []
    if count < span:
        return [last - ((i + 1) * span) // (count + 1) for i in range(count)]
    return [last - (i * span) // count for i in range(count)]
