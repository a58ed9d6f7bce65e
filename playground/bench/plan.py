"""The plan of a bench run, before anything generates: cells, the methods each runs, run counts, time estimate.

A *cell* is one (prompt set, chat template). Every cell runs our plain loop (`none`) on the same prompts, so every
row's speedup has a baseline measured in the same run. A record whose first prompt + max_new_tokens does not fit
the target's context is left out of its cell (counted in `skipped`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from playground.bench.config import BenchConfig
from playground.bench.methods import Method, methods_for
from playground.prompt_sets import PromptRecord, PromptSet, load_prompt_set

Encode = Callable[[list[dict], str], list[int]]  # (messages, template) -> prompt token ids
RunKey = tuple[int, Method]  # (cell index, method): the runs an estimate tells apart


class PromptEncoder:
    """Templated prompt ids, each conversation encoded once per template."""

    def __init__(self, encode: Callable[..., list[int]]) -> None:
        self._encode, self._cache = encode, {}

    def __call__(self, messages: list[dict], template: str) -> list[int]:
        key = (template, tuple((m["role"], m["content"]) for m in messages))
        if key not in self._cache:
            self._cache[key] = self._encode(
                messages, chat_template=None if template in ("default", "raw") else template, raw=template == "raw")
        return self._cache[key]


@dataclass
class Cell:
    prompt_set: PromptSet
    template: str
    records: list[PromptRecord]  # the ones that fit the context
    skipped: int
    context_tokens: int | None  # median first-turn prompt length
    studies: dict[Method, list[str]] = field(default_factory=dict)  # methods in run order -> report sections
    unavailable: dict[Method, str] = field(default_factory=dict)  # methods with no numbers here, and why

    @property
    def methods(self) -> list[Method]:
        return list(self.studies)

    @property
    def runnable(self) -> list[Method]:
        return [m for m in self.studies if m not in self.unavailable]


@dataclass
class Plan:
    cells: list[Cell]
    repeats: int
    max_new_tokens: int
    max_positions: int  # the target's context

    def fits(self, prompt_tokens: int) -> bool:
        return prompt_tokens + self.max_new_tokens <= self.max_positions

    @property
    def ready_cells(self) -> list[tuple[int, Cell]]:
        return [(c, cell) for c, cell in enumerate(self.cells) if cell.records]

    def warmup_methods(self) -> list[Method]:
        """Every method that runs somewhere, plain decoding excepted (each cell warms that up itself)."""
        seen: dict[Method, None] = {}
        for cell in self.cells:
            seen.update(dict.fromkeys(m for m in cell.runnable if m.kind != "baseline"))
        return list(seen)

    def count_warmups(self) -> int:
        """Plain decoding's warm-up in each cell with prompts, and each other method's once."""
        return len(self.ready_cells) + len(self.warmup_methods())

    def count_runs(self) -> int:
        """Generation runs after the warm-up: the timed passes, and one instrumented pass per EAGLE method."""
        return sum(len(cell.records) * self._runs_per_record(m) for cell in self.cells for m in cell.runnable)

    def run_seconds(self, plain: dict[int, tuple[float, float]], relative: dict[Method, float],
                    all_turns: bool) -> dict[RunKey, float]:
        """Seconds of one conversation of each method of each cell at most: the cell's plain (prefill, per-token)
        seconds, times the method's speed relative to plain, every answer to max_new_tokens."""
        seconds = {}
        for c, (prefill, per_token) in plain.items():
            cell = self.cells[c]
            turns = statistics.mean(len(r.turns) if all_turns else 1 for r in cell.records)
            for method in cell.runnable:
                seconds[(c, method)] = turns * (prefill + self.max_new_tokens * per_token * relative.get(method, 1.0))
        return seconds

    def estimate_seconds(self, run_seconds: dict[RunKey, float]) -> float:
        """Seconds of all runs after the warm-up at most, from `run_seconds`."""
        return sum(len(self.cells[c].records) * self._runs_per_record(method) * seconds
                   for (c, method), seconds in run_seconds.items())

    def _runs_per_record(self, method: Method) -> int:
        return self.repeats + (method.kind == "eagle")


def make_plan(config: BenchConfig, encode: Encode, max_positions: int,
              unavailable: Callable[[Method], str | None]) -> Plan:
    """The cells of `config`'s sweeps on a target with `max_positions`, each method marked runnable or not."""
    plan = Plan([], config.repeats, config.max_new_tokens, max_positions)
    no_prompt_fits = (f"no prompt of this set fits the target's context ({max_positions} tokens) with "
                      f"max_new_tokens={config.max_new_tokens}")
    cells: dict[tuple[str, str], Cell] = {}
    sets: dict[str, PromptSet] = {}
    for sweep in config.sweeps:
        for set_name in sweep.prompt_sets:
            if set_name not in sets:
                sets[set_name] = load_prompt_set(set_name, config.limit)
            for template in sweep.templates:
                if (set_name, template) not in cells:
                    records = sets[set_name].records
                    lengths = {r.question_id: len(encode(r.messages([]), template)) for r in records}
                    fit = [r for r in records if plan.fits(lengths[r.question_id])]
                    context = int(statistics.median(lengths[r.question_id] for r in fit)) if fit else None
                    cells[(set_name, template)] = Cell(sets[set_name], template, fit, len(records) - len(fit), context)
                cell = cells[(set_name, template)]
                for method in methods_for(sweep.drafters, sweep.ks, sweep.tree_nodes, sweep.k_auto):
                    studies = cell.studies.setdefault(method, [])
                    if sweep.study not in studies:
                        studies.append(sweep.study)
                    reason = no_prompt_fits if not cell.records else unavailable(method)
                    if reason:
                        cell.unavailable[method] = reason
    plan.cells = list(cells.values())
    if not plan.ready_cells:
        raise ValueError(f"no prompt fits the target's context ({max_positions} tokens) with "
                         f"max_new_tokens={config.max_new_tokens}")
    return plan
