"""The line for the model: which runs hold it and which wait, so that a queued run can tell its user so.

The app runs a fixed number of model runs at once (one by default, so measured speeds are not shared); Gradio's
queue holds the rest, first come first served, and says nothing to the page while a run waits. The UI announces each
run as its button is pressed (`join`), and every run reports when it starts and ends; a run that joined while every
slot was taken by other runs is told its place and what it waits for. Runs submitted through the API without the
announcement still hold slots, but are not counted among those waiting.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

Key = tuple[str, str]  # (session, tab)


@dataclass(frozen=True)
class Holder:
    key: Key
    what: str  # e.g. "chat answer", "benchmark (smoke)"


class EngineLine:
    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._running: list[Holder] = []
        self._waiting: list[Key] = []  # in the order they joined, as Gradio's queue serves them
        self._cancelled: set[Key] = set()  # left the line by Stop, not yet told
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(slots)  # Gradio's queue bounds the UI's runs; this bounds them with the rest

    def join(self, session: str, tab: str) -> str | None:
        """A run is being submitted: its place in line while every slot is taken by others (as a sentence), else
        None."""
        key = (session, tab)
        with self._lock:
            if len(self._running) < self.slots or any(h.key == key for h in self._running):
                return None  # it starts at once (or that tab's own run is going and will be stopped)
            if key not in self._waiting:
                self._waiting.append(key)
            return self._notice(key)

    def start(self, session: str, tab: str, what: str) -> None:
        key = (session, tab)
        with self._lock:
            self._waiting = [k for k in self._waiting if k != key]
            self._cancelled.discard(key)
            self._running.append(Holder(key, what))

    @contextmanager
    def slot(self, session: str, tab: str, what: str) -> Iterator[None]:
        """Hold one of the model's slots while the block runs, waiting for one first: the UI's runs, which Gradio's
        queue already keeps to `slots`, and the calls that come by another door (the agents' tools), which it does
        not see."""
        with self._slots:
            self.start(session, tab, what)
            try:
                yield
            finally:
                self.finish(session, tab)

    def finish(self, session: str, tab: str) -> None:
        key = (session, tab)
        with self._lock:
            held = next((h for h in self._running if h.key == key), None)
            if held is not None:
                self._running.remove(held)

    @property
    def idle(self) -> bool:
        """No run holds a slot and none waits for one."""
        with self._lock:
            return not self._running and not self._waiting

    def leave(self, session: str, tab: str) -> bool:
        """A waiting run was cancelled before it started; whether one was waiting (`cancelled_in_line` then tells
        once)."""
        key = (session, tab)
        with self._lock:
            waited = key in self._waiting
            self._waiting = [k for k in self._waiting if k != key]
            if waited:
                self._cancelled.add(key)
            return waited

    def was_cancelled_in_line(self, session: str, tab: str) -> bool:
        """Whether the tab's last run was cancelled while it waited and has not been told so yet (not asking once)."""
        with self._lock:
            return (session, tab) in self._cancelled

    def cancelled_in_line(self, session: str, tab: str) -> bool:
        """Whether the tab's last run was cancelled while it waited, asked once (for the page's next redraw)."""
        with self._lock:
            if (session, tab) not in self._cancelled:
                return False
            self._cancelled.discard((session, tab))
            return True

    def forget(self, session: str) -> None:
        """The browser tab closed: its runs neither wait nor hold a slot."""
        with self._lock:
            self._waiting = [k for k in self._waiting if k[0] != session]
            self._cancelled = {k for k in self._cancelled if k[0] != session}
            self._running = [h for h in self._running if h.key[0] != session]

    def _notice(self, key: Key) -> str:
        place = self._waiting.index(key) + 1
        busy = ", ".join(("your " if h.key[0] == key[0] else "another user's ") + h.what for h in self._running)
        ahead = f", after {place - 1} other waiting run{'s' * (place > 2)}" if place > 1 else ""
        return (f"**Queued** (place {place} in line{ahead}): the model runs {self.slots} request"
                f"{'s' * (self.slots > 1)} at a time and is busy with {busy}. Yours starts when "
                f"{'it ends' if place == 1 and len(self._running) == 1 else 'its turn comes'}; Stop cancels it.")
