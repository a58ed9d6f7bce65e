"""Shared fixtures.

- the models to test against (tiny, or the real default pair; see tests/support/appserver.py) and a running app for the
  API and browser tests;
- the engine tests' tiny models (tests/support/tiny.py), built once per session, and a loaded target with both drafters.

Threads: these tests usually share the machine's cores with a training run, so torch uses one thread unless
PLAYGROUND_THREADS says otherwise. vLLM: tests/backends/test_vllm_cpu.py, skipped where it is not installed, required
in CI.
Network: never; the Hub is switched to offline mode for this process and the
subprocesses it starts. vLLM logs warnings and errors only, here and in the apps and servers the tests start: a
failed engine start then shows its cause (a worker's traceback, or its exit code) instead of burying it in pages of
start-up INFO lines.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

import pytest  # noqa: E402

from playground.engine.threads import thread_policy  # noqa: E402

thread_policy().fix(int(os.environ["PLAYGROUND_THREADS"]) if os.environ.get("PLAYGROUND_THREADS") else 1)


MARKERS = {
    "unit": "none of the below: in-process, quick (`-m unit` runs the quick part alone)",
    "browser": "drives the app in Chromium (uses the `browser` fixture, tests/support/browser.py)",
    "vllm": "starts vLLM engines (its module says so: `pytestmark = pytest.mark.vllm`)",
    "slow": "starts an app or a server in a subprocess (uses a fixture of SLOW_FIXTURES), loads the real default "
            "pair or trains (its module says so: `pytestmark = pytest.mark.slow`)",
    "idle": "asserts what happens on an idle machine: it measures what else ran and skips, saying so, where "
            "something did (its module or test says so)",
}
# The fixtures that start an app or a server: a test using one (directly or through another fixture) is slow.
SLOW_FIXTURES = {"app_url", "real_app_url", "server", "vllm_app_url"}


def pytest_configure(config: pytest.Config) -> None:
    for name, meaning in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {meaning}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks from what a test uses (the `browser` fixture; an app or a server), beside those its module declares, so
    that a new test is marked by what it does; a test with none of them is `unit`."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if "browser" in fixtures:
            item.add_marker("browser")
        if SLOW_FIXTURES & fixtures:
            item.add_marker("slow")
        if not any(item.get_closest_marker(name) for name in ("browser", "vllm", "slow")):
            item.add_marker("unit")


def pytest_sessionstart(session: pytest.Session) -> None:
    """CI sets PLAYGROUND_REQUIRE_VLLM=1: there the vLLM tests must run, so a vLLM that cannot be imported fails the
    run instead of skipping them (imported in a subprocess, which leaves this one's logging alone)."""
    if os.environ.get("PLAYGROUND_REQUIRE_VLLM") == "1":
        result = subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True, text=True)
        if result.returncode != 0:
            tail = result.stderr.strip().splitlines()[-1:] or ["(no message)"]
            pytest.exit(f"PLAYGROUND_REQUIRE_VLLM=1 and vLLM cannot be imported: {tail[0]}", returncode=1)


@pytest.fixture(scope="session")
def pair_models(tiny_root: Path) -> Iterator[Path]:
    """The session's tiny pair as the default preset's models (PLAYGROUND_MODELS_DIR) for in-process tests."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PLAYGROUND_MODELS_DIR", str(tiny_root))
        yield tiny_root


@pytest.fixture(scope="session")
def app_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the `app_url` app writes its log."""
    return tmp_path_factory.mktemp("app") / "app.log"


@pytest.fixture(scope="session")
def app_url(tiny_root: Path, app_log: Path) -> Iterator[str]:
    """A running app: on the tiny pair, or on the real default pair with PLAYGROUND_TEST_REAL_MODELS=1."""
    from tests.support.appserver import running_app, use_real_models

    with running_app(None if use_real_models() else tiny_root, app_log) as url:
        yield url


@pytest.fixture(scope="session")
def real_app_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app on the real default pair, for what races a run in progress (Stop, Clear, streaming in the page): it
    writes ~10-30 tokens/s on a CPU, while the tiny models can write 1024 tokens before a request reaches the
    server."""
    from playground.smollm2 import unavailable_reason
    from tests.support.appserver import running_app

    if unavailable_reason():
        pytest.skip(unavailable_reason())
    with running_app(None, tmp_path_factory.mktemp("real-app") / "app.log") as url:
        yield url


# --- engine tests: tiny models -------------------------------------------------------------------------------

ENGINE_DRAFTERS = ("eagle3", "eagle3.1")


@dataclass
class LoadedDrafter:
    drafter: object  # playground.engine.Eagle3Drafter
    aux_layers: list[int]
    layout: str


@dataclass
class TinyModels:
    root: Path
    target: object  # playground.engine.Target
    drafters: dict[str, LoadedDrafter]
    training_prompts: list[list[int]]  # prompts the drafters were trained on (acceptance is high on these)


@pytest.fixture(scope="session")
def tiny_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """target/, eagle3/, eagle3.1/ written by tests/support/tiny.py (about 6 s)."""
    from tests.support.tiny import build_tiny_pair

    return build_tiny_pair(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def tiny(tiny_root: Path) -> TinyModels:
    """The tiny target loaded once, both drafters loaded and attached, and the drafters' training prompts."""
    from playground.engine import Target, load_drafter
    from tests.support.tiny import greedy_rollouts

    target = Target.load(str(tiny_root / "target"))
    drafters = {}
    for name in ENGINE_DRAFTERS:
        drafter, layout = load_drafter(tiny_root / name)
        drafters[name] = LoadedDrafter(drafter, target.attach(drafter), layout)
    rollouts = greedy_rollouts(target.model, n=48, prompt_len=8, new_tokens=40, seed=1)
    return TinyModels(tiny_root, target, drafters, [row[:8].tolist() for row in rollouts[:4]])
