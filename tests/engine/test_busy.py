"""When a run says the machine was busy (engine/threads.py `busy_text`, `cores_taken`): other processes' CPU time
over the run, in cores, beyond the cores our threads leave free. The rule on hand-made readings, then real runs of the
tiny target beside a real busy loop and without one. No timing is asserted."""

from __future__ import annotations

import time

import pytest
import torch

from playground.bench.neighbours import busy_neighbours, other_work
from playground.engine import GenerationConfig, RunTally, StepEvent
from playground.engine.decode import plain_generate
from playground.engine.threads import (
    BUSY_CORES,
    LoadGauge,
    OtherCpu,
    ThreadPolicy,
    busy_text,
    cores_taken,
    machine_busy_seconds,
    usable_cores,
)

# Other processes' cores over successive 50 ms readings while Chromium rendered a streaming Chat answer beside the
# default pair on a 2-core machine (docs/engine.md "Threads on a shared CPU": 0.37-0.51 cores over an answer): in
# bursts, most readings near nothing.
BROWSER_LIKE = [0.0, 0.2, 1.4, 0.0, 0.2, 0.0, 1.2, 0.0, 0.4, 0.6]


class Scripted:
    def __init__(self, values: list) -> None:
        self.values = list(values)

    def __call__(self):
        return self.values.pop(0)


def run_of(per_step: list[float | None]):
    events = [StepEvent(step=i, drafted=[], accepted=0, emitted=[i], elapsed_ms=10.0 * (i + 1), cores_taken=taken)
              for i, taken in enumerate(per_step)]
    return RunTally.of(events, 4).metrics()


def test_other_processes_cpu_time_is_the_machines_busy_time_less_ours_over_the_wall_time() -> None:
    cpu = OtherCpu(machine=Scripted([10.0, 10.9, 11.0, None, 12.0, 20.0]), own=Scripted([5.0, 5.4, 5.4, 5.4, 5.5, 6.0]),
                   clock=Scripted([0.0, 0.5, 0.6, 0.7, 0.8, 5.0]), max_gap_s=1.0)
    assert cpu.read() is None  # a first reading measures nothing
    assert cpu.read() == pytest.approx((0.9 - 0.4) / 0.5)
    assert cpu.read() == pytest.approx(0.1 / 0.1)
    assert cpu.read() is None and cpu.read() is None  # the system did not say; the next starts afresh
    assert cpu.read() is None  # 4.2 s since the reading before: the app was idle between runs, not this run


def test_the_gauge_reads_cpu_time_with_the_load_and_the_policy_counts_only_what_falls_on_cores_it_wants() -> None:
    gauge = LoadGauge(read=Scripted([0, 1]), every_s=0, cpu=OtherCpu(
        machine=Scripted([0.0, 1.5]), own=Scripted([0.0, 0.5]), clock=Scripted([0.0, 1.0])))
    policy = ThreadPolicy(max_threads=2, gauge=gauge)
    policy.sample()
    assert gauge.others_cores is None and policy.cores_taken is None
    policy.sample()
    assert gauge.others_cores == pytest.approx(1.0)
    assert cores_taken(1.0, threads=2, cores=2) == 1.0  # a full core of the two we want
    assert cores_taken(1.0, threads=1, cores=2) == 0.0  # one thread of ours on two cores: the other had a core
    assert cores_taken(1.0, threads=2, cores=16) == 0.0 and cores_taken(None, threads=2) is None


def test_a_browser_like_intermittent_share_is_not_busy_and_a_full_core_taken_is() -> None:
    browser = run_of([cores_taken(others, threads=2, cores=2) for others in BROWSER_LIKE])
    assert browser.cores_taken == pytest.approx(sum(BROWSER_LIKE) / len(BROWSER_LIKE))
    assert browser.cores_taken < BUSY_CORES and busy_text(browser.cores_taken) == ""
    loop = run_of([cores_taken(others, threads=2, cores=2) for others in [1.0, 0.8, 1.2, 1.0, None, 1.0]])
    assert loop.cores_taken == pytest.approx(1.0)
    assert "busy" in busy_text(loop.cores_taken) and "1.0 of the cores" in busy_text(loop.cores_taken)
    assert run_of([None, None]).cores_taken is None and busy_text(None) == ""


def machine_unreadable() -> bool:
    return machine_busy_seconds() is None


def run_for(target, seconds: float) -> float | None:
    """Plain decoding of the tiny target, run after run, for `seconds`, with the thread policy a user gets (one
    thread a core): its steps' mean cores_taken."""
    before, policy = target.threads, ThreadPolicy(max_threads=usable_cores(), gauge=LoadGauge())
    target.threads, tally, end = policy, RunTally(1), time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            for event in plain_generate(target, [1, 2, 3], GenerationConfig(max_new_tokens=24)):
                tally.observe(event)
    finally:
        target.threads = before
    return tally.metrics().cores_taken


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_a_real_busy_loop_beside_a_real_run_reads_busy(tiny, restore_threads) -> None:
    if machine_unreadable():
        pytest.skip("the system does not say the machine's CPU time (/proc/stat)")
    with busy_neighbours(1, max_seconds=30):
        taken = run_for(tiny.target, 1.5)
    assert taken is not None and taken >= BUSY_CORES, taken  # a loop holds a core; other work only adds to it


@pytest.mark.idle
def test_a_real_run_on_an_idle_machine_reads_idle(tiny, restore_threads) -> None:
    if machine_unreadable():
        pytest.skip("the system does not say the machine's CPU time (/proc/stat)")
    with other_work() as beside:
        taken = run_for(tiny.target, 1.5)
    others = beside.other_share * usable_cores()
    if others >= BUSY_CORES / 2:
        pytest.skip(f"needs an idle machine: other processes took {others:.2f} cores while it ran")
    assert taken is not None and taken < BUSY_CORES, (taken, others)  # our own threads are never counted as others
