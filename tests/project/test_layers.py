"""The layering ARCHITECTURE.md states holds for every import in playground/: each import statement (at module
level or inside a function, parsed with ast) goes from one part to a part that part may import, as the document's
own table says (read here, so the table cannot drift from what is checked)."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "playground"

DOCUMENT = ROOT / "ARCHITECTURE.md"
TABLE_HEADER = "| part | may import |"


def layer_table(text: str) -> dict[str, set[str]]:
    """ARCHITECTURE.md's table of what each part may import: its parts' names in backticks; "nothing", "the base
    modules" (the first row's parts) and "what `part` may" (that part's own list) as shorthands."""
    lines = text[text.index(TABLE_HEADER):].splitlines()[2:]
    rows = []
    for line in itertools.takewhile(lambda line: line.startswith("|"), lines):
        parts, allowed = (cell.strip() for cell in line.strip("|").split("|")[:2])
        rows.append((re.findall(r"`([^`]+)`", parts), allowed))
    base = set(rows[0][0])
    table: dict[str, set[str]] = {}
    for names, allowed in rows:
        if allowed == "every command":
            continue
        inherited = re.findall(r"what `([^`]+)` may", allowed)
        own = set(re.findall(r"`([^`]+)`", re.sub(r"what `[^`]+` may", "", allowed)))
        own |= base if "the base modules" in allowed else set()
        for name in names:
            table[name] = own | set().union(*(table[other] for other in inherited))
    return table


ALLOWED = layer_table(DOCUMENT.read_text())


def part(module: str) -> str:
    """playground.backends.local -> backends; playground -> __init__."""
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 else "__init__"


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for each playground module this file imports."""
    relative = path.relative_to(ROOT).with_suffix("").parts
    return imports_in(path.read_text(), relative[:-1])


def imports_in(text: str, package: tuple[str, ...]) -> list[tuple[int, str]]:
    """(line, module) for each playground module `text`, a module of `package`, imports."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            if module == "playground" or (node.level and not node.module):
                found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, module))
    return [(line, module) for line, module in found if module.split(".")[0] == "playground"]


def test_every_import_follows_the_layers() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = part(".".join(path.relative_to(ROOT).with_suffix("").parts))
        if source == "__main__":
            continue  # the entry point imports every command
        assert source in ALLOWED, f"{path.relative_to(ROOT)}: a part ARCHITECTURE.md's table does not name"
        for line, module in imports(path):
            target = part(module)
            if target != source and target not in ALLOWED[source]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module} ({source} -> {target})")
    assert not wrong, "\n".join(wrong)


def test_the_check_sees_imports_inside_functions() -> None:
    """A negative control: imports tucked inside a function are found, relative ones resolved."""
    text = "def f():\n    from playground.bench import figures\n    from ..ui import chat\n    from . import style\n"
    found = [module for _, module in imports_in(text, ("playground", "viz"))]
    assert found == ["playground.bench", "playground.ui", "playground.viz.style"]
    assert {part(module) for module in found} - ALLOWED["viz"] - {"viz"} == {"bench", "ui"}


def test_the_table_is_read_as_written() -> None:
    """A control on the reader: shorthands expand, and a part the table forbids stays forbidden."""
    assert ALLOWED["drafting"] == set() and ALLOWED["engine"] == {"drafting"}
    assert ALLOWED["presets"] == {"drafting", "environment", "blas", "smollm2"}
    assert ALLOWED["generate"] == ALLOWED["flags"] | {"health"} and "examples" in ALLOWED["bench"] - ALLOWED["train"]
    assert "ui" not in set().union(*ALLOWED.values()) and "bench" not in ALLOWED["train"]
    assert "__main__" not in ALLOWED and len(ALLOWED) == 28
