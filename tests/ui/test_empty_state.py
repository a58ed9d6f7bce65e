"""The chat's empty state and the prompt box invite the same thing (issue 55: "Ask something about Python…" above
"Ask anything: code, explanations, writing…")."""

from __future__ import annotations

import gradio as gr

from playground.ui import build_app
from playground.ui.chat import ASK


def test_the_empty_chat_and_the_prompt_box_say_one_thing() -> None:
    demo = build_app()
    by_id = {block.elem_id: block for block in demo.blocks.values() if getattr(block, "elem_id", None)}
    chatbot, prompt = by_id["chat"], by_id["prompt"]
    assert isinstance(chatbot, gr.Chatbot) and isinstance(prompt, gr.Textbox)
    assert chatbot.placeholder.startswith(ASK) and prompt.placeholder.startswith(ASK)
    assert "Python" not in chatbot.placeholder
