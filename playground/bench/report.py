"""Bench outputs: results.csv, results.json and a self-contained report.html with the figures and the findings in
words (`playground.bench.findings`)."""

from __future__ import annotations

import html
import json
from collections import defaultdict
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from playground.bench import figures
from playground.bench.figures import condition, method_name
from playground.bench.findings import deepest_pairs, findings, fixed_k_eagle_rows, ours_and_peers, pairs, study_rows
from playground.bench.rows import BenchResult, BenchRow

TABLE_COLUMNS = ("label", "k_text", "tree_nodes", "prompt_set", "template", "context_tokens", "prompts", "turns",
                 "tokens_per_second", "baseline_tokens_per_second", "speedup", "predicted_speedup",
                 "mean_acceptance_length",
                 "draft_acceptance_rate", "verified_per_step", "draft_ms", "verify_ms",
                 "instrumented_tokens_per_second", "lossless", "note")


# ------------------------------------------------------------------------------------------------ outputs


def _figures(rows: list[BenchRow]) -> list[tuple[str, list[go.Figure]]]:
    sections: list[tuple[str, list[go.Figure]]] = [("Speed", [figures.speed_figure(rows)])]
    eagle = fixed_k_eagle_rows(rows)
    if not eagle:
        return sections
    by_k = study_rows(eagle, "k")
    if len({r.k for r in by_k}) > 1:
        sections.append(("Acceptance length vs k", [figures.acceptance_vs_k_figure(by_k)]))
    deepest = [r for pair in deepest_pairs(pairs(by_k)) for r in pair] or deepest_rows(by_k)
    sections.append(("Drift by draft depth (the deepest k of each condition)", [
        figures.per_position_figure(deepest), figures.attention_by_depth_figure(deepest),
        figures.hidden_rms_figure(deepest)]))
    by_context = study_rows(eagle, "context")
    if len({r.context_tokens for r in by_context}) > 1:
        sections.append(("Acceptance length vs context length", [figures.acceptance_vs_context_figure(by_context)]))
    by_template = study_rows(eagle, "template")
    if len({condition(r) for r in by_template}) > 1:
        sections.append(("Changed chat template or system prompt", [
            figures.template_figure(by_template), figures.per_position_figure(by_template),
            figures.attention_by_depth_figure(by_template), figures.hidden_rms_figure(by_template)]))
    return sections


def deepest_rows(rows: list[BenchRow]) -> list[BenchRow]:
    deepest = max(r.k for r in rows)
    return [r for r in rows if r.k == deepest]


def _cell(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.2f}"
    return html.escape(str(value))


def _table(rows: list[BenchRow]) -> str:
    head = "".join(f"<th>{'k' if c == 'k_text' else c}</th>" for c in TABLE_COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{_cell(getattr(r, c))}</td>" for c in TABLE_COLUMNS) + "</tr>"
                   for r in rows)
    return f"<div class='wide'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def _peer_table(rows: list[BenchRow]) -> str:
    """Per condition: each of our drafting methods (its fastest k) over each peer (its fastest k), in tokens/s."""
    tables = []
    by_condition: dict[str, list[BenchRow]] = defaultdict(list)
    for r in rows:
        by_condition[condition(r)].append(r)
    for cond, group in by_condition.items():
        ours, peers = ours_and_peers(group)
        if not (ours and peers):
            continue
        head = "".join(f"<th>÷ {html.escape(method_name(p))}</th>" for p in peers)
        body = "".join(f"<tr><td>{html.escape(method_name(e))}</td>" + "".join(
            f"<td>{e.tokens_per_second / p.tokens_per_second:.2f}×</td>" for p in peers) + "</tr>"
            for e in ours)
        tables.append(f"<h3>{html.escape(cond)}</h3><table><thead><tr><th>tokens/s of</th>{head}</tr></thead>"
                      f"<tbody>{body}</tbody></table>")
    return "<h2>Our drafting methods beside the peers (tokens/s ratios)</h2>" + "".join(tables) if tables else ""


def report_html(result: BenchResult, findings_text: list[str], plotlyjs: str = "inline") -> str:
    """The report page; plotly.js is inlined once (`inline`) or loaded from the CDN (`cdn`)."""
    rows, first = result.rows, True
    parts = []
    for title, figs in _figures(rows):
        parts.append(f"<h2>{html.escape(title)}</h2>")
        for fig in figs:
            include = (True if plotlyjs == "inline" else "cdn") if first else False
            parts.append(fig.to_html(full_html=False, include_plotlyjs=include))
            first = False
    config = result.config
    head = (f"preset <b>{html.escape(result.preset)}</b> · target <code>{html.escape(result.target)}</code> · "
            f"profile {html.escape(str(config.get('profile')))} · started {result.started} · "
            f"{result.seconds / 60:.1f} min · temperature {config['temperature']} · max_new_tokens "
            f"{config['max_new_tokens']} · repeats {config['repeats']} · {html.escape(result.machine['cpu'])}")
    items = "".join(f"<li>{html.escape(f)}</li>" for f in findings_text)
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
<h2>Machine and configuration</h2><pre>{html.escape(readable_json({'machine': result.machine, 'config': config}))}</pre>
</body></html>
"""


def readable_json(value, depth: int = 0) -> str:
    """JSON indented by level, with a list of plain values on one line (a sweep's ks read `[1, 2, 3, 4, 6, 8]`)."""
    pad = "  " * depth
    if isinstance(value, dict) and value:
        items = [f"{pad}  {json.dumps(key)}: {readable_json(item, depth + 1)}" for key, item in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, list) and any(isinstance(item, (dict, list)) for item in value):
        return "[\n" + ",\n".join(f"{pad}  {readable_json(item, depth + 1)}" for item in value) + f"\n{pad}]"
    return json.dumps(value)


def _csv_value(value):
    return json.dumps(value) if isinstance(value, (list, dict)) else value


def write_outputs(result: BenchResult, out_dir: str | Path, plotlyjs: str = "inline") -> dict[str, Path]:
    """Write results.csv (list columns as JSON), results.json and report.html; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = result.to_dict()
    data["findings"] = findings(result.rows, greedy=result.greedy)
    paths = {"csv": out / "results.csv", "json": out / "results.json", "html": out / "report.html"}
    frame = pd.DataFrame([{k: _csv_value(v) for k, v in r.items()} for r in data["rows"]]).convert_dtypes()
    frame.to_csv(paths["csv"], index=False)
    paths["json"].write_text(json.dumps(data, indent=1))
    paths["html"].write_text(report_html(result, data["findings"], plotlyjs), encoding="utf-8")
    return paths
