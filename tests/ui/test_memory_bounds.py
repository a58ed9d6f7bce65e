"""What the app keeps that grows with use, bounded: visitors' sessions (Gradio keeps each one's state and its own copy
of every component's config with the last value sent; PLAYGROUND_SESSIONS), and the heap a run freed, given back to
the system when it ends (machine.release_freed_memory). The whole app over a varied session:
scripts/app_memory.py, docs/app.md."""

from __future__ import annotations

import ast
from pathlib import Path

import gradio as gr
import pytest
from gradio_client import Client

from playground.machine import release_freed_memory
from playground.ui import SESSIONS, session_capacity

ROOT = Path(__file__).resolve().parents[2]


def _rss_mib() -> float:
    status = Path("/proc/self/status").read_text().splitlines()
    return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


def test_the_heap_a_run_freed_goes_back_to_the_system() -> None:
    """Many small blocks (below glibc's mmap threshold, so from its heap), all freed but one kept at the end: glibc
    keeps the freed pages for reuse, and the trim gives them back."""
    if not release_freed_memory():
        pytest.skip("this C library has no malloc_trim (not glibc)")
    blocks = [bytearray(64 * 1024) for _ in range(3200)]  # 200 MiB, each page touched (zero-filled)
    kept = blocks[-1]
    del blocks
    held = _rss_mib()
    assert release_freed_memory()
    given_back = held - _rss_mib()
    assert given_back > 100, f"only {given_back:.0f} MiB of 200 freed came back"
    assert len(kept) == 64 * 1024


def test_session_capacity_reads_its_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLAYGROUND_SESSIONS", raising=False)
    assert session_capacity() == SESSIONS
    monkeypatch.setenv("PLAYGROUND_SESSIONS", "5")
    assert session_capacity() == 5
    for bad in ("0", "2.5", "many"):
        monkeypatch.setenv("PLAYGROUND_SESSIONS", bad)
        with pytest.raises(ValueError, match="PLAYGROUND_SESSIONS"):
            session_capacity()


def test_app_py_launches_with_the_session_capacity() -> None:
    tree = ast.parse((ROOT / "app.py").read_text())
    launches = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute) and node.func.attr == "launch"]
    assert len(launches) == 1
    given = {kw.arg: ast.unparse(kw.value) for kw in launches[0].keywords}
    assert given.get("state_session_capacity") == "session_capacity()"


def test_sessions_beyond_the_capacity_are_forgotten_least_recently_used_first(monkeypatch) -> None:
    """A Blocks app launched as app.py launches it, with PLAYGROUND_SESSIONS=2: three visitors each keep a value in a
    gr.State; the first visitor's is gone (a new session's default), the last two keep theirs, and Gradio holds two
    sessions, not three."""
    monkeypatch.setenv("PLAYGROUND_SESSIONS", "2")
    with gr.Blocks() as demo:
        kept = gr.State("")
        box = gr.Textbox()
        gr.Button().click(lambda text: (text, text), box, [kept, box], api_name="keep")
        gr.Button().click(lambda value: value, kept, box, api_name="read")
    demo.queue()
    demo.launch(prevent_thread_lock=True, state_session_capacity=session_capacity(), quiet=True)
    try:
        visitors = [Client(demo.local_url, verbose=False) for _ in range(3)]
        for i, visitor in enumerate(visitors):
            visitor.predict(f"visitor {i}", api_name="/keep")
        assert len(demo.state_holder.session_data) == 2
        assert [visitor.predict(api_name="/read") for visitor in visitors[1:]] == ["visitor 1", "visitor 2"]
        assert visitors[0].predict(api_name="/read") == ""  # forgotten: its session starts again empty
    finally:
        demo.close()


def test_the_freed_heap_is_given_back_once_the_line_is_idle_not_during_a_run(monkeypatch) -> None:
    """After a run (and a replay) the trim waits until no run holds or waits for the model: while one does, it is
    tried again later, and given up after its tries."""
    import time

    from playground.ui import line

    trims = []
    monkeypatch.setattr(line, "release_freed_memory", lambda: trims.append(1) or True)
    line.release_memory_when_idle(after_s=0.01).join()
    assert trims == [1]
    line.LINE.start("visitor", "chat", "chat answer")
    try:
        line.release_memory_when_idle(after_s=0.05, tries=100)
        time.sleep(0.3)
        assert trims == [1]  # not while the run holds the model
    finally:
        line.LINE.finish("visitor", "chat")
    deadline = time.monotonic() + 30
    while len(trims) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert trims == [1, 1]  # once the model was free
    line.LINE.start("visitor", "chat", "chat answer")
    try:
        line.release_memory_when_idle(after_s=0.01, tries=3)
        time.sleep(0.5)
    finally:
        line.LINE.finish("visitor", "chat")
    time.sleep(0.2)
    assert trims == [1, 1]  # its tries ran out while the model was held


def test_a_replay_holds_the_trim_off_while_it_runs_and_gives_memory_back_after(monkeypatch) -> None:
    """A replay (which measures step costs) holds a place in the line: no trim while it runs; one once it has ended."""
    import time

    from playground.ui import line

    trims = []
    monkeypatch.setattr(line, "release_freed_memory", lambda: trims.append(1) or True)

    def replay():
        line.release_memory_when_idle(after_s=0.02, tries=100)
        time.sleep(0.3)
        assert trims == [] and not line.LINE.idle and not line.model_idle()
        yield "replayed"

    assert list(line.holding_line(None, "chat-replay", "replay of the last answer", replay)) == ["replayed"]
    deadline = time.monotonic() + 30
    while not trims and time.monotonic() < deadline:
        time.sleep(0.05)
    assert trims and line.model_idle()
