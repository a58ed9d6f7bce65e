"""What both tabs share: preset and generation controls, stop switches, error reporting and exports."""

from __future__ import annotations

import functools
import html
import logging
import re
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import gradio as gr
from starlette.types import ASGIApp, Receive, Scope, Send

from playground import environment
from playground.backends import backend_unavailable_reason
from playground.backends.availability import offered_presets
from playground.drafting import MAX_K, PLAIN
from playground.engine.templates import CHAT_TEMPLATES
from playground.engine.tree_shape import MAX_NODES, TreeShape
from playground.playback import (
    MAX_NEW_TOKENS,
    EngineLine,
    Run,
    StopSwitches,
    export_runs,
)
from playground.presets import DRAFTER_LABELS, Preset, get_preset
from playground.viz import TokenPiece, legend_html, provenance_html, rendered_html

log = logging.getLogger("playground")
ENGINE = "engine"  # concurrency id of every event that runs the model
ENGINE_SLOTS = int(environment.number("PLAYGROUND_CONCURRENCY", 1))  # model runs at once (the queue's limit)
STOP_SWITCHES = StopSwitches()
LINE = EngineLine(ENGINE_SLOTS)


class StampArrival:
    """ASGI middleware for the Gradio app: note when each HTTP request arrived. A queued run's request is the one that
    joined the queue, so a run can tell whether Stop was pressed while it waited."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope.setdefault("state", {})["arrived_at"] = time.monotonic()
        await self.app(scope, receive, send)


def armed_stop(request: gr.Request | None, tab: str) -> threading.Event:
    """This run's stop switch, already set if Stop was pressed after the run was submitted (while it was queued)."""
    arrived = getattr(getattr(getattr(request, "request", None), "state", None), "arrived_at", None)
    return STOP_SWITCHES.arm(session_id(request), tab, arrived if arrived is not None else time.monotonic())


def stoppable(request: gr.Request | None, tab: str, what: str,
              updates: Callable[[Callable[[], bool]], Iterator[tuple]]) -> Iterator[tuple | dict]:
    """The UI updates of `updates(should_stop)`, wired to the tab's Stop, holding a place in the model's line while
    it runs (`what` says what to the users waiting behind it). A run stopped while it was still queued does not
    start: every output is left as it was."""
    stop, session = armed_stop(request, tab), session_id(request)
    if stop.is_set():  # the Stop that cancelled it already said so on the status line
        LINE.leave(session, tab)
        yield gr.skip()  # one skip leaves every output of the listener as it was
        return
    LINE.start(session, tab, what)
    try:
        yield from updates(stop.is_set)
    finally:
        LINE.finish(session, tab)


STOPPED_IN_LINE = "Stopped before it started: the queued run was cancelled."


def stop_tab(request: gr.Request | None, tab: str) -> str | None:
    """Stop the tab's run, or cancel it while it waits in line: then the status line's text for that."""
    STOP_SWITCHES.trip(session_id(request), tab)
    return STOPPED_IN_LINE if LINE.leave(session_id(request), tab) else None


def wire_stop(button: gr.Button, tab: str, status: gr.components.Component, runs: list, api_name: str) -> None:
    """Stop trips the run's switch rather than cancelling its event: the run then ends within a step and still sends
    its last update (status "stopped", final numbers), which a cancelled event would drop. A run still waiting in the
    queue is cancelled as well: Gradio's page ignores a button's next click while its last run is pending, so a
    stopped run left in the queue would swallow the user's next Send until the model came free.

    Gradio 6 acts on `cancels` only for a listener of the trigger itself (on one chained with .then or .success it
    cancels nothing), so the page presses a hidden button whose click cancels the tab's runs, and only when the
    server says that Stop found the run waiting in line."""
    cancel_button = gr.Button(visible="hidden", elem_id=f"{tab}-cancel-queued")
    cancelled_in_line = gr.Textbox(visible="hidden", elem_id=f"{tab}-cancelled-in-line")

    def stop(request: gr.Request):
        return stop_tab(request, tab) or gr.skip()

    def whether_cancelled_in_line(request: gr.Request) -> str:
        return "yes" if LINE.was_cancelled_in_line(session_id(request), tab) else ""

    button.click(stop, None, status, queue=False, api_name=api_name, show_progress="hidden").then(
        whether_cancelled_in_line, None, cancelled_in_line, queue=False, api_visibility="private",
        show_progress="hidden",
    ).then(None, cancelled_in_line, None, api_visibility="private",
           js=f"(cancelled) => {{ if (cancelled) document.getElementById('{tab}-cancel-queued').click(); }}")
    cancel_button.click(None, None, None, cancels=runs, queue=False, api_visibility="private")


def status_after_failure(request: gr.Request | None, tab: str, status: str) -> str:
    """The status line a tab's .failure listener shows: the refusal that ended the request, where one did (it stays
    on the line until the next action writes it, where the toast fades); Gradio counts a queued run that Clear
    cancelled (Stop only trips the switch) as failed, and then the line says it was stopped; else the conversation's
    last status."""
    if request is None:
        return status
    refusal = REFUSALS.take(session_id(request), tab)
    if refusal:
        return f"**Refused:** {escape_markdown(refusal)}"
    return STOPPED_IN_LINE if LINE.cancelled_in_line(session_id(request), tab) else status


class Refusals:
    """The last refusal of each session's tab, from the handler that refused to its tab's .failure listener (which
    Gradio gives no exception); bounded, the oldest forgotten first."""

    def __init__(self, most: int = 1024) -> None:
        self._by_tab: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._lock, self._most = threading.Lock(), most

    def put(self, session: str, tab: str, message: str) -> None:
        with self._lock:
            self._by_tab[session, tab] = message
            self._by_tab.move_to_end((session, tab))
            while len(self._by_tab) > self._most:
                self._by_tab.popitem(last=False)

    def take(self, session: str, tab: str) -> str | None:
        with self._lock:
            return self._by_tab.pop((session, tab), None)


REFUSALS = Refusals()


def escape_markdown(text: str) -> str:
    """User-quoting text for a Markdown status line: HTML escaped, Markdown's own marks taken literally."""
    return re.sub(r"([\\`*_\[\]#|~>])", r"\\\1", html.escape(text, quote=False))


def in_line(triggers: list, tab: str, status: gr.components.Component):
    """The first step of every model run: when its button is pressed, tell its user on `status` whether it has to
    wait for the model, and behind what (Gradio's queue says nothing to the page meanwhile). Chain the run with
    `.then`: Gradio's page sends the listeners of one trigger one after another, so a listener beside the run would
    only be sent once the run had started."""

    def announce(request: gr.Request):
        return LINE.join(session_id(request), tab) or gr.skip()

    return gr.on(triggers, announce, None, status, queue=False, api_visibility="private", show_progress="hidden")


ANSWER_VIEWS = {"rendered": rendered_html, "tokens": provenance_html}


@dataclass
class AnswerView:
    """A session's choice of how answers look: rendered Markdown or raw tokens, both coloured by provenance. Changed
    in place (a State's value is shared by reference), so a run in progress renders its next update the new way."""

    mode: str = "rendered"

    def html(self, pieces: list[TokenPiece]) -> str:
        return ANSWER_VIEWS[self.mode](pieces)


def answer_view_control(elem_id: str) -> gr.Radio:
    return gr.Radio([("Rendered", "rendered"), ("Tokens", "tokens")], value=AnswerView.mode, label="Answer view",
                    elem_id=elem_id, info="rendered: Markdown and code blocks; tokens: the raw text, token by token",
                    elem_classes="answer-view")


def follow_answer_view(control: gr.Radio, view: gr.State, show: Callable, inputs: list, outputs: list) -> None:
    """When the view changes, remember it for the session and redraw what is on screen with `show(*inputs)`."""

    def change(mode: str, current: AnswerView, *values):
        if mode in ANSWER_VIEWS:
            current.mode = mode
        return show(*values, current)

    control.change(change, [control, view, *inputs], outputs, queue=False, api_visibility="private")


def session_id(request: gr.Request | None) -> str:
    return (request.session_hash if request is not None else None) or "anonymous"


def drafter_choices(preset: Preset) -> list[tuple[str, str]]:
    """(label, name) pairs: the preset's drafters, then plain decoding."""
    return [(DRAFTER_LABELS.get(n, n), n) for n in [*preset.drafters, PLAIN]]


def compare_drafters(preset: Preset) -> tuple[str, str]:
    """Default left and right drafters: EAGLE-3 vs EAGLE-3.1 where the preset has both, else its drafter vs none."""
    if {"eagle3", "eagle3.1"} <= set(preset.drafters):
        return "eagle3", "eagle3.1"
    return preset.default_drafter, PLAIN


def preset_info(preset: Preset) -> str:
    """Markdown under the preset menu: what it is, and why it cannot run here or lacks a drafter."""
    lines = [preset.description] if preset.description else []
    unavailable = backend_unavailable_reason(preset)
    if unavailable:
        lines.append(f"**Not available here:** {unavailable}.")
    lines += [f"**No {DRAFTER_LABELS.get(name, name)} drafter:** {why}"
              for name, why in preset.missing_drafters.items()]
    if preset.notes:
        lines.append(preset.notes)
    return "\n\n".join(lines)


def report_user_errors(handler: Callable[..., Iterator], tab: str | None = None) -> Callable[..., Iterator]:
    """Turn a bad request (empty prompt, k out of range, prompt too long, a drafter that does not fit, missing model
    files, a preset that cannot run here) into an error message for the browser and API clients; the app keeps
    serving. With `tab`, the refusal is also kept for that tab's status line (`status_after_failure`)."""

    @functools.wraps(handler)
    def wrapper(*args, **kwargs):
        try:
            yield from handler(*args, **kwargs)
        except (ValueError, OSError) as err:  # RequestError, CheckpointError, TargetError, BackendUnavailable
            log.info("refused: %s", err)  # one line; Gradio's own traceback is turned off for these
            request = next((a for a in (*args, *kwargs.values()) if isinstance(a, gr.Request)), None)
            if tab is not None and request is not None:
                REFUSALS.put(session_id(request), tab, str(err))
            raise gr.Error(_as_text(str(err)), title="Cannot run that", print_exception=False) from None

    return wrapper


def _as_text(message: str) -> str:
    """A message for Gradio's toast, which renders HTML: it may quote what the user typed. Only `&` and `<` can start
    markup, so API clients still read `>=` as it is."""
    return message.replace("&", "&amp;").replace("<", "&lt;")


# Inputs without Gradio's own value check (range, choices): RunSettings.checked_preset() checks every value with one
# clear message and one log line, where Gradio's check prints a traceback to the log for every bad API call.
# `is_template` keeps the parent's frontend.


class CheckedSlider(gr.Slider):
    is_template = True

    def preprocess(self, payload: float) -> float:
        return payload


class CheckedRadio(gr.Radio):
    is_template = True

    def preprocess(self, payload: str | None) -> str | None:
        return payload


class CheckedNumber(gr.Number):
    """A number box that sends what was typed: Gradio's slider clamps a typed value to its range without a word."""

    is_template = True

    def preprocess(self, payload: float | None) -> float | None:
        return payload


class CheckedDropdown(gr.Dropdown):
    is_template = True

    def preprocess(self, payload: str | None) -> str | None:
        return payload


@dataclass
class GenerationControls:
    """Settings shared by a tab's runs, named as RunSettings' fields (how a run drafts is set per run:
    settings_form.DraftingControls)."""

    preset: gr.Dropdown
    preset_info: gr.Markdown
    temperature: gr.Slider
    top_p: gr.Slider
    max_new_tokens: gr.Slider
    chat_template: gr.Radio
    system: gr.Textbox
    seed: gr.Textbox
    not_offered: gr.Markdown  # the presets this machine cannot run, and why


def not_offered_markdown(refused: dict[str, tuple[str, str]]) -> str:
    """'Not offered on this machine: kimi-k2.6 (needs 4 GPUs) · …', each with its full reason as a tooltip."""
    if not refused:
        return ""
    items = " · ".join(f'<span title="{html.escape(sentence, quote=True)}">`{name}` ({html.escape(short)})</span>'
                       for name, (short, sentence) in refused.items())
    return f"**Not offered on this machine:** {items}"


def generation_controls(prefix: str, preset: Preset) -> GenerationControls:
    offered, refused = offered_presets(always=preset.name)
    return GenerationControls(
        preset=CheckedDropdown([(p.title, p.name) for p in offered], value=preset.name, label="Preset",
                               elem_id=f"{prefix}preset", interactive=len(offered) > 1,
                               info="the presets this machine can run"),
        preset_info=gr.Markdown(preset_info(preset), elem_classes="preset-info"),
        not_offered=gr.Markdown(not_offered_markdown(refused), elem_id=f"{prefix}not-offered",
                                elem_classes="preset-info"),
        temperature=CheckedSlider(0.0, 2.0, value=0.0, step=0.05, label="Temperature (0 = greedy)",
                              elem_id=f"{prefix}temperature"),
        top_p=CheckedSlider(0.05, 1.0, value=1.0, step=0.05, label="Top-p", elem_id=f"{prefix}top-p"),
        max_new_tokens=CheckedSlider(1, MAX_NEW_TOKENS, value=256, step=1, label="Max new tokens",
                                 elem_id=f"{prefix}max-new-tokens"),
        chat_template=CheckedRadio(list(CHAT_TEMPLATES), value="default", label="Chat template",
                               info="alt: the same conversation in a format the model saw less of",
                               elem_id=f"{prefix}chat-template"),
        system=gr.Textbox(label="System prompt", lines=2, placeholder="(none)", elem_id=f"{prefix}system"),
        # a textbox, not gr.Number: the browser sends a Number's empty value as 0, and empty must mean "random"
        seed=gr.Textbox("", label="Seed (sampling)", placeholder="random", max_lines=1, elem_id=f"{prefix}seed",
                        info="empty: a fresh random answer each time; a number repeats it (and gives both sides of a "
                             "comparison the same seed)"),
    )


def follow_preset(controls: GenerationControls, *drafters: tuple[gr.Radio, Callable[[Preset], str]]) -> None:
    """When another preset is chosen, show its description and offer its drafters: each radio keeps its choice where
    the new preset has that drafter too, else takes its default."""

    def update(name: str, *chosen: str):
        preset = get_preset(name)
        radios = [gr.Radio(choices=drafter_choices(preset),
                           value=now if now in preset.drafter_names else default(preset))
                  for (_, default), now in zip(drafters, chosen)]
        return preset_info(preset), *radios

    radios = [radio for radio, _ in drafters]
    controls.preset.change(update, [controls.preset, *radios], [controls.preset_info, *radios], queue=False,
                           api_visibility="private")


def depth_legend(*sides: tuple[str, float]) -> str:
    """The depth legend for (drafter, k) sides: depths up to the largest k that drafts; none for plain decoding (nor for
    a k the run would refuse)."""
    ks = [int(k) for drafter, k in sides if drafter != PLAIN and k is not None and k == int(k) and 1 <= k <= MAX_K]
    return legend_html(max(ks)) if ks else ""


def drafter_control(preset: Preset, value: str, elem_id: str, label: str = "Drafter") -> gr.Radio:
    return CheckedRadio(drafter_choices(preset), value=value, label=label, elem_id=elem_id)


def k_control(elem_id: str, label: str = "k: draft tokens per step") -> gr.Number:
    return CheckedNumber(4, label=f"{label} (1–{MAX_K})", minimum=1, maximum=MAX_K, step=1, elem_id=elem_id)


def follow_drafter(drafter: gr.Radio, *drafting: gr.components.Component) -> None:
    """k and the adaptive stop mean nothing for plain decoding: disabled while it is chosen."""
    drafter.change(lambda name: [gr.update(interactive=name != PLAIN) for _ in drafting], drafter, list(drafting),
                   queue=False, api_visibility="private")


def min_draft_prob_control(elem_id: str, label: str = "Adaptive: end the chain after a draft below") -> gr.Slider:
    return CheckedSlider(0.0, 0.9, value=0.0, step=0.05, label=label, elem_id=elem_id,
                         info="the drafter's own probability; 0 = k every step (drift charts need every depth), "
                              "~0.3 = faster")


def tree_nodes_control(elem_id: str, label: str = "Draft tree nodes") -> gr.Number:
    return CheckedNumber(0, label=f"{label} (0–{MAX_NODES})", minimum=0, maximum=MAX_NODES, step=1,
                         elem_id=elem_id, info=f"0: a chain of k drafts per step; N: an EAGLE-2 tree of N nodes, k "
                                               f"deep, up to {TreeShape.topk} children each, verified in one forward "
                                               f"(our engine)")


def export_files(runs: dict[str, Run], messages: list[dict], tab: str, comparison: dict | None = None) -> list[str]:
    folder = Path(tempfile.mkdtemp(prefix="eagle-playground-"))
    stem = f"eagle-playground-{tab}-{datetime.now():%Y%m%d-%H%M%S}"
    return [str(p) for p in export_runs(runs, messages, folder, stem, comparison)]
