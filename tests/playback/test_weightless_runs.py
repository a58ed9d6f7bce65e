"""Weightless methods (prompt lookup, suffix decoding) as the app plays them, on the tiny pair: the same answer as
plain decoding, each view saying something true, exports naming the method and its settings, and suffix decoding's
cache kept per Chat conversation, bounded and cleared."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path

import pytest

from playground.drafting import METHODS, SUFFIX_CACHE, SUFFIX_DEPTH
from playground.engine.suffix import SESSIONS, SessionCaches
from playground.playback import Conversation, RunSettings, chat_turn, compare, export_runs, regenerate_turn
from playground.viz import (
    acceptance_by_position_figure,
    accepted_per_step_figure,
    attention_drift_figure,
    hidden_rms_figure,
)
from tests.support.appserver import long_answer_prompt

PROMPT = long_answer_prompt()
NEVER = lambda: False  # noqa: E731


def last_run(conversation: Conversation, prompt: str = PROMPT, **settings):
    runs = list(chat_turn(conversation, prompt, RunSettings(**{"max_new_tokens": 40, **settings}), NEVER))
    return runs[-1]


def _said(fig) -> str:
    return " ".join(a.text.replace("<br>", " ") for a in fig.layout.annotations)


@pytest.mark.parametrize("method", ["ngram", "suffix"])
def test_a_weightless_chat_answer_is_plain_decodings(pair_models: Path, method: str) -> None:
    plain = last_run(Conversation(), drafter="none")
    run = last_run(Conversation(), drafter=method)
    assert run.finished and run.token_ids == plain.token_ids and run.text == plain.text
    assert sum(len(e.drafted) for e in run.events) > 0, "the method proposed nothing: the test shows nothing"


def test_compare_eagle_against_suffix_decoding_gives_one_answer_and_true_panels(pair_models: Path) -> None:
    left = RunSettings(drafter="eagle3.1", k=4, max_new_tokens=40)
    right = RunSettings(drafter="suffix", k=4, max_new_tokens=40)
    for comparison in compare(PROMPT, left, right, NEVER):  # noqa: B007 - the last one is read below
        pass
    assert comparison.left.token_ids == comparison.right.token_ids and comparison.shared_baseline
    views = [comparison.left.view(), comparison.right.view()]
    assert views[1].label == f"{METHODS['suffix'].label}, k=4"
    drift = attention_drift_figure(views)
    assert drift.data, "EAGLE-3.1's attention is drawn"
    assert "suffix decoding, k=4: proposes from the text alone, with no drafter" in _said(drift)
    position = acceptance_by_position_figure(views)
    assert {trace.name for trace in position.data} >= {"EAGLE-3.1, k=4", "suffix decoding, k=4"}


def test_every_chat_panel_says_something_true_for_a_weightless_run(pair_models: Path) -> None:
    run = last_run(Conversation(), drafter="ngram")
    view = run.view()
    assert accepted_per_step_figure(view).data and acceptance_by_position_figure([view]).data
    for figure, noun in ((attention_drift_figure([view]), "drafter attention"),
                         (hidden_rms_figure([view]), "drafter hidden states")):
        assert not figure.data
        assert _said(figure) == f"prompt lookup (n-gram), k=4: proposes from the text alone, with no drafter, so " \
                                f"no {noun} to show"
    assert run.health.status == "not checked" and "no trained drafter to fingerprint" in run.health.why_not


def test_an_export_names_the_method_and_its_settings(pair_models: Path, tmp_path: Path) -> None:
    conversation = Conversation()
    settings = ((SUFFIX_DEPTH.name, 12),)
    run = last_run(conversation, drafter="suffix", method_settings=settings)
    json_path, csv_path = export_runs({"turn 1": run}, conversation.messages(""), tmp_path, "run")
    record = json.loads(json_path.read_text())["runs"][0]
    assert record["drafter"] == "suffix" and record["settings"]["drafter"] == "suffix"
    assert record["settings"]["method_settings"] == [[SUFFIX_DEPTH.name, 12]]
    assert record["config"]["method_settings"] == [[SUFFIX_DEPTH.name, 12]]
    assert record["health"]["status"] == "not checked"
    assert run.view().label == "suffix decoding max_tree_depth 12, k=4"  # two sides of one method told apart
    ngram = RunSettings(drafter="ngram", method_settings=(("prompt_lookup_min", 3), ("prompt_lookup_max", 5)))
    assert ngram.drafter_label == "prompt lookup (n-gram) min 3"  # the default left unsaid
    assert all(line.split(",")[1] == "suffix" for line in csv_path.read_text().splitlines()[1:])


def test_suffix_decoding_reads_the_conversations_earlier_answers(pair_models: Path) -> None:
    """Regenerating an answer (the same question, the same greedy answer) on the conversation's cache accepts more
    drafts than the same run on a fresh conversation's: the earlier answer is speculated whole."""
    fresh = last_run(Conversation(), drafter="suffix")
    conversation = Conversation()
    first = last_run(conversation, drafter="suffix")
    again = list(regenerate_turn(conversation, RunSettings(drafter="suffix", max_new_tokens=40), NEVER))[-1]
    assert again.token_ids == first.token_ids == fresh.token_ids
    accepted = [sum(e.accepted for e in run.events) for run in (fresh, again)]
    assert accepted[1] > accepted[0], accepted
    assert len(SESSIONS.kept(conversation.session).sequences) == 2


def test_the_suffix_cache_is_per_visitor_bounded_and_cleared(pair_models: Path) -> None:
    """The cache is suffix decoding's own, keyed by the conversation: one per visitor (Gradio deep-copies a State's
    default per session), left alone by other methods, bounded by its setting and forgotten by Clear."""
    default = Conversation()
    visitor, other = copy.deepcopy(default), copy.deepcopy(default)  # as Gradio copies a State's default per session
    assert len({visitor.session, other.session, default.session}) == 3
    last_run(visitor, drafter="suffix")
    last_run(visitor, "And then?", drafter="suffix")
    kept = SESSIONS.kept(visitor.session)
    assert len(kept.sequences) == 2 and kept.tokens() > 0
    assert SESSIONS.kept(other.session) is None and SESSIONS.kept(default.session) is None
    last_run(visitor, "Once more.", drafter="eagle3.1")  # another method leaves the cache alone
    assert len(kept.sequences) == 2
    bounded = replace(RunSettings(), drafter="suffix", method_settings=((SUFFIX_CACHE.name, 0),))
    list(chat_turn(visitor, "Shorter?", replace(bounded, max_new_tokens=8), NEVER))
    assert len(kept.sequences) == 1  # earlier sequences beyond 0 tokens forgotten: the running one
    visitor.clear()
    assert SESSIONS.kept(visitor.session) is None and kept.tokens() == 0 and kept.trie is None


def test_session_caches_are_bounded_least_recently_used_first() -> None:
    caches = SessionCaches(most=2)
    first = caches.cache("a")
    caches.cache("b")
    assert caches.cache("a") is first  # "a" used again: "b" is now the oldest
    caches.cache("c")
    assert len(caches) == 2 and caches.kept("b") is None and caches.kept("a") is first
