"""Settings have one home: every PLAYGROUND_* variable is read through playground/environment.py and listed there, and
docs/settings.md is its table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from playground import environment

ROOT = Path(__file__).resolve().parents[2]


def test_no_module_reads_a_playground_variable_itself() -> None:
    direct = re.compile(r"(environ(\.get)?\(|environ\[|getenv\()\s*[\"']PLAYGROUND_")
    offenders = [f"{path.relative_to(ROOT)}:{n}" for path in [ROOT / "app.py", *(ROOT / "playground").rglob("*.py")]
                 if path.name != "environment.py"
                 for n, line in enumerate(path.read_text().splitlines(), 1) if direct.search(line)]
    assert not offenders, f"read PLAYGROUND_* through playground.environment: {offenders}"


def test_every_variable_named_in_the_code_is_a_setting() -> None:
    named = {name for path in [ROOT / "app.py", *(ROOT / "playground").rglob("*.py")]
             for name in re.findall(r"PLAYGROUND_[A-Z_]+[A-Z]", path.read_text())}
    assert named <= set(environment.SETTINGS), sorted(named - set(environment.SETTINGS))


def test_the_docs_table_is_rendered_from_the_settings() -> None:
    assert (ROOT / "docs" / "settings.md").read_text() == environment.table_markdown(), \
        "run: python -m playground.environment > docs/settings.md"


def test_reading_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLAYGROUND_PAIRS_GB", " 2.5 ")
    assert environment.number("PLAYGROUND_PAIRS_GB") == 2.5
    monkeypatch.setenv("PLAYGROUND_PAIRS_GB", "lots")
    with pytest.raises(ValueError, match="PLAYGROUND_PAIRS_GB='lots' is not a number"):
        environment.number("PLAYGROUND_PAIRS_GB")
    monkeypatch.delenv("PLAYGROUND_MAX_DOWNLOAD_GB", raising=False)
    assert environment.number("PLAYGROUND_MAX_DOWNLOAD_GB", 4.0) == 4.0
    with pytest.raises(KeyError, match="not a playground setting"):
        environment.text("PLAYGROUND_TYPO")
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.setenv("PLAYGROUND_PUBLIC", "true")
    assert environment.public_host()
    monkeypatch.setenv("PLAYGROUND_PUBLIC", "0")
    assert not environment.public_host()
