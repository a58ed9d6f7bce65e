"""The processes vLLM's engines start: an engine core and its worker per engine, children of this process (nothing else
here starts processes), read for what they hold and killed when the app stops while an engine is still starting; and
an engine stopped once (`stop_engine`)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


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


def stop_engine(engine: Any, timeout: float | None = None) -> None:
    """Shut an engine down, once; its processes get `timeout` seconds to exit before they are killed (None: vLLM's
    default). Once: AsyncLLM.__del__ shuts down again, and at interpreter exit (our loop thread still holds it) that
    second call meets torn-down module globals and prints a TypeError. Its output handler (a task on our loop) is
    cancelled first: vLLM cancels it after stopping the engine core, and meanwhile it found the core dead and logged
    an EngineDeadError traceback at every shutdown of the app."""
    _cancel_output_handler(engine)
    engine.shutdown(timeout=timeout)
    engine.shutdown = lambda *args, **kwargs: None


def _cancel_output_handler(engine: Any, wait_s: float = 5.0) -> None:
    handler = getattr(engine, "output_handler", None)
    if handler is None or handler.done() or not handler.get_loop().is_running():
        return

    async def cancel() -> None:
        handler.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await handler

    with contextlib.suppress(Exception):  # a loop that stops meanwhile: vLLM's shutdown cancels it as before
        asyncio.run_coroutine_threadsafe(cancel(), handler.get_loop()).result(timeout=wait_s)
