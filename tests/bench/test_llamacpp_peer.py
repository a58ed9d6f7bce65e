"""bench-engines' llama.cpp peer: every row set against llama.cpp's plain decoding at the same C (rows made here: the
rule is tested, not a machine), skipped in one line where llama-cpp-python is not installed, and, where it is, the
peer decoding the default target's GGUF greedily from our tokenizer's ids."""

from __future__ import annotations

import importlib.util
from dataclasses import asdict

import pytest

from playground.bench.engines import EngineBenchConfig, EngineRow, compare_rows, llamacpp_rows, table


def _row(engine: str, drafter: str, rate: float, concurrency: int = 1) -> EngineRow:
    return EngineRow(engine, drafter, drafter, None if drafter == "none" else 4, concurrency, 2, 64, rate,
                     (rate, rate), rate, 1.0, token_ids=[[1, 2], [3]])


def test_every_row_is_set_against_llamacpp_plain_at_the_same_concurrency() -> None:
    rows = [_row("llamacpp", "none", 100.0), _row("llamacpp", "ngram", 150.0), _row("local", "none", 80.0),
            _row("local", "eagle3.1", 120.0), _row("local", "none", 50.0, concurrency=4)]
    compare_rows(rows)
    assert [r.against_llamacpp for r in rows] == [1.0, 1.5, 0.8, 1.2, None]
    assert [r.speedup for r in rows] == [1.0, 1.5, 1.0, 1.5, 1.0]  # each engine against its own plain decoding
    text = table({"rows": [{k: v for k, v in asdict(r).items() if k != "token_ids"} for r in rows]})
    assert "| against llama.cpp plain |" in text
    assert "| local | eagle3.1 k=4 | 1 | 120.0 | 1.50× | 1.20× |" in text
    assert "| local | none | 4 | 50.0 | 1.00× | — |" in text


def test_without_llamacpp_the_peer_is_skipped_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from playground.bench import llamacpp

    real = importlib.util.find_spec
    monkeypatch.setattr(llamacpp.importlib.util, "find_spec", lambda name: None if name == "llama_cpp" else real(name))
    said: list[str] = []
    assert llamacpp_rows(EngineBenchConfig(engines=("llamacpp",)), [], said.append, {}) == []
    assert len(said) == 1 and "llama-cpp-python is not installed" in said[0] and "\n" not in said[0]


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python is not installed "
                    "(optional: requirements-llamacpp.txt)")
def test_the_peer_decodes_the_default_gguf_greedily_from_our_ids() -> None:
    from playground.bench.llamacpp import LlamaCppPeer, encoded_prompts, unavailable_reason, user_turns

    if unavailable_reason():
        pytest.skip(unavailable_reason())
    from transformers import AutoTokenizer

    from playground.smollm2 import HUB_ID, local_folder

    (ids,) = encoded_prompts(user_turns(["Repeat after me: one two three one two three."]))
    tokenizer = AutoTokenizer.from_pretrained(local_folder(HUB_ID))
    peer = LlamaCppPeer(threads=1)
    plain, seconds, _ = peer.run(ids, "none", 4, 24)
    again, _, _ = peer.run(ids, "none", 4, 24)
    lookup, _, _ = peer.run(ids, "ngram", 4, 24)
    assert 0 < len(plain) <= 24 and seconds > 0 and again == plain  # greedy, and no state kept between requests
    assert lookup == plain  # llama.cpp's prompt lookup keeps its own greedy answer
    assert "one" in tokenizer.decode(plain).lower()
