"""docs/app.md's sentence on draft trees says what the app's run check does: each setting it names as refused is
refused by `RunSettings.checked_preset()` (the check every Chat and Compare run goes through) and each it leaves out
is not; a sampled tree, which it says runs, runs through the same path as a chat turn, on the tiny pair."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from playground.playback import Conversation, RunSettings, chat_turn
from playground.request import RequestError, require_local_engine_options

APP_DOC = Path(__file__).resolve().parents[2] / "docs" / "app.md"
TREE = {"tree_nodes": 16, "k": 4, "max_new_tokens": 12}
# each condition the sentence may name, and how the app would be asked for it with a 16-node tree
CONDITIONS = {
    "a temperature above 0": {"temperature": 0.7, "seed": 1},
    "adaptive drafting": {"min_draft_prob": 0.5},
    "k auto": {"k_auto": True},
}
BACKENDS = {"a vLLM or remote preset": ("vllm", "remote")}


def tree_paragraph() -> str:
    text = " ".join(APP_DOC.read_text().split())
    return text[text.index("draft tree nodes (`#tree-nodes`"):][:1500]


def refusal_sentence() -> str:
    """The sentence of the paragraph that lists what a tree is refused with."""
    return next(s for s in re.split(r"(?<=[.;])\s+", tree_paragraph()) if "refused in one line" in s)


def refused(settings: dict) -> bool:
    try:
        RunSettings(drafter="eagle3.1", **TREE, **settings).checked_preset()
    except RequestError:
        return True
    return False


def test_the_doc_names_exactly_what_the_run_check_refuses_with_a_tree(pair_models: Path) -> None:
    sentence = refusal_sentence()
    assert not refused({}), "a greedy tree on our engine must run"
    for phrase, settings in CONDITIONS.items():
        assert (phrase in sentence) == refused(settings), f"docs/app.md on trees and {phrase!r}: {sentence}"
    for phrase, backends in BACKENDS.items():
        assert phrase in sentence, sentence
        cfg = RunSettings(drafter="eagle3.1", **TREE).generation_config()
        for backend in backends:
            with pytest.raises(RequestError, match="draft trees run on our engine"):
                require_local_engine_options(backend, cfg)
        require_local_engine_options("local", cfg)  # our engine takes it


def test_a_sampled_tree_runs_as_the_doc_says(pair_models: Path) -> None:
    paragraph = tree_paragraph()
    assert "With a temperature above 0 the tree is sampled" in paragraph
    settings = RunSettings(drafter="eagle3.1", **TREE, **CONDITIONS["a temperature above 0"])
    *_, run = chat_turn(Conversation(), "def add(a, b):", settings, lambda: False)
    assert run.finished and run.token_ids
    drafting = [e for e in run.events if e.drafted]
    assert drafting and all(e.tree_tokens for e in drafting)  # every drafting step verified a tree
