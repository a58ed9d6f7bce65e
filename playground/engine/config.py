"""How to decode one answer (`GenerationConfig`), checked when made, and when a configuration can use a draft tree.

Each setting's refusal is worded once, by its `*_problem` function, which the server's request models call too: a bad
temperature reads the same from the CLI, the app and the server."""

from __future__ import annotations

import math
from dataclasses import dataclass

from playground.drafting import PARAMETERS, k_problem, parameters_problem

from .tree_shape import TreeShape

SEEDS = 2**63  # seeds are 0 .. SEEDS - 1 (what torch.Generator.manual_seed takes, without negatives)


def max_new_tokens_problem(max_new_tokens: int, most: int | None = None) -> str | None:
    """Why an answer cannot have this many new tokens, or None: at least 1, and at most `most` where an entry point
    bounds it (the app's slider); the one wording of this refusal, for every entry point."""
    if max_new_tokens < 1:
        return f"max new tokens must be at least 1, got {max_new_tokens}"
    if most is not None and max_new_tokens > most:
        return f"max new tokens must be at most {most}, got {max_new_tokens}"
    return None


MAX_TEMPERATURE = 2.0  # vLLM's bound (SamplingParams: "temperature must be in [0, 2]"), and OpenAI's


def temperature_problem(temperature: float) -> str | None:
    """Why a temperature cannot be sampled at, or None: the one wording of this refusal, for every entry point,
    with vLLM's range."""
    if not math.isfinite(temperature):
        return f"temperature must be a finite number, got {temperature}"
    if temperature < 0:
        return f"temperature must be >= 0, got {temperature}"
    if temperature > MAX_TEMPERATURE:
        return f"temperature must be in [0, {MAX_TEMPERATURE:g}] (as vLLM's), got {temperature}"
    return None


def top_p_problem(top_p: float) -> str | None:
    return None if 0 < top_p <= 1 else f"top_p must be in (0, 1], got {top_p}"


def min_draft_prob_problem(min_draft_prob: float) -> str | None:
    return None if 0 <= min_draft_prob < 1 else f"the minimum draft probability must be in [0, 1), got {min_draft_prob}"


def seed_problem(seed: object) -> str | None:
    """Why a seed cannot seed the sampler (None: no seed), or None."""
    if seed is None or (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < SEEDS):
        return None
    return f"the seed must be a whole number from 0 to 2**63 - 1, got {seed}"


@dataclass(frozen=True)
class GenerationConfig:
    """How to decode one answer. It checks itself when made (ValueError, one line): a config that exists is one the
    engine can run, so no caller checks it again."""

    max_new_tokens: int = 256
    k: int = 4  # speculative tokens per step (chain drafting, as vLLM's num_speculative_tokens)
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int | None = None
    stop_strings: tuple[str, ...] = ()
    instrument: bool = True  # attention masses, hidden RMS and draft probabilities per depth
    # Adaptive draft length: drafting stops after a draft the drafter gave less than this probability (that draft is
    # still verified); 0 drafts k every step. Stopping after the draft, never dropping it, keeps sampling exact: whether
    # a position is drafted depends only on the tokens before it.
    min_draft_prob: float = 0.0
    tree: TreeShape | None = None  # a draft tree per step instead of a chain (engine/tree.py); None drafts chains
    # settings of a drafting method, by the registry's names (playground/drafting.py), as (name, value) pairs; a
    # setting left out takes the registry's default
    method_settings: tuple[tuple[str, int | float], ...] = ()
    # Pause drafting where it measures clearly slower than plain steps on this answer (engine/guard.py): k auto's greedy
    # chains. Which steps draft then depends on the clock, never the tokens
    guard: bool = False

    def __post_init__(self) -> None:
        problem = (k_problem(self.k) or max_new_tokens_problem(self.max_new_tokens)
                   or temperature_problem(self.temperature) or top_p_problem(self.top_p)
                   or min_draft_prob_problem(self.min_draft_prob) or seed_problem(self.seed))
        if problem:
            raise ValueError(problem)
        problem = tree_problem(self, self.tree) if self.tree is not None else None
        if problem:
            raise ValueError(problem)
        if self.guard and (not self.greedy or self.tree is not None):
            raise ValueError("the drafting guard watches greedy chains: which steps draft depends on the clock, which "
                             "must not change a sampled answer")
        problem = parameters_problem(dict(self.method_settings))
        if problem:
            raise ValueError(problem)

    def setting(self, name: str) -> int | float:
        """A drafting method's setting: the one given, else the registry's default."""
        return dict(self.method_settings).get(name, PARAMETERS[name][1].default)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def tree_problem(cfg: GenerationConfig, shape: TreeShape) -> str | None:
    """Why this configuration cannot decode with a draft tree, or None."""
    if cfg.min_draft_prob:
        return "the minimum draft probability (adaptive draft length) applies to chains, not to draft trees"
    return shape.problem()
