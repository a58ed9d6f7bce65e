"""Fast smoke tests of the offline training pipeline (tiny sizes, a few seconds each)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from playground.train import corpus
from playground.train.tokenizer import train_tokenizer, training_texts

pytestmark = pytest.mark.slow

MESSAGES = [
    {"role": "system", "content": "You are a helpful Python assistant."},
    {"role": "user", "content": "Explain what `os.path.join` does."},
]


def test_corpus_split_is_disjoint() -> None:
    train = corpus.build_conversations("train")
    val = corpus.build_conversations("validation")
    assert len(train) > 1000 and len(val) > 20
    train_sources = {c["source"] for c in train} | {d.source for d in corpus.build_documents("train")}
    val_sources = {c["source"] for c in val} | {d.source for d in corpus.build_documents("validation")}
    assert train_sources.isdisjoint(val_sources)
    assert all(c["messages"][-1]["role"] == "assistant" for c in train[:100])
    prompts = corpus.held_out_prompts(5)
    assert len(prompts) == 5 and all(p[-1]["role"] == "user" for p in prompts)
    assert prompts == corpus.held_out_prompts(5)


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tok")
    train_tokenizer(itertools.islice(training_texts(), 300), vocab_size=400).save_pretrained(out)
    return out


def test_chat_templates_round_trip(tokenizer_dir: Path) -> None:
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    text = tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert text == (
        "<|bos|><|system|>\nYou are a helpful Python assistant.<|end|>\n"
        "<|user|>\nExplain what `os.path.join` does.<|end|>\n<|assistant|>\n"
    )
    ids = tok.apply_chat_template(MESSAGES, add_generation_prompt=True, return_dict=False)
    assert ids[0] == tok.bos_token_id and ids[-2] == tok.convert_tokens_to_ids("<|assistant|>")
    assert tok.decode(ids) == text
    alt = tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False, chat_template="alt")
    assert alt.startswith("<|bos|>### System\n") and alt.endswith("### Assistant\n")
    assert tok.eos_token == "<|end|>" and tok.pad_token == "<|pad|>"
