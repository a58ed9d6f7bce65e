"""The Compare tab: one prompt, two configurations decoding at the same time, side by side."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import replace

import gradio as gr
import plotly.graph_objects as go

from playground.playback import ChartPace, Comparison, Conversation, RequestError, Run, RunSettings, compare
from playground.presets import ENGINE_LABELS, Preset, engine_presets, get_preset
from playground.request.availability import unavailable
from playground.viz import (
    SUMMARY_COLUMNS,
    TITLES,
    RunView,
    acceptance_by_position_figure,
    attention_drift_figure,
    escape_html,
    health_badge,
    message_figure,
    speedup_figure,
    stats_html,
    summary_table,
)

from . import controls
from .controls import AnswerView, CheckedRadio, DraftingControls, compare_drafters
from .exports import export_files
from .line import ENGINE, holding_line, in_line, stoppable, wire_stop
from .refusals import report_user_errors, status_after_failure
from .replay_panel import replay_panel, replay_view
from .settings_form import SettingsForm

TAB = "compare"


def _side_html(run: Run, run_view: RunView, view: AnswerView) -> str:
    """The side's title and answer; before its first token, what it waits for (vLLM starting its engines, with how
    long so far), in the panel itself."""
    title = f'<div class="side-title">{escape_html(run_view.label)}</div>'
    if not run.pieces and (run.starting or run.waiting):
        return title + f'<div class="side-waiting">{escape_html(run.status)}</div>'
    return title + view.html(run.pieces)


@functools.cache  # built once: Clear sends these, and five plotly figures took ~0.3 s to build on a busy machine
def _hint(plot: str):
    return message_figure(TITLES[plot], "run a comparison to see this chart")


def on_engine(preset: str, engine: str | None, other_engine: str | None = None) -> str:
    """The preset of `preset`'s pair on `engine`; None, or the preset's own engine while the other side runs it too:
    the preset itself. Sides on two engines both run the pair's engine twins, which read the same weights (on the
    default pair the float32 ones, vLLM's), so greedy answers compare token for token."""
    try:
        own = get_preset(preset)
    except KeyError:
        return preset  # run_settings says so
    twins = engine_presets(own)
    across = bool(engine and other_engine and engine != other_engine)
    if not engine or (engine == own.backend and not across):
        return preset
    if engine not in twins:
        raise RequestError(f"preset {preset!r} has no {ENGINE_LABELS.get(engine, engine)} twin to compare with; "
                           f"its engines: {', '.join(ENGINE_LABELS.get(e, e) for e in twins)}")
    return twins[engine]


def run_comparison(prompt: str, left: RunSettings, right: RunSettings, view: AnswerView, left_engine: str | None = None,
                   right_engine: str | None = None, request: gr.Request = None):
    left = replace(left, preset=on_engine(left.preset, left_engine, right_engine))
    right = replace(right, preset=on_engine(right.preset, right_engine, left_engine))
    charts = ChartPace()
    yield from stoppable(request, TAB, "comparison", lambda should_stop: (
        (*show_comparison(comparison, view, charts=charts.due(comparison.left, comparison.right)), comparison)
        for comparison in compare(prompt, left, right, should_stop)))


def show_comparison(comparison: Comparison | None, view: AnswerView, request: gr.Request | None = None,
                    charts: bool = True) -> tuple:
    """Both panels, their cards, the status, the verdict, the table and the charts (the hints before any comparison;
    without `charts`, the table and charts stay as the page shows them); also what a refused or failed request leaves
    on screen, so that nothing stays covered by the error."""
    if comparison is None:
        return ("", "", "", "", status_after_failure(request, TAB, ""), "", None, _hint("position"), _hint("drift"),
                _hint("speedup"))
    runs = (comparison.left, comparison.right)
    views = [run.view() for run in runs]
    statuses = " · ".join(f"**{v.label}** ({run.precision}): {run.status}" for v, run in zip(views, runs))
    status = status_after_failure(request, TAB, statuses)
    shown = (_side_html(comparison.left, views[0], view), _side_html(comparison.right, views[1], view),
             *(stats_html(v) + health_badge(run.health) for v, run in zip(views, runs)), status,
             _verdict_markdown(comparison, views))
    if not charts:
        return (*shown, *(gr.skip(),) * 4)
    return (*shown, summary_table(views), acceptance_by_position_figure(views), attention_drift_figure(views),
            speedup_figure(views))


def _verdict_markdown(comparison: Comparison, views: list[RunView]) -> str:
    """The verdict once both sides and their baseline are done (until then their numbers are still moving)."""
    if not (comparison.left.complete and comparison.right.complete):
        finished = comparison.left.finished and comparison.right.finished
        return "Timing plain decoding on this text for the verdict…" if finished else ""
    return escape_html(comparison.verdict((views[0], views[1])).sentence)


def replay_comparison(comparison: Comparison | None, request: gr.Request
                      ) -> Iterator[tuple[str, go.Figure, list[list], go.Figure]]:
    """The comparison's answer replayed (ui.replay_panel; greedy sides on one target wrote the same text), each
    side's configuration set against its prediction; it holds the model's line while it runs."""
    if comparison is None:
        raise RequestError("nothing to replay yet: run a comparison first")
    yield from holding_line(request, f"{TAB}-replay", "replay of the comparison",
                            lambda: iter([replay_view({"Left": comparison.left, "Right": comparison.right})]))


def export(comparison: Comparison | None) -> list[str]:
    if comparison is None:
        raise gr.Error("nothing to export yet: run a comparison first", title="Nothing to export",
                       print_exception=False)
    messages = Conversation().messages(comparison.left.settings.system, comparison.prompt)
    return export_files({"left": comparison.left, "right": comparison.right}, messages, TAB, comparison.record())


def engine_choices(preset: Preset) -> dict:
    """A side's engine radio for this preset: the pair on our engine or on vLLM, shown only where it has both and
    this machine can run both."""
    twins = [engine for engine, name in engine_presets(preset).items()
             if name == preset.name or not unavailable(get_preset(name))]
    return {"choices": [(ENGINE_LABELS[e], e) for e in twins], "value": preset.backend, "visible": len(twins) > 1}


def engine_control(preset: Preset, side: str) -> gr.Radio:
    return CheckedRadio(label=f"{side.capitalize()} engine", elem_id=f"compare-{side}-engine",
                        **engine_choices(preset))


def _side(preset: Preset, side: str, drafter: str) -> tuple[gr.Radio, DraftingControls, gr.HTML, gr.HTML]:
    """One side's engine, its drafting controls, its coloured answer and its stat cards (elem ids compare-<side>-…)."""
    with gr.Column():
        engine = engine_control(preset, side)
        drafting = controls.drafting_controls(preset, drafter, f"compare-{side}-", side)
        answer = gr.HTML(elem_id=f"compare-{side}", elem_classes="side-panel")
        stats = gr.HTML(elem_id=f"compare-{side}-stats")
    return engine, drafting, answer, stats


def build_compare_tab(preset: Preset) -> gr.Dropdown:
    """The tab; its preset menu (the app offers a session's own pairs there)."""
    comparison = gr.State(None)
    view = gr.State(AnswerView())
    left_default, right_default = compare_drafters(preset)
    with gr.Row(elem_id="compare-prompt-row"):
        prompt = gr.Textbox(elem_id="compare-prompt", show_label=False, lines=2, max_lines=8, scale=5,
                            placeholder="One prompt, two configurations, decoded at the same time…")
        with gr.Column(scale=1, min_width=140, elem_id="compare-buttons"):
            run_button = gr.Button("Run both", variant="primary", elem_id="compare-run")
            stop_button = gr.Button("Stop", variant="stop", elem_id="compare-stop")
    # Under Run both, above the two sides: a visitor reads what happened and who won before the details.
    status = gr.Markdown(elem_id="compare-status", elem_classes="status-line")
    verdict = gr.Markdown(elem_id="compare-verdict", elem_classes="status-line")
    with gr.Accordion("Shared settings", open=False):
        answer_view = controls.answer_view_control(elem_id="compare-view")
        shared = controls.generation_controls("compare-", preset)
    legend = gr.HTML(controls.depth_legend((left_default, 4), (right_default, 4)), elem_id="compare-legend")
    with gr.Row(equal_height=False):
        left_engine, left, left_html, left_stats = _side(preset, "left", left_default)
        right_engine, right, right_html, right_stats = _side(preset, "right", right_default)
    controls.follow_drafter(left, shared.preset)
    controls.follow_drafter(right, shared.preset)
    table = gr.Dataframe(headers=SUMMARY_COLUMNS, elem_id="compare-table", interactive=False, label="Summary")
    with gr.Row():
        position_plot = gr.Plot(_hint("position"), elem_id="compare-position-plot", show_label=False)
        drift_plot = gr.Plot(_hint("drift"), elem_id="compare-drift-plot", show_label=False)
        speedup_plot = gr.Plot(_hint("speedup"), elem_id="compare-speedup", show_label=False)
    replay_button, replay_note, replay_chart, replay_table, replay_costs = replay_panel(
        "What would each drafter buy on this prompt?", "This comparison's answer", "compare-")
    with gr.Accordion("Export this comparison", open=False):
        export_button = gr.Button("Export JSON + CSV", elem_id="compare-export", size="sm")
        export_out = gr.File(label="Run files", file_count="multiple", elem_id="compare-export-files")

    shown = [left_html, right_html, left_stats, right_stats, status, verdict, table, position_plot, drift_plot,
             speedup_plot]
    form = SettingsForm(shared, {"left": left, "right": right})
    compare_event = in_line([run_button.click, prompt.submit], TAB, status).then(
        report_user_errors(form.handler(run_comparison), TAB),
        inputs=[prompt, *form.components(), view, left_engine, right_engine],
        outputs=[*shown, comparison],
        api_name="compare", concurrency_id=ENGINE, show_progress="hidden", show_progress_on=left_html,
    )
    compare_event.failure(show_comparison, [comparison, view], shown, queue=False, api_visibility="private")
    controls.follow_answer_view(answer_view, view, show_comparison, [comparison], shown)
    wire_stop(stop_button, TAB, status, [compare_event], api_name="stop_compare")
    export_button.click(export, comparison, export_out, api_name="export_compare")
    replay_button.click(report_user_errors(replay_comparison, TAB), comparison,
                        [replay_note, replay_chart, replay_table, replay_costs], api_name="replay_compare",
                        concurrency_id=ENGINE, show_progress_on=replay_chart)
    sides = [left.drafter, left.k, right.drafter, right.k]
    gr.on([c.change for c in sides], lambda ld, lk, rd, rk: controls.depth_legend((ld, lk), (rd, rk)), sides, legend,
          queue=False, api_visibility="private")
    controls.follow_preset(shared, (left.drafter, lambda p: compare_drafters(p)[0]),
                  (right.drafter, lambda p: compare_drafters(p)[1]))

    def engines_of(name: str):
        return [gr.Radio(**engine_choices(get_preset(name))) for _ in ("left", "right")]

    shared.preset.change(engines_of, shared.preset, [left_engine, right_engine], queue=False,
                           api_visibility="private")
    return shared.preset
