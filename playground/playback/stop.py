"""Stop switches: one per (session, tab), checked by the engine between steps."""

from __future__ import annotations

import threading
import time


class StopSwitches:
    """One threading.Event per (session, tab). Stop sets it; the engine checks it between steps.

    Stop also counts for a run still waiting in the queue: each switch remembers when Stop was last pressed, and a
    run armed later but submitted before that press starts already stopped."""

    def __init__(self) -> None:
        self._events: dict[tuple[str, str], threading.Event] = {}
        self._stopped_at: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def arm(self, session: str, tab: str, submitted_at: float) -> threading.Event:
        """The switch of a run submitted at `submitted_at` (time.monotonic()), set if Stop was pressed since."""
        with self._lock:
            event = self._events[(session, tab)] = threading.Event()
            if self._stopped_at.get((session, tab), float("-inf")) >= submitted_at:
                event.set()
            return event

    def trip(self, session: str, tab: str) -> None:
        with self._lock:
            self._stopped_at[(session, tab)] = time.monotonic()
            event = self._events.get((session, tab))
        if event is not None:
            event.set()

    def forget(self, session: str) -> None:
        with self._lock:
            for table in (self._events, self._stopped_at):
                for key in [key for key in table if key[0] == session]:
                    del table[key]
