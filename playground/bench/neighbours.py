"""Busy neighbours: processes that spin on a core each while a measurement runs, as a shared machine's other jobs do.

Each is a Python busy loop in a process of its own that ends by itself after `MAX_SECONDS` (so an interrupted bench
leaves nothing running for long) and is ended as soon as the block it serves is left.

`other_work` measures the other side: how much of the machine other processes took while a measurement ran, so a
result file can say it was measured beside other work.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from playground.engine.threads import machine_ticks

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


STAT = Path("/proc/stat")
LOADAVG = Path("/proc/loadavg")


def _load_average(loadavg: Path = LOADAVG) -> float | None:
    try:
        return float(loadavg.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class OtherWork:
    """What ran beside a measurement, read from the machine's own counters: the share of all cores' time that other
    processes used while the block ran (the machine's busy time less this process's and its children's) and the
    1-minute load average at both ends. `other_share` None where the counters cannot be read."""

    other_share: float | None = None
    load_average: list[float | None] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def beside(self) -> bool | None:
        """Whether other work took a noticeable share (`BESIDE_SHARE`) of the machine while the block ran."""
        return None if self.other_share is None else self.other_share >= BESIDE_SHARE

    def to_dict(self) -> dict:
        return {"beside_other_work": self.beside, "other_cpu_share": self.other_share,
                "load_average_1min": self.load_average, "seconds": round(self.seconds, 1),
                "how": "other processes' share of all cores' time over the run (/proc/stat's busy time less this "
                       "process's own and its descendants', such as vLLM's engine processes), and the 1-minute load "
                       "average at its start and end"}


BESIDE_SHARE = 0.05  # other processes' share of the machine above which a measurement ran beside other work


PROC = Path("/proc")


def _descendant_ticks(proc: Path = PROC, root: int | None = None) -> int:
    """CPU time, in clock ticks, of the live processes below this one (vLLM's engine processes, their workers), with
    their own reaped children's: what os.times() counts of them only once they have ended and been waited for."""
    parent, ticks = {}, {}
    for entry in proc.glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # ended meanwhile
        fields = stat[stat.rindex(")") + 2 :].split()
        parent[int(entry.name)] = int(fields[1])
        ticks[int(entry.name)] = sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
    below, frontier = set(), {os.getpid() if root is None else root}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier} - below
        below |= frontier
    return sum(ticks[pid] for pid in below)


def _own_ticks() -> float:
    """CPU time of this process and everything below it, in clock ticks: ended children through os.times(), live
    ones through /proc, so that an engine's own processes are not counted as other work."""
    times = os.times()
    ended = (times.user + times.system + times.children_user + times.children_system) * os.sysconf("SC_CLK_TCK")
    return ended + _descendant_ticks()


@contextlib.contextmanager
def other_work(stat: Path = STAT, loadavg: Path = LOADAVG) -> Iterator[OtherWork]:
    """Measure what ran beside the block; the record is filled in when the block ends."""
    record = OtherWork(load_average=[_load_average(loadavg)])
    start, own, t0 = machine_ticks(stat), _own_ticks(), time.monotonic()
    try:
        yield record
    finally:
        end, record.seconds = machine_ticks(stat), time.monotonic() - t0
        record.load_average.append(_load_average(loadavg))
        if start and end and end[1] > start[1]:
            others = (end[0] - start[0]) - (_own_ticks() - own)
            record.other_share = round(min(max(others / (end[1] - start[1]), 0.0), 1.0), 3)
