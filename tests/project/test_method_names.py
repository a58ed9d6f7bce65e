"""The two EAGLE names are spelled as string literals in at most five modules under playground/ (issue 54's bound):
the registry (`drafting.py`), the presets' data and the checkpoint layouts spell them; every other module reads
names, labels, colours and capabilities from `drafting` (`EAGLE3`, `EAGLE3_1`, `METHODS`, `CHECKPOINTED`)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "playground"
SPELLED = re.compile(r"""["']eagle3(\.1)?["']""")  # "eagle3" or 'eagle3.1', not eagle3_1 or a path's eagle3/
MOST_MODULES = 5


def spelling_modules() -> list[str]:
    """The modules under playground/ whose text spells either name as a quoted string (not Gradio's generated,
    git-ignored .pyi stubs: copies of a module's source as it was when the stub was written)."""
    return sorted(path.relative_to(ROOT).as_posix() for path in PACKAGE.rglob("*.py")
                  if SPELLED.search(path.read_text(encoding="utf-8")))


def test_the_registry_spells_the_names_the_pattern_looks_for():
    assert "playground/drafting.py" in spelling_modules()


def test_the_eagle_names_are_spelled_in_at_most_five_modules():
    modules = spelling_modules()
    assert len(modules) <= MOST_MODULES, (f"{len(modules)} modules spell 'eagle3' / 'eagle3.1': {modules}; read "
                                          "drafting.EAGLE3, EAGLE3_1, METHODS or a capability instead")
