"""Plotly figures from RunViews. Each figure takes one run or several (overlaid for side-by-side comparison); and
the replay panel's: what each drafter, k and tree would have bought on one answer, predicted, beside what ran.

A value the backend could not provide (None in the trace) is never drawn as zero: the figure says why instead.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import plotly.graph_objects as go

from playground.engine.costs import CostProfile

from .provenance import depth_colour
from .style import VARIANT_COLORS, two_lines
from .summary import (
    PERCENT_D3,
    RATE_D3,
    RMS_D3,
    SHARE_D3,
    length_text,
    rate_text,
    speedup_text,
    times_text,
)
from .view import RunView

HEIGHT = 290
RUN_COLOURS = ("#4C78A8", "#F58518", "#54A24B", "#B279A2")  # one per overlaid run (see _run_colours)
BASELINE_COLOUR = "#9D9DA3"
ATTENTION_COLOURS = {"sink": "#6E6E78", "context": "#3FA7A0", "draft": "#D6487E"}
RUN_PATTERNS = ("", "/", ".", "x")  # bar fill per overlaid run where colour already means something else
MUTED = "#8A8F98"  # mid grey: readable on light and dark backgrounds
# Plotly never wraps an annotation: a longer line is cut at the chart's edge. These fit a chart a phone's width wide.
MESSAGE_LINE_CHARS = 36  # at the message's 13 px
NOTE_LINE_CHARS = 44  # at a note's 10 px, from the plot's left edge
TITLES = {
    "accept": "Accepted drafts per step", "position": "Acceptance rate by draft position",
    "drift": "Attention drift by depth", "rms": "Hidden-state RMS by depth",
    "speedup": "Speed vs plain decoding (measured here)",
}


FEATURE_FIELDS = ("attention", "hidden_rms")  # StepEvent fields only a drafter fed the target's hidden states fills


def _layout(fig: go.Figure, title: str, revision: str, **extra) -> go.Figure:
    fig.update_layout(
        # plotly grows a two-line title upwards from its anchor: start it one line lower
        title={"text": title, "x": 0.01, "xanchor": "left", "y": 0.92 if "<br>" in title else 0.98, "yanchor": "top",
               "font": {"size": 14}},
        height=HEIGHT, margin={"l": 48, "r": 16, "t": 72, "b": 40},
        paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)",
        font={"color": MUTED, "size": 11},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.01, "x": 0, "xanchor": "left", "font": {"size": 10}},
        uirevision=revision,
        modebar={"orientation": "v"},  # the toolbar (on hover) down the right edge, not over the title's line
        **extra,
    )
    fig.update_xaxes(gridcolor="rgba(128,128,128,0.18)", zeroline=False)
    fig.update_yaxes(gridcolor="rgba(128,128,128,0.18)", zeroline=False)
    return fig


def _run_colours(views: list[RunView]) -> list[str]:
    """EAGLE-3 and EAGLE-3.1 keep the benchmark report's colours when the runs' drafters differ; else by position."""
    names = [v.drafter for v in views]
    by_position = [RUN_COLOURS[i % len(RUN_COLOURS)] for i in range(len(views))]
    if len(set(names)) < len(names):
        return by_position
    return [VARIANT_COLORS.get(name, colour) for name, colour in zip(names, by_position)]


def _wrapped(text: str, width: int) -> str:
    """`text` (lines parted by `<br>`) with each line broken between words to at most `width` characters."""
    return "<br>".join(short for line in text.split("<br>")
                       for short in textwrap.wrap(line, width, break_long_words=False, break_on_hyphens=False) or [""])


def message_figure(title: str, message: str) -> go.Figure:
    """An empty chart that says why there is nothing to draw."""
    fig = go.Figure()
    fig.add_annotation(text=_wrapped(message, MESSAGE_LINE_CHARS), x=0.5, y=0.5, xref="paper", yref="paper",
                       showarrow=False, font={"size": 13, "color": MUTED})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _layout(fig, title, revision=title)


def _why_missing(view: RunView, field: str, noun: str, event_field: str | None = None) -> str | None:
    """Why `view.metrics.<field>` cannot be drawn, or None when it can. `event_field` names the StepEvent field
    behind it, whose reason the backend may give in `view.missing`."""
    if view.plain:
        return f"{view.label}: no drafter, so no {noun} to show"
    if event_field in FEATURE_FIELDS and not view.features:
        return f"{view.label}: proposes from {view.proposes_from}, with no drafter, so no {noun} to show"
    if view.metrics.drafting_steps == 0:
        return f"{view.label}: waiting for the first drafting step…"
    if getattr(view.metrics, field) is None:
        reason = view.missing.get(event_field or "") or f"this backend does not report {noun}"
        return f"{view.label}: {reason}"
    return None


def _split(views: list[RunView], field: str, noun: str,
           event_field: str | None = None) -> tuple[list[tuple[int, RunView]], list[str]]:
    drawable, notes = [], []
    for i, view in enumerate(views):
        reason = _why_missing(view, field, noun, event_field)
        if reason is None:
            drawable.append((i, view))
        else:
            notes.append(reason)
    return drawable, notes


def _with_notes(fig: go.Figure, notes: list[str]) -> go.Figure:
    if notes:
        text = _wrapped("<br>".join(notes), NOTE_LINE_CHARS)
        fig.add_annotation(text=text, x=0, y=-0.22, xref="paper", yref="paper", showarrow=False,
                           xanchor="left", yanchor="top", align="left", font={"size": 10, "color": MUTED})
        fig.update_layout(margin={"b": 40 + 14 * (text.count("<br>") + 1)})
    return fig


def accepted_per_step_figure(view: RunView) -> go.Figure:
    """Accepted drafts per verification step, stacked by depth in the provenance colours, with k as the ceiling."""
    title = TITLES["accept"]
    reason = _why_missing(view, "mean_acceptance_length", "draft acceptance")
    if reason:
        return message_figure(title, reason)
    drafting = [e for e in view.events if e.drafted]
    steps = [e.step for e in drafting]
    fig = go.Figure()
    for depth in range(1, view.k + 1):
        fig.add_bar(x=steps, y=[1 if e.accepted >= depth else 0 for e in drafting], name=f"depth {depth}",
                    marker_color=depth_colour(depth, 0.85), showlegend=False,
                    customdata=[[e.accepted, len(e.drafted)] for e in drafting],
                    hovertemplate="step %{x}: accepted %{customdata[0]} of %{customdata[1]}<extra></extra>")
    fig.add_hline(y=view.k, line_dash="dash", line_color=MUTED, annotation_text=f"k = {view.k} (ceiling)",
                  annotation_position="top left", annotation_font_color=MUTED)
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="accepted", range=[0, view.k + 0.6], dtick=1 if view.k <= 10 else 2)
    mal = view.metrics.mean_acceptance_length
    return _layout(fig, two_lines(title, f"mean acceptance length {length_text(mal)}"), revision="accept",
                   barmode="stack", bargap=0.1)


def acceptance_by_position_figure(views: list[RunView]) -> go.Figure:
    """Per-position acceptance rate: accepted at position i / drafting steps (vLLM's definition)."""
    title = TITLES["position"]
    drawable, notes = _split(views, "per_position_acceptance", "draft acceptance")
    if not drawable:
        return message_figure(title, "<br>".join(notes))
    fig, colours = go.Figure(), _run_colours(views)
    for i, view in drawable:
        m = view.metrics
        fig.add_bar(x=list(range(1, len(m.per_position_acceptance) + 1)), y=m.per_position_acceptance,
                    name=view.label, marker_color=colours[i],
                    customdata=[[c, m.drafting_steps] for c in m.per_position_counts],
                    hovertemplate=view.label + f"<br>position %{{x}}: %{{y:{PERCENT_D3}}} (%{{customdata[0]}} of "
                    "%{customdata[1]} drafting steps)<extra></extra>")
        _usual(fig, view.usual_by_position, f"{view.label}: usual", colours[i], "position", PERCENT_D3)
    fig.update_xaxes(title_text="draft position", dtick=1)
    fig.update_yaxes(title_text="accepted / drafting steps", range=[0, 1.02], tickformat=PERCENT_D3)
    shown_usual = any(view.usual_by_position for _, view in drawable)
    return _with_notes(_layout(fig, title, revision="position", barmode="group",
                               showlegend=len(views) > 1 or shown_usual), notes)


def _usual(fig: go.Figure, usual: list[tuple[float, float, float]] | None, name: str, colour: str, axis: str,
           number: str, flip: bool = False) -> None:
    """The drafter's fingerprint as a mark per depth at its answers' mean, the 10th-90th percentile as the bar (a
    share measured from the top where `flip`: where a stacked bar's last part begins)."""
    if not usual:
        return
    mean, low, high = ([1 - v for v in vs] if flip else list(vs) for vs in zip(*usual))
    fig.add_scatter(x=list(range(1, len(usual) + 1)), y=mean, mode="markers", name=name,
                    marker={"symbol": "line-ew-open", "size": 18, "color": colour},
                    error_y={"type": "data", "symmetric": False, "color": colour,
                             "array": [abs(h - m) for m, h in zip(mean, low if flip else high)],
                             "arrayminus": [abs(m - lo) for m, lo in zip(mean, high if flip else low)]},
                    hovertemplate=f"{name}<br>{axis} %{{x}}: %{{y:{number}}} (the fingerprint's answers; "
                    "10th-90th percentile as the bar)<extra></extra>")


def attention_drift_figure(views: list[RunView]) -> go.Figure:
    """Drafter attention by depth, stacked: sink (first position), the rest of the context, its own drafts."""
    title = TITLES["drift"]
    drawable, notes = _split(views, "attention_by_depth", "drafter attention", "attention")
    if not drawable:
        return message_figure(title, "<br>".join(notes))
    fig = go.Figure()
    for i, view in drawable:
        masses = view.metrics.attention_by_depth
        depths = list(range(1, len(masses) + 1))
        parts = {
            "sink": [a.sink for a in masses],
            "context": [max(a.context - a.sink, 0.0) for a in masses],  # `context` includes the sink
            "draft": [a.draft for a in masses],
        }
        names = {"sink": "sink (first token)", "context": "context (excl. sink)", "draft": "own drafts"}
        base = [0.0] * len(depths)
        for part, values in parts.items():
            fig.add_bar(x=depths, y=values, base=list(base), offsetgroup=str(i), name=names[part],
                        showlegend=i == drawable[0][0], marker_color=ATTENTION_COLOURS[part],
                        marker_pattern_shape=RUN_PATTERNS[i % len(RUN_PATTERNS)],
                        hovertemplate=f"{view.label}<br>depth %{{x}}: {names[part]} %{{y:{SHARE_D3}}}<extra></extra>")
            base = [b + v for b, v in zip(base, values)]
        usual = (view.usual_drift or {}).get("draft")
        _usual(fig, usual, f"{view.label}: usual start of own drafts", "#333333", "depth", SHARE_D3, flip=True)
    if len(drawable) > 1:  # legend entries that say which fill pattern is which run
        for i, view in drawable:
            fig.add_bar(x=[None], y=[None], name=view.label, offsetgroup=str(i), marker_color=MUTED,
                        marker_pattern_shape=RUN_PATTERNS[i % len(RUN_PATTERNS)])
    fig.update_xaxes(title_text="draft depth", dtick=1)
    fig.update_yaxes(title_text="share of attention", range=[0, 1.02], tickformat=".0%")
    return _with_notes(_layout(fig, title, revision="drift", barmode="group"), notes)


def hidden_rms_figure(views: list[RunView]) -> go.Figure:
    """RMS of the hidden state the drafter carries into each depth (grows when the fed-back state is un-normalised)."""
    title = TITLES["rms"]
    drawable, notes = _split(views, "hidden_rms_by_depth", "drafter hidden states", "hidden_rms")
    if not drawable:
        return message_figure(title, "<br>".join(notes))
    fig, colours = go.Figure(), _run_colours(views)
    for i, view in drawable:
        rms = view.metrics.hidden_rms_by_depth
        fig.add_scatter(x=list(range(1, len(rms) + 1)), y=rms, mode="lines+markers", name=view.label,
                        line={"color": colours[i]},
                        hovertemplate=view.label + f"<br>depth %{{x}}: RMS %{{y:{RMS_D3}}}<extra></extra>")
        _usual(fig, (view.usual_drift or {}).get("rms"), f"{view.label}: usual", colours[i], "depth", RMS_D3)
    fig.update_xaxes(title_text="draft depth", dtick=1)
    fig.update_yaxes(title_text="RMS", rangemode="tozero")
    shown_usual = any(view.usual_drift for _, view in drawable)
    return _with_notes(_layout(fig, title, revision="rms", showlegend=len(views) > 1 or shown_usual), notes)


def speedup_figure(views: list[RunView]) -> go.Figure:
    """Decode rate of each run so far next to plain decoding measured alongside it (whiskers: slowest to fastest
    group of plain steps)."""
    title = TITLES["speedup"]
    running = [(i, v) for i, v in enumerate(views) if v.metrics.decode_tokens_per_second]
    baselines = list({id(v.baseline): (v, v.baseline) for v in views if v.baseline}.values())
    unmeasurable = next((v.missing["baseline"] for v in views if "baseline" in v.missing), None)
    if not running and not baselines:
        return message_figure(title, f"no plain-decoding baseline: {unmeasurable}" if unmeasurable
                              else "measuring…")
    colours = _run_colours(views)
    fig = go.Figure()
    for view, b in baselines:
        label = "plain decoding" if len(baselines) == 1 else f"plain decoding ({view.label})"
        fig.add_bar(x=[b.tokens_per_second], y=[label], orientation="h", marker_color=BASELINE_COLOUR,
                    error_x={"type": "data", "symmetric": False, "array": [b.fastest - b.tokens_per_second],
                             "arrayminus": [b.tokens_per_second - b.slowest], "color": MUTED},
                    text=[f"{rate_text(b.tokens_per_second)} tok/s ({b.tokens} steps)"], textposition="inside",
                    insidetextanchor="start", hovertemplate=f"{label}: %{{x:{RATE_D3}}} tokens/s, groups of steps "
                    f"{rate_text(b.slowest)}–{rate_text(b.fastest)}<extra></extra>")
    for i, view in running:
        rate = view.metrics.decode_tokens_per_second
        text = f"{rate_text(rate)} tok/s" + (f" · {speedup_text(view)}" if view.speedup and not view.plain else "")
        fig.add_bar(x=[rate], y=[view.label], orientation="h", marker_color=colours[i], text=[text],
                    textposition="inside", insidetextanchor="start",
                    hovertemplate=f"%{{y}}: %{{x:{RATE_D3}}} tokens/s<extra></extra>")
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title_text="decode tokens / s", rangemode="tozero")
    # one run: the speedup and its range in the title; several: just the speedups (their ranges are on the bars)
    speedups = [speedup_text(v) if len(running) == 1 else times_text(v.speedup) for _, v in running
                if v.speedup and not v.plain]  # plain decoding is the baseline: no speedup over itself
    notes = []
    if not baselines and unmeasurable:
        headline, notes = title, [f"no plain-decoding baseline: {unmeasurable}"]
    elif not baselines:
        headline = two_lines(title, "measuring plain decoding alongside…")
    elif speedups:
        headline = two_lines(f"Speedup {' / '.join(speedups)}",
                              "vs plain decoding" + (", measured alongside" if len(speedups) == 1 else ""))
    elif any(v.too_few_steps and not v.plain for _, v in running):
        headline = two_lines(title, "too few steps yet to measure a speedup")
    else:
        headline = title
    return _with_notes(_layout(fig, headline, revision="speedup", showlegend=False, bargap=0.35), notes)


def step_costs_figure(profiles: dict[str, CostProfile]) -> go.Figure:
    """This machine's measured step costs behind the replay's predictions (engine.costs.CostProfile, by drafter
    label): a target forward over N rows (a verification; 1 row is a plain step) and drafting a chain of k, medians
    with their 10th-90th percentile."""
    title = two_lines("Step costs on this machine", "what the predicted speedups are made of")
    if not profiles:
        return message_figure(title, "no cost profile: nothing was predicted")
    fig = go.Figure()
    first = next(iter(profiles.values()))
    rows = sorted(first.verify)
    _cost_line(fig, rows, [first.verify[n] for n in rows], "target forward over N rows", "#444444")
    for label, profile in profiles.items():
        ks = sorted(profile.chain)
        _cost_line(fig, ks, [profile.chain[k] for k in ks], f"{label}: drafting a chain of k",
                   VARIANT_COLORS.get(label, "#2ca02c"))
    fig.update_xaxes(title_text="rows verified (N) · drafts (k)", dtick=2)
    fig.update_yaxes(title_text="ms", rangemode="tozero")
    return _legend_below(_layout(fig, title, revision="costs", showlegend=True))


def _legend_below(fig: go.Figure) -> go.Figure:
    """The legend under the plot, where a long one does not cover the title (at phone width it wraps to lines)."""
    fig.update_layout(height=HEIGHT + 60, margin={"t": 56, "b": 96},
                      legend={"orientation": "h", "yanchor": "top", "y": -0.3, "x": 0, "xanchor": "left"})
    return fig


def _cost_line(fig: go.Figure, x: list[int], costs: list, name: str, colour: str) -> None:
    fig.add_scatter(x=x, y=[c.ms for c in costs], mode="lines+markers", name=name, line={"color": colour},
                    error_y={"type": "data", "symmetric": False, "color": colour,
                             "array": [c.high - c.ms for c in costs], "arrayminus": [c.ms - c.low for c in costs]},
                    hovertemplate=f"{name}<br>%{{x}}: %{{y:.1f}} ms (10th-90th percentile as the bar)<extra></extra>")


REPLAY_TITLE = "Predicted speedup on this answer"
OTHER_DRAFTER_COLOURS = ("#2ca02c", "#9467bd", "#8c564b")  # drafters without a colour of their own
TREE_SYMBOLS = ("diamond", "square", "triangle-up", "pentagon")  # one per tree size, smallest first
MEASURED_COLOUR = "#111111"
TREE_SHIFT = 0.25  # a tree's mark sits beside the chain of its k, one step of this per size


@dataclass(frozen=True)
class Predicted:
    """One replayed configuration's prediction."""

    drafter: str  # the label shown, e.g. "EAGLE-3.1"
    k: int
    tree_nodes: int  # 0: a chain
    speedup: float
    low: float
    high: float
    acceptance_length: float | None = None


@dataclass(frozen=True)
class Measured:
    """A configuration that ran, at its measured speedup."""

    who: str  # "The answer", "Left", "Right"
    drafter: str
    k: int
    tree_nodes: int
    speedup: float


def replay_figure(predicted: list[Predicted], measured: list[Measured] = ()) -> go.Figure:
    """Predicted speedup against k for each drafter (chains joined by a line, trees as marks beside their k, each
    with its range as a bar), plain decoding as the dashed 1× line, and each configuration that ran as a star at its
    measured speedup."""
    if not predicted:
        return message_figure(REPLAY_TITLE, "nothing was predicted")
    fig = go.Figure()
    drafters = list(dict.fromkeys(p.drafter for p in predicted))
    sizes = sorted({p.tree_nodes for p in predicted if p.tree_nodes})
    others = OTHER_DRAFTER_COLOURS
    colours = {d: VARIANT_COLORS.get(d, others[i % len(others)]) for i, d in enumerate(drafters)}
    for drafter in drafters:
        chains = sorted((p for p in predicted if p.drafter == drafter and not p.tree_nodes), key=lambda p: p.k)
        trees = [p for p in predicted if p.drafter == drafter and p.tree_nodes]
        if chains:
            _marks(fig, chains, f"{drafter}, chains", colours[drafter], "lines+markers", "circle",
                   [p.k for p in chains])
        if trees:
            nodes = " / ".join(str(n) for n in sorted({p.tree_nodes for p in trees}))
            _marks(fig, trees, f"{drafter}, trees of {nodes} nodes", colours[drafter], "markers+text",
                   [TREE_SYMBOLS[sizes.index(p.tree_nodes) % len(TREE_SYMBOLS)] for p in trees],
                   [_x(p.k, p.tree_nodes, sizes) for p in trees], text=[str(p.tree_nodes) for p in trees])
    for m in measured:
        fig.add_scatter(x=[_x(m.k, m.tree_nodes, sizes)], y=[m.speedup], mode="markers", name=f"{m.who}: measured",
                        marker={"symbol": "star", "size": 15, "color": MEASURED_COLOUR,
                                "line": {"color": "#ffffff", "width": 1}},
                        hovertemplate=f"{m.who} ran {_config(m.drafter, m.k, m.tree_nodes)}: measured "
                                      f"{m.speedup:.2f}×<extra></extra>")
    fig.add_hline(y=1, line={"dash": "dash", "color": MUTED, "width": 1.5}, annotation_text="plain decoding, 1×",
                  annotation_position="bottom right", annotation_font={"size": 10, "color": MUTED})
    top = max([p.high for p in predicted] + [m.speedup for m in measured] + [1.0])
    ks = sorted({p.k for p in predicted})
    fig.update_xaxes(title_text="k (drafts per step; a tree: its depth)", tickvals=ks)
    fig.update_yaxes(title_text="speedup vs plain", range=[0, top * 1.1], ticksuffix="×")
    return _legend_below(_layout(fig, REPLAY_TITLE, revision="replay", showlegend=True))


def _marks(fig: go.Figure, points: list[Predicted], name: str, colour: str, mode: str, symbol, x: list[float],
           text: list[str] | None = None) -> None:
    fig.add_scatter(
        x=x, y=[p.speedup for p in points], mode=mode, name=name, line={"color": colour},
        marker={"symbol": symbol, "size": 9, "color": colour}, text=text,
        textposition=["top center", "bottom center"] * len(points) if text else None,  # side by side: apart
        textfont={"size": 9, "color": colour},
        error_y={"type": "data", "symmetric": False, "color": colour, "thickness": 1.2, "width": 3,
                 "array": [p.high - p.speedup for p in points], "arrayminus": [p.speedup - p.low for p in points]},
        customdata=[[_config(p.drafter, p.k, p.tree_nodes), p.low, p.high,
                     f"{p.acceptance_length:.2f}" if p.acceptance_length else "—"] for p in points],
        hovertemplate="%{customdata[0]}: predicted %{y:.2f}× (%{customdata[1]:.2f}–%{customdata[2]:.2f}), "
                      "acceptance length %{customdata[3]}<extra></extra>")


def _x(k: int, tree_nodes: int, sizes: list[int]) -> float:
    """Where a configuration sits on the k axis: a chain at its k, a tree just right of it, by size."""
    return k + (TREE_SHIFT * (sizes.index(tree_nodes) + 1) if tree_nodes in sizes else 0.0)


def _config(drafter: str, k: int, tree_nodes: int) -> str:
    return f"{drafter}, {'a tree of ' + str(tree_nodes) + ' nodes, ' if tree_nodes else ''}k = {k}"
