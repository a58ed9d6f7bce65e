"""'What would each drafter buy on this answer?': the panel Chat and Compare share — a finished answer replayed
under each drafter, k and tree (bench.replay.replay_run), as a line, a chart of every prediction against k with the
measured run marked (viz.replay_figure), a short table beneath it (each drafter's best chain and tree, and what
ran) and the step costs the predictions read; the runs it was asked for keep it, so their exports carry it."""

from __future__ import annotations

import gradio as gr
import plotly.graph_objects as go

from playground.backends import shared_backend
from playground.bench.replay import Replayed, replay_json, replay_problem, replay_run
from playground.playback import RequestError, Run
from playground.presets import DRAFTER_LABELS, get_preset
from playground.viz import Measured, Predicted, escape_html, message_figure, replay_figure, step_costs_figure

REPLAY_COLUMNS = ["configuration", "acceptance length", "predicted speedup"]
EXPLAINED = ("replayed under each drafter, k and tree: the acceptance a live greedy run of each would have on this "
             "text (exact; a sampled answer gets each drafter's expected acceptance at k = 1), and its speedup "
             "predicted from this machine's measured step costs (measured once, then kept). The chart shows every "
             "configuration; the table each drafter's best chain and tree, and what ran.")


def replay_panel(title: str, what: str, prefix: str = ""
                 ) -> tuple[gr.Button, gr.Markdown, gr.Plot, gr.Dataframe, gr.Plot]:
    """The panel's accordion (elem ids <prefix>replay-…): its button, line, chart, table and step-cost chart."""
    with gr.Accordion(title, open=False, elem_id=f"{prefix}replay-panel"):
        gr.Markdown(f"{what} {EXPLAINED}", elem_classes="preset-info")
        button = gr.Button(f"Replay {what[0].lower()}{what[1:]}", elem_id=f"{prefix}replay", size="sm")
        note = gr.Markdown(elem_id=f"{prefix}replay-note", elem_classes="status-line")
        chart = gr.Plot(message_figure("Predicted speedup on this answer", f"press Replay to see what each drafter "
                                       f"would buy on {what[0].lower()}{what[1:]}"),
                        elem_id=f"{prefix}replay-chart", show_label=False)
        table = gr.Dataframe(headers=REPLAY_COLUMNS, elem_id=f"{prefix}replay-table", interactive=False,
                             show_label=False, wrap=True, elem_classes="replay-table")
        costs = gr.Plot(elem_id=f"{prefix}replay-costs", show_label=False)
    return button, note, chart, table, costs


def replay_view(sides: dict[str, Run]) -> tuple[str, go.Figure, list[list], go.Figure]:
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
    ran = ran_configurations(sides)
    chart = replay_figure([Predicted(_label(r.drafter), r.k, r.tree_nodes, r.predicted_speedup, *r.predicted_range,
                                     r.acceptance_length) for r in rows if r.predicted_speedup],
                          [Measured(who, _label(d), k, n, speedup) for who, (d, k, n, speedup) in ran.items()
                           if speedup])
    costs = step_costs_figure({_label(name): profile for name, profile in profiles.items()})
    return escape_html(line), chart, summary_rows(rows, ran, named=len(sides) > 1), costs


def ran_configurations(sides: dict[str, Run]) -> dict[str, tuple[str, int, int, float | None]]:
    """Each side that ran a drafter on our engine: (drafter, k, tree nodes, measured speedup or None)."""
    return {who: (run.settings.drafter, run.settings.k, run.settings.tree_nodes, run.view().speedup)
            for who, run in sides.items() if run.engine == "local" and not run.settings.plain}


def summary_rows(rows: list[Replayed], ran: dict[str, tuple], named: bool = False) -> list[list]:
    """The table beneath the chart: per drafter its best chain and its best tree by predicted speedup, then each
    configuration that ran where not among them; the shape says why a row is there (`named`: which side ran
    it)."""
    why: dict[Replayed, list[str]] = {}
    for drafter in dict.fromkeys(r.drafter for r in rows):
        for trees in (False, True):
            shaped = [r for r in rows if r.drafter == drafter and bool(r.tree_nodes) == trees]
            if shaped:
                why.setdefault(max(shaped, key=lambda r: r.predicted_speedup or 0), []).append("best")
    for who, (drafter, k, nodes, _) in ran.items():
        match = next((r for r in rows if (r.drafter, r.k, r.tree_nodes) == (drafter, k, nodes)), None)
        if match is not None:
            why.setdefault(match, []).append(f"{who.lower()} ran" if named else "ran")
    ordered = [r for r in rows if r in why]
    return [[f"{_label(r.drafter)} {f'tree of {r.tree_nodes}' if r.tree_nodes else 'chain'}, k = {r.k} "
             f"({', '.join(why[r])})",
             (f"{r.acceptance_length:.2f}" + (" expected" if r.expected else "")) if r.acceptance_length else "—",
             (f"{r.predicted_speedup:.2f}× ({r.predicted_range[0]:.2f}–{r.predicted_range[1]:.2f})"
              if r.predicted_speedup else "—")] for r in ordered]


def _label(drafter: str) -> str:
    return DRAFTER_LABELS.get(drafter, drafter)
