"""Running a plan: warm-up, then the timed passes and the instrumented pass, yielded one conversation at a time.

* Warm-up first: every method runs once before anything is timed; the warm-up times feed the run's estimate.
* Timed passes run with `instrument=False`; for each repeat, each prompt runs every method back to back, so a noisy
  neighbour on the machine slows all methods alike.
* Attention and hidden-state RMS come from one separate instrumented pass of each EAGLE method.
* Multi-turn records run every turn in order, each method feeding back its own previous answers (as a user would
  see them); `turns="first"` runs only the first turn. A later turn that does not fit the context ends that
  conversation.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from playground.bench.config import BenchConfig
from playground.bench.methods import Answer, Method, Runner
from playground.bench.plan import Cell, Plan, PromptEncoder

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
    def __init__(self, plan: Plan, config: BenchConfig, runner: Runner, encode: PromptEncoder, tick) -> None:
        self.plan, self.config, self.runner, self.encode, self.tick = plan, config, runner, encode, tick

    def converse(self, method: Method, cell: Cell, index: int, instrument: bool = False) -> list[Answer]:
        """All turns of one record (or the first), feeding back this method's own answers."""
        record = cell.records[index]
        answers: list[Answer] = []
        n_turns = len(record.turns) if self.config.turns == "all" else 1
        for turn in range(n_turns):
            prompt_ids = self.encode(record.messages([self.runner.backend.decode(a.ids) for a in answers]),
                                     cell.template)
            if not self.plan.fits(len(prompt_ids)):
                break
            answers.append(self.runner.generate(method, prompt_ids, self.config.generation(index, turn, instrument)))
        return answers

    def warm_up(self) -> float:
        """Run every method once before timing; return the estimated seconds of the whole run: each cell's plain
        prefill and per-token time from its own warm-up, times each method's warm-up speed relative to plain on the
        first cell's first prompt."""
        short = self.config.generation(0, 0, max_new_tokens=WARMUP_TOKENS)
        plain: dict[int, tuple[float, float]] = {}
        for c, cell in self.plan.ready_cells:
            prompt_ids = self.encode(cell.records[0].messages([]), cell.template)
            plain[c] = prefill_and_per_token(self.runner.generate(Method("none"), prompt_ids, short))
            self.tick(f"warm-up · {cell.prompt_set.name} · {cell.template}")
        first, cell = self.plan.ready_cells[0]
        prompt_ids = self.encode(cell.records[0].messages([]), cell.template)
        relative = {Method("none"): 1.0}
        for method in self.plan.warmup_methods():
            answer = self.runner.generate(method, prompt_ids, short)
            relative[method] = prefill_and_per_token(answer)[1] / plain[first][1]
            self.tick(f"warm-up · {method}")
        return self.plan.estimate_seconds(plain, relative, all_turns=self.config.turns == "all")

    def samples(self) -> Iterator[Sample]:
        """The timed passes (repeat by repeat, prompt by prompt, every method back to back), then the instrumented
        pass of each EAGLE method."""
        repeats = self.config.repeats
        for repeat in range(repeats):
            for c, cell in enumerate(self.plan.cells):
                for i in range(len(cell.records)):
                    for method in cell.runnable:
                        yield Sample(c, method, i, self.converse(method, cell, i), repeat)
                        self.tick(f"{method} · {cell.prompt_set.name} · {cell.template} · "
                                  f"prompt {i + 1}/{len(cell.records)} · pass {repeat + 1}/{repeats}")
        for c, cell in enumerate(self.plan.cells):
            for method in (m for m in cell.runnable if m.kind == "eagle"):
                for i in range(len(cell.records)):
                    yield Sample(c, method, i, self.converse(method, cell, i, instrument=True), None)
                    self.tick(f"instrumented · {method} · {cell.prompt_set.name} · {cell.template} · "
                              f"prompt {i + 1}/{len(cell.records)}")


def prefill_and_per_token(answer: Answer) -> tuple[float, float]:
    """Seconds of the first step (prefill and first token) and per later token; a peer without steps: 0 and the
    mean over its tokens."""
    if not answer.events:
        return 0.0, answer.seconds / max(len(answer.ids), 1)
    prefill = answer.events[0].elapsed_ms / 1000
    return prefill, (answer.seconds - prefill) / max(len(answer.ids) - 1, 1)
