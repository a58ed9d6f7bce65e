"""The live plain-decoding baseline: plain decoding of the same prompt, stepped in short bursts between a run's steps.

A baseline measured once and reused goes stale as the machine's load changes, and a speedup against it can read
0.7× for plain decoding against itself. Measured alongside the run instead — same machine, same moment, same
prompt, same settings — the two rates see the same load, and the bursts' spread says how noisy the figure is.
It costs time: the plain stream gets up to `SHARE` of the run's decode time (plus its own prefill), and at least
`MIN_BURSTS` bursts once the run has finished.
"""

from __future__ import annotations

import time
from typing import Callable, Iterator

from playground.engine import Baseline, StepEvent

SHARE = 0.25
BURST_TOKENS = 4
MIN_BURSTS = 3


def decode_seconds(events: list[StepEvent]) -> float:
    """A run's decode-loop time after its first step (the prefill), pauses excluded."""
    return (events[-1].elapsed_ms - events[0].elapsed_ms) / 1000 if events else 0.0


class BaselineSampler:
    """Plain decoding for the runs in `runs` (each has `events` and a `baseline` to fill), opened lazily and reopened
    when an answer ends. Each burst times `BURST_TOKENS` plain decode steps; the stream's first step (the prefill)
    is not timed."""

    def __init__(self, open_plain: Callable[[], Iterator[StepEvent]], runs: list, should_stop: Callable[[], bool]) -> None:
        self._open_plain = open_plain
        self.runs = runs
        self._should_stop = should_stop
        self._stream: Iterator[StepEvent] | None = None
        self._timed_steps = 0
        self._bursts: list[tuple[int, float]] = []  # (tokens, seconds)
        self.spent_s = 0.0  # wall time spent on plain decoding, prefills included
        self.exhausted = False  # an answer ended with nothing to time (a one-token answer): no baseline

    @property
    def estimate(self) -> Baseline | None:
        if not self._bursts:
            return None
        tokens, seconds = sum(t for t, _ in self._bursts), sum(s for _, s in self._bursts)
        rates = [t / s for t, s in self._bursts]
        return Baseline(tokens / seconds, min(rates), max(rates), len(self._bursts), tokens)

    def keep_up(self) -> None:
        """Give the plain stream its share of the runs' decode time so far."""
        budget = SHARE * sum(decode_seconds(run.events) for run in self.runs)
        while self._can_sample() and self.spent_s < budget:
            self._burst()

    def finish(self) -> None:
        """After the runs: enough bursts for a spread (unless stopped), then close the stream."""
        while self._can_sample() and len(self._bursts) < MIN_BURSTS:
            self._burst()
        self._close()

    def _can_sample(self) -> bool:
        return not self.exhausted and not self._should_stop()

    def _burst(self) -> None:
        tokens, seconds = 0, 0.0
        while tokens < BURST_TOKENS and not self.exhausted:
            if self._stream is None:
                self._stream, self._timed_steps = self._open_plain(), -1  # -1: the first step is the prefill
            started = time.perf_counter()
            event = next(self._stream, None)
            took = time.perf_counter() - started
            self.spent_s += took
            if event is not None:
                if self._timed_steps >= 0:
                    tokens, seconds = tokens + len(event.emitted), seconds + took
                self._timed_steps += 1
            if event is None or event.finished:
                self.exhausted = self._timed_steps <= 0
                self._close()
        if tokens:
            self._bursts.append((tokens, seconds))
            estimate = self.estimate
            for run in self.runs:
                run.baseline = estimate

    def _close(self) -> None:
        if self._stream is not None:
            getattr(self._stream, "close", lambda: None)()
            self._stream = None
