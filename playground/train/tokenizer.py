"""Byte-level BPE tokenizer (vocab 4096) with two named chat templates.

Layout of the default template (the one the target is trained on)::

    <|bos|><|system|>\\n{system}<|end|>\\n<|user|>\\n{user}<|end|>\\n<|assistant|>\\n{answer}<|end|>\\n

``add_generation_prompt=True`` appends ``<|assistant|>\\n``; the model ends its turn with
``<|end|>`` (which is also the EOS token). The ``alt`` template renders the same conversation
as plain text headers (``### System`` / ``### User`` / ``### Assistant``), still ending turns
with ``<|end|>``. Training uses the default template only, so the playground can show how
a template the model never saw changes its behaviour (and the drafter's acceptance).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from playground.train import corpus

VOCAB_SIZE = 4096
BOS, END, PAD = "<|bos|>", "<|end|>", "<|pad|>"
ROLE_TOKENS = {"system": "<|system|>", "user": "<|user|>", "assistant": "<|assistant|>"}
SPECIAL_TOKENS = [BOS, END, PAD, *ROLE_TOKENS.values()]

DEFAULT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)
ALT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '### ' + message['role'] | capitalize + '\\n' + message['content'] + '<|end|>\\n\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '### Assistant\\n' }}{% endif %}"
)


def training_texts() -> Iterator[str]:
    """All text of the training split (message contents and code documents)."""
    for conv in corpus.build_conversations("train"):
        for message in conv["messages"]:  # type: ignore[attr-defined]
            yield message["content"]
    for doc in corpus.build_documents("train"):
        yield doc.text


def train_tokenizer(texts: Iterable[str], vocab_size: int = VOCAB_SIZE) -> PreTrainedTokenizerFast:
    """Train byte-level BPE on ``texts`` and wrap it with special tokens and chat templates."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=END,
        pad_token=PAD,
        additional_special_tokens=list(ROLE_TOKENS.values()),
        model_max_length=2048,
    )
    hf.chat_template = {"default": DEFAULT_TEMPLATE, "alt": ALT_TEMPLATE}
    return hf


def build_tokenizer(out_dir: Path, vocab_size: int = VOCAB_SIZE) -> PreTrainedTokenizerFast:
    """Train on the corpus training split and save Hugging Face tokenizer files to ``out_dir``."""
    hf = train_tokenizer(training_texts(), vocab_size)
    out_dir.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(out_dir)
    return hf
