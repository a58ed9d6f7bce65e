"""Benchmark figures (plotly) drawn from bench result rows (`playground.bench.rows.BenchRow`).

Each function takes the rows it should draw (the caller picks them) and returns a figure; no gradio here, so the
report and the app's Benchmark tab draw the same pictures.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.drafting import method_of
from playground.viz.style import two_lines
from playground.viz.summary import (
    LENGTH_D3,
    PERCENT_D3,
    RATE_D3,
    RMS_D3,
    SHARE_D3,
    length_text,
    range_text,
    times_text,
)

if TYPE_CHECKING:  # bench draws with viz; viz only reads the row type
    from playground.bench.rows import BenchRow

OTHER_COLORS = ("#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#ff7f0e")
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


def condition(row: BenchRow) -> str:
    """The prompt set and chat template a row ran on."""
    return f"{row.prompt_set} · {row.template}"


def method_name(row: BenchRow) -> str:
    return row.label if row.k is None else f"{row.label} k={row.k}"


def _color(row: BenchRow, others: dict[str, str]) -> str:
    method = method_of(row.drafter)  # the registry's colour for its own method, chains at a fixed k
    if method is not None and method.colour and row.label == method.label:
        return method.colour
    return others.setdefault(row.label, OTHER_COLORS[len(others) % len(OTHER_COLORS)])


def _groups(rows: Iterable[BenchRow], key: Callable[[BenchRow], tuple]) -> dict[tuple, list[BenchRow]]:
    out: dict[tuple, list[BenchRow]] = defaultdict(list)
    for row in rows:
        out[key(row)].append(row)
    return out


def _layout(fig: go.Figure, title: str, detail: str, x: str, y: str, **extra) -> go.Figure:
    """Titles on two short lines (one long line is cut at phone width); the legend below the plot; the toolbar (on
    hover) down the right edge, not over the title."""
    fig.update_layout(title={"text": two_lines(title, detail), "font": {"size": 15}}, xaxis_title=x, yaxis_title=y,
                      template="plotly_white", height=420, legend=dict(orientation="h", yanchor="top", y=-0.2),
                      margin=dict(t=72, b=40, r=48), modebar={"orientation": "v"}, **extra)
    return fig


def _lines(rows: list[BenchRow], series: Callable[[BenchRow], tuple], name: Callable[[BenchRow], str],
           points: Callable[[BenchRow], tuple[list, list]]) -> go.Figure:
    """One line per series; colour by drafter, dash by the rest of the series key."""
    fig, others, dashes = go.Figure(), {}, {}
    for key, group in _groups(rows, series).items():
        row = group[0]
        xs, ys = [], []
        for r in group:
            px, py = points(r)
            xs += px
            ys += py
        order = sorted(range(len(xs)), key=lambda i: xs[i])
        dash = dashes.setdefault(key[1:], DASHES[len(dashes) % len(DASHES)])
        fig.add_scatter(x=[xs[i] for i in order], y=[ys[i] for i in order], mode="lines+markers", name=name(row),
                        line=dict(color=_color(row, others), dash=dash))
    return fig


def speed_figure(rows: list[BenchRow]) -> go.Figure:
    """Tokens/s of every method, one horizontal bar per (method, condition) so every label reads level, coloured by
    condition; each bar labelled with its speedup and, over several passes, the speedup's range."""
    fig = go.Figure()
    measured = [r for r in rows if r.tokens_per_second is not None]
    for (cond,), group in _groups(measured, lambda r: (condition(r),)).items():
        fig.add_bar(y=[f"{method_name(r)}<br>{cond}" for r in group], x=[r.tokens_per_second for r in group],
                    name=cond, orientation="h", text=[_speedup_label(r) for r in group], textposition="auto",
                    textfont={"size": 12}, hovertemplate=f"%{{y}}: %{{x:{RATE_D3}}} tokens/s, %{{text}}<extra></extra>")
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig = _layout(fig, "Decoding speed", "bar label: speedup over plain decoding, same run", "tokens / s", "",
                  barmode="overlay")
    return fig.update_layout(height=max(320, 140 + 34 * len(measured)))


def speedup_range(r: BenchRow) -> tuple[float, float] | None:
    """Lowest and highest per-pass speedup (None with fewer than two passes: no spread was measured)."""
    runs = r.speedup_runs
    return (min(runs), max(runs)) if len(runs) >= 2 else None


def speedup_range_text(r: BenchRow) -> str | None:
    spread = speedup_range(r)
    return range_text(spread) if spread else None


def _speedup_label(r: BenchRow) -> str:
    spread = speedup_range_text(r)
    return times_text(r.speedup) + (f" ({spread})" if spread else "")


def acceptance_vs_k_figure(rows: list[BenchRow]) -> go.Figure:
    fig = _lines([r for r in rows if r.mean_acceptance_length is not None],
                 series=lambda r: (r.label, condition(r)), name=lambda r: f"{r.label} · {condition(r)}",
                 points=lambda r: ([r.k], [r.mean_acceptance_length]))
    return _layout(fig, "Mean acceptance length vs k", "k: speculative tokens per step", "k",
                   "mean acceptance length", xaxis_dtick=1, yaxis_hoverformat=LENGTH_D3)


def acceptance_vs_context_figure(rows: list[BenchRow]) -> go.Figure:
    fig = _lines([r for r in rows if r.mean_acceptance_length is not None],
                 series=lambda r: (r.label, r.k, r.template),
                 name=lambda r: f"{method_name(r)} · {r.template}",
                 points=lambda r: ([r.context_tokens], [r.mean_acceptance_length]))
    return _layout(fig, "Acceptance length vs context", "mean acceptance length by prompt length",
                   "prompt tokens (median)", "mean acceptance length", yaxis_hoverformat=LENGTH_D3)


def per_position_figure(rows: list[BenchRow]) -> go.Figure:
    fig = _lines([r for r in rows if r.per_position_acceptance],
                 series=lambda r: (r.label, condition(r), r.k),
                 name=lambda r: f"{method_name(r)} · {condition(r)}",
                 points=lambda r: (list(range(1, len(r.per_position_acceptance) + 1)),
                                   r.per_position_acceptance))
    return _layout(fig, "Per-position acceptance", "accepted at position i / drafting steps", "draft position",
                   "acceptance rate", yaxis_range=[0, 1], xaxis_dtick=1, yaxis_tickformat=PERCENT_D3,
                   yaxis_hoverformat=PERCENT_D3)


def attention_by_depth_figure(rows: list[BenchRow]) -> go.Figure:
    """The drafter's attention share on the sink token, the context, and its own drafts, by draft depth."""
    parts = ("sink", "context", "draft")
    fig = make_subplots(rows=1, cols=3, shared_yaxes=True,
                        subplot_titles=("on the sink (first) token", "on the context", "on its own drafts"))
    others, dashes = {}, {}
    for row in (r for r in rows if r.attention_by_depth):
        depths = list(range(1, len(row.attention_by_depth) + 1))
        dash = dashes.setdefault(condition(row), DASHES[len(dashes) % len(DASHES)])
        for col, part in enumerate(parts, 1):
            fig.add_scatter(x=depths, y=[getattr(a, part) for a in row.attention_by_depth], mode="lines+markers",
                            name=f"{method_name(row)} · {condition(row)}", legendgroup=f"{method_name(row)}{dash}",
                            showlegend=col == 1, line=dict(color=_color(row, others), dash=dash), row=1, col=col)
    fig.update_yaxes(range=[0, 1], tickformat=PERCENT_D3, hoverformat=SHARE_D3)
    fig.update_xaxes(title_text="draft depth", dtick=1)
    return _layout(fig, "Drafter attention by depth", "share, averaged over heads, layers and steps", "draft depth",
                   "attention share")


def hidden_rms_figure(rows: list[BenchRow]) -> go.Figure:
    fig = _lines([r for r in rows if r.hidden_rms_by_depth],
                 series=lambda r: (r.label, condition(r), r.k),
                 name=lambda r: f"{method_name(r)} · {condition(r)}",
                 points=lambda r: (list(range(1, len(r.hidden_rms_by_depth) + 1)), r.hidden_rms_by_depth))
    return _layout(fig, "Hidden-state RMS by depth", "the state carried into each draft depth", "draft depth", "RMS",
                   xaxis_dtick=1, yaxis_hoverformat=RMS_D3)


def template_figure(rows: list[BenchRow]) -> go.Figure:
    """Mean acceptance length per condition (prompt set · template), one bar per drafter."""
    fig, others = go.Figure(), {}
    for group in _groups([r for r in rows if r.mean_acceptance_length is not None],
                         lambda r: (method_name(r),)).values():
        fig.add_bar(x=[condition(r) for r in group], y=[r.mean_acceptance_length for r in group],
                    name=method_name(group[0]), marker_color=_color(group[0], others),
                    text=[length_text(r.mean_acceptance_length) for r in group], textposition="outside")
    return _layout(fig, "Changed templates and system prompts", "mean acceptance length per condition",
                   "prompt set · chat template", "mean acceptance length", barmode="group")
