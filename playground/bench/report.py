"""Bench outputs: results.csv, results.json and a self-contained report.html with figures and findings in words.

Findings are generated from the measured rows — whichever way the numbers come out — never written by hand.
"""

from __future__ import annotations

import html
import json
from collections import defaultdict
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from playground.bench.runner import BenchResult
from playground.viz import bench as figures
from playground.viz.bench import condition, method_name, speedup_range

Row = dict
STUDIES = ("k", "context", "template")
TABLE_COLUMNS = ("label", "k", "prompt_set", "template", "context_tokens", "prompts", "turns", "tokens_per_second",
                 "baseline_tokens_per_second", "speedup", "mean_acceptance_length", "draft_acceptance_rate",
                 "instrumented_tokens_per_second", "lossless", "note")


# ------------------------------------------------------------------------------------------------ findings


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _ratio_words(ratio: float) -> str:
    if abs(ratio - 1) < 0.005:
        return f"{ratio:.2f}× (no difference)"
    return f"{ratio:.2f}× ({'longer' if ratio > 1 else 'shorter'})"


def pairs(rows: list[Row]) -> list[tuple[Row, Row]]:
    """(EAGLE-3 row, EAGLE-3.1 row) measured on the same prompt set, template and k."""
    groups: dict[tuple, dict[str, list[Row]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["kind"] == "eagle" and r["mean_acceptance_length"] is not None:
            groups[(r["prompt_set"], r["template"], r["k"])][r["variant"]].append(r)
    return [(g["EAGLE-3"][0], g["EAGLE-3.1"][0]) for g in groups.values()
            if len(g["EAGLE-3"]) == 1 and len(g["EAGLE-3.1"]) == 1]


def _al_ratio(pair: tuple[Row, Row]) -> float:
    return pair[1]["mean_acceptance_length"] / pair[0]["mean_acceptance_length"]


def _lossless_findings(rows: list[Row], greedy: bool) -> list[str]:
    if not greedy:
        return [("Outputs were sampled (temperature > 0), so they are not compared token by token with plain "
                 "decoding; only greedy runs have a lossless check.")]
    checked = [r for r in rows if r["lossless"] is not None]
    broken = [r for r in checked if not r["lossless"]]
    if not broken:
        return [(f"Lossless: the greedy output of all {len(checked)} measured configurations was token-identical "
                 "to plain decoding on every prompt.")]
    return [f"NOT lossless: {method_name(r)} on {condition(r)} differed from plain decoding on "
            f"{len(r['mismatched_prompts'])} of {r['prompts']} prompts ({', '.join(r['mismatched_prompts'][:5])})."
            for r in broken]


def _spread_words(r: Row) -> str:
    spread = speedup_range(r)
    if spread is None:
        return "one pass, so no spread was measured: indicative only"
    return f"median of {len(r['speedup_runs'])} passes, which ranged {spread[0]:.2f}–{spread[1]:.2f}×"


def _speed_findings(rows: list[Row]) -> list[str]:
    out = []
    by_condition: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        if r["tokens_per_second"] is not None:
            by_condition[condition(r)].append(r)
    for cond, group in by_condition.items():
        ranked = sorted(group, key=lambda r: r["tokens_per_second"], reverse=True)
        best = ranked[0]
        finding = (f"On {cond}, the fastest method was {method_name(best)} at {best['tokens_per_second']:.1f} "
                   f"tokens/s: {best['speedup']:.2f}× plain decoding ({best['baseline_tokens_per_second']:.1f} "
                   f"tokens/s, same run, same prompts; {_spread_words(best)}).")
        close = [r for r in ranked[1:] if _overlap(best, r)]
        if close:
            finding += (" Within noise of " + ", ".join(f"{method_name(r)} ({r['speedup']:.2f}×, {_spread_words(r)})"
                                                        for r in close) + ": the passes do not separate them.")
        out.append(finding)
        eagles, peers = _eagles_and_peers(group)
        for eagle in eagles if peers else []:
            ratios = ", ".join(f"{eagle['tokens_per_second'] / p['tokens_per_second']:.2f}× {method_name(p)}"
                               for p in peers)
            out.append(f"{method_name(eagle)} (its fastest k) ran at {ratios} (tokens/s ratios).")
    notes: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in rows:
        if r["note"] and r["label"] not in notes[(condition(r), r["note"])]:
            notes[(condition(r), r["note"])].append(r["label"])
    return out + [f"Not measured on {cond} ({', '.join(labels)}): {note}." for (cond, note), labels in notes.items()]


def _overlap(a: Row, b: Row) -> bool:
    ra, rb = speedup_range(a), speedup_range(b)
    return ra is not None and rb is not None and ra[0] <= rb[1] and rb[0] <= ra[1]


def _eagles_and_peers(rows: list[Row]) -> tuple[list[Row], list[Row]]:
    """The fastest k of each EAGLE drafter and of each peer among measured rows of one condition."""
    measured = [r for r in rows if r["tokens_per_second"] is not None]
    return (_best_per_label([r for r in measured if r["kind"] == "eagle"]),
            _best_per_label([r for r in measured if r["kind"] == "peer"]))


def _best_per_label(rows: list[Row]) -> list[Row]:
    best: dict[str, Row] = {}
    for r in rows:
        if r["label"] not in best or r["tokens_per_second"] > best[r["label"]]["tokens_per_second"]:
            best[r["label"]] = r
    return list(best.values())


def _k_findings(pairs: list[tuple[Row, Row]]) -> list[str]:
    out = []
    by_condition: dict[str, list[tuple[Row, Row]]] = defaultdict(list)
    for pair in pairs:
        by_condition[condition(pair[0])].append(pair)
    for cond, group in by_condition.items():
        if len(group) < 2:
            continue
        group.sort(key=lambda p: p[0]["k"])
        low, high = group[0], group[-1]
        out.append(
            f"On {cond}, EAGLE-3.1's mean acceptance length is {_ratio_words(_al_ratio(high))} EAGLE-3's at "
            f"k={high[0]['k']} ({high[1]['mean_acceptance_length']:.2f} vs {high[0]['mean_acceptance_length']:.2f}) "
            f"and {_ratio_words(_al_ratio(low))} at k={low[0]['k']} ({low[1]['mean_acceptance_length']:.2f} vs "
            f"{low[0]['mean_acceptance_length']:.2f}).")
        out.append(
            f"From k={low[0]['k']} to k={high[0]['k']}, EAGLE-3's acceptance length goes from "
            f"{low[0]['mean_acceptance_length']:.2f} to {high[0]['mean_acceptance_length']:.2f} and EAGLE-3.1's from "
            f"{low[1]['mean_acceptance_length']:.2f} to {high[1]['mean_acceptance_length']:.2f}.")
        fastest = [max((p[i] for p in group), key=lambda r: r["speedup"] or 0) for i in (0, 1)]
        out.append(f"Fastest k on {cond}: EAGLE-3 at k={fastest[0]['k']} ({fastest[0]['speedup']:.2f}×), "
                   f"EAGLE-3.1 at k={fastest[1]['k']} ({fastest[1]['speedup']:.2f}×).")
    return out


def _context_findings(pairs: list[tuple[Row, Row]]) -> list[str]:
    out = []
    by_k: dict[tuple, list[tuple[Row, Row]]] = defaultdict(list)
    for pair in pairs:
        by_k[(pair[0]["k"], pair[0]["template"])].append(pair)
    for (k, template), group in by_k.items():
        lengths = sorted({p[0]["context_tokens"] for p in group})
        if len(lengths) < 2:
            continue
        group.sort(key=lambda p: p[0]["context_tokens"])
        ratios = "; ".join(f"{_al_ratio(p):.2f}× at ~{p[0]['context_tokens']} prompt tokens ({p[0]['prompt_set']})"
                           for p in group)
        out.append(f"EAGLE-3.1 / EAGLE-3 mean acceptance length at k={k} ({template} template): {ratios}.")
        short, long = group[0], group[-1]
        keep = [long[i]["mean_acceptance_length"] / short[i]["mean_acceptance_length"] for i in (0, 1)]
        out.append(f"From ~{short[0]['context_tokens']} to ~{long[0]['context_tokens']} prompt tokens, EAGLE-3 keeps "
                   f"{_pct(keep[0])} of its acceptance length and EAGLE-3.1 keeps {_pct(keep[1])}.")
    return out


def _template_findings(pairs: list[tuple[Row, Row]]) -> list[str]:
    out = []
    reference = {p[0]["k"]: p for p in pairs if p[0]["template"] == "default" and
                 not p[0]["prompt_set"].endswith("unfamiliar-system")}
    for pair in pairs:
        base = reference.get(pair[0]["k"])
        if base is None or pair is base:
            continue
        keep = [pair[i]["mean_acceptance_length"] / base[i]["mean_acceptance_length"] for i in (0, 1)]
        out.append(f"Under {condition(pair[0])} (vs {condition(base[0])}, k={pair[0]['k']}): EAGLE-3 keeps "
                   f"{_pct(keep[0])} of its acceptance length, EAGLE-3.1 keeps {_pct(keep[1])}; EAGLE-3.1 / EAGLE-3 "
                   f"= {_ratio_words(_al_ratio(pair))}.")
    return out


def _depth_findings(pairs: list[tuple[Row, Row]]) -> list[str]:
    out = []
    for e3, e31 in pairs:
        if not (e3["attention_by_depth"] and e31["attention_by_depth"]):
            continue
        d = min(len(e3["attention_by_depth"]), len(e31["attention_by_depth"]))
        a3, a31 = e3["attention_by_depth"][d - 1], e31["attention_by_depth"][d - 1]
        out.append(f"At draft depth {d} ({condition(e3)}, k={e3['k']}), EAGLE-3 puts {_pct(a3['draft'])} of its "
                   f"attention on its own drafts and {_pct(a3['sink'])} on the sink token; EAGLE-3.1 puts "
                   f"{_pct(a31['draft'])} and {_pct(a31['sink'])}.")
        if e3["hidden_rms_by_depth"] and e31["hidden_rms_by_depth"]:
            r3, r31 = e3["hidden_rms_by_depth"], e31["hidden_rms_by_depth"]
            out.append(f"The hidden state carried into depth 1..{len(r3)} has RMS {r3[0]:.2f} → {r3[-1]:.2f} for "
                       f"EAGLE-3 (×{r3[-1] / r3[0]:.2f}) and {r31[0]:.2f} → {r31[-1]:.2f} for EAGLE-3.1 "
                       f"(×{r31[-1] / r31[0]:.2f}).")
        if e3["per_position_acceptance"] and e31["per_position_acceptance"]:
            p3, p31 = e3["per_position_acceptance"][-1], e31["per_position_acceptance"][-1]
            out.append(f"Acceptance at the deepest position ({len(e3['per_position_acceptance'])}) there: EAGLE-3 "
                       f"{_pct(p3)}, EAGLE-3.1 {_pct(p31)} of drafting steps.")
    return out


def deepest_pairs(matched: list[tuple[Row, Row]]) -> list[tuple[Row, Row]]:
    """Per condition, the pair with the largest k."""
    best: dict[str, tuple[Row, Row]] = {}
    for pair in matched:
        if condition(pair[0]) not in best or pair[0]["k"] > best[condition(pair[0])][0]["k"]:
            best[condition(pair[0])] = pair
    return list(best.values())


def study_rows(rows: list[Row], study: str) -> list[Row]:
    """Rows a report section reads: those made for the study, or all rows when no sweep named any study."""
    if any(s in STUDIES for r in rows for s in r["studies"]):
        return [r for r in rows if study in r["studies"]]
    return rows


def findings(rows: list[Row], greedy: bool) -> list[str]:
    """Plain-language statements of the measured numbers."""
    out = _lossless_findings(rows, greedy) + _speed_findings(rows)
    out += _k_findings(pairs(study_rows(rows, "k")))
    out += _context_findings(pairs(study_rows(rows, "context")))
    out += _template_findings(pairs(study_rows(rows, "template")))
    out += _depth_findings(deepest_pairs(pairs(study_rows(rows, "k"))))
    all_pairs = pairs(rows)
    if all_pairs:
        wins = sum(_al_ratio(p) > 1 for p in all_pairs)
        out.append(f"Overall, EAGLE-3.1 had the longer mean acceptance length in {wins} of {len(all_pairs)} matched "
                   "(prompt set, template, k) configurations.")
    return out


# ------------------------------------------------------------------------------------------------ outputs


def _figures(rows: list[Row]) -> list[tuple[str, list[go.Figure]]]:
    sections: list[tuple[str, list[go.Figure]]] = [("Speed", [figures.speed_figure(rows)])]
    eagle = [r for r in rows if r["kind"] == "eagle" and r["mean_acceptance_length"] is not None]
    if not eagle:
        return sections
    by_k = study_rows(eagle, "k")
    if len({r["k"] for r in by_k}) > 1:
        sections.append(("Acceptance length vs k", [figures.acceptance_vs_k_figure(by_k)]))
    deepest = [r for pair in deepest_pairs(pairs(by_k)) for r in pair] or deepest_rows(by_k)
    sections.append(("Drift by draft depth (the deepest k of each condition)", [
        figures.per_position_figure(deepest), figures.attention_by_depth_figure(deepest),
        figures.hidden_rms_figure(deepest)]))
    by_context = study_rows(eagle, "context")
    if len({r["context_tokens"] for r in by_context}) > 1:
        sections.append(("Acceptance length vs context length", [figures.acceptance_vs_context_figure(by_context)]))
    by_template = study_rows(eagle, "template")
    if len({condition(r) for r in by_template}) > 1:
        sections.append(("Changed chat template or system prompt", [
            figures.template_figure(by_template), figures.per_position_figure(by_template),
            figures.attention_by_depth_figure(by_template), figures.hidden_rms_figure(by_template)]))
    return sections


def deepest_rows(rows: list[Row]) -> list[Row]:
    deepest = max(r["k"] for r in rows)
    return [r for r in rows if r["k"] == deepest]


def _cell(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.2f}"
    return html.escape(str(value))


def _table(rows: list[Row]) -> str:
    head = "".join(f"<th>{c}</th>" for c in TABLE_COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{_cell(r[c])}</td>" for c in TABLE_COLUMNS) + "</tr>" for r in rows)
    return f"<div class='wide'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def _peer_table(rows: list[Row]) -> str:
    """Per condition: each EAGLE drafter (its fastest k) over each peer (its fastest k), in tokens/s."""
    tables = []
    by_condition: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_condition[condition(r)].append(r)
    for cond, group in by_condition.items():
        eagles, peers = _eagles_and_peers(group)
        if not (eagles and peers):
            continue
        head = "".join(f"<th>÷ {html.escape(method_name(p))}</th>" for p in peers)
        body = "".join(f"<tr><td>{html.escape(method_name(e))}</td>" + "".join(
            f"<td>{e['tokens_per_second'] / p['tokens_per_second']:.2f}×</td>" for p in peers) + "</tr>"
            for e in eagles)
        tables.append(f"<h3>{html.escape(cond)}</h3><table><thead><tr><th>tokens/s of</th>{head}</tr></thead>"
                      f"<tbody>{body}</tbody></table>")
    return "<h2>EAGLE beside the peers (tokens/s ratios)</h2>" + "".join(tables) if tables else ""


def report_html(data: dict, plotlyjs: str = "inline") -> str:
    """The report page; plotly.js is inlined once (`inline`) or loaded from the CDN (`cdn`)."""
    rows, first = data["rows"], True
    parts = []
    for title, figs in _figures(rows):
        parts.append(f"<h2>{html.escape(title)}</h2>")
        for fig in figs:
            include = (True if plotlyjs == "inline" else "cdn") if first else False
            parts.append(fig.to_html(full_html=False, include_plotlyjs=include))
            first = False
    config = data["config"]
    head = (f"preset <b>{html.escape(data['preset'])}</b> · target <code>{html.escape(data['target'])}</code> · "
            f"profile {html.escape(str(config.get('profile')))} · started {data['started']} · "
            f"{data['seconds'] / 60:.1f} min · temperature {config['temperature']} · max_new_tokens "
            f"{config['max_new_tokens']} · repeats {config['repeats']} · {html.escape(data['machine']['cpu'])}")
    items = "".join(f"<li>{html.escape(f)}</li>" for f in data["findings"])
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>EAGLE Playground bench</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }}
table {{ border-collapse: collapse; font-size: 0.85em; }} td, th {{ border: 1px solid #ddd; padding: 3px 6px; }}
th {{ background: #f4f4f4; }} .wide {{ overflow-x: auto; }}
code, pre {{ background: #f6f6f6; }} pre {{ padding: 1em; overflow-x: auto; }}
</style></head><body>
<h1>EAGLE Playground bench</h1>
<p>{head}</p>
<p>Speedup is measured against plain decoding of the same target on the same prompts in the same run (ratio of
median tokens/s over repeats, after warm-up); attention and hidden-state RMS come from a separate instrumented
pass that is not timed. Mean acceptance length = 1 + accepted / drafting steps (vLLM's definition).</p>
<h2>Findings</h2><ul>{items}</ul>
{''.join(parts)}
{_peer_table(rows)}
<h2>All rows</h2>{_table(rows)}
<h2>Machine and configuration</h2><pre>{html.escape(json.dumps({'machine': data['machine'], 'config': config},
                                                                  indent=2))}</pre>
</body></html>
"""


def _csv_value(value):
    return json.dumps(value) if isinstance(value, (list, dict)) else value


def write_outputs(result: BenchResult, out_dir: str | Path, plotlyjs: str = "inline") -> dict[str, Path]:
    """Write results.csv (list columns as JSON), results.json and report.html; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = result.to_dict()
    data["findings"] = findings(data["rows"], greedy=result.config["temperature"] == 0)
    paths = {"csv": out / "results.csv", "json": out / "results.json", "html": out / "report.html"}
    frame = pd.DataFrame([{k: _csv_value(v) for k, v in r.items()} for r in data["rows"]]).convert_dtypes()
    frame.to_csv(paths["csv"], index=False)
    paths["json"].write_text(json.dumps(data, indent=1))
    paths["html"].write_text(report_html(data, plotlyjs), encoding="utf-8")
    return paths
