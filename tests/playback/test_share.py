"""Links to an answer (playback.share): settings survive the round trip through an address, and a link that cannot
run here is refused in one line."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from urllib.parse import parse_qsl

import pytest

from playground.playback import RequestError, RunSettings
from playground.playback.share import MAX_LINK_PROMPT, PARSERS, link_problem, settings_from_query, share_query


def read(query: str) -> tuple:
    return settings_from_query(dict(parse_qsl(query.removeprefix("?"))))


def test_a_link_carries_the_prompt_and_settings(pair_models: Path) -> None:
    settings = RunSettings(drafter="eagle3", k=6, temperature=0.7, top_p=0.9, max_new_tokens=64, system="Be brief.",
                           seed=42, min_draft_prob=0.2)
    prompt = 'Write "hello" & <b>bold</b> (in Python)?'
    query = share_query(prompt, settings)
    assert query.startswith("?prompt=") and " " not in query and "(" not in query  # safe inside a Markdown link
    assert read(query) == (prompt, settings)
    suffix = RunSettings(drafter="suffix", method_settings=(("suffix_decoding_max_tree_depth", 32),
                                                            ("suffix_decoding_min_token_prob", 0.25)))
    assert read(share_query("hi", suffix)) == ("hi", suffix)  # a weightless method's settings go with it
    plain = share_query("hi", RunSettings())
    assert set(dict(parse_qsl(plain[1:]))) == {"prompt", "preset", "drafter", "k"}  # defaults left out, but these


def test_an_address_without_a_link_changes_nothing_and_a_bad_link_is_one_line(pair_models: Path) -> None:
    assert settings_from_query({}) == (None, None)
    assert settings_from_query({"utm_source": "x"}) == (None, None)
    for query, message in [("?prompt=hi&k=50", r"k \(speculative tokens per step\) must be between 1 and"),
                           ("?prompt=hi&k=four", "the link's k='four' is not a number"),
                           ("?prompt=hi&preset=no-such", "no-such"),
                           ("?prompt=hi&drafter=medusa", "unknown drafter 'medusa'"),
                           ("?prompt=hi&drafter=suffix&method_settings=suffix_decoding_max_tree_depth:99",
                            "suffix_decoding_max_tree_depth .* must be from 2 to 64, got 99"),
                           ("?prompt=hi&drafter=ngram&method_settings=prompt_lookup_min:x",
                            "the link's method_settings='prompt_lookup_min:x' is not a number")]:
        with pytest.raises(RequestError, match=message) as refused:
            read(query)
        assert "\n" not in str(refused.value)
    assert share_query("x" * (MAX_LINK_PROMPT + 1), RunSettings()) is None
    with pytest.raises(RequestError, match="a link carries at most"):
        settings_from_query({"prompt": "x" * (MAX_LINK_PROMPT + 1)})


def test_every_setting_has_a_parser_and_a_loaded_pair_gets_no_link(pair_models: Path) -> None:
    """A setting added to RunSettings must say how a link reads it; a pair loaded in one session (own:…) gets no
    link, and a link naming one is refused in one line: a link opens a new session, which has not loaded it."""
    assert set(PARSERS) == {f.name for f in fields(RunSettings)}
    own = RunSettings(preset="own:org/model@abc123")
    assert share_query("hi", own) is None and "loaded in this session" in link_problem("hi", own)
    with pytest.raises(RequestError, match=r"names a pair loaded in another session \(own:org/model@abc123\)"):
        read("?prompt=hi&preset=own:org/model@abc123&drafter=eagle3&k=4")
