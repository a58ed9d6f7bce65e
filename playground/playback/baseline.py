"""The live plain-decoding baseline: plain decode steps timed in short bursts between a run's steps, at the position
the run has reached.

A baseline measured once and reused goes stale as the machine's load changes, and a speedup against it can read
0.7× for plain decoding against itself. Measured alongside the run instead — same machine, same moment, same
prompt, same context length (`engine.PlainProbe`) — the two rates see the same conditions, and the bursts' spread
and the run's own stretches say how noisy the figure is. It costs time: the bursts and their catch-up forwards get
up to `SHARE` of the run's decode time, and at least `MIN_BURSTS` bursts are taken once the run has finished.
"""

from __future__ import annotations

import time
from typing import Callable

from playground.engine import Baseline, PlainProbe
from playground.engine.trace import decode_seconds

SHARE = 0.25
BURST_TOKENS = 4  # a burst times at least this many decode steps…
BURST_SECONDS = 0.05  # …and at least this long, so that a fast model's bursts are not timer and scheduler noise
MIN_BURSTS = 5


class BaselineSampler:
    """The baseline of one run (anything with `events`, `token_ids` and a `baseline` to fill)."""

    def __init__(self, probe: PlainProbe, prompt_ids: list[int], run, should_stop: Callable[[], bool]) -> None:
        self._probe, self._prompt_ids, self.run, self._should_stop = probe, prompt_ids, run, should_stop
        self._bursts: list[tuple[int, float]] = []  # (steps, seconds)
        self.spent_s = 0.0  # wall time spent on the baseline, catch-up forwards included
        self.exhausted = False  # the target's context is full: nothing more to time

    @property
    def estimate(self) -> Baseline | None:
        if not self._bursts:
            return None
        tokens, seconds = sum(t for t, _ in self._bursts), sum(s for _, s in self._bursts)
        rates = [t / s for t, s in self._bursts]
        return Baseline(tokens / seconds, min(rates), max(rates), len(self._bursts), tokens)

    def keep_up(self) -> None:
        """Give the baseline its share of the run's decode time so far."""
        while self._can_sample() and self.spent_s < SHARE * decode_seconds(self.run.events):
            self._burst()

    def finish(self) -> None:
        """After the run: enough bursts for a spread, unless it was stopped."""
        while self._can_sample() and len(self._bursts) < MIN_BURSTS:
            self._burst()

    def _can_sample(self) -> bool:
        return bool(self.run.events) and not self.exhausted and not self._should_stop()

    def _burst(self) -> None:
        started = time.perf_counter()
        steps = self._probe.time_steps(self._prompt_ids + self.run.token_ids, BURST_TOKENS, BURST_SECONDS)
        self.spent_s += time.perf_counter() - started
        if not steps:
            self.exhausted = True
            return
        self._bursts.append((len(steps), sum(steps)))
        self.run.baseline = self.estimate
