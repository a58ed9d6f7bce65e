"""How many CPU threads each phase of a step runs on, and how busy the machine is while it runs.

A decode step on a CPU mixes two kinds of work:
- one-row products (a plain step, every draft of a chain): bound by reading the weights, which one core does about
  as fast as two (SmolLM2 on a 2-core AMD EPYC Zen 4: a plain step 36.8 ms on one thread, 36.0 on two);
- a verification of k + 1 rows (and a prefill): compute-bound, so two threads run it in ~0.6x one's time.
OpenMP threads meet at a barrier after every product. When another process holds a core, the thread that shares it
is descheduled for a time slice while its partner waits, so every barrier costs milliseconds: beside one busy loop
the same plain step took 127 ms on two threads and 52 on one, a 5-row verification 196 ms and 87.

So the policy (`ThreadPolicy`), chosen per phase and adapting to the machine as steps run:
- one-row work runs on the thread count measured fastest for it at load (`calibrate`; one thread unless more are
  measurably faster), so it never waits at a barrier for nothing;
- multi-row work runs on every thread while no other task is runnable, and on as many as the cores left free when
  others are (`LoadGauge`: the runnable tasks the kernel counts, less this one, read every 50 ms at most and
  smoothed over readings).
A user who sets the threads (`--threads`, PLAYGROUND_THREADS, OMP_NUM_THREADS) gets exactly that many, in every
phase. Every step event carries the threads its verification ran on and the load last read before it, so a reading
taken on a busy machine says so. "Busy" is other processes' CPU time on the cores our threads want (`cores_taken`,
`busy_text`), not the runnable snapshots: a browser rendering the answer on the same 2-core machine is runnable at
about half the steps but takes under half a core, a busy loop a whole one (docs/engine.md).

`playground/__init__.py` also bounds how long an idle OpenMP thread spins before it sleeps (`openmp.py`), so that
a thread left over from a verification does not burn the core the next phase, or a neighbour, needs.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

LOADAVG = Path("/proc/loadavg")
SMOOTHING = 0.3  # weight of the newest load sample in the running estimate
BUSY = 0.5  # other runnable tasks, smoothed, at which a core counts as taken
BUSY_READINGS = 3  # calibration at load is skipped only where this many readings in a row see other tasks
MULTI_THREAD_GAIN = 1.1  # one-row work takes more threads only when they are measured this much faster
BUSY_CORES = 0.75  # other processes' CPU time, in cores our threads wanted, at which a run met a busy machine


def runnable_tasks(loadavg: Path = LOADAVG) -> int | None:
    """Tasks the kernel counts as runnable right now, the reader included (/proc/loadavg's fourth field, "R/T");
    None where the system does not say."""
    try:
        return int(loadavg.read_text().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None


def cores_taken(others_cores: float | None, threads: int, cores: int | None = None) -> float | None:
    """Of other processes' CPU time (`others_cores`, in cores), what fell on the cores `threads` of ours want: the
    rest had cores of its own (`cores`: this process's usable cores)."""
    if others_cores is None:
        return None
    return max(others_cores - max((cores or usable_cores()) - threads, 0), 0.0)


def busy_text(taken: float | None) -> str:
    """What the machine's load did to a run's readings (RunMetrics.cores_taken, its steps' mean `cores_taken`), or ""
    where it ran alone, beside work too small to count (a browser rendering its answer), or nobody could tell: for
    status lines and the CLI. The one rule for "busy": `BUSY_CORES`."""
    if taken is None or taken < BUSY_CORES:
        return ""
    return (f"the machine was busy (other processes took {taken:.1f} of the cores its threads wanted): speeds and "
            "speedups read lower than on an idle machine")


OWN_TASKS = Path("/proc/self/task")
CONSISTENT_TRIES = 4  # readings of this process's threads around the machine's count until two agree
SETTLE_TRIES = 8  # pauses while another thread of ours still runs (an OpenMP helper spinning after a product)
SETTLE_S = 0.0002


def own_running_tids(tasks: Path = OWN_TASKS) -> frozenset[str]:
    """This process's threads in state R (running or runnable), by thread id. An OpenMP helper still spinning after
    a product counts here, not as another task."""
    try:
        tids = os.listdir(tasks)
    except OSError:
        return frozenset()
    running = set()
    for tid in tids:
        try:
            stat = (tasks / tid / "stat").read_bytes()
        except OSError:
            continue  # the thread ended meanwhile
        if stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] == b"R":
            running.add(tid)
    return frozenset(running)


def own_running_threads(tasks: Path = OWN_TASKS) -> int:
    """How many of this process's threads are in state R, at least 1: the caller."""
    return max(len(own_running_tids(tasks)), 1)


def other_runnable_tasks(count: Callable[[], int | None] = runnable_tasks,
                         ours: Callable[[], frozenset[str]] = own_running_tids,
                         tries: int = CONSISTENT_TRIES, pause: Callable[[float], None] = time.sleep,
                         me: str | None = None) -> int | None:
    """Runnable tasks on the machine that are not this process's threads; None where the system does not say.

    The machine's count includes this process's threads that are runnable, and also, while an OpenMP helper spins
    after a product, one or two more that /proc shows nowhere as running: our other threads sit asleep on the
    spinning helper's core (on Linux 6.18 we take it for EEVDF's delayed dequeue, which leaves a task that has just
    slept on the run queue, counted). So right after a product the machine's count less our running threads read
    one task more than there was (on an idle 2-core Zen 5, 37-44 % of a step-cost profile's timed calls
    "began beside another task"). So the reading first waits, `SETTLE_TRIES` pauses of `SETTLE_S` at most, until no
    thread of ours but the reader (`me`) runs, which lets the queued sleepers go; then reads our running threads
    before and after the machine's count, and uses the count only where the two readings agree (after `tries`
    disagreements the threads running in either reading count as ours). The per-thread reads are made only when the
    machine count says something besides the reader may run (one file read otherwise)."""
    running = count()
    if running is None:
        return None
    if running <= 1:
        return 0
    me = str(threading.get_native_id()) if me is None else me
    before = ours()
    for _ in range(SETTLE_TRIES):
        if not before - {me}:
            break
        pause(SETTLE_S)
        before = ours()
    seen = before
    for _ in range(tries):
        running = count()
        if running is None:
            return None
        after = ours()
        if after == before:
            return max(running - max(len(after | {me}), 1), 0)
        seen, before = before | after, after
    return max(running - max(len(seen | {me}), 1), 0)


STAT = Path("/proc/stat")
CPU_INTERVAL_MAX_S = 1.0  # a longer gap between two readings (the app idle between runs) measures no run


def machine_ticks(stat: Path = STAT) -> tuple[int, int] | None:
    """(busy, total) CPU time of the whole machine so far, in clock ticks (/proc/stat's first line: busy is all but
    idle and iowait; guest time is already counted in user); None where the system does not say."""
    try:
        values = [int(v) for v in stat.read_text().splitlines()[0].split()[1:9]]
    except (OSError, ValueError, IndexError):
        return None
    total = sum(values)
    return total - values[3] - (values[4] if len(values) > 4 else 0), total


def machine_busy_seconds(stat: Path = STAT) -> float | None:
    """CPU time every core of the machine has spent busy so far, in seconds; None where the system does not say."""
    ticks = machine_ticks(stat)
    return None if ticks is None else ticks[0] / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU time this process's threads have used so far, in seconds."""
    times = os.times()
    return times.user + times.system


class OtherCpu:
    """Other processes' CPU time between two readings, in cores: the machine's busy time less this process's own,
    over the wall time between them. None for the first reading, where the system does not say, or after a gap of
    over `max_gap_s` (what ran while no run read the load is not what a run met)."""

    def __init__(self, machine: Callable[[], float | None] = machine_busy_seconds,
                 own: Callable[[], float] = own_cpu_seconds, clock: Callable[[], float] = time.monotonic,
                 max_gap_s: float = CPU_INTERVAL_MAX_S) -> None:
        self._machine, self._own, self._clock, self.max_gap_s = machine, own, clock, max_gap_s
        self._last: tuple[float, float, float] | None = None

    def read(self) -> float | None:
        now, busy, own = self._clock(), self._machine(), self._own()
        last, self._last = self._last, None if busy is None else (now, busy, own)
        if last is None or busy is None or not 0 < now - last[0] <= self.max_gap_s:
            return None
        return ((busy - last[1]) - (own - last[2])) / (now - last[0])


SAMPLE_EVERY_S = 0.2  # the load is read at most this often; forwards in between carry the last reading


class LoadGauge:
    """Other runnable tasks than this process's, read before a target forward at most every `every_s` seconds and
    smoothed over readings: a neighbour process, a browser rendering the page. (Another run in this process shares
    the cores too, but through threads the OS counts as ours; the app runs one at a time by default.)

    Not every forward: where one-row work runs on two threads, a reading right after a product waits the full
    settling time for our helper thread (`other_runnable_tasks`), and reading before every forward cost 3.4 ms of
    SmolLM2's 7 ms int4 step (on a 2-core Zen 5: plain decoding 100 tok/s read every step, 152 unread). Read every
    50 ms, a reading's settling and /proc reads still took about a tenth of a decoding's time once the int4 step
    fell to 6-7 ms (on a 2-core Zen 4, int4 plain decoding 107 tok/s read every 50 ms, 121 every 200 ms); read
    every 200 ms, a neighbour is seen within two readings (0.4 s) and a run's cores taken still has readings
    enough."""

    def __init__(self, read: Callable[[], int | None] = other_runnable_tasks, every_s: float = SAMPLE_EVERY_S,
                 clock: Callable[[], float] = time.monotonic, cpu: OtherCpu | None = None) -> None:
        self._read, self.every_s, self._clock = read, every_s, clock
        self._cpu = cpu or OtherCpu(clock=clock)
        self.smoothed = 0.0
        self.last: int | None = None
        self.others_cores: float | None = None  # other processes' CPU time since the reading before, in cores
        self._read_at: float | None = None

    def sample(self) -> int | None:
        """Other runnable tasks now (None where unknown): a new reading, which updates the smoothed estimate, or
        within `every_s` of the last reading, that one."""
        now = self._clock()
        if self._read_at is not None and now - self._read_at < self.every_s:
            return self.last
        self._read_at = now
        self.others_cores = self._cpu.read()
        others = self._read()
        if others is None:
            return None
        self.last = others
        self.smoothed += SMOOTHING * (others - self.smoothed)
        return others

    @property
    def busy_cores(self) -> int:
        """Cores other tasks take, by the smoothed estimate."""
        return int(self.smoothed + 1 - BUSY) if self.smoothed >= BUSY else 0


def user_threads(environ=os.environ) -> int | None:
    """Threads the user fixed for OpenMP (OMP_NUM_THREADS), or None. The playground's own `--threads` and
    PLAYGROUND_THREADS reach the policy through `ThreadPolicy.fix`, called by the entry points."""
    value = environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def usable_cores() -> int:
    """Cores this process may run on (its affinity, where the system says)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class ThreadPolicy:
    """Threads per phase (module docstring). `use(rows)` before a product of `rows` rows sets torch's threads and
    returns how many; `describe()` says what the policy is, for run records and status lines."""

    def __init__(self, max_threads: int | None = None, fixed: int | None = None,
                 gauge: LoadGauge | None = None) -> None:
        self.fixed = fixed
        self.max_threads = fixed or max_threads or torch.get_num_threads()
        self.one_row = 1 if fixed is None else fixed
        self.gauge = gauge or LoadGauge()
        self.measured: dict[int, float] = {}  # one-row forward ms by thread count, from `calibrate`
        self._lock = threading.Lock()

    def fix(self, threads: int) -> None:
        """Every phase on exactly `threads` from now on (the user's choice)."""
        self.fixed = self.max_threads = self.one_row = threads
        torch.set_num_threads(threads)

    def multi_row(self) -> int:
        """Threads for multi-row work now: every thread, less the cores other tasks take (at least one)."""
        if self.fixed is not None:
            return self.fixed
        return max(1, min(self.max_threads, usable_cores() - self.gauge.busy_cores))

    def use(self, rows: int) -> int:
        threads = min(self.one_row, self.multi_row()) if rows <= 1 else self.multi_row()
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        return threads

    def sample(self) -> int | None:
        """A load sample before a target forward (between products; `LoadGauge.sample`): the other runnable tasks."""
        return self.gauge.sample()

    @property
    def cores_taken(self) -> float | None:
        """Other processes' CPU time between the last two load samples (`LoadGauge.others_cores`), in cores, beyond
        the cores this policy's threads leave free (`cores_taken`)."""
        return cores_taken(self.gauge.others_cores, self.max_threads)

    def calibrate(self, one_row_forward: Callable[[], object], reps: int = 5) -> None:
        """Time `one_row_forward` on one thread and on every thread, alternating, median of `reps`, and keep the
        faster for one-row work (more threads only if `MULTI_THREAD_GAIN` faster). Skipped where the user fixed the
        threads, where there is one, or while other tasks run (their load would decide, not the kernels): one-row work
        then stays on one thread. "Other tasks run" takes every one of `BUSY_READINGS` readings a sampling interval
        apart: a single reading also catches a kernel thread's moment or the C compiler just gone (the int4 path's
        first load), which left a fresh process's one-row work on one thread (9.6 ms a step against 6.4 on two)."""
        if self.fixed is not None or self.max_threads < 2:
            return
        with self._lock:
            if self._busy():
                return
            times: dict[int, list[float]] = {1: [], self.max_threads: []}
            one_row_forward()
            try:
                for _ in range(reps):
                    for threads, samples in times.items():
                        self.fixed = self.one_row = threads  # the forward's own `use` keeps this count
                        torch.set_num_threads(threads)
                        start = time.perf_counter()
                        one_row_forward()
                        samples.append(time.perf_counter() - start)
            finally:
                self.fixed = None
            self.measured = {t: statistics.median(s) * 1000 for t, s in times.items()}
            many = self.measured[self.max_threads]
            self.one_row = self.max_threads if self.measured[1] >= MULTI_THREAD_GAIN * many else 1
            torch.set_num_threads(self.max_threads)

    def _busy(self) -> bool:
        for reading in range(BUSY_READINGS):
            if reading:
                time.sleep(self.gauge.every_s)
            if not self.gauge.sample():
                return False
        return True

    def describe(self) -> str:
        if self.fixed is not None:
            return f"{self.fixed} thread{'s' if self.fixed > 1 else ''} (set by the user)"
        measured = ", ".join(f"{ms:.1f} ms on {t}" for t, ms in sorted(self.measured.items()))
        return (f"one-row work on {self.one_row}, verification on up to {self.max_threads} "
                f"(fewer while other tasks run)" + (f"; one row measured {measured}" if measured else ""))


_POLICY: ThreadPolicy | None = None
_POLICY_LOCK = threading.Lock()


def thread_policy() -> ThreadPolicy:
    """The process's policy (threads are process-wide): fixed where the environment sets the threads."""
    global _POLICY
    with _POLICY_LOCK:
        if _POLICY is None:
            _POLICY = ThreadPolicy(fixed=user_threads())
        return _POLICY
