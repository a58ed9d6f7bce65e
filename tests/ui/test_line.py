"""The model's line without a browser: a replay in progress holds it, so a chat sent meanwhile is told it waits, and
that chat's Stop says it was cancelled before it started (the issue saw status line and chat left empty: the replay
held the engine without the line knowing, so the chat was never counted as waiting)."""

from __future__ import annotations

from playground.ui.line import LINE, STOP_SWITCHES, STOPPED_IN_LINE, holding_line, stop_tab


def test_a_chat_stopped_behind_a_replay_says_it_was_cancelled_before_it_started() -> None:
    session = "anonymous"  # session_id(None): the handlers' request stands in for a browser tab's
    seen = {}

    def replaying():
        seen["notice"] = LINE.join(session, "chat")  # Send pressed while the replay works
        seen["stopped"] = stop_tab(None, "chat")  # then Stop, before the chat started
        yield "replayed"

    try:
        assert list(holding_line(None, "chat-replay", "replay of the last answer", replaying)) == ["replayed"]
        assert seen["notice"].startswith("**Queued** (place 1 in line)") and "your replay of the last answer" in \
            seen["notice"], seen
        assert seen["stopped"] == STOPPED_IN_LINE
        assert LINE.cancelled_in_line(session, "chat")  # the page's next redraw says so too
        assert LINE.join(session, "chat") is None  # the replay gave the line back when it ended
    finally:
        LINE.forget(session)
        STOP_SWITCHES.forget(session)


def test_without_the_replay_holding_the_line_the_stop_finds_nothing_to_cancel() -> None:
    """The negative control: a model run the line does not know of leaves the chat's Stop nothing to say."""
    try:
        assert LINE.join("anonymous", "chat") is None
        assert stop_tab(None, "chat") is None
    finally:
        LINE.forget("anonymous")
        STOP_SWITCHES.forget("anonymous")
