"""How a speedup is measured and judged is worded once, from the constants the code uses (viz/summary.py's helps,
playback/baseline.py's SAMPLING_HELP), and the exports' timing note and the About tab render those words instead of
restating them: every number in that prose is one of the constants."""

from __future__ import annotations

import re
from pathlib import Path

from playground.engine.trace import (
    MIN_SPEEDUP_GROUPS,
    RANGE_CONFIDENCE,  # noqa: E402
)
from playground.playback.baseline import GROUP_SECONDS, GROUP_STEPS, SAMPLING_HELP, SHARE, SHARE_IN_CHAT
from playground.playback.exports import TIMING_NOTE
from playground.playback.run import RENDER_SHARE
from playground.ui.about import METRICS
from playground.viz.summary import (
    BASELINE_HELP,
    SPEEDUP_HELP,
    SPEEDUP_RANGE_HELP,
    TOKENS_PER_SECOND_HELP,
    TOO_FEW_STEPS_HELP,
    VERDICT_HELP,
    WITHIN_NOISE,
)

APP_DOC = Path(__file__).resolve().parents[2] / "docs" / "app.md"
TIMING_WORDS = (SPEEDUP_RANGE_HELP, TOO_FEW_STEPS_HELP, VERDICT_HELP, BASELINE_HELP, SAMPLING_HELP,
                TOKENS_PER_SECOND_HELP)


def test_the_exports_and_about_render_the_one_explanation() -> None:
    for words in TIMING_WORDS:
        assert words in TIMING_NOTE, words
        assert words in METRICS, words
    assert SPEEDUP_HELP in METRICS and WITHIN_NOISE in VERDICT_HELP


def test_every_number_in_the_explanation_is_the_codes() -> None:
    """A figure typed into the prose by hand (a "tenth", "groups of four" gone stale) has no constant behind it:
    only the constants' values, and plain decoding's own 1.00×, may appear."""
    allowed = {str(MIN_SPEEDUP_GROUPS), f"{SHARE_IN_CHAT:.0%}", f"{SHARE:.0%}", str(GROUP_STEPS),
               f"{GROUP_SECONDS * 1000:.0f}", "1.00", f"{RANGE_CONFIDENCE:.0%}"}
    assert f"{MIN_SPEEDUP_GROUPS} groups of plain steps" in TOO_FEW_STEPS_HELP
    assert f"at most {SHARE_IN_CHAT:.0%}" in SAMPLING_HELP and f"at least {GROUP_STEPS} steps" in SAMPLING_HELP
    for words in TIMING_WORDS:
        numbers = set(re.findall(r"\d+(?:\.\d+)?%?", words))
        assert numbers <= allowed, (numbers - allowed, words)
    spelled = re.compile(r"\b(a (half|third|quarter|tenth)|two|three|four|five|six|ten)\b", re.IGNORECASE)
    for text in (TIMING_NOTE, METRICS):
        assert not spelled.search(text), spelled.search(text)


def test_docs_app_gives_each_share_as_its_constant_says() -> None:
    """docs/app.md's timing section names each share's constant beside its value, the value as the code has it; no
    fraction is spelled there by hand (a "tenth" that outlived its constant)."""
    doc = APP_DOC.read_text()
    section = doc[doc.index("## Timing: what the speedup measures"):].split("\n## ")[0].replace("\n", " ")
    for name, value in {"SHARE_IN_CHAT": SHARE_IN_CHAT, "SHARE": SHARE, "RENDER_SHARE": RENDER_SHARE}.items():
        quoted = re.findall(rf"(\S+) \(`{name}`\)", section)
        assert quoted == [f"{value:.0%}"], (name, quoted)
    spelled = re.search(r"\ba (half|third|quarter|tenth|fifth)\b", section, re.IGNORECASE)
    assert spelled is None, spelled
