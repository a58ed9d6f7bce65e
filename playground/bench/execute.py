"""Running a plan: warm-up, then the timed passes and the instrumented pass, yielded one conversation at a time.

* Warm-up first: every method runs once before anything is timed; the warm-up times feed the run's estimate.
* Timed passes run with `instrument=False`; for each repeat, each prompt runs every method back to back, so a noisy
  neighbour on the machine slows all methods alike.
* Attention and hidden-state RMS come from one separate instrumented pass of each EAGLE method.
* Multi-turn records run every turn in order, each method feeding back its own previous answers (as a user would
  see them), and suffix decoding keeping one cache for the conversation (it sees its earlier answers, as in the
  app); `turns="first"` runs only the first turn. A later turn that does not fit the context ends that
  conversation.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass

from playground.bench.config import BenchConfig
from playground.bench.methods import Answer, Method, Runner
from playground.bench.plan import Cell, Plan, PromptEncoder, RunKey
from playground.bench.progress import Run
from playground.drafting import PLAIN
from playground.engine.proposers import forget_session

WARMUP_TOKENS = 16


@dataclass(frozen=True)
class Sample:
    """One conversation of one method on one record of one cell."""

    cell: int
    method: Method
    record: int
    answers: list[Answer]
    repeat: int | None  # None: the instrumented pass


class Executor:
    """Runs a plan; `step(run)` wraps every generation run (progress, and the stop between runs)."""

    def __init__(self, plan: Plan, config: BenchConfig, runner: Runner, encode: PromptEncoder,
                 step: Callable[[Run], AbstractContextManager]) -> None:
        self.plan, self.config, self.runner, self.encode, self.step = plan, config, runner, encode, step

    def converse(self, method: Method, cell: Cell, index: int, instrument: bool = False) -> list[Answer]:
        """All turns of one record (or the first), feeding back this method's own answers."""
        record = cell.records[index]
        answers: list[Answer] = []
        session = f"bench:{uuid.uuid4().hex}"  # the conversation's: a method that keeps state keeps it for its turns
        n_turns = len(record.turns) if self.config.turns == "all" else 1
        try:
            for turn in range(n_turns):
                prompt_ids = self.encode(record.messages([self.runner.backend.decode(a.ids) for a in answers]),
                                         cell.template)
                if not self.plan.fits(len(prompt_ids)):
                    break
                answers.append(self.runner.generate(method, prompt_ids,
                                                    self.config.generation(index, turn, instrument), session))
        finally:
            forget_session(session)
        return answers

    def _run(self, c: int, method: Method, phase: str) -> Run:
        cell = self.plan.cells[c]
        return Run(c, cell.prompt_set.name, cell.template, method, phase)

    def warm_up(self) -> dict[RunKey, float]:
        """Run every method once before timing; return the estimated seconds of one run of each method in each cell:
        the cell's plain prefill and per-token time from its own warm-up, times the method's warm-up speed relative
        to plain on the first cell's first prompt."""
        short = self.config.generation(0, 0, max_new_tokens=WARMUP_TOKENS)
        plain: dict[int, tuple[float, float]] = {}
        for c, cell in self.plan.ready_cells:
            prompt_ids = self.encode(cell.records[0].messages([]), cell.template)
            with self.step(self._run(c, Method(PLAIN), "warm-up")):
                plain[c] = prefill_and_per_token(self.runner.generate(Method(PLAIN), prompt_ids, short))
        first, cell = self.plan.ready_cells[0]
        prompt_ids = self.encode(cell.records[0].messages([]), cell.template)
        relative = {Method(PLAIN): 1.0}
        for method in self.plan.warmup_methods():
            with self.step(self._run(first, method, "warm-up")):
                answer = self.runner.generate(method, prompt_ids, short)
            relative[method] = prefill_and_per_token(answer)[1] / plain[first][1]
        return self.plan.run_seconds(plain, relative, all_turns=self.config.turns == "all")

    def samples(self) -> Iterator[Sample]:
        """The timed passes (repeat by repeat, prompt by prompt, every method back to back), then the instrumented
        pass of each EAGLE method."""
        for repeat in range(self.config.repeats):
            for c, cell in enumerate(self.plan.cells):
                for i in range(len(cell.records)):
                    for method in cell.runnable:
                        with self.step(self._run(c, method, "timed")):
                            answers = self.converse(method, cell, i)
                        yield Sample(c, method, i, answers, repeat)
        for c, cell in enumerate(self.plan.cells):
            for method in (m for m in cell.runnable if m.kind == "eagle"):
                for i in range(len(cell.records)):
                    with self.step(self._run(c, method, "instrumented")):
                        answers = self.converse(method, cell, i, instrument=True)
                    yield Sample(c, method, i, answers, None)


def prefill_and_per_token(answer: Answer) -> tuple[float, float]:
    """Seconds of the first step (prefill and first token) and per later token; a peer without steps: 0 and the
    mean over its tokens."""
    if not answer.events:
        return 0.0, answer.seconds / max(len(answer.ids), 1)
    prefill = answer.events[0].elapsed_ms / 1000
    return prefill, (answer.seconds - prefill) / max(len(answer.ids) - 1, 1)
