"""The About tab is rendered from the committed result files (playground/ui/about.py): its prose types no measured
number, each number moves with its file, and each claim made of a number follows the number."""

from __future__ import annotations

import ast
import copy
import re
from dataclasses import replace
from pathlib import Path

from playground.ui import ABOUT
from playground.ui.about import Measurements, about_markdown

ABOUT_SOURCE = Path(__file__).resolve().parents[2] / "playground" / "ui" / "about.py"
COMMITTED = Measurements.committed()


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_about_tab_is_the_committed_files_rendered() -> None:
    assert ABOUT == about_markdown(COMMITTED)
    assert "for free" not in ABOUT and "the check is not free" in _flat(ABOUT)


def test_the_prose_types_no_measured_decimal() -> None:
    """Every decimal in the About tab comes from a file: the module's literal text holds none but the plain-decoding
    line, 1.0×."""
    tree = ast.parse(ABOUT_SOURCE.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(node)}
    literal = [node.value for node in ast.walk(tree)
               if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]
    # a decimal not inside a name (EAGLE-3.1, Kimi K2.6)
    decimals = {match for text in literal for match in re.findall(r"(?<![\w.-])\d+\.\d+", text)}
    assert decimals <= {"1.0"}, f"about.py types measured numbers by hand: {sorted(decimals)}"


def _with(m: Measurements, **changes) -> Measurements:
    return replace(m, **{name: copy.deepcopy(getattr(m, name)) for name in changes}) if changes else m


def test_each_number_moves_with_its_file() -> None:
    m = _with(COMMITTED, speed=True, long_context=True)
    by_k = m.speed["speed"]["by_k"]["4"]
    by_k["eagle3.1"]["median_speedup"] = 1.87
    m.long_context["sets"]["numpy-2k"]["drafters"]["eagle3"]["median_acceptance_length"] = 1.111
    text = _flat(about_markdown(m))
    assert "at k = 4, 1.87× for EAGLE-3.1" in text and "1.11 vs 2.03 at ~2k" in text
    assert "1.87×" not in _flat(ABOUT)


def test_each_claim_follows_its_number() -> None:
    m = _with(COMMITTED, speed=True, long_context=True, drift=True)
    for name in ("eagle3 adaptive 0.3", "eagle3.1 adaptive 0.3"):
        m.speed["speed"]["by_k"]["4"][name]["speedup_range"][0] = 1.05
    m.long_context["sets"]["numpy-8k"]["drafters"]["eagle3"]["median_acceptance_length"] = 2.5
    for row in m.drift["rows"]:
        row["speedup"] = max(row["speedup"], 1.02)
        if row["drafter"] == "eagle3.1":
            row["hidden_rms_by_depth"] = [1.0 + 0.2 * depth for depth in range(len(row["hidden_rms_by_depth"]))]
    before, after = _flat(ABOUT), _flat(about_markdown(m))
    assert "the slowest adaptive run was still below plain decoding" in before
    assert "its slowest runs above 1.0×" in after and "still below plain decoding" not in after
    assert "EAGLE-3.1 leads at every length" in before and "EAGLE-3.1 leads at 3 of 4 lengths" in after
    assert "EAGLE can be slower than plain decoding.** In the drift study" in before
    assert "no cell ran below plain decoding" in after
    assert "stays near 1.4 for EAGLE-3.1" in before and "moves between 1.0 and 2.4 for EAGLE-3.1" in after


def test_a_copy_without_the_kimi_files_leaves_that_section_out() -> None:
    """A Space folder carries only the assets its hardware uses: the tab still renders."""
    text = about_markdown(replace(COMMITTED, kimi_engines=None))
    assert "Kimi K2.6's architecture" in ABOUT and "Kimi K2.6's architecture" not in text
    assert "### Metric definitions" in text
