"""The default pair on both engines, for the vLLM tests: its presets (float32, the weights vLLM reads), the prompts
and k they share."""

from __future__ import annotations

import pytest

from playground.presets import Preset, get_preset

K = 4
PROMPTS = ["Explain photosynthesis in two sentences.", "Write a short poem about a lighthouse."]
EDIT_PROMPT = ("Rename the function total_price to order_total in this code. Reply with the code only.\n\n"
               "def total_price(items, tax_rate):\n    subtotal = 0\n    for item in items:\n"
               "        subtotal += item.price * item.quantity\n    tax = subtotal * tax_rate\n"
               "    return subtotal + tax\n")  # an editing prompt: prompt lookup finds the answer in it


def real_pair_presets() -> tuple[Preset, Preset]:
    """The default pair on our engine and on vLLM, whatever PLAYGROUND_MODELS_DIR another fixture has set."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("PLAYGROUND_MODELS_DIR", raising=False)
        return get_preset("smollm2-135m-float32"), get_preset("smollm2-135m-vllm")


def ids_of(events) -> list[int]:
    return [t for e in events for t in e.emitted]
