"""Start the real app (app.py) in a subprocess on a free port: for the API and browser tests and the screenshot script.

Models: the real embedded target and drafters when they are present, else tiny real models built in a few seconds.
The switch, PLAYGROUND_TEST_REAL_MODELS: "1" forces the real models, "0" forces tiny ones, unset = real ones
exactly when assets/models/embedded/{target,eagle3,eagle3.1}/config.json all exist.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

REPO_ROOT = Path(__file__).resolve().parent.parent
REAL_MODELS = REPO_ROOT / "assets" / "models" / "embedded"
REAL_MODEL_PARTS = ("target", "eagle3", "eagle3.1")


def use_real_models() -> bool:
    switch = os.environ.get("PLAYGROUND_TEST_REAL_MODELS")
    if switch is not None:
        return switch == "1"
    return all((REAL_MODELS / part / "config.json").exists() for part in REAL_MODEL_PARTS)


def long_answer_prompt() -> str:
    """A prompt the models in use answer at length (the tiny models end at once on many prompts)."""
    # The embedded target answers most prompts in under 100 tokens; this one sends it into a long greedy loop
    # (1024 tokens, measured), so Stop always lands mid-answer.
    return ("Write a Python function `is_prime(n)` that returns True if n is a prime number." if use_real_models()
            else "Hello there")


def models_dir(scratch: Path) -> Path:
    """The real embedded models, or tiny ones built under `scratch`."""
    if use_real_models():
        return REAL_MODELS
    from tests.tiny import build_tiny_embedded

    if not (scratch / "eagle3.1" / "config.json").exists():
        build_tiny_embedded(scratch)
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
def running_app(models: Path, log_path: Path, timeout_s: float = 120.0) -> Iterator[str]:
    """Run app.py (niced, one torch thread) against `models`; yields its URL once it answers HTTP."""
    port = free_port()
    env = {
        **os.environ, "PLAYGROUND_EMBEDDED_DIR": str(models), "GRADIO_SERVER_NAME": "127.0.0.1",
        "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False", "OMP_NUM_THREADS": "1",
        "PLAYGROUND_THREADS": os.environ.get("PLAYGROUND_THREADS", "1"),
        "GRADIO_TEMP_DIR": str(log_path.parent / "gradio-tmp"),
        "PLAYGROUND_REMOTE_URL": "",  # no remote server: the tests use that preset as one that cannot run here
    }
    url = f"http://127.0.0.1:{port}/"
    with log_path.open("w") as log:
        process = subprocess.Popen(["nice", "-n", "19", sys.executable, "app.py"], cwd=REPO_ROOT, env=env,
                                   stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + timeout_s
            while not _answers(url):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the app did not start; its log:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.5)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
