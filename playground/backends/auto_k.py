"""`k auto`: the k predicted fastest for a preset drafter on this machine — its acceptance by position (the
evaluation.json shipped beside the drafters) priced at this machine's step costs for the pair (engine/costs.py,
measured once per machine, pair and context, then kept) — or plain decoding where no k pays. One home for the
choice `generate --k auto` and `serve --k auto` make."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from playground.drafting import PLAIN
from playground.engine.costs import AutoK, CostProfile, choose_k, pair_profile, shipped_acceptance
from playground.presets import Preset, repo_relative
from playground.smollm2 import cache_root

from .local import LocalBackend


def auto_k_problem(preset: Preset, drafter: str) -> str | None:
    """Why auto cannot choose k for `drafter` of `preset` (worded to follow k's name), or None."""
    if drafter == PLAIN or drafter not in preset.drafters:
        return "auto chooses k for a preset drafter on our engine, named by the preset"
    try:
        shipped_acceptance(Path(preset.drafters[drafter]).parent, drafter)
    except ValueError as err:
        return f"auto needs {drafter}'s acceptance by position: {err}; give k a number"
    return None


def auto_k(backend: LocalBackend, drafter: str, context_ids: list[int], tokens: int,
           announce: Callable[[str], None] | None = None, profile: CostProfile | None = None) -> AutoK:
    """The choice for `drafter` of the backend's preset at a context of `tokens` (its step costs measured over
    `context_ids` repeated to that length, or `profile` where the caller measured them); ValueError where it cannot
    choose (a drafter given as a folder, or one without an acceptance by position), worded to follow k's name
    ("--k " + message, "k " + message)."""
    preset = backend.preset
    problem = auto_k_problem(preset, drafter)
    if problem:
        raise ValueError(problem)
    folder = Path(preset.drafters[drafter]).parent
    per_position = shipped_acceptance(folder, drafter)
    if profile is None:
        loaded = backend.drafter(drafter)
        profile = pair_profile(backend.target, loaded.drafter, loaded.aux_layers, (preset.target, loaded.source),
                               context_ids, tokens, cache_root(), announce=announce)
    return choose_k(profile, per_position, repo_relative(folder / "evaluation.json"))
