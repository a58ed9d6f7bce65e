"""Refusals: a bad request becomes one clear sentence for the browser's toast and the API's error, kept on the tab's
status line until the next action, and one log line; the app keeps serving."""

from __future__ import annotations

import functools
import html
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator

import gradio as gr

from .line import LINE, STOPPED_IN_LINE, session_id

log = logging.getLogger("playground")


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
