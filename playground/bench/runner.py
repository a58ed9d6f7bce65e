"""The sweep: methods (plain, EAGLE drafters at each k, peers) x prompt sets x chat templates, on one target.

How numbers are made (and kept honest):

* A *cell* is one (prompt set, chat template). Every cell runs our plain loop (`none`) on the same prompts, and
  every row's speedup is its tokens/s over `none`'s in that cell: a ratio of medians over repeats.
* Warm-up first: every method runs once before anything is timed.
* Timed passes run with `instrument=False`; for each repeat, each prompt runs every method back to back, so
  a noisy neighbour on the machine slows all methods alike. tokens/s of a pass = generated tokens / seconds,
  summed over its prompts (each call timed by wall clock around it, prefill included).
* Attention and hidden-state RMS come from one separate instrumented pass; its speed is reported
  (`instrumented_tokens_per_second`) but never used for speed numbers.
* Acceptance metrics come from `engine.trace.summarize` over all timed steps of a row (vLLM's pooled definitions).
* `lossless` (greedy only): every answer of every pass equals plain decoding's, token for token.
* Multi-turn records run every turn in order, each method feeding back its own previous answers (as a user
  would see them); `turns="first"` runs only the first turn. A record whose first prompt + max_new_tokens does
  not fit the target's context is skipped (counted in `prompts_skipped`); a later turn that does not fit ends
  that conversation.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
import transformers

from playground.bench.methods import Answer, Method, Runner, methods_for
from playground.bench.prompts import PromptRecord, PromptSet, load_prompt_set
from playground.engine import GenerationConfig, summarize

ProgressCallback = Callable[[int, int, str], None]
TEMPLATES_HELP = "default (the tokenizer's), raw (no template), or llama3 (Llama-3-style headers, unfamiliar to SmolLM2)"
WARMUP_TOKENS = 16


@dataclass(frozen=True)
class Sweep:
    """A product of prompt sets x templates x drafters x k. `study` names the report section its rows feed."""

    prompt_sets: tuple[str, ...]
    drafters: tuple[str, ...]
    ks: tuple[int, ...]
    templates: tuple[str, ...] = ("default",)
    study: str = "sweep"  # speed | k | context | template | sweep


@dataclass
class BenchConfig:
    sweeps: list[Sweep]
    max_new_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    repeats: int = 3
    limit: int | None = None  # first N prompts of each set
    turns: str = "all"  # all | first
    seed: int = 0
    assistant: str | None = None  # a small draft model for hf-assisted
    profile: str | None = None

    def validate(self) -> None:
        if self.repeats < 1:
            raise ValueError(f"repeats must be at least 1, got {self.repeats}")
        if self.turns not in ("all", "first"):
            raise ValueError(f"turns must be 'all' or 'first', got {self.turns!r}")
        GenerationConfig(max_new_tokens=self.max_new_tokens, k=max(k for s in self.sweeps for k in s.ks),
                         temperature=self.temperature, top_p=self.top_p).validate()

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class BenchRow:
    """One (method, prompt set, template): speed, acceptance, drift and correctness. None = does not apply."""

    drafter: str  # none | eagle3 | eagle3.1 | a drafter folder | hf-greedy | prompt-lookup | hf-assisted
    label: str  # display name of the drafter or peer, without k
    kind: str  # baseline | eagle | peer
    variant: str | None  # EAGLE-3 / EAGLE-3.1, from the drafter's config
    k: int | None
    prompt_set: str
    template: str
    studies: list[str]  # report sections that read this row
    prompts: int
    prompts_skipped: int  # too long for the target's context with max_new_tokens
    context_tokens: int | None  # median first-turn prompt length (templated)
    turns: int = 0  # generated answers per pass
    generated_tokens: int | None = None  # per pass
    tokens_per_second: float | None = None  # median over repeats
    tokens_per_second_runs: list[float] = field(default_factory=list)
    baseline_tokens_per_second: float | None = None  # `none` in the same cell, same run
    speedup: float | None = None  # tokens_per_second / baseline_tokens_per_second
    speedup_runs: list[float] = field(default_factory=list)  # per pass, against plain decoding in the same pass
    mean_acceptance_length: float | None = None
    draft_acceptance_rate: float | None = None
    per_position_acceptance: list[float] | None = None
    attention_by_depth: list[dict[str, float]] | None = None  # {sink, context, draft} per depth (instrumented pass)
    hidden_rms_by_depth: list[float] | None = None
    instrumented_tokens_per_second: float | None = None
    lossless: bool | None = None  # greedy: identical to plain decoding on every prompt; None when sampling
    mismatched_prompts: list[str] = field(default_factory=list)
    note: str | None = None  # why a method has no numbers here

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class BenchResult:
    rows: list[BenchRow]
    config: dict
    machine: dict
    preset: str
    target: str
    started: str
    seconds: float

    def to_dict(self) -> dict:
        return {"rows": [r.to_dict() for r in self.rows], "machine": self.machine, "config": self.config,
                "preset": self.preset, "target": self.target, "started": self.started, "seconds": self.seconds}


@dataclass
class _Cell:
    prompt_set: PromptSet
    template: str
    records: list[PromptRecord]  # the ones that fit the context
    skipped: int
    context_tokens: int | None
    studies: dict[Method, list[str]]  # methods in run order -> report sections

    @property
    def methods(self) -> list[Method]:
        return list(self.studies)


def machine_info(device: str) -> dict:
    cpu = platform.processor()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                 if line.startswith("model name")]
        cpu = names[0] if names else cpu
    info = {"cpu": cpu or "unknown", "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "platform": platform.platform(), "device": device}
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


class Bench:
    """Prepares cells, warms up, estimates, runs the passes and aggregates rows."""

    def __init__(self, config: BenchConfig, runner: Runner, progress: ProgressCallback | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        config.validate()
        self.config, self.runner = config, runner
        self.target = runner.target
        self.progress = progress or (lambda done, total, message: None)
        self.log = log or (lambda message: None)
        self._encoded: dict[tuple, list[int]] = {}
        self.cells = self._cells()
        if not self._ready_cells():
            raise ValueError(f"no prompt fits the target's context ({self.target.max_positions} tokens) with "
                             f"max_new_tokens={config.max_new_tokens}")
        self.done, self.total = 0, self._count_runs()

    # ------------------------------------------------------------------ preparation

    def encode(self, messages: list[dict], template: str) -> list[int]:
        key = (template, tuple((m["role"], m["content"]) for m in messages))
        if key not in self._encoded:
            self._encoded[key] = self.runner.backend.encode(
                messages, chat_template=None if template in ("default", "raw") else template, raw=template == "raw")
        return self._encoded[key]

    def _fits(self, prompt_ids: list[int]) -> bool:
        return len(prompt_ids) + self.config.max_new_tokens <= self.target.max_positions

    def _cells(self) -> list[_Cell]:
        cells: dict[tuple[str, str], _Cell] = {}
        sets: dict[str, PromptSet] = {}
        for sweep in self.config.sweeps:
            for set_name in sweep.prompt_sets:
                if set_name not in sets:
                    sets[set_name] = load_prompt_set(set_name, self.config.limit)
                for template in sweep.templates:
                    if (set_name, template) not in cells:
                        cells[(set_name, template)] = self._new_cell(sets[set_name], template)
                    studies = cells[(set_name, template)].studies
                    for method in methods_for(sweep.drafters, sweep.ks):
                        studies.setdefault(method, [])
                        if sweep.study not in studies[method]:
                            studies[method].append(sweep.study)
        return list(cells.values())

    def _new_cell(self, prompt_set: PromptSet, template: str) -> _Cell:
        prompts = {r.question_id: self.encode(r.messages([]), template) for r in prompt_set.records}
        fits = [r for r in prompt_set.records if self._fits(prompts[r.question_id])]
        context = int(statistics.median(len(prompts[r.question_id]) for r in fits)) if fits else None
        return _Cell(prompt_set, template, fits, len(prompt_set.records) - len(fits), context, {})

    def runnable(self, cell: _Cell) -> list[Method]:
        return [m for m in cell.methods if self.unavailable(cell, m) is None] if cell.records else []

    def unavailable(self, cell: _Cell, method: Method) -> str | None:
        """Why a method has no numbers in a cell (its row then carries the reason)."""
        if not cell.records:
            return (f"no prompt of this set fits the target's context ({self.target.max_positions} tokens) with "
                    f"max_new_tokens={self.config.max_new_tokens}")
        return self.runner.unavailable(method)

    def _count_runs(self) -> int:
        per_cell = [len(c.records) * (self.config.repeats * len(self.runnable(c))
                                      + sum(m.kind == "eagle" for m in self.runnable(c))) for c in self.cells]
        return len(self._ready_cells()) + len(self._warmup_methods()) + sum(per_cell)

    def _ready_cells(self) -> list[_Cell]:
        return [c for c in self.cells if c.records]

    def _warmup_methods(self) -> list[Method]:
        seen: dict[Method, None] = {}
        for cell in self.cells:
            seen.update(dict.fromkeys(m for m in self.runnable(cell) if m.kind != "baseline"))
        return list(seen)

    # ------------------------------------------------------------------ running

    def _cfg(self, prompt_index: int, turn: int, instrument: bool = False, max_new_tokens: int | None = None
             ) -> GenerationConfig:
        c = self.config
        return GenerationConfig(max_new_tokens=max_new_tokens or c.max_new_tokens, temperature=c.temperature,
                                top_p=c.top_p, seed=c.seed + 1000 * prompt_index + turn, instrument=instrument)

    def _tick(self, message: str) -> None:
        self.done += 1
        self.progress(self.done, self.total, message)

    def converse(self, method: Method, cell: _Cell, index: int, instrument: bool = False) -> list[Answer]:
        """All turns of one record (or the first), feeding back this method's own answers."""
        record = cell.records[index]
        answers: list[Answer] = []
        n_turns = len(record.turns) if self.config.turns == "all" else 1
        for turn in range(n_turns):
            prompt_ids = self.encode(record.messages([self.runner.backend.decode(a.ids) for a in answers]),
                                     cell.template)
            if not self._fits(prompt_ids):
                break
            answers.append(self.runner.generate(method, prompt_ids, self._cfg(index, turn, instrument)))
        return answers

    def warm_up(self) -> float:
        """Run every method once before timing; return the estimated seconds of the whole run: each cell's plain
        prefill and per-token time from its own warm-up, times each method's warm-up speed relative to plain on
        the same prompt, every answer to max_new_tokens (answers that end sooner take less)."""
        plain: dict[int, tuple[float, float]] = {}
        for c, cell in enumerate(self.cells):
            if cell.records:
                prompt_ids = self.encode(cell.records[0].messages([]), cell.template)
                plain[c] = _prefill_and_per_token(self.runner.generate(
                    Method("none"), prompt_ids, self._cfg(0, 0, max_new_tokens=WARMUP_TOKENS)))
                self._tick(f"warm-up · {cell.prompt_set.name} · {cell.template}")
        first = next(iter(plain))
        prompt_ids = self.encode(self.cells[first].records[0].messages([]), self.cells[first].template)
        relative = {Method("none"): 1.0}
        for method in self._warmup_methods():
            answer = self.runner.generate(method, prompt_ids, self._cfg(0, 0, max_new_tokens=WARMUP_TOKENS))
            relative[method] = _prefill_and_per_token(answer)[1] / plain[first][1]
            self._tick(f"warm-up · {method}")
        total = 0.0
        for c, (prefill, per_token) in plain.items():
            cell = self.cells[c]
            turns = statistics.mean(len(r.turns) if self.config.turns == "all" else 1 for r in cell.records)
            for method in self.runnable(cell):
                runs = len(cell.records) * turns * (self.config.repeats + (method.kind == "eagle"))
                total += runs * (prefill + self.config.max_new_tokens * per_token * relative.get(method, 1.0))
        return total

    def describe_estimate(self, seconds: float) -> str:
        return (f"{self.total} generation runs, about {seconds / 60:.1f} min at most (every answer to "
                "max_new_tokens at each method's warm-up speed; answers that end sooner take less)")

    def run(self) -> list[BenchRow]:
        self.log(self.describe_estimate(self.warm_up()))
        timed: dict[tuple[int, Method], list[list[list[Answer]]]] = {}
        for repeat in range(self.config.repeats):
            for c, cell in enumerate(self.cells):
                for i in range(len(cell.records)):
                    for method in self.runnable(cell):
                        runs = timed.setdefault((c, method), [[] for _ in range(self.config.repeats)])
                        runs[repeat].append(self.converse(method, cell, i))
                        self._tick(f"{method} · {cell.prompt_set.name} · {cell.template} · "
                                   f"prompt {i + 1}/{len(cell.records)} · pass {repeat + 1}/{self.config.repeats}")
        instrumented: dict[tuple[int, Method], list[list[Answer]]] = {}
        for c, cell in enumerate(self.cells):
            for method in (m for m in self.runnable(cell) if m.kind == "eagle"):
                for i in range(len(cell.records)):
                    instrumented.setdefault((c, method), []).append(self.converse(method, cell, i, instrument=True))
                    self._tick(f"instrumented · {method} · {cell.prompt_set.name} · {cell.template} · "
                               f"prompt {i + 1}/{len(cell.records)}")
        rows = []
        for c, cell in enumerate(self.cells):
            baseline = timed.get((c, Method("none")))
            for method in cell.methods:
                rows.append(self._row(cell, method, timed.get((c, method)), instrumented.get((c, method)), baseline))
        return rows

    # ------------------------------------------------------------------ aggregation

    def _row(self, cell: _Cell, method: Method, passes: list[list[list[Answer]]] | None,
             instrumented: list[list[Answer]] | None, baseline: list[list[list[Answer]]] | None) -> BenchRow:
        row = BenchRow(
            drafter=method.name, label=method.label, kind=method.kind, variant=self.runner.variant_name(method),
            k=method.k, prompt_set=cell.prompt_set.name, template=cell.template, studies=cell.studies[method],
            prompts=len(cell.records), prompts_skipped=cell.skipped, context_tokens=cell.context_tokens,
            note=self.unavailable(cell, method))
        if passes is None or baseline is None:
            return row
        row.baseline_tokens_per_second = _median_speed(baseline)
        row.turns = sum(len(conversation) for conversation in passes[0])
        row.generated_tokens = sum(len(a.ids) for conversation in passes[0] for a in conversation)
        row.tokens_per_second_runs = [_speed(p) for p in passes]
        row.tokens_per_second = _median_speed(passes)
        row.speedup = row.tokens_per_second / row.baseline_tokens_per_second
        row.speedup_runs = [_speed(p) / _speed(b) for p, b in zip(passes, baseline)]
        if method.kind == "eagle":
            steps = [e for p in passes for conversation in p for a in conversation for e in a.events]
            metrics = summarize(steps, method.k)
            row.mean_acceptance_length = metrics.mean_acceptance_length
            row.draft_acceptance_rate = metrics.draft_acceptance_rate
            row.per_position_acceptance = metrics.per_position_acceptance
        if instrumented:
            steps = [e for conversation in instrumented for a in conversation for e in a.events]
            drift = summarize(steps, method.k)
            row.attention_by_depth = [asdict(m) for m in drift.attention_by_depth or []] or None
            row.hidden_rms_by_depth = drift.hidden_rms_by_depth
            row.instrumented_tokens_per_second = _speed(instrumented)
        if self.config.greedy:
            reference = [[a.ids for a in conversation] for conversation in baseline[0]]
            candidates = passes + ([instrumented] if instrumented else [])
            row.mismatched_prompts = sorted({
                cell.records[i].question_id for p in candidates for i, conversation in enumerate(p)
                if [a.ids for a in conversation] != reference[i]})
            row.lossless = not row.mismatched_prompts
        return row


def _prefill_and_per_token(answer: Answer) -> tuple[float, float]:
    """Seconds of the first step (prefill and first token) and per later token; a peer without steps: 0 and the
    mean over its tokens."""
    if not answer.events:
        return 0.0, answer.seconds / max(len(answer.ids), 1)
    prefill = answer.events[0].elapsed_ms / 1000
    return prefill, (answer.seconds - prefill) / max(len(answer.ids) - 1, 1)


def _speed(pass_: list[list[Answer]]) -> float:
    answers = [a for conversation in pass_ for a in conversation]
    return sum(len(a.ids) for a in answers) / sum(a.seconds for a in answers)


def _median_speed(passes: list[list[list[Answer]]]) -> float:
    return statistics.median(_speed(p) for p in passes)


def run_bench(config: BenchConfig, runner: Runner, progress: ProgressCallback | None = None,
              log: Callable[[str], None] | None = None) -> BenchResult:
    started, t0 = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), time.perf_counter()
    rows = Bench(config, runner, progress, log).run()
    backend = runner.backend
    return BenchResult(rows=rows, config=asdict(config), machine=machine_info(str(backend.device)),
                       preset=backend.preset.name, target=backend.preset.target, started=started,
                       seconds=time.perf_counter() - t0)


SWEEP_FIELDS = ("prompt_sets", "drafters", "ks", "templates")


def with_overrides(config: BenchConfig, **changes) -> BenchConfig:
    """A copy of `config`: given sweep fields replace those of every sweep, other given fields the config's."""
    changes = {k: v for k, v in changes.items() if v is not None}
    sweep_changes = {k: changes.pop(k) for k in SWEEP_FIELDS if k in changes}
    sweeps = list(dict.fromkeys(replace(s, **sweep_changes) for s in config.sweeps))  # drop sweeps made equal
    return replace(config, sweeps=sweeps, **changes)
