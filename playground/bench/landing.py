"""The README's speedup table ("Does EAGLE pay here?"), rendered from the committed result files.

Each row is one committed measurement; every number and every verdict in the "pays?" column is read or decided from
its file. `python scripts/render_readme.py` writes the table into README.md between the two markers below, and a test
checks that the committed README holds what this renders.
"""

from __future__ import annotations

import json
from pathlib import Path

from playground.drafting import PLAIN
from playground.machine import cpu_name
from playground.presets import REPO_ROOT, SHIPPED_DRAFTERS
from playground.viz.summary import times_text as _times

from .rows import result_cell

BEGIN = "<!-- speedup table: rendered by scripts/render_readme.py from the committed result files -->"
END = "<!-- end of the speedup table -->"
SPEED = SHIPPED_DRAFTERS / "speed.json"
ENGINES = REPO_ROOT / "assets" / "bench" / "engines-cpu" / "results.json"
DRIFT = REPO_ROOT / "assets" / "bench" / "drift" / "results.json"
H200 = REPO_ROOT / "assets" / "bench" / "h200" / "results.json"
DRAFTERS = ("eagle3", "eagle3.1")
DRAFTER_NAMES = {"eagle3": "EAGLE-3", "eagle3.1": "EAGLE-3.1"}
SET_NAMES = {"held-out": "held-out", "mt-bench": "MT-Bench", "humaneval": "HumanEval"}


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _link(path: Path) -> str:
    relative = path.relative_to(REPO_ROOT)
    return f"[`{relative.parent.name}/{relative.name}`]({relative})" if relative.name == "results.json" \
        else f"[`{relative.name}`]({relative})"


def _ranged(entry: dict) -> str:
    low, high = entry["speedup_range"]
    return f"{_times(entry['median_speedup'])} ({low:.2f}–{high:.2f})"


def pays(speedups: list[float], lows: list[float] | None = None) -> str:
    """The verdict on speedups (medians; `lows`, the slowest runs, where there was more than one pass)."""
    if all(v > 1 for v in speedups):
        if lows and any(low < 1 for low in lows):
            return "a little, on average: single runs range from a loss to a gain"
        return "yes"
    if all(v < 1 for v in speedups):
        return "no"
    return "on some prompts, not on others"


def row_verdict(by_drafter: dict[str, list[float]], lows: dict[str, list[float]] | None = None) -> str:
    """One verdict where both drafters get the same, else each drafter's."""
    verdicts = {d: pays(v, lows[d] if lows else None) for d, v in by_drafter.items()}
    if len(set(verdicts.values())) == 1:
        return next(iter(verdicts.values()))
    return "; ".join(f"{DRAFTER_NAMES[d]}: {v}" for d, v in verdicts.items())


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def _machine(machine: dict, requests: str) -> str:
    return f"{machine['cores']}-core {cpu_name(machine)} CPU, {requests}"


def _verdict(entries: list[dict]) -> str:
    """The verdict on speed.json's entries, one per drafter in DRAFTERS' order."""
    return row_verdict({d: [e["median_speedup"]] for d, e in zip(DRAFTERS, entries)},
                       {d: [e["speedup_range"][0]] for d, e in zip(DRAFTERS, entries)})


def _speed_rows(speed: dict, best_elsewhere: float) -> tuple[list[str], dict]:
    by_drafter, prompts = speed["speed"]["by_k"]["4"], speed["prompts"]
    fixed = [by_drafter[d] for d in DRAFTERS]
    adaptive = [by_drafter[name] for d in DRAFTERS for name in by_drafter if name.startswith(f"{d} adaptive ")]
    sets = ", ".join(SET_NAMES.get(s, s) for s in prompts["per_set"])
    rows = [_row(_machine(speed["machine"], "one request"),
                 f"our engine, k = 4, {prompts['count']} prompts ({sets}) × {speed['speed']['max_new_tokens']} tokens, "
                 f"the shipped pair ({_link(SPEED)})",
                 *(_ranged(d) for d in fixed), _verdict(fixed))]
    if len(adaptive) == len(DRAFTERS):
        verdict = _verdict(adaptive)
        if max(d["median_speedup"] for d in adaptive) > max(best_elsewhere, *(d["median_speedup"] for d in fixed)):
            verdict = f"the best setting measured on a CPU; {verdict}"
        rows.append(_row("the same", f"the same with adaptive drafting (the chain ends after a draft below "
                                     f"probability {adaptive[0]['min_draft_prob']:g})",
                         *(_ranged(d) for d in adaptive), verdict))
    return rows, speed["machine"]


def _same_machine(machine: dict, before: dict, requests: str) -> str:
    same = (machine["cpu"], machine["cores"]) == (before["cpu"], before["cores"])
    return f"the same, {requests}" if same else _machine(machine, requests)


def _engine_rows(engines: dict, before: dict) -> list[str]:
    config = engines["config"]
    speedup = {(r["engine"], r["drafter"], r["concurrency"]): r["speedup"] for r in engines["rows"]
               if not r["instrumented"] and r["drafter"] != PLAIN}
    most = max(c for _, _, c in speedup)
    one = [speedup["vllm", d, 1] for d in DRAFTERS]
    ours_one = " and ".join(_times(speedup["local", d, 1]) for d in DRAFTERS)
    many = [(speedup["vllm", d, most], speedup["local", d, most]) for d in DRAFTERS]
    return [
        _row(_same_machine(engines["machine"], before, "one request"),
             f"vLLM's CPU build, k = {config['k']}, {config['prompts']} {SET_NAMES.get(config['prompt_set'])} prompts "
             f"× {config['max_new_tokens']} tokens, the step-1840 pair ({_link(ENGINES)})",
             *(_times(s) for s in one),
             f"{row_verdict(dict(zip(DRAFTERS, ([s] for s in one))))} (our engine in the same run: {ours_one})"),
        _row(_same_machine(engines["machine"], before, f"{most} requests at once"), "vLLM / our engine, the same run",
             *(f"{_times(v)} / {_times(o)}" for v, o in many), row_verdict(dict(zip(DRAFTERS, map(list, many))))),
    ]


def _drift_row(drift: dict, before: dict) -> str:
    rows, config = drift["rows"], drift["config"]
    long = [result_cell(rows, d, "long-4k") for d in DRAFTERS]
    context = f"~{long[0]['context_tokens'] / 1000:.0f}k-token prompts"
    passes = "one pass" if config["repeats"] == 1 else f"{config['repeats']} passes"
    machine = drift.get("machine", before)
    return _row(_same_machine(machine, before, context),
                f"our engine, k = 8, the drift study ({config['limit']} prompts × {config['max_new_tokens']} tokens, "
                f"{passes}; {_link(DRIFT)})", *(_times(r["speedup"]) for r in long),
                row_verdict({d: [r["speedup"]] for d, r in zip(DRAFTERS, long)}))


def _h200_row(h200: dict) -> str:
    config = h200["config"]
    sets = [s for s in SET_NAMES if any(r["prompt_set"] == s for r in h200["rows"])]
    per_drafter = {d: {s: result_cell(h200["rows"], d, s, k=4)["speedup"] for s in sets} for d in DRAFTERS}
    passes = "one pass" if config["repeats"] == 1 else f"{config['repeats']} passes"
    verdict = row_verdict({d: list(by_set.values()) for d, by_set in per_drafter.items()})
    per_set = "one prompt" if config["limit"] == 1 else f"{config['limit']} prompts"
    return _row(f"{h200['machine']['gpu']} GPU, one request",
                f"our engine on CUDA, k = 4, {per_set} per set × {config['max_new_tokens']} tokens, "
                f"{passes}, the GPU-trained pair (not shipped; {_link(H200)})",
                *(", ".join(f"{_times(v)} {SET_NAMES[s]}" for s, v in per_drafter[d].items()) for d in DRAFTERS),
                f"{verdict} (indicative only)" if config["repeats"] == 1 else verdict)


def speedup_table() -> str:
    speed, engines, drift, h200 = (_load(p) for p in (SPEED, ENGINES, DRIFT, H200))
    vllm_best = max(r["speedup"] for r in engines["rows"] if r["drafter"] != PLAIN)
    speed_rows, machine = _speed_rows(speed, vllm_best)
    lines = ["| machine | what ran | EAGLE-3 | EAGLE-3.1 | pays? |", "|---|---|---|---|---|", *speed_rows,
             *_engine_rows(engines, machine), _drift_row(drift, machine), _h200_row(h200),
             _row("4 Blackwell GPUs (Kimi K2.6)", "vLLM, tensor parallelism 4", "not measured here",
                  "not measured here", "not verified")]
    return "\n".join(lines)


def with_table(readme: str) -> str:
    """`readme` with the rendered table between its markers."""
    start, end = readme.index(BEGIN) + len(BEGIN), readme.index(END)
    return readme[:start] + "\n" + speedup_table() + "\n" + readme[end:]
