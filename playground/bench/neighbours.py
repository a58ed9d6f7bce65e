"""Busy neighbours: processes that spin on a core each while a measurement runs, as a shared machine's other jobs do.

Each is a Python busy loop in a process of its own that ends by itself after `MAX_SECONDS` (so an interrupted bench
leaves nothing running for long) and is ended as soon as the block it serves is left.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator

MAX_SECONDS = 3600
_LOOP = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass\n"


@contextlib.contextmanager
def busy_neighbours(count: int, max_seconds: float = MAX_SECONDS) -> Iterator[list[subprocess.Popen]]:
    """`count` busy-loop processes for the duration of the block."""
    processes = [subprocess.Popen([sys.executable, "-c", _LOOP.format(seconds=max_seconds)],
                                  stdin=subprocess.DEVNULL) for _ in range(count)]
    try:
        if processes:
            time.sleep(0.5)  # let the scheduler spread them before the measurement starts
        yield processes
    finally:
        for process in processes:
            process.kill()
        for process in processes:
            process.wait()


def parse_neighbours(text: str) -> tuple[int, ...]:
    """'0,1,2' -> (0, 1, 2): busy neighbour counts, each a condition of its own."""
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"--neighbours takes a comma list of whole numbers, got {text!r}") from None
    if not counts or any(c < 0 or c > 16 for c in counts):
        raise ValueError(f"--neighbours: each count must be from 0 to 16, got {text!r}")
    return counts
