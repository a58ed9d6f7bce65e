"""A bench run, start to end: plan the cells (plan.py), warm up and estimate, run the passes (execute.py), fold the
samples into rows (aggregate.py). The methods are plain decoding, EAGLE drafters at each k, and peers (methods.py),
over prompt sets x chat templates, on one target."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict

from playground.bench.aggregate import aggregate
from playground.bench.config import BenchConfig, ProgressCallback
from playground.bench.execute import Executor
from playground.bench.methods import Runner
from playground.bench.plan import PromptEncoder, make_plan
from playground.bench.progress import BenchProgress, Run, format_duration
from playground.bench.rows import BenchResult, BenchRow
from playground.machine import machine_info
from playground.run_record import run_fields


class BenchStopped(Exception):
    """The runner's should_stop was set: the bench ends after the answer in progress, with no result."""


class Bench:
    """One config on one runner: its plan, the executor that runs it, and the progress it reports."""

    def __init__(self, config: BenchConfig, runner: Runner, progress: ProgressCallback | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        config.validate()
        self.config, self.runner = config, runner
        self.progress = progress or (lambda done, total, message: None)
        self.log = log or (lambda message: None)
        encode = PromptEncoder(runner.backend.encode)
        self.plan = make_plan(config, encode, runner.target.max_positions, runner.unavailable)
        self.executor = Executor(self.plan, config, runner, encode, self._step)
        self.status = BenchProgress(self.plan.count_warmups(), self.plan.count_runs())

    @contextmanager
    def _step(self, run: Run) -> Iterator[None]:
        """Say what runs before it starts; count it when it ends, and end the bench there if it was stopped."""
        status = self.status
        self.progress(status.done, status.total, status.starting(run))
        yield
        status.finished(run)
        if self.runner.should_stop():
            raise BenchStopped(f"the benchmark was stopped after {status.done} of {status.total} generation runs; "
                               "a partial run has no result")

    def estimate(self) -> str:
        """Warm every method up and say how long the run will take."""
        run_seconds = self.executor.warm_up()
        seconds = self.plan.estimate_seconds(run_seconds)
        self.status.warmed_up(run_seconds, seconds)
        return (f"{self.status.runs} generation runs after the warm-up, about {format_duration(seconds)} at most "
                "(every answer to max_new_tokens at each method's warm-up speed; answers that end sooner take less)")

    def run(self) -> list[BenchRow]:
        self.log(self.estimate())
        rows = aggregate(self.plan, self.executor.samples(), self.config.greedy, self.runner.variant_name,
                         lambda cell, method, answer, earlier: self.runner.health(
                             self.config.generation(0, 0), method, cell.template, cell.context_tokens or 0, answer,
                             earlier),
                         lambda cell, method, answers: self.runner.predicted(method, cell.context_tokens or 0,
                                                                             answers))
        for row in rows:
            if row.kind != "peer":
                row.run_fields = run_fields(self.runner.backend, plain=row.kind == "baseline")
        self.progress(self.status.total, self.status.total, "finished")
        return rows


def run_bench(config: BenchConfig, runner: Runner, progress: ProgressCallback | None = None,
              log: Callable[[str], None] | None = None) -> BenchResult:
    started, t0 = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), time.perf_counter()
    rows = Bench(config, runner, progress, log).run()
    backend = runner.backend
    return BenchResult(rows=rows, config=asdict(config), machine=machine_info(str(backend.device)),
                       preset=backend.preset.name, target=backend.preset.target, started=started,
                       seconds=time.perf_counter() - t0)
