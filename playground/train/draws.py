"""The prompt collections a drafter is distilled on, and their draws: `base` (prompts.py) and the benchmark-shaped
`tasks` / `tasks2` (task_prompts.py, which reuse prompts.py's vocabulary), each drawn again with new random choices
and none of an earlier draw's prompts, split into train and held-out by the prompt's text."""

from __future__ import annotations

from functools import cache

from playground.train.prompts import PromptItem, Split, build_prompts, split_of
from playground.train.task_prompts import build_second_draw, build_task_prompts

COLLECTIONS = ("base", "tasks", "tasks2")


def build_collection(name: str, seed: int = 0) -> list[PromptItem]:
    """`base` (prompts.py), `tasks` (task_prompts.py: benchmark-shaped requests, distilled in a second round) or
    `tasks2` (a second draw of those templates, none of the first's prompts: the third round)."""
    if name == "base":
        return build_prompts(seed)
    if name == "tasks":
        return build_task_prompts(seed)
    if name == "tasks2":
        return build_second_draw(seed)
    raise ValueError(f"unknown prompt collection {name!r}; choose from {', '.join(COLLECTIONS)}")


def build_draw(name: str, draw: int) -> list[PromptItem]:
    """Draw `draw` of a collection: its templates filled with the random choices of seed `draw`, less every prompt
    an earlier draw (0 .. draw-1) already asked, so more draws mean more distinct prompts, never repeats."""
    asked = {p.messages[-1]["content"] for earlier in range(draw) for p in _asked_in(name, earlier)}
    return [p for p in build_collection(name, draw) if p.messages[-1]["content"] not in asked]


@cache
def _asked_in(name: str, draw: int) -> tuple[PromptItem, ...]:  # distilling draws 0..n builds each draw once
    return tuple(build_collection(name, draw))


def prompts_for(split: Split, seed: int = 0, collection: str = "base") -> list[PromptItem]:
    """The `split` of draw `seed` of a collection (the split hashes the prompt text, so it holds across draws)."""
    return [p for p in build_draw(collection, seed) if split_of(p.messages[-1]["content"]) == split]
