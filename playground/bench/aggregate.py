"""From samples to rows: speed against plain decoding in the same cell and pass, acceptance, drift, losslessness.

* tokens/s of a pass = generated tokens / seconds, summed over its prompts (each call timed by wall clock around
  it, prefill included); a row's tokens/s is the median over passes, its speedup that over plain decoding's
  median, and `speedup_runs` the per-pass ratios against plain decoding in the same pass.
* Acceptance metrics come from `engine.trace.summarize` over all timed steps of a row (vLLM's pooled definitions),
  for EAGLE drafters and the weightless methods alike;
  attention and hidden-state RMS from the instrumented pass, whose speed is reported but never used for speed.
* Step costs (`draft_ms`, `verify_ms`: medians over the timed steps after each answer's first) and rows verified
  per drafting step (chains: drafts + 1; trees: nodes + 1) say what a method pays per step for its acceptance.
* `lossless` (greedy only): every answer of every pass equals plain decoding's, token for token.
* `health`: each answer of the first timed pass held against its drafter's fingerprint (playground/health), summed.
* `auto_k` (k auto rows): what it chose for the first timed pass's answers (each prompt's k, or plain decoding).
* `predicted_speedup`: the first timed pass's own steps priced at this machine's measured step costs (engine/costs),
  beside the measured speedup: the cost model checked against measurement on every row (a weightless method's
  steps at the target's verification alone).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable

from playground.bench.execute import Sample
from playground.bench.methods import Answer, Method
from playground.bench.plan import Cell, Plan
from playground.bench.rows import BenchRow
from playground.drafting import PLAIN
from playground.engine import summarize
from playground.health import Health, health_summary

Pass = list[list[Answer]]  # one conversation per record of a cell


HealthOf = Callable[[Cell, Method, Answer, list[Health]], Health | None]  # on one answer, after these of the row
PredictOf = Callable[[Cell, Method, list[Answer]], tuple[float, float, float] | None]  # (speedup, low, high)


def aggregate(plan: Plan, samples: Iterable[Sample], greedy: bool,
              variant_name: Callable[[Method], str | None], health_of: HealthOf | None = None,
              predict_of: PredictOf | None = None) -> list[BenchRow]:
    """One row per (cell, method) of the plan, in plan order; methods that could not run carry their reason."""
    timed: dict[tuple[int, Method], list[Pass]] = defaultdict(lambda: [[] for _ in range(plan.repeats)])
    instrumented: dict[tuple[int, Method], Pass] = defaultdict(list)
    for s in samples:
        if s.repeat is None:
            instrumented[(s.cell, s.method)].append(s.answers)
        else:
            timed[(s.cell, s.method)][s.repeat].append(s.answers)
    return [_row(cell, method, timed.get((c, method)), instrumented.get((c, method)), timed.get((c, Method(PLAIN))),
                 greedy, variant_name(method), health_of, predict_of)
            for c, cell in enumerate(plan.cells) for method in cell.methods]


def _row(cell: Cell, method: Method, passes: list[Pass] | None, instrumented: Pass | None,
         baseline: list[Pass] | None, greedy: bool, variant: str | None, health_of: HealthOf | None,
         predict_of: PredictOf | None) -> BenchRow:
    row = BenchRow(
        drafter=method.name, label=method.label, kind=method.kind, variant=variant, k=method.k,
        tree_nodes=method.tree_nodes, k_auto=method.auto,
        prompt_set=cell.prompt_set.name, template=cell.template, studies=cell.studies[method],
        prompts=len(cell.records), prompts_skipped=cell.skipped, context_tokens=cell.context_tokens,
        note=cell.unavailable.get(method))
    if passes is None or baseline is None:
        return row
    row.baseline_tokens_per_second = _median_speed(baseline)
    row.turns = sum(len(conversation) for conversation in passes[0])
    row.generated_tokens = sum(len(a.ids) for conversation in passes[0] for a in conversation)
    row.tokens_per_second_runs = [_speed(p) for p in passes]
    row.tokens_per_second = _median_speed(passes)
    row.speedup = row.tokens_per_second / row.baseline_tokens_per_second
    row.speedup_runs = [_speed(p) / _speed(b) for p, b in zip(passes, baseline)]
    if method.auto:
        row.auto_k = _auto_choices([a for conversation in passes[0] for a in conversation])
    k = method.k or max((c["k"] or 1 for c in row.auto_k or []), default=1)  # k auto: the deepest k it chose
    steps = [e for p in passes for conversation in p for a in conversation for e in (a.events or [])[1:]]  # no prefill
    drafting = [e for e in steps if e.drafted or e.tree_tokens]
    if drafting:
        row.verified_per_step = summarize(drafting, k).verified_per_step  # nodes (or drafts) + 1, counted once
        draft = [e.draft_ms for e in drafting if e.draft_ms is not None]
        row.draft_ms = statistics.median(draft) if draft else None
    verify = [e.verify_ms for e in steps if e.verify_ms is not None]
    row.verify_ms = statistics.median(verify) if verify else None
    if method.speculates:
        metrics = summarize([e for p in passes for conversation in p for a in conversation for e in a.events], k)
        row.mean_acceptance_length = metrics.mean_acceptance_length
        row.draft_acceptance_rate = metrics.draft_acceptance_rate
        row.per_position_acceptance = metrics.per_position_acceptance
    if health_of is not None and method.kind == "eagle":  # the first timed pass: runs as a user would have them
        healths: list[Health] = []  # each answer's, held with the row's earlier ones (health.check.pooled)
        for a in (a for conversation in passes[0] for a in conversation):
            if (h := health_of(cell, method, a, healths)) is not None:
                healths.append(h)
        row.health = health_summary(healths)
    if predict_of is not None and (predicted := predict_of(cell, method, [a for c in passes[0] for a in c])):
        speedup, low, high = predicted
        row.predicted_speedup, row.predicted_range = speedup, [low, high]
    if instrumented:
        drift = summarize([e for conversation in instrumented for a in conversation for e in a.events], k)
        row.attention_by_depth = drift.attention_by_depth or None
        row.hidden_rms_by_depth = drift.hidden_rms_by_depth
        row.instrumented_tokens_per_second = _speed(instrumented)
    if greedy:
        reference = [[a.ids for a in conversation] for conversation in baseline[0]]
        candidates = passes + ([instrumented] if instrumented else [])
        row.mismatched_prompts = sorted({
            cell.records[i].question_id for p in candidates for i, conversation in enumerate(p)
            if [a.ids for a in conversation] != reference[i]})
        row.lossless = not row.mismatched_prompts
    return row


def _auto_choices(answers: list[Answer]) -> list[dict]:
    """Each distinct choice k auto made over these answers, in first-made order, with the answers it ran."""
    choices: dict[int | None, dict] = {}
    for a in answers:
        if a.auto is not None:
            choices.setdefault(a.auto.k, {**a.auto.to_dict(), "answers": 0})["answers"] += 1
    return list(choices.values())


def _speed(pass_: Pass) -> float:
    answers = [a for conversation in pass_ for a in conversation]
    return sum(len(a.ids) for a in answers) / sum(a.seconds for a in answers)


def _median_speed(passes: list[Pass]) -> float:
    return statistics.median(_speed(p) for p in passes)
