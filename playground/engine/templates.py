"""Chat templates: the tokenizer's own ("default"), and named ones the project ships for the template study.

`llama3` wraps each turn in Llama-3-style headers, `<|start_header_id|>role<|end_header_id|>` … `<|eot_id|>`.
SmolLM2 and our drafters were never trained on it (SmolLM2's vocabulary has no such special tokens, so they become
plain text pieces): it is the unfamiliar template of the EAGLE-3 vs EAGLE-3.1 template-perturbation result.
"""

from __future__ import annotations

from typing import Any

LLAMA3_STYLE = (
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
SHIPPED = {"llama3": LLAMA3_STYLE}
CHAT_TEMPLATES = ("default", *SHIPPED)  # what the app, CLI and bench offer


class UnknownTemplate(ValueError):
    pass


def resolve_template(name: str | None, tokenizer: Any | None = None) -> str | None:
    """The Jinja text for a template name (None = the tokenizer's default); a tokenizer's own named templates
    count too. Raises UnknownTemplate for anything else."""
    if name in (None, "", "default"):
        return None
    if name in SHIPPED:
        return SHIPPED[name]
    own = getattr(tokenizer, "chat_template", None)
    if isinstance(own, dict) and name in own:
        return own[name]
    raise UnknownTemplate(f"unknown chat template {name!r}; choose one of {', '.join(CHAT_TEMPLATES)}")


def raw_prompt(messages: list[dict]) -> str:
    """No template: the turns' text joined by newlines."""
    return "\n".join(m["content"] for m in messages)


def encode_chat(tokenizer: Any, messages: list[dict], chat_template: str | None = None, raw: bool = False) -> list[int]:
    """Prompt ids for a conversation, ready for the assistant's answer."""
    if raw:
        return list(tokenizer(raw_prompt(messages), add_special_tokens=True)["input_ids"])
    template = resolve_template(chat_template, tokenizer)
    kwargs = {"chat_template": template} if template else {}
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False,
                                              **kwargs))
