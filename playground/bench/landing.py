"""The README's speedup table ("Does EAGLE pay here?"), rendered from the committed result files.

Each row is one committed measurement; every number and every verdict in the "pays?" column is read or decided from
its file, and every row names the CPU kind and date its file records (or says what it does not record). The first
rows come from the landing files, one per CPU kind (`assets/bench/landing/<kind>.json`, written by `python -m
playground bench --profile landing`: landing_run.py); the About tab and the Chat's example line read them through
`landing_records`, `nearest_record` and `kind_words_of` here. `python scripts/render_readme.py` writes the table into
README.md between the two markers below, and a test checks that the committed README holds what this renders.
"""

from __future__ import annotations

import json
from pathlib import Path

from playground.drafting import METHODS, PLAIN
from playground.machine import cpu_kind, cpu_name, kind_words, nearest_kind, recorded_kind
from playground.presets import REPO_ROOT, SHIPPED_DRAFTERS
from playground.viz.summary import times_text as _times

from .landing_run import LANDING_DIR, VLLM_LANDING_DIR
from .rows import result_cell

BEGIN = "<!-- speedup table: rendered by scripts/render_readme.py from the committed result files -->"
END = "<!-- end of the speedup table -->"
SPEED = SHIPPED_DRAFTERS / "speed.json"
ENGINES = REPO_ROOT / "assets" / "bench" / "engines-cpu" / "results.json"
DRIFT = REPO_ROOT / "assets" / "bench" / "drift" / "results.json"
H200 = REPO_ROOT / "assets" / "bench" / "h200" / "results.json"
DRAFTERS = tuple(name for name, method in METHODS.items() if method.checkpoint)  # the registry's trained drafters
DRAFTER_NAMES = {name: METHODS[name].label for name in DRAFTERS}
SET_NAMES = {"held-out": "held-out", "mt-bench": "MT-Bench", "humaneval": "HumanEval"}


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _link(path: Path) -> str:
    if not path.is_relative_to(REPO_ROOT):  # a file outside the repository (tests render copies): its name
        return f"`{path.name}`"
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


def kind_words_of(machine: dict) -> str:
    """The CPU kind a file's machine record names, in words, or what the record says where it names none."""
    kind = recorded_kind(machine)
    return kind_words(kind) if kind else "its CPU flags not recorded"


def _date(started: str | None) -> str:
    return started[:10] if started else "date not recorded"


def _machine(machine: dict, started: str | None, requests: str) -> str:
    return f"{machine['cores']}-core {cpu_name(machine)} CPU ({kind_words_of(machine)}), {_date(started)}, {requests}"


def _verdict(entries: list[dict]) -> str:
    """The verdict on speed.json's entries, one per drafter in DRAFTERS' order."""
    return row_verdict({d: [e["median_speedup"]] for d, e in zip(DRAFTERS, entries)},
                       {d: [e["speedup_range"][0]] for d, e in zip(DRAFTERS, entries)})


def _speed_rows(speed: dict, best_elsewhere: float) -> tuple[list[str], dict]:
    by_drafter, prompts = speed["speed"]["by_k"]["4"], speed["prompts"]
    fixed = [by_drafter[d] for d in DRAFTERS]
    adaptive = [by_drafter[name] for d in DRAFTERS for name in by_drafter if name.startswith(f"{d} adaptive ")]
    sets = ", ".join(SET_NAMES.get(s, s) for s in prompts["per_set"])
    rows = [_row(_machine(speed["machine"], speed.get("started"), "one request"),
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


def _same_machine(machine: dict, started: str | None, before: dict, requests: str) -> str:
    same = (machine["cpu"], machine["cores"], recorded_kind(machine)) == (before["cpu"], before["cores"],
                                                                          recorded_kind(before))
    return f"the same CPU, {_date(started)}, {requests}" if same else _machine(machine, started, requests)


def _engine_rows(engines: dict, before: dict, path: Path = ENGINES, pair: str = "the step-1840 pair") -> list[str]:
    """vLLM's rows from a `bench-engines` result: one request at a time, and the most requests at once where the run
    had several levels."""
    config = engines["config"]
    speedup = {(r["engine"], r["drafter"], r["concurrency"]): r["speedup"] for r in engines["rows"]
               if not r["instrumented"] and r["drafter"] != PLAIN and not r.get("neighbours")}
    most = max(c for _, _, c in speedup)
    one = [speedup["vllm", d, 1] for d in DRAFTERS]
    ours_one = " and ".join(_times(speedup["local", d, 1]) for d in DRAFTERS)
    many = [(speedup["vllm", d, most], speedup["local", d, most]) for d in DRAFTERS]
    share = (engines.get("other_work") or {}).get("other_cpu_share")
    # vLLM's engine processes end without this process waiting for them, so their CPU time reads as other work
    requests = "one request" + (f", other processes (vLLM's ended engine processes among them) took {100 * share:.0f} "
                                "% of the CPU time" if share is not None else "")
    rows = [
        _row(_same_machine(engines["machine"], engines.get("started"), before, requests),
             f"vLLM's CPU build, k = {config['k']}, {config['prompts']} {SET_NAMES.get(config['prompt_set'])} prompts "
             f"× {config['max_new_tokens']} tokens, one pass, {pair} ({_link(path)})",
             *(_times(s) for s in one),
             f"{row_verdict(dict(zip(DRAFTERS, ([s] for s in one))))} (our engine in the same run: {ours_one})"),
    ]
    if most > 1:
        rows.append(_row("the same", f"vLLM / our engine, the same run, {most} requests at once",
                         *(f"{_times(v)} / {_times(o)}" for v, o in many),
                         row_verdict(dict(zip(DRAFTERS, map(list, many))))))
    return rows


def _drift_row(drift: dict, before: dict) -> str:
    rows, config = drift["rows"], drift["config"]
    long = [result_cell(rows, d, "long-4k") for d in DRAFTERS]
    context = f"~{long[0]['context_tokens'] / 1000:.0f}k-token prompts"
    passes = "one pass" if config["repeats"] == 1 else f"{config['repeats']} passes"
    machine = drift.get("machine", before)
    return _row(_same_machine(machine, drift.get("started"), before, context),
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
    return _row(f"{h200['machine']['gpu']} GPU, {_date(h200.get('started'))}, one request",
                f"our engine on CUDA, k = 4, {per_set} per set × {config['max_new_tokens']} tokens, "
                f"{passes}, the GPU-trained pair (not shipped; {_link(H200)})",
                *(", ".join(f"{_times(v)} {SET_NAMES[s]}" for s, v in per_drafter[d].items()) for d in DRAFTERS),
                f"{verdict} (indicative only)" if config["repeats"] == 1 else verdict)


def landing_records(folder: Path = LANDING_DIR) -> list[dict]:
    """The landing files, newest first (each with its `path`); none where the folder is absent."""
    if not folder.is_dir():
        return []
    records = [{**_load(path), "path": path} for path in sorted(folder.glob("*.json"))]
    return sorted(records, key=lambda r: (r["date"], r["cpu_kind"]), reverse=True)


def nearest_record(records: list[dict], kind: str | None = None) -> dict | None:
    """The newest landing record of the committed kind nearest to `kind` (this machine's by default); None where no
    committed kind is near (machine.nearest_kind)."""
    nearest = nearest_kind(kind or cpu_kind(), [r["cpu_kind"] for r in records])
    return next((r for r in records if r["cpu_kind"] == nearest), None)


def beside_words(record: dict) -> str:
    """What ran beside a landing measurement, as its file records it."""
    other = record.get("other_work") or {}
    share = other.get("other_cpu_share")
    if share is None:
        return "what ran beside it not recorded"
    if other.get("beside_other_work"):
        return f"measured beside other work (other processes took {100 * share:.0f} % of the CPU time)"
    return f"on an otherwise idle machine (other processes took {100 * share:.0f} % of the CPU time)"


def measured_on(record: dict) -> str:
    """'a 2-core AMD EPYC CPU (AMD Zen 4, family 25: …), 2026-12-06': what a landing record ran on, and when."""
    machine = record["machine"]
    return f"a {machine['cores']}-core {cpu_name(machine)} CPU ({kind_words(record['cpu_kind'])}), {record['date']}"


def _set_speedups(rows: list[dict], drafter: str, auto: bool) -> dict[str, dict]:
    return {r["prompt_set"]: r for r in rows
            if r["drafter"] == drafter and bool(r.get("k_auto")) == auto and r.get("speedup") is not None}


def _chosen(by_set: dict[str, dict]) -> str:
    ks = sorted({c["k"] for r in by_set.values() for c in r.get("auto_k") or [] if c["k"] is not None})
    plain = any(c["k"] is None for r in by_set.values() for c in r.get("auto_k") or [])
    chosen = [*(str(k) for k in ks), *(["plain"] if plain else [])]
    return f"; k chosen: {', '.join(chosen)}" if chosen else ""


def _set_cell(prompt_set: str, row: dict) -> str:
    """'2.05× held-out (1.90–2.20)': the median over passes, and the passes' range where there were several."""
    runs = row.get("speedup_runs") or []
    spread = f" ({min(runs):.2f}–{max(runs):.2f})" if len(runs) > 1 else ""
    return f"{_times(row['speedup'])} {SET_NAMES.get(prompt_set, prompt_set)}{spread}"


def weights_words(record: dict) -> str:
    """'its int4 weights': what the landing run's target multiplied (a file from before int4: float32)."""
    weights = {(r.get("run_fields") or {}).get("weights") for r in record["rows"]} - {None}
    return f"its {' and '.join(sorted(weights)) if weights else 'float32'} weights"


def _landing_row(record: dict, auto: bool) -> str:
    by_drafter = {d: _set_speedups(record["rows"], d, auto) for d in DRAFTERS}
    cells = [", ".join(_set_cell(s, r) for s, r in by_set.items()) + (_chosen(by_set) if auto else "")
             for by_set in by_drafter.values()]
    verdict = row_verdict({d: [r["speedup"] for r in by_set.values()] for d, by_set in by_drafter.items()},
                          {d: [min(r["speedup_runs"]) for r in by_set.values() if r["speedup_runs"]]
                           for d, by_set in by_drafter.items()})
    if not auto:
        config = record["config"]
        sets = sorted({r["prompt_set"] for r in record["rows"]}, key=list(SET_NAMES).index)
        prompts = sum(next(r["prompts"] for r in record["rows"] if r["prompt_set"] == s) for s in sets)
        passes = "one pass" if config["repeats"] == 1 else f"{config['repeats']} passes"
        names = ", ".join(SET_NAMES[s] for s in sets)
        count = f"{prompts} prompts ({names})" if prompts != len(sets) else \
            f"{prompts} prompt{'s' if prompts > 1 else ''}, one each from {names},"
        what = (f"our engine, k = 4, {count} × "
                f"{config['max_new_tokens']} tokens, {passes}, the shipped pair on {weights_words(record)} "
                f"({_link(record['path'])})")
        return _row(f"{measured_on(record)[2:]}, one request, {beside_words(record)}", what, *cells, verdict)
    return _row("the same", "the same at k auto (each prompt's k chosen from step costs measured in the run)", *cells,
                verdict)


def vllm_landing_records(folder: Path = VLLM_LANDING_DIR) -> dict[str, dict]:
    """The vLLM landing files (`bench-engines --landing`) by CPU kind, each with its `path`."""
    if not folder.is_dir():
        return {}
    records = [{**_load(path), "path": path} for path in sorted(folder.glob("*.json"))]
    return {recorded_kind(r["machine"]): r for r in records}


def _landing_rows(records: list[dict], vllm: dict[str, dict]) -> list[str]:
    """Each CPU kind's rows: our engine at k = 4 and at k auto, then vLLM's, where that kind has a vLLM file."""
    rows = []
    for record in records:
        rows += [_landing_row(record, auto) for auto in (False, True)]
        if record["cpu_kind"] in vllm:
            engines = vllm[record["cpu_kind"]]
            rows += _engine_rows(engines, record["machine"], engines["path"], "the shipped pair in float32")
    return rows


def speedup_table(folder: Path = LANDING_DIR) -> str:
    speed, engines, drift, h200 = (_load(p) for p in (SPEED, ENGINES, DRIFT, H200))
    landing, vllm = landing_records(folder), vllm_landing_records(folder / "vllm")
    best_elsewhere = max([r["speedup"] for r in engines["rows"] if r["drafter"] != PLAIN]
                         + [r["speedup"] for record in landing for r in record["rows"]
                            if r["drafter"] != PLAIN and r.get("speedup") is not None])
    speed_rows, machine = _speed_rows(speed, best_elsewhere)
    lines = [f"| machine | what ran | {' | '.join(DRAFTER_NAMES.values())} | pays? |",
             "|---|---|" + "---|" * len(DRAFTERS) + "---|", *_landing_rows(landing, vllm),
             *speed_rows, *_engine_rows(engines, machine), _drift_row(drift, machine), _h200_row(h200),
             _row("4 Blackwell GPUs (Kimi K2.6)", "vLLM, tensor parallelism 4", "not measured here",
                  "not measured here", "not verified")]
    return "\n".join(lines)


def with_table(readme: str, folder: Path = LANDING_DIR) -> str:
    """`readme` with the rendered tables between their markers: this speedup table and the llama.cpp one."""
    from .against_llamacpp import with_llamacpp_table

    start, end = readme.index(BEGIN) + len(BEGIN), readme.index(END)
    return with_llamacpp_table(readme[:start] + "\n" + speedup_table(folder) + "\n" + readme[end:])


def chat_examples_figures(records: list[dict], kind: str | None = None) -> tuple[str, dict[str, float]]:
    """The Chat's example line and each example prompt's measured acceptance length, from the landing record of the
    kind nearest to this machine (else the newest that measured them); ('', {}) where no file measured them."""
    measured = [r for r in records if r.get("chat_examples")]
    record = nearest_record(measured, kind) or next(iter(measured), None)
    if record is None:
        return "", {}
    examples = record["chat_examples"]
    lengths = {e["prompt"]: e["mean_acceptance_length"] for e in examples["prompts"]}
    line = (f"Examples: {DRAFTER_NAMES.get(examples['drafter'], examples['drafter'])}'s mean acceptance length at "
            f"k = {examples['k']} (tokens per step, at most {examples['k'] + 1}), {examples['max_new_tokens']} tokens, "
            f"measured on {measured_on(record)}.")
    return line, lengths
