"""The Chat tab: a streaming chat whose answers are coloured by token provenance, with live charts beside it."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import gradio as gr
import plotly.graph_objects as go

from playground.bench.engines import instrumentation_note
from playground.bench.landing import chat_examples_figures, landing_records
from playground.examples import CHAT_EXAMPLES
from playground.playback import ChartPace, Conversation, Run, chat_turn, regenerate_turn
from playground.playback.baseline import ALONGSIDE, SHARE_IN_CHAT
from playground.playback.run_settings import RequestError, RunSettings
from playground.playback.share import link_problem, settings_from_query, share_query
from playground.presets import Preset
from playground.viz import (
    TITLES,
    RunView,
    acceptance_by_position_figure,
    accepted_per_step_figure,
    attention_drift_figure,
    escape_html,
    health_badge,
    hidden_rms_figure,
    message_figure,
    plain_verdict,
    speedup_figure,
    stats_html,
    tree_html,
)

from .controls import (
    AnswerView,
    CheckedNumber,
    answer_view_control,
    default_drafter,
    depth_legend,
    drafting_controls,
    follow_answer_view,
    follow_drafter,
    follow_preset,
    generation_controls,
)
from .exports import export_files
from .line import ENGINE, holding_line, in_line, stop_tab, stoppable, wire_stop
from .own_pair import PairPanel, pair_panel
from .refusals import report_user_errors, status_after_failure
from .replay_panel import replay_panel, replay_view
from .settings_form import SettingsForm

TAB = "chat"
PLOTS = ("accept", "speedup", "position", "drift", "rms")  # in the order of the tab's outputs


def _chatbot_messages(conversation: Conversation, view: AnswerView) -> list[dict]:
    """User text escaped as typed; answers as provenance HTML, rendered or as tokens. The model only ever sees the
    plain text."""
    messages = []
    for exchange in conversation.exchanges:
        messages.append({"role": "user", "content": escape_html(exchange.user)})
        run = exchange.run
        waiting = not run.pieces and run.starting  # vLLM starting its engines: said in the answer's place
        messages.append({"role": "assistant", "content": f"<em>{escape_html(run.starting)}</em>" if waiting else
                         view.html(run.pieces)})
    return messages


def _run_outputs(run: Run, charts: bool = True) -> tuple:
    """Status, stat cards, the five charts and the live JSON for one run (without `charts`, the charts and JSON are
    left as the page shows them)."""
    view = run.view()
    status = f"**{run.settings.drafter_label}** · {run.precision} · {run.status}"
    stats = (stats_html(view, speed_note(run, view)) + health_badge(run.health)
             + (tree_html(run.tree) if run.tree else ""))
    if not charts:
        return (status, stats, *(gr.skip(),) * (len(PLOTS) + 1))
    return (status, stats, accepted_per_step_figure(view), speedup_figure([view]),
            acceptance_by_position_figure([view]), attention_drift_figure([view]), hidden_rms_figure([view]),
            run.record(TAB, with_steps=False, view=view))


def _live_outputs(conversation: Conversation, view: AnswerView, runs: Iterator[Run]) -> Iterator[tuple]:
    """The chatbot and the run's outputs for each update of a streaming run: the chatbot only when the answer grew (or
    what it waits for changed), the charts and JSON when ChartPace says so; what is left out stays as the page shows
    it."""
    charts, shown = ChartPace(), None
    for run in runs:
        grew, shown = (len(run.events), run.starting) != shown or run.complete, (len(run.events), run.starting)
        yield run, (_chatbot_messages(conversation, view) if grew else gr.skip(), *_run_outputs(run, charts.due(run)))


def speed_note(run: Run, view: RunView) -> str:
    """Under the cards: the verdict against plain decoding once it is measured, what the measurement cost, and before
    that when it will be measured."""
    verdict, baseline = plain_verdict(view), run.baseline
    if "baseline" in view.missing:
        cost = ""
    elif baseline is not None and run.finished:
        cost = (f"Plain decoding was timed {baseline.timing}, on its text: {baseline.tokens} steps, "
                f"{baseline.measuring_s:.1f} s.")
    elif baseline is None or baseline.timing == ALONGSIDE:
        cost = (f"Plain decoding is timed on this answer between its steps, with at most "
                f"{SHARE_IN_CHAT:.0%} of its time, so it streams at nearly the engine's speed.")
    else:
        cost = "Plain decoding is timed once the answer is written (vLLM decodes on between our reads)."
    return " ".join(text for text in (verdict.sentence if verdict and verdict.measured else "", cost) if text)


def show_conversation(conversation: Conversation, view: AnswerView, request: gr.Request | None = None) -> tuple:
    """The conversation as it stands and its last run's numbers: after a refused, failed or cancelled request (so that
    nothing stays covered by the error or reads 'generating…'; the error itself is the one toast), or in another
    view."""
    if not conversation.exchanges:
        messages, (status, *views) = [], _empty_outputs()
    else:
        messages, (status, *views) = (_chatbot_messages(conversation, view),
                                      _run_outputs(conversation.exchanges[-1].run))
    return (messages, status_after_failure(request, TAB, status), *views)


@functools.cache  # built once: Clear sends these, and five plotly figures took ~0.3 s to build on a busy machine
def _hint(plot: str):
    return message_figure(TITLES[plot], "send a prompt to see this chart")


def _empty_outputs() -> tuple:
    return ("", "", *(_hint(plot) for plot in PLOTS), None)


def chat(prompt: str, settings: RunSettings, conversation: Conversation, view: AnswerView, request: gr.Request):
    # the prompt box empties once the model has taken the prompt, so a refused prompt stays there to be edited
    yield from stoppable(request, TAB, "chat answer", lambda should_stop: (
        ("" if run.events else gr.skip(), *outputs)
        for run, outputs in _live_outputs(conversation, view, chat_turn(conversation, prompt, settings, should_stop))))


def regenerate(settings: RunSettings, conversation: Conversation, view: AnswerView, request: gr.Request):
    yield from stoppable(request, TAB, "chat answer", lambda should_stop: (
        outputs for _, outputs in _live_outputs(conversation, view, regenerate_turn(conversation, settings,
                                                                                     should_stop))))


def clear(conversation: Conversation, request: gr.Request) -> tuple:
    """Empty the conversation in place: a run still going loses it, so nothing it does reaches the next turn."""
    stop_tab(request, TAB)
    conversation.clear()
    return ([], *_empty_outputs())


def export(system: str, conversation: Conversation) -> list[str]:
    if not conversation.exchanges:
        raise gr.Error("nothing to export yet: send a prompt first", title="Nothing to export", print_exception=False)
    runs = {f"turn {i + 1}": ex.run for i, ex in enumerate(conversation.exchanges)}
    return export_files(runs, conversation.messages(system or ""), TAB)


def replay_last(conversation: Conversation, request: gr.Request) -> Iterator[tuple[str, go.Figure, list[list],
                                                                                 go.Figure]]:
    """The last answer replayed (ui.replay_panel), as the panel's line, chart, table and step-cost chart; it holds
    the model's line while it runs, as a chat answer does."""
    if not conversation.exchanges:
        raise RequestError("nothing to replay yet: send a prompt first")
    yield from holding_line(request, f"{TAB}-replay", "replay of the last answer",
                            lambda: iter([replay_view({"The answer": conversation.exchanges[-1].run})]))


def link_markdown(conversation: Conversation) -> str:
    """A link that opens this page on the last prompt with its run's settings (playback.share)."""
    if not conversation.exchanges:
        return ""
    last = conversation.exchanges[-1]
    problem = link_problem(last.user, last.run.settings)
    if problem:
        return f"No link to this answer: {problem}."
    query = share_query(last.user, last.run.settings)
    earlier = " (earlier turns are not in it)" if len(conversation.exchanges) > 1 else ""
    repeats = ("the same answer, token for token, on this kind of machine" if last.run.settings.temperature == 0
               else "the same sample" if last.run.settings.seed is not None else "a new sample (the run had no seed)")
    return f"[Link to this answer]({query}): the prompt and these settings{earlier}; Send gives {repeats}."


def link_opener(form: SettingsForm) -> Callable[[gr.Request], tuple]:
    """Fill the prompt box and `form`'s controls from the page's address (a link made by link_markdown), then say so
    on the status line; nothing is run until the visitor sends it."""
    untouched = len(form.components()) + 1  # the prompt box too

    def open_link(request: gr.Request) -> tuple:
        try:
            prompt, settings = settings_from_query(dict(request.query_params))
        except RequestError as err:
            return (*(gr.skip() for _ in range(untouched)), f"**This link cannot run here:** {escape_html(str(err))}")
        if settings is None:
            return tuple(gr.skip() for _ in range(untouched + 1))
        return (prompt if prompt is not None else gr.skip(), *form.values(settings),
                "Opened from a link: press Send to run it.")

    return open_link


def tree_of_step(step: float | None, conversation: Conversation) -> str:
    """The draft tree of one step of the last answer (a tree run), or why there is none."""
    run = conversation.exchanges[-1].run if conversation.exchanges else None
    if run is None or not run.trees:
        return "<p>The last answer drafted no trees: set draft tree nodes above 0 and send a prompt.</p>"
    if step is None or not float(step).is_integer():
        return "<p>Type a step number: each token's step is in its details (hover or tap it).</p>"
    tree = run.tree_of_step(int(step))
    if tree is None:
        return (f"<p>Step {int(step)} drafted no tree: the last answer's trees are steps {run.trees[0].step} to "
                f"{run.trees[-1].step}.</p>")
    return tree_html(tree, elem_id="tree-of-step-view")


def example_labels(records: list[dict] | None = None) -> tuple[str, list[str]]:
    """The examples' line and button labels, their figures read from the landing file nearest to this machine
    (bench.landing.chat_examples_figures); titles alone where no file measured them."""
    line, lengths = chat_examples_figures(landing_records() if records is None else records)
    return line or "Examples", [e.label(lengths.get(e.prompt)) for e in CHAT_EXAMPLES]


def example_prompts(prompt: gr.Textbox) -> gr.Examples:
    """One click fills the prompt box with a measured example (playground.examples); Send runs it."""
    line, labels = example_labels()
    return gr.Examples([[e.prompt] for e in CHAT_EXAMPLES], inputs=prompt, label=line,
                       example_labels=labels, examples_per_page=len(CHAT_EXAMPLES),
                       elem_id="chat-examples", api_visibility="private")


ASK = "Ask anything: code, explanations, writing…"  # one invitation, in the empty chat and in the box below it
EMPTY_CHAT = f"{ASK} Coloured tokens came from accepted drafts."
PROMPT_PLACEHOLDER = f"{ASK} (Enter to send, Shift+Enter for a new line)"


def build_chat_tab(preset: Preset, demo: gr.Blocks) -> tuple[gr.Dropdown, PairPanel]:
    """The tab; its preset menu and the own-pair panel, which the app wires to every tab's menu. A page opened from
    a link to an answer (`demo`'s load) starts with its prompt and settings."""
    # One Conversation object per session, never replaced: handlers change it in place, so no handler's output can
    # put back a conversation that Clear emptied (Gradio passes a State's value by reference).
    conversation = gr.State(Conversation())
    view = gr.State(AnswerView())
    with gr.Row(equal_height=False):
        with gr.Column(scale=5):
            chatbot = gr.Chatbot(elem_id="chat", label="Chat", show_label=False, height=440, layout="panel",
                                 latex_delimiters=[], buttons=["copy", "copy_all"],
                                 placeholder=EMPTY_CHAT)
            legend = gr.HTML(depth_legend((preset.default_drafter, 4)), elem_id="chat-legend")
            prompt = gr.Textbox(elem_id="prompt", show_label=False, lines=2, max_lines=8, autofocus=True,
                                placeholder=PROMPT_PLACEHOLDER)
            with gr.Row():
                send = gr.Button("Send", variant="primary", elem_id="send", scale=2)
                stop_button = gr.Button("Stop", variant="stop", elem_id="stop", scale=1)
                regenerate_button = gr.Button("Regenerate", elem_id="regenerate", scale=1)
                clear_button = gr.Button("Clear", elem_id="clear", scale=1)
            status = gr.Markdown(elem_id="chat-status", elem_classes="status-line")  # under Send: where the eye is
            example_prompts(prompt)
            stats = gr.HTML(elem_id="chat-stats")
            replay_button, replay_note, replay_chart, replay_table, replay_costs = replay_panel(
                "What would each drafter buy on this answer?", "The last answer")
            with gr.Accordion("A tree run: any step's tree", open=False, elem_id="tree-step-panel"):
                step_box = CheckedNumber(None, label="Step", minimum=1, step=1, elem_id="tree-step",
                                         info="the cards show the latest step's tree; each token's step is in its "
                                              "details (hover or tap it)")
                step_tree = gr.HTML(elem_id="tree-of-step")
            link = gr.Markdown(elem_id="chat-link")
        with gr.Column(scale=3, min_width=280):
            answer_view = answer_view_control(elem_id="chat-view")
            drafting = drafting_controls(preset, default_drafter(preset), k_auto=True)
            controls = generation_controls("", preset)
            follow_drafter(drafting, controls.preset)
            form = SettingsForm(controls, {"": drafting})
            panel = pair_panel()
            with gr.Accordion("Export this chat", open=False):
                export_button = gr.Button("Export JSON + CSV", elem_id="chat-export", size="sm")
                export_out = gr.File(label="Run files", file_count="multiple", elem_id="chat-export-files")
    with gr.Row():
        accept_plot = gr.Plot(_hint("accept"), elem_id="accept-plot", show_label=False)
        speedup_plot = gr.Plot(_hint("speedup"), elem_id="speedup", show_label=False)
    with gr.Row():
        position_plot = gr.Plot(_hint("position"), elem_id="position-plot", show_label=False)
        drift_plot = gr.Plot(_hint("drift"), elem_id="drift-plot", show_label=False)
        rms_plot = gr.Plot(_hint("rms"), elem_id="rms-plot", show_label=False)
    gr.Markdown(instrumentation_note(), elem_id="instrumentation-cost")
    with gr.Accordion("Live run data (JSON)", open=False):
        run_json = gr.JSON(elem_id="chat-run-json", show_label=False)

    run_views = [status, stats, accept_plot, speedup_plot, position_plot, drift_plot, rms_plot, run_json]
    chat_event = in_line([send.click, prompt.submit], TAB, status).then(
        report_user_errors(form.handler(chat), TAB), inputs=[prompt, *form.components(), conversation, view],
        outputs=[prompt, chatbot, *run_views], api_name="chat", concurrency_id=ENGINE,
        show_progress="hidden", show_progress_on=chatbot,  # not on the status line: it says when a run waits
    )
    regenerate_event = in_line([regenerate_button.click], TAB, status).then(
        report_user_errors(form.handler(regenerate), TAB), inputs=[*form.components(), conversation, view],
        outputs=[chatbot, *run_views],
        api_name="regenerate", concurrency_id=ENGINE, show_progress="hidden", show_progress_on=chatbot,
    )
    for event in (chat_event, regenerate_event):
        event.failure(show_conversation, [conversation, view], [chatbot, *run_views], queue=False,
                      api_visibility="private")
        event.then(link_markdown, conversation, link, queue=False, api_visibility="private")
    demo.load(link_opener(form), None, [prompt, *form.components(), status], queue=False, api_visibility="private")
    step_box.change(tree_of_step, [step_box, conversation], step_tree, queue=False, api_name="tree_of_step")
    follow_answer_view(answer_view, view, show_conversation, [conversation], [chatbot, *run_views])
    wire_stop(stop_button, TAB, status, [chat_event, regenerate_event], api_name="stop")
    clear_button.click(clear, conversation, [chatbot, *run_views], cancels=[chat_event, regenerate_event],
                       queue=False, api_name="clear").then(lambda: "", None, link, queue=False,
                                                           api_visibility="private")
    export_button.click(export, [controls.system, conversation], export_out, api_name="export_chat")
    replay_button.click(report_user_errors(replay_last, TAB), conversation,
                        [replay_note, replay_chart, replay_table, replay_costs], api_name="replay",
                        concurrency_id=ENGINE, show_progress_on=replay_chart)
    gr.on([drafting.k.change, drafting.drafter.change], lambda depth, name: depth_legend((name, depth)),
          [drafting.k, drafting.drafter], legend, queue=False, api_visibility="private")
    follow_preset(controls, (drafting.drafter, default_drafter))
    return controls.preset, panel
