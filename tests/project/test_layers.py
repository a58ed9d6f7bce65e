"""The layering ARCHITECTURE.md states holds for every import in playground/: each import statement (at module
level or inside a function, parsed with ast) goes from one part to a part that part may import."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "playground"

BASE = {"drafting", "environment", "blas"}
COMMANDS = BASE | {"smollm2", "engine", "presets", "request", "backends", "auto_k", "run_record", "specstats",
                   "flags"}
MEASURING = COMMANDS | {"prompt_sets", "machine", "viz", "health"}
ALLOWED: dict[str, set[str]] = {  # ARCHITECTURE.md's table, part by part
    "drafting": set(), "environment": set(), "blas": set(), "__init__": {"blas"}, "examples": {"drafting"},
    "engine": {"drafting"},
    "smollm2": {"environment", "blas"}, "machine": {"environment", "blas"},
    "presets": BASE | {"smollm2"},
    "prompt_sets": BASE | {"presets"},
    "request": BASE | {"smollm2", "engine", "presets"},
    "specstats": {"engine"}, "streamed_steps": {"engine"},
    "backends": BASE | {"smollm2", "engine", "presets", "request", "specstats", "streamed_steps"},
    "auto_k": BASE | {"smollm2", "engine", "presets", "request", "backends"},
    "run_record": {"engine", "backends"},
    "own_pair": BASE | {"engine", "presets", "request", "backends"},
    "viz": {"engine", "drafting"},
    "health": COMMANDS | {"prompt_sets", "machine"},
    "playback": BASE | {"request", "backends", "auto_k", "run_record", "engine", "presets", "viz", "health"},
    "flags": COMMANDS, "generate": COMMANDS | {"health"}, "serve": COMMANDS | {"health"}, "space": COMMANDS,
    "bench": MEASURING | {"examples"}, "train": MEASURING,
    "ui": MEASURING | {"playback", "bench", "examples", "own_pair"},
}


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
