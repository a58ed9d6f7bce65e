"""The model's line and Stop, for every tab: runs of the model queue on one line (ENGINE, its slots), each waits
there saying so on its tab's status line, and a tab's Stop arms a switch its run reads between steps, or takes a
queued run out of the line before it starts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import gradio as gr
from starlette.types import ASGIApp, Receive, Scope, Send

from playground import environment
from playground.machine import release_freed_memory
from playground.playback import (
    EngineLine,
    StopSwitches,
)

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
    try:
        with LINE.slot(session, tab, what):
            yield from updates(stop.is_set)
    finally:
        release_memory_when_idle()


def model_idle() -> bool:
    """No run (nor a replay: it holds a place in the line, `holding_line`) holds or waits for the model."""
    return LINE.idle


TRIM_AFTER_S = 1.0  # how long after a run its freed heap is given back, if the model is idle then (else retried)
TRIM_TRIES = 60


def release_memory_when_idle(after_s: float = TRIM_AFTER_S, tries: int = TRIM_TRIES) -> threading.Timer:
    """Give back the heap the last run freed (machine.release_freed_memory) `after_s` seconds from now, once no run
    holds or waits for the model (tried again every `after_s`, `tries` times): never within a run's own time (the
    first trim after the weights load took 0.6 s here, later ones a few ms, holding glibc's arenas meanwhile), nor
    before a stopped run's last update has reached the page. Returns the first timer."""
    def trim(left: int) -> None:
        if model_idle():
            release_freed_memory()
        elif left > 1:
            schedule(left - 1)

    def schedule(left: int) -> threading.Timer:
        timer = threading.Timer(after_s, trim, (left,))
        timer.daemon = True
        timer.start()
        return timer

    return schedule(tries)


def holding_line(request: gr.Request | None, tab: str, what: str, updates: Callable[[], Iterator]) -> Iterator:
    """The UI updates of a model run with no Stop of its own (the replay panel, on `tab`: its own key, which no Stop
    trips), holding a place in the model's line while it runs: a run sent meanwhile is told it waits behind it, so
    that run's Stop finds it in line and says it was cancelled before it started."""
    session = session_id(request)
    try:
        with LINE.slot(session, tab, what):
            yield from updates()
    finally:
        release_memory_when_idle()  # its step-cost measurement frees much of what it took


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


def in_line(triggers: list, tab: str, status: gr.components.Component):
    """The first step of every model run: when its button is pressed, tell its user on `status` whether it has to
    wait for the model, and behind what (Gradio's queue says nothing to the page meanwhile). Chain the run with
    `.then`: Gradio's page sends the listeners of one trigger one after another, so a listener beside the run would
    only be sent once the run had started."""

    def announce(request: gr.Request):
        return LINE.join(session_id(request), tab) or gr.skip()

    return gr.on(triggers, announce, None, status, queue=False, api_visibility="private", show_progress="hidden")


def session_id(request: gr.Request | None) -> str:
    return (request.session_hash if request is not None else None) or "anonymous"
