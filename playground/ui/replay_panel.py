"""'What would each drafter buy on this answer?': the panel Chat and Compare share — a finished answer replayed
under each drafter, k and tree (bench.replay.replay_run), as a line, a table and the step costs the predictions
read; the runs it was asked for keep it, so their exports carry it."""

from __future__ import annotations

import gradio as gr
import plotly.graph_objects as go

from playground.backends import shared_backend
from playground.bench.replay import replay_json, replay_problem, replay_run
from playground.playback import RequestError, Run
from playground.presets import DRAFTER_LABELS, get_preset
from playground.viz import escape_html, step_costs_figure

REPLAY_COLUMNS = ["drafter", "k", "tree nodes", "acceptance length", "verified rows / step", "predicted speedup",
                  "range"]
EXPLAINED = ("replayed under each drafter, k and tree: the acceptance a live greedy run of each would have on this "
             "text (exact; a sampled answer gets each drafter's expected acceptance at k = 1), and its speedup "
             "predicted from this machine's measured step costs (measured once, then kept).")


def replay_panel(title: str, what: str, prefix: str = "") -> tuple[gr.Button, gr.Markdown, gr.Dataframe, gr.Plot]:
    """The panel's accordion (elem ids <prefix>replay-…): its button, line, table and chart."""
    with gr.Accordion(title, open=False, elem_id=f"{prefix}replay-panel"):
        gr.Markdown(f"{what} {EXPLAINED}", elem_classes="preset-info")
        button = gr.Button(f"Replay {what[0].lower()}{what[1:]}", elem_id=f"{prefix}replay", size="sm")
        note = gr.Markdown(elem_id=f"{prefix}replay-note", elem_classes="status-line")
        table = gr.Dataframe(headers=REPLAY_COLUMNS, elem_id=f"{prefix}replay-table", interactive=False,
                             show_label=False)
        costs = gr.Plot(elem_id=f"{prefix}replay-costs", show_label=False)
    return button, note, table, costs


def replay_view(sides: dict[str, Run]) -> tuple[str, list[list], go.Figure]:
    """The first replayable answer of `sides` (name -> Run) replayed, each side's configuration set against its
    prediction; every side keeps the result (its export carries it)."""
    problems = {side: replay_problem(run) for side, run in sides.items()}
    source = next((run for side, run in sides.items() if problems[side] is None), None)
    if source is None:
        raise RequestError(f"cannot replay {'the last answer' if len(sides) == 1 else 'this comparison'}: "
                           f"{next(iter(problems.values()))}")
    try:
        rows, line, profiles = replay_run(shared_backend(get_preset(source.settings.preset)), source, sides)
    except ValueError as err:  # e.g. a sampled answer of one token: nothing to take an expectation over
        raise RequestError(f"cannot replay this answer: {err}") from None
    for run in sides.values():
        run.replay = {"line": line, **replay_json(rows, profiles)}
    table = [[DRAFTER_LABELS.get(r.drafter, r.drafter), r.k, r.tree_nodes or "chain",
              (f"{r.acceptance_length:.2f}" + (" expected" if r.expected else "")) if r.acceptance_length else "—",
              f"{r.verified_per_step:.1f}" if r.verified_per_step else "—",
              f"{r.predicted_speedup:.2f}×" if r.predicted_speedup else "—",
              f"{r.predicted_range[0]:.2f}–{r.predicted_range[1]:.2f}" if r.predicted_range else "—"] for r in rows]
    costs = step_costs_figure({DRAFTER_LABELS.get(name, name): profile for name, profile in profiles.items()})
    return escape_html(line), table, costs
