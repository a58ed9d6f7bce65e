"""The thread policy and the load gauge (engine/threads.py), the busy neighbours of the benches, and what a run
records of both. No timing is asserted: where a choice depends on a measurement, the measurement is scripted."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from playground.bench.neighbours import busy_neighbours, parse_neighbours
from playground.engine import RunTally, StepEvent
from playground.engine.threads import (
    LoadGauge,
    ThreadPolicy,
    busy_text,
    other_runnable_tasks,
    own_running_threads,
    runnable_tasks,
)


class ScriptedLoad:
    """Other runnable tasks, as a list read one sample at a time."""

    def __init__(self, values: list[int | None]) -> None:
        self.values = list(values)

    def __call__(self) -> int | None:
        return self.values.pop(0)


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_the_gauge_smooths_what_it_reads_and_calls_a_core_taken_only_when_it_stays_taken() -> None:
    gauge = LoadGauge(every_s=0, read=ScriptedLoad([1, 0, 0, 1, 1, 1, 1, None]))
    assert gauge.sample() == 1 and gauge.busy_cores == 0  # one sample of a neighbour: not yet a taken core
    gauge.sample(), gauge.sample()
    assert gauge.busy_cores == 0
    for _ in range(4):
        gauge.sample()
    assert gauge.busy_cores == 1 and gauge.last == 1
    assert gauge.sample() is None and gauge.last == 1  # unknown: the estimate stands


def test_the_gauge_reads_at_most_every_interval_and_forwards_between_carry_the_last_reading() -> None:
    now = [0.0]
    gauge = LoadGauge(ScriptedLoad([1, 0, 2]), every_s=0.05, clock=lambda: now[0])
    assert gauge.sample() == 1
    now[0] = 0.049
    assert gauge.sample() == 1 and gauge.sample() == 1  # within the interval: no reading, the last one stands
    now[0] = 0.05
    assert gauge.sample() == 0
    now[0] = 0.2
    assert gauge.sample() == 2  # the script held three readings: a fourth read would have raised IndexError
    assert gauge.smoothed == pytest.approx(0.3 * (1 - 0.3) * (1 - 0.3) + 0.3 * 2)


def test_one_row_work_and_verification_get_their_own_thread_counts(restore_threads) -> None:
    load = ScriptedLoad([0] * 3 + [1] * 10)
    policy = ThreadPolicy(max_threads=2, gauge=LoadGauge(load, every_s=0))
    cores = 2
    import playground.engine.threads as threads

    original = threads.usable_cores
    threads.usable_cores = lambda: cores
    try:
        policy.sample()
        assert policy.use(1) == 1 and torch.get_num_threads() == 1
        assert policy.use(5) == 2 and torch.get_num_threads() == 2  # idle: verification on every thread
        for _ in range(10):
            policy.sample()
        assert policy.use(5) == 1  # a neighbour holds a core: verification leaves it alone
        assert policy.use(1) == 1
        policy.one_row = 2  # where two threads measured faster for one row at load, a neighbour still takes one
        assert policy.use(1) == 1
    finally:
        threads.usable_cores = original


def test_threads_the_user_sets_hold_in_every_phase_whatever_the_load(restore_threads) -> None:
    policy = ThreadPolicy(max_threads=2, gauge=LoadGauge(every_s=0, read=ScriptedLoad([3] * 10)))
    policy.fix(2)
    for _ in range(10):
        policy.sample()
    assert [policy.use(rows) for rows in (1, 5, 17)] == [2, 2, 2]
    assert "set by the user" in policy.describe()
    policy.calibrate(lambda: pytest.fail("a fixed policy measures nothing"))


def _forward_costing(ms_by_threads: dict[int, float], policy: ThreadPolicy | None = None):
    """A one-row forward that takes the time its thread count costs; with `policy`, it first asks the policy for its
    threads, as Target.forward does."""
    def forward() -> None:
        if policy is not None:
            policy.use(1)
        time.sleep(ms_by_threads[torch.get_num_threads()] / 1000)
    return forward


def test_calibration_keeps_one_thread_for_one_row_work_unless_more_are_measurably_faster(restore_threads) -> None:
    same = ThreadPolicy(max_threads=2, gauge=LoadGauge(every_s=0, read=ScriptedLoad([0] * 3)))
    same.calibrate(_forward_costing({1: 20, 2: 20}), reps=2)
    assert same.one_row == 1 and set(same.measured) == {1, 2} and "one row measured" in same.describe()
    faster = ThreadPolicy(max_threads=2, gauge=LoadGauge(every_s=0, read=ScriptedLoad([0] * 3)))
    faster.calibrate(_forward_costing({1: 40, 2: 20}, faster), reps=2)  # timed through the policy's own `use`
    assert faster.one_row == 2 and faster.fixed is None
    busy = ThreadPolicy(max_threads=2, gauge=LoadGauge(every_s=0, read=ScriptedLoad([1, 2, 1])))
    busy.calibrate(lambda: pytest.fail("a busy machine would decide, not the kernels"))
    assert busy.one_row == 1 and not busy.measured
    # one reading's other task (a kernel thread's moment, a compiler just gone) does not skip the measurement
    blip = ThreadPolicy(max_threads=2, gauge=LoadGauge(every_s=0, read=ScriptedLoad([1, 0] + [0] * 3)))
    blip.calibrate(_forward_costing({1: 40, 2: 20}, blip), reps=2)
    assert blip.one_row == 2 and set(blip.measured) == {1, 2}


def test_the_load_is_read_from_proc_and_this_process_threads_are_not_counted(tmp_path: Path) -> None:
    loadavg = tmp_path / "loadavg"
    loadavg.write_text("0.50 0.40 0.30 3/412 9876\n")
    assert runnable_tasks(loadavg) == 3
    assert runnable_tasks(tmp_path / "missing") is None
    tasks = tmp_path / "task"
    for tid, state in ((10, "R"), (11, "S"), (12, "R")):
        (tasks / str(tid)).mkdir(parents=True)
        (tasks / str(tid) / "stat").write_text(f"{tid} (pt worker (1)) {state} 1 2 3\n")  # a name with ") " in it
    assert own_running_threads(tasks) == 2
    assert own_running_threads(tmp_path / "none") == 1
    if runnable_tasks() is not None:  # Linux: the real reading is a count, this thread never among the others
        others = other_runnable_tasks()
        assert others is not None and 0 <= others < runnable_tasks() + 8


def test_a_run_records_its_threads_and_how_busy_the_machine_was() -> None:
    events = [StepEvent(step=i, drafted=[], accepted=0, emitted=[i], elapsed_ms=10.0 * (i + 1),
                        threads=2 if i == 0 else 1, others_running=1 if i in (2, 3) else 0) for i in range(5)]
    metrics = RunTally.of(events, 4).metrics()
    assert metrics.busy_share == pytest.approx(2 / 5) and metrics.threads == [1, 2]
    assert metrics.cores_taken is None and busy_text(metrics.cores_taken) == ""  # the CPU time was not read
    bare = RunTally.of([StepEvent(step=0, drafted=[], accepted=0, emitted=[1], elapsed_ms=1.0)], 4).metrics()
    assert bare.busy_share is None and bare.threads is None  # a backend that cannot tell says nothing


def test_busy_neighbours_run_while_the_block_runs_and_end_with_it() -> None:
    with busy_neighbours(2, max_seconds=60) as processes:
        assert len(processes) == 2 and all(p.poll() is None for p in processes)
    assert all(p.poll() is not None for p in processes)
    with busy_neighbours(0) as none:
        assert none == []
    assert parse_neighbours("0,1,2") == (0, 1, 2)
    for bad in ("", "1,x", "-1", "17"):
        with pytest.raises(ValueError, match="--neighbours"):
            parse_neighbours(bad)


def test_the_two_engine_bench_sets_each_condition_against_its_idle_row() -> None:
    """bench-engines --neighbours: speedups within a condition, each row's rate over its idle twin's, a table column
    per condition (rows made here: the rule is tested, not a machine)."""
    from dataclasses import asdict

    from playground.bench.engines import EngineRow, compare_rows, table

    def row(drafter: str, neighbours: int, rate: float) -> EngineRow:
        return EngineRow("local", drafter, drafter, None if drafter == "none" else 4, 1, 2, 64, rate, (rate, rate),
                         rate, 1.0, neighbours=neighbours, token_ids=[[1, 2], [3]])

    rows = [row("none", 0, 25.0), row("eagle3.1", 0, 40.0), row("none", 1, 20.0), row("eagle3.1", 1, 30.0)]
    compare_rows(rows)
    assert [r.kept_of_idle for r in rows] == [None, None, 0.8, 0.75]
    assert [r.speedup for r in rows] == [1.0, 1.6, 1.0, 1.5] and all(r.identical_to_plain for r in rows)
    text = table({"rows": [{k: v for k, v in asdict(r).items() if k != "token_ids"} for r in rows]})
    assert "| busy neighbours |" in text and "| local | eagle3.1 k=4 | 1 | 1 | 30.0 | 0.75× | 1.50× |" in text
