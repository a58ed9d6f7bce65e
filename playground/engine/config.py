"""How to decode one answer (`GenerationConfig`), checked when made, and when a configuration can use a draft tree."""

from __future__ import annotations

from dataclasses import dataclass

from playground.drafting import PARAMETERS, k_problem, parameters_problem

from .tree_shape import TreeShape

SEEDS = 2**63  # seeds are 0 .. SEEDS - 1 (what torch.Generator.manual_seed takes, without negatives)


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

    def __post_init__(self) -> None:
        if k_problem(self.k):
            raise ValueError(k_problem(self.k))
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_draft_prob < 1:
            raise ValueError(f"the minimum draft probability must be in [0, 1), got {self.min_draft_prob}")
        if self.seed is not None and not (isinstance(self.seed, int) and 0 <= self.seed < SEEDS):
            raise ValueError(f"the seed must be a whole number from 0 to 2**63 - 1, got {self.seed}")
        problem = tree_problem(self, self.tree) if self.tree is not None else None
        if problem:
            raise ValueError(problem)
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
