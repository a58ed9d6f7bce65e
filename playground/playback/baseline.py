"""The live plain-decoding baseline: plain decode steps timed one at a time between a run's steps, at the position
the run has reached.

A baseline measured once and reused goes stale as the machine's load changes, and a speedup against it can read
0.7× for plain decoding against itself. Measured alongside the run instead — same machine, same moment, same
prompt, same context length (`engine.PlainProbe`) — the two rates see the same conditions. Each sample is a single
step taken between two of the run's steps, because the conditions a step meets depend on what ran just before it:
in the app, plain steps timed back to back ran ~5 % faster than the run's own, which follow UI updates and other
work, and plain against plain read 0.88–0.91×.
Consecutive samples are pooled into groups (at least `GROUP_STEPS` steps and `GROUP_SECONDS`) whose spread, with the
run's own stretches, says how noisy the figure is. It costs time: the samples and their catch-up forwards get up to
`SHARE` of the run's decode time, and at least `MIN_SPEEDUP_GROUPS` groups are timed once the run has finished.
For vLLM, whose engine decodes on while we sample, every sample is timed after the run, at its final position.
"""

from __future__ import annotations

import time
from typing import Callable

from playground.engine import Baseline, PlainProbe
from playground.engine.trace import MIN_SPEEDUP_GROUPS, decode_seconds

SHARE = 0.25
GROUP_STEPS = 4  # a group pools at least this many timed steps…
GROUP_SECONDS = 0.05  # …and at least this long, so that a fast model's groups are not timer and scheduler noise


def pool(steps: list[float]) -> Baseline | None:
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
    return Baseline(len(steps) / sum(steps), min(rates), max(rates), len(groups), len(steps))


class BaselineSampler:
    """The baseline of one run (anything with `events`, `token_ids` and a `baseline` to fill)."""

    def __init__(self, probe: PlainProbe, prompt_ids: list[int], run, should_stop: Callable[[], bool],
                 during_run: bool = True) -> None:
        self._probe, self._prompt_ids, self.run, self._should_stop = probe, prompt_ids, run, should_stop
        self._during_run = during_run  # False: only after the run (an engine that decodes on while we sample)
        self._steps: list[float] = []  # seconds of each timed plain step
        self.spent_s = 0.0  # wall time spent on the baseline, catch-up forwards included

    def keep_up(self) -> None:
        """Called between the run's steps: one timed step, when the baseline is behind its share of the run's decode
        time."""
        if self._during_run and self._can_sample() and self.spent_s < SHARE * decode_seconds(self.run.events):
            self._sample()

    def finish(self) -> None:
        """After the run: enough groups for a spread, unless it was stopped."""
        while self._can_sample() and (self.run.baseline is None or self.run.baseline.groups < MIN_SPEEDUP_GROUPS):
            self._sample()

    def _can_sample(self) -> bool:
        return bool(self.run.events) and not self._should_stop()

    def _sample(self) -> None:
        started = time.perf_counter()
        self._steps.append(self._probe.time_step(self._prompt_ids + self.run.token_ids))
        self.spent_s += time.perf_counter() - started
        self.run.baseline = pool(self._steps)
