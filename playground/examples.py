"""The Chat tab's one-click example prompts: two where EAGLE-3.1 drafts well, two where it does not.

Chosen by measurement, not by guess, out of twelve candidates, on the default preset (SmolLM2-135M-Instruct with the
shipped drafters) at the Chat tab's defaults: EAGLE-3.1, k = 4, greedy, 256 new tokens, default chat template, no
system prompt. Each was run with

    python -m playground generate --drafter eagle3.1 --k 4 --max-new-tokens 256 --json --prompt "<prompt>"

on a 2-core AMD EPYC (lscpu: "AMD EPYC", family 25 model 1, AVX2, no AVX-512; MKL_CBWR=AVX2 as the app sets it)
on 2026-12-03, and `metrics.mean_acceptance_length` (tokens per verify step, the bonus token included: at most
k + 1 = 5) is recorded beside each. Greedy decoding makes it deterministic on a given machine; another CPU's kernels
can round differently and move it a little. The Chat tab's own path (playback.chat_turn with the tab's default
settings) gave the same figures for the two code prompts, to the token.

The other candidates (same command): a Fibonacci function 3.06, a linked-list reversal 3.31, counting from 1 to 20
3.18, a poem about the sea 2.36, a lighthouse-keeper story 1.88, an ideal weekend in three sentences 1.61,
speculative decoding in two sentences 1.62, and "List the days of the week, one per line." 1.34 (the model fell
into "Sunday, Sunday" over and over: repetition alone did not make the drafts land).
"""

from __future__ import annotations

from dataclasses import dataclass

MEASURED_WITH = "python -m playground generate --drafter eagle3.1 --k 4 --max-new-tokens 256 --json --prompt …"
MEASURED_ON = "a 2-core AMD EPYC (AVX2)"
EXAMPLES_LABEL = (f"Examples: EAGLE-3.1's mean acceptance length at k = 4 (tokens per step, at most 5), measured on "
                  f"{MEASURED_ON}. Code drafts well; open, creative text does not.")


@dataclass(frozen=True)
class ExamplePrompt:
    prompt: str
    title: str  # a few words: the button shows about 60 characters
    mean_acceptance_length: float  # measured as the module says; EAGLE-3.1, k = 4, greedy

    @property
    def label(self) -> str:
        """The button's text: 'Code: a palindrome check · 4.12 tokens/step'."""
        return f"{self.title} · {self.mean_acceptance_length:.2f} tokens/step"


CHAT_EXAMPLES = (
    # code: a short, idiomatic function the target writes the way the drafter learned it (53 of 68 drafts accepted)
    ExamplePrompt("Write a Python function that checks whether a string is a palindrome.",
                  "Code: a palindrome check", 4.12),
    # code with boilerplate: __init__, self.stack, the methods one after another (182 of 292 accepted)
    ExamplePrompt("Write a Python class for a stack with push, pop and peek methods.", "Code: a stack class", 3.49),
    # open, creative text: every next word is one of many (109 of 584 accepted)
    ExamplePrompt("Invent a name and a backstory for a fantasy dragon.", "Creative: a dragon's backstory", 1.75),
    # made-up names: the drafter cannot guess what the target invents (81 of 692 accepted)
    ExamplePrompt("Give me five creative names for a coffee shop.", "Creative: coffee shop names", 1.47),
)
