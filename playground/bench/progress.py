"""What a running bench says it is doing, before each generation run: "warm-up 2 of 7 (held-out, EAGLE-3, k=1)…",
then "run 7 of 24 (held-out, EAGLE-3.1, k=4), ~1 min 10 s left".

The time left is the plan's estimate of the runs still to come (from the warm-up timings), scaled by how long the
finished runs took against their own estimates: the plan takes every answer to max_new_tokens, so on its own it
errs long, and a busy machine makes every run slower alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from playground.bench.methods import Method
from playground.bench.plan import RunKey


@dataclass(frozen=True)
class Run:
    """One generation run of a bench, as the status line names it."""

    cell: int
    prompt_set: str
    template: str
    method: Method
    phase: str  # warm-up | timed | instrumented

    def __str__(self) -> str:
        parts = [self.prompt_set if self.template == "default" else f"{self.prompt_set}, {self.template} template",
                 "plain decoding" if self.method.kind == "baseline" else self.method.label]
        if self.method.k is not None:
            parts.append(f"k={self.method.k}")
        if self.phase == "instrumented":
            parts.append("instrumented pass")
        return ", ".join(parts)


@dataclass
class BenchProgress:
    """Counts a bench's warm-ups and runs, and words the status line before each of them."""

    warmups: int
    runs: int  # timed and instrumented
    clock: Callable[[], float] = time.monotonic
    done: int = 0  # warm-ups and runs finished
    run_seconds: dict[RunKey, float] = field(default_factory=dict)  # the plan's estimate of one run, once warmed up
    estimated_total: float = 0.0
    estimated_done: float = 0.0
    runs_since: float = 0.0  # clock() at the end of the warm-up

    @property
    def total(self) -> int:
        return self.warmups + self.runs

    def warmed_up(self, run_seconds: dict[RunKey, float], estimated_total: float) -> None:
        self.run_seconds, self.estimated_total, self.runs_since = run_seconds, estimated_total, self.clock()

    def starting(self, run: Run) -> str:
        """The status line while `run` runs."""
        if run.phase == "warm-up":
            return f"warm-up {self.done + 1} of {self.warmups} ({run})…"
        left = format_duration(self.seconds_left())
        return f"run {self.done - self.warmups + 1} of {self.runs} ({run}), ~{left} left"

    def finished(self, run: Run) -> None:
        self.done += 1
        if run.phase != "warm-up":
            self.estimated_done += self.run_seconds[(run.cell, run.method)]

    def seconds_left(self) -> float:
        """The estimate of the runs not yet finished, scaled by the finished runs' actual over estimated time."""
        left = self.estimated_total - self.estimated_done
        if not self.estimated_done:
            return left
        return left * (self.clock() - self.runs_since) / self.estimated_done


def format_duration(seconds: float) -> str:
    """'45 s', '2 min 25 s', '12 min', '6 h 5 min': to the 5 seconds under ten minutes, to the minute from there."""
    if seconds >= 600:
        return _two_units(*divmod(round(seconds / 60), 60), "h", "min")
    return _two_units(*divmod(5 * round(seconds / 5), 60), "min", "s")


def _two_units(large: int, small: int, large_unit: str, small_unit: str) -> str:
    if not large:
        return f"{small} {small_unit}"
    return f"{large} {large_unit} {small} {small_unit}" if small else f"{large} {large_unit}"
