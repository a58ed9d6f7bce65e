"""The processes vLLM's engines start: an engine core and its worker per engine, children of this process (nothing else
here starts processes), read for what they hold and killed when the app stops while an engine is still starting."""

from __future__ import annotations

import contextlib


def descendant_pids() -> set[int]:
    """The ids of this process's child processes and theirs."""
    import psutil

    return {child.pid for child in psutil.Process().children(recursive=True)}


def kill_born_since(before: set[int], wait_s: float) -> int:
    """Kill this process's descendants whose ids are not in `before` (those a start begun then has started) and wait
    up to `wait_s` for them to go; returns how many there were."""
    import psutil

    born = [child for child in psutil.Process().children(recursive=True) if child.pid not in before]
    for process in born:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(born, timeout=wait_s)
    return len(born)


def engine_processes(pids: set[int]) -> list:
    """Those of `pids` that are vLLM's engine processes (named VLLM::EngineCore, VLLM::Worker; not multiprocessing's
    resource tracker, which the first start also begins and which stays for the process's life), as psutil
    processes: a kill then checks that the id still names the same process."""
    import psutil

    found = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            if process.name().startswith("VLLM::"):
                found.append(process)
    return found


def kill_processes(processes: list, wait_s: float) -> None:
    """Kill those of `processes` still running (psutil checks each is the process it was) and wait up to `wait_s`."""
    import psutil

    left = []
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()
            left.append(process)
    psutil.wait_procs(left, timeout=wait_s)


def child_processes_memory() -> tuple[int, int]:
    """(bytes, count): the proportional set size of this process's descendants (RSS where PSS cannot be read)."""
    import psutil

    total, count = 0, 0
    for child in psutil.Process().children(recursive=True):
        try:
            info = child.memory_full_info()
            total += getattr(info, "pss", info.rss)
            count += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total, count
