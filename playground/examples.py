"""The Chat tab's one-click example prompts: two where EAGLE-3.1 drafts well, two where it does not.

Chosen by measurement, not by guess, out of twelve candidates, on the default preset (SmolLM2-135M-Instruct with the
shipped drafters) at the Chat tab's defaults: EAGLE-3.1, k = 4, greedy, 256 new tokens, default chat template, no
system prompt, each run with

    python -m playground generate --drafter eagle3.1 --k 4 --max-new-tokens 256 --json --prompt "<prompt>"

on a 2-core AMD EPYC (lscpu: "AMD EPYC", family 25 model 1, AVX2, no AVX-512) on 2026-12-03. The other candidates
(a Fibonacci function, a linked-list reversal, counting from 1 to 20, a poem about the sea, a lighthouse-keeper
story, an ideal weekend in three sentences, speculative decoding in two sentences, the days of the week) fell
between the code and the creative ones, or repeated themselves without the drafts landing.

The figures the buttons show are not kept here: `python -m playground bench --profile landing` measures each
example's mean acceptance length on its machine (bench/landing_run.py) into that CPU kind's landing file, and the
Chat tab reads the file of the kind nearest to the machine it runs on (bench/landing.py), naming kind and date.
"""

from __future__ import annotations

from dataclasses import dataclass

from playground.drafting import DEFAULT_DRAFTER

EXAMPLES_DRAFTER, EXAMPLES_K, EXAMPLES_TOKENS = DEFAULT_DRAFTER, 4, 256  # the Chat tab's defaults, as measured


@dataclass(frozen=True)
class ExamplePrompt:
    prompt: str
    title: str  # a few words: the button shows about 60 characters

    def label(self, mean_acceptance_length: float | None) -> str:
        """The button's text: 'Code: a palindrome check · 4.12 tokens/step', or the title where it is not measured."""
        if mean_acceptance_length is None:
            return self.title
        return f"{self.title} · {mean_acceptance_length:.2f} tokens/step"


CHAT_EXAMPLES = (
    # code: a short, idiomatic function the target writes the way the drafter learned it
    ExamplePrompt("Write a Python function that checks whether a string is a palindrome.",
                  "Code: a palindrome check"),
    # code with boilerplate: __init__, self.stack, the methods one after another
    ExamplePrompt("Write a Python class for a stack with push, pop and peek methods.", "Code: a stack class"),
    # open, creative text: every next word is one of many
    ExamplePrompt("Invent a name and a backstory for a fantasy dragon.", "Creative: a dragon's backstory"),
    # made-up names: the drafter cannot guess what the target invents
    ExamplePrompt("Give me five creative names for a coffee shop.", "Creative: coffee shop names"),
)
