"""Start the real app (app.py) or `python -m playground serve` in a subprocess on a free port: for the API, server and
browser tests and the screenshot script.

Models: tiny real models built in a few seconds (the default, so the suite stays fast on a CPU), or the real default
pair — SmolLM2-135M-Instruct and the shipped drafters — with PLAYGROUND_TEST_REAL_MODELS=1.
"""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

REPO_ROOT = Path(__file__).resolve().parents[2]


def use_real_models() -> bool:
    return os.environ.get("PLAYGROUND_TEST_REAL_MODELS") == "1"


def long_answer_prompt() -> str:
    """A prompt the models in use answer at length (the tiny models end at once on many prompts)."""
    return "Write a long story about a dragon who learns to paint." if use_real_models() else "Hello there"


def models_dir(scratch: Path) -> Path | None:
    """None for the real default pair, else tiny models built under `scratch`."""
    if use_real_models():
        return None
    from tests.support.tiny import build_tiny_pair

    if not (scratch / "eagle3.1" / "config.json").exists():
        build_tiny_pair(scratch)
    return scratch


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@contextmanager
def running_app(models: Path | None, log_path: Path, timeout_s: float = 180.0, stop_s: float = 15.0,
                one_thread: bool = True) -> Iterator[str]:
    """Run app.py (niced; one torch thread, or with `one_thread` False the thread policy a user gets) against `models`
    (None: the real default pair); yields its URL once it answers HTTP. At the end it gets SIGTERM and `stop_s` to
    stop its vLLM engines, if it started any."""
    port = free_port()
    thread_settings = {"OMP_NUM_THREADS": "1", "PLAYGROUND_THREADS": os.environ.get("PLAYGROUND_THREADS", "1")}
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("PLAYGROUND_MODELS_DIR", *thread_settings)},
        # tiny models: their step-cost profiles in the test's folder, not the user's cache
        **({"PLAYGROUND_MODELS_DIR": str(models), "PLAYGROUND_CACHE_DIR": str(log_path.parent / "cache")}
           if models else {}), "GRADIO_SERVER_NAME": "127.0.0.1",
        "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False", **(thread_settings if one_thread else {}),
        "GRADIO_TEMP_DIR": str(log_path.parent / "gradio-tmp"),
        "PLAYGROUND_REMOTE_URL": "",  # no remote server: the tests use that preset as one that cannot run here
    }
    url = f"http://127.0.0.1:{port}/"
    with running_process(["nice", "-n", "19", sys.executable, "app.py"], env, log_path, url, "the app",
                         timeout_s, stop_s):
        yield url


@contextmanager
def running_process(command: list[str], env: dict, log_path: Path, url: str, what: str, timeout_s: float,
                    stop_s: float) -> Iterator[subprocess.Popen]:
    """Run `command` (output to `log_path`) until `url` answers 200, yield it, and stop it at the end (SIGTERM, then
    SIGKILL after `stop_s`). Every process it started must end with it (an app's or a server's vLLM engines hold
    ~3-4 GB each): any left behind are killed and reported as an error."""
    with log_path.open("w") as log:
        process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + timeout_s
            while not _answers(url):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{what} did not start; its log:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.5)
            yield process
        finally:
            left_behind = _stop(process, stop_s)
    if left_behind:
        raise RuntimeError(f"{what} left processes running after it stopped (killed now): {left_behind}")


def _stop(process: subprocess.Popen, stop_s: float) -> list[str]:
    """SIGTERM, then SIGKILL after `stop_s`; returns the names of the processes it had started that outlived it by
    10 s, after killing them."""
    try:
        started = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        started = []
    process.terminate()
    try:
        process.wait(timeout=stop_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    _, alive = psutil.wait_procs(started, timeout=10)
    names = [p.name() for p in alive]
    for p in alive:
        p.kill()
    return names


@contextmanager
def running_server(models: Path, *flags: str, timeout_s: float = 240.0) -> Iterator[tuple[str, subprocess.Popen]]:
    """`python -m playground serve` over `models` (one torch thread, any free port): yields (URL, process) once it
    prints its URL. Its stderr is left to the caller to read after the server has stopped."""
    env = {**os.environ, "PLAYGROUND_MODELS_DIR": str(models), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "playground", "serve", "--preset", "smollm2-135m", "--port", "0", *flags]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()  # a reader thread: a selector misses lines already in the pipe's buffer
    threading.Thread(target=lambda: [lines.put(out) for out in proc.stdout], daemon=True).start()
    deadline, line = time.monotonic() + timeout_s, ""
    while not line.startswith("serving") and time.monotonic() < deadline and proc.poll() is None:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            pass
    if not line.startswith("serving"):
        proc.kill()
        raise RuntimeError(f"the server did not start: {proc.stderr.read()[-2000:]}")
    try:
        yield line.split(" on ")[-1].strip(), proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)
