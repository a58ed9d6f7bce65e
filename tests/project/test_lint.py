"""ruff (configured in pyproject.toml) passes on the whole tree: CI runs it through this test."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def ruff() -> str | None:
    beside = Path(sys.executable).with_name("ruff")
    return str(beside) if beside.exists() else shutil.which("ruff")


def test_ruff_passes() -> None:
    assert ruff() is not None, "ruff is not installed: pip install -r requirements-dev.txt"
    result = subprocess.run([ruff(), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
