"""ARCHITECTURE.md is a true map: every file it names exists, and every module under playground/ is named in it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = ROOT / "ARCHITECTURE.md"
FILE_NAME = re.compile(r"`([\w./-]+\.(?:py|md|c|h|json|toml|txt|sh|yml))`")


def repository_files() -> list[Path]:
    return [p.relative_to(ROOT) for p in ROOT.rglob("*") if p.is_file()
            and not {".git", ".venv", "node_modules", "__pycache__"} & set(p.relative_to(ROOT).parts)]


def missing_names(text: str, files: list[Path]) -> list[str]:
    """The file names `text` gives in backticks that no file has: a path (with a folder) must end a file's path, a
    bare name must be some file's name."""
    paths = {str(p) for p in files}
    names = {p.name for p in files}
    missing = []
    for name in sorted(set(FILE_NAME.findall(text))):
        found = any(p == name or p.endswith("/" + name) for p in paths) if "/" in name else name in names
        if not found:
            missing.append(name)
    return missing


def test_every_file_the_map_names_exists() -> None:
    assert missing_names(DOCUMENT.read_text(), repository_files()) == []


def test_every_module_is_on_the_map() -> None:
    text = DOCUMENT.read_text()
    unnamed = [str(p) for p in repository_files() if p.parts[0] == "playground" and p.suffix == ".py"
               and p.name != "__init__.py" and f"{p.name}`" not in text and f"{p.name}," not in text]
    assert unnamed == []


def test_a_wrong_name_is_caught() -> None:
    """A negative control: a file that is gone, a path in the wrong folder."""
    files = [Path("playground/streamed_steps.py"), Path("playground/request/check.py")]
    assert missing_names("`steps.py`, `request.py`, `engine/check.py`, `request/check.py`", files) == [
        "engine/check.py", "request.py", "steps.py"]
