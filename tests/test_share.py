"""Links to an answer (playback.share): settings survive the round trip through an address, and a link that cannot
run here is refused in one line."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl

import pytest

from playground.playback import RequestError, RunSettings
from playground.playback.share import MAX_LINK_PROMPT, settings_from_query, share_query


def read(query: str) -> tuple:
    return settings_from_query(dict(parse_qsl(query.removeprefix("?"))))


def test_a_link_carries_the_prompt_and_settings(pair_models: Path) -> None:
    settings = RunSettings(drafter="eagle3", k=6, temperature=0.7, top_p=0.9, max_new_tokens=64, system="Be brief.",
                           seed=42, min_draft_prob=0.2)
    prompt = 'Write "hello" & <b>bold</b> (in Python)?'
    query = share_query(prompt, settings)
    assert query.startswith("?prompt=") and " " not in query and "(" not in query  # safe inside a Markdown link
    assert read(query) == (prompt, settings)
    plain = share_query("hi", RunSettings())
    assert set(dict(parse_qsl(plain[1:]))) == {"prompt", "preset", "drafter", "k"}  # defaults left out, but these


def test_an_address_without_a_link_changes_nothing_and_a_bad_link_is_one_line(pair_models: Path) -> None:
    assert settings_from_query({}) == (None, None)
    assert settings_from_query({"utm_source": "x"}) == (None, None)
    for query, message in [("?prompt=hi&k=50", r"k \(speculative tokens per step\) must be between 1 and"),
                           ("?prompt=hi&k=four", "the link's k='four' is not a number"),
                           ("?prompt=hi&preset=no-such", "no-such"),
                           ("?prompt=hi&drafter=medusa", "unknown drafter 'medusa'")]:
        with pytest.raises(RequestError, match=message) as refused:
            read(query)
        assert "\n" not in str(refused.value)
    assert share_query("x" * (MAX_LINK_PROMPT + 1), RunSettings()) is None
    with pytest.raises(RequestError, match="a link carries at most"):
        settings_from_query({"prompt": "x" * (MAX_LINK_PROMPT + 1)})
