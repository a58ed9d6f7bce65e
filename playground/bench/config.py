"""What a bench run measures: sweeps of prompt sets x templates x drafters x k, and the run's settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from playground.engine import GenerationConfig, TreeShape
from playground.engine.config import tree_problem

ProgressCallback = Callable[[int, int, str], None]
TEMPLATES_HELP = ("default (the tokenizer's), raw (no template), or llama3 (Llama-3-style headers, unfamiliar to "
                  "SmolLM2)")


@dataclass(frozen=True)
class Sweep:
    """A product of prompt sets x templates x drafters x k. `study` names the report section its rows feed."""

    prompt_sets: tuple[str, ...]
    drafters: tuple[str, ...]
    ks: tuple[int, ...]
    templates: tuple[str, ...] = ("default",)
    study: str = "sweep"  # speed | k | context | template | sweep
    tree_nodes: tuple[int, ...] = ()  # beside each EAGLE drafter's chain at k, a draft tree of N nodes, k deep
    k_auto: bool = False  # beside the fixed ks, each preset EAGLE drafter at `k auto` (auto_k.py)


@dataclass
class BenchConfig:
    sweeps: list[Sweep]
    max_new_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    min_draft_prob: float = 0.0  # adaptive draft length for every EAGLE run (0: k drafts every step)
    repeats: int = 3
    limit: int | None = None  # first N prompts of each set
    turns: str = "all"  # all | first
    seed: int = 0
    assistant: str | None = None  # a small draft model for hf-assisted
    profile: str | None = None
    # the weightless methods' settings ((name, value) as drafting.PARAMETERS names them); a method not named runs at
    # the registry's defaults, and each run takes its own method's alone (methods.own_settings)
    method_settings: tuple[tuple[str, int | float], ...] = ()

    def validate(self) -> None:
        if self.repeats < 1:
            raise ValueError(f"repeats must be at least 1, got {self.repeats}")
        if self.turns not in ("all", "first"):
            raise ValueError(f"turns must be 'all' or 'first', got {self.turns!r}")
        deepest = max((k for s in self.sweeps for k in s.ks), default=1)
        cfg = GenerationConfig(max_new_tokens=self.max_new_tokens, k=deepest, temperature=self.temperature,
                               top_p=self.top_p, min_draft_prob=self.min_draft_prob,
                               method_settings=self.method_settings)
        for nodes in sorted({n for s in self.sweeps for n in s.tree_nodes}):
            problem = tree_problem(cfg, TreeShape.k_deep(cfg.k, nodes))
            if problem:
                raise ValueError(f"--tree-nodes {nodes}: {problem}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def generation(self, prompt_index: int, turn: int, instrument: bool = False,
                   max_new_tokens: int | None = None) -> GenerationConfig:
        """The settings of one answer; the seed differs per prompt and turn, the same for every method."""
        return GenerationConfig(max_new_tokens=max_new_tokens or self.max_new_tokens, temperature=self.temperature,
                                top_p=self.top_p, seed=self.seed + 1000 * prompt_index + turn, instrument=instrument,
                                min_draft_prob=self.min_draft_prob, method_settings=self.method_settings)


SWEEP_FIELDS = ("prompt_sets", "drafters", "ks", "templates", "tree_nodes", "k_auto")


def with_overrides(config: BenchConfig, **changes) -> BenchConfig:
    """A copy of `config`: given sweep fields replace those of every sweep, other given fields the config's."""
    changes = {k: v for k, v in changes.items() if v is not None}
    sweep_changes = {k: changes.pop(k) for k in SWEEP_FIELDS if k in changes}
    sweeps = list(dict.fromkeys(replace(s, **sweep_changes) for s in config.sweeps))  # drop sweeps made equal
    return replace(config, sweeps=sweeps, **changes)
