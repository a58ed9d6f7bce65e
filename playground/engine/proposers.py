"""Every drafting method's proposer, built from the registry: one entry point (`decode`) for plain decoding and every
method, so a backend never asks which kind of method it runs.

A method's registry entry (`drafting.Method.proposer`) names its engine module; that module's
`build_speculator(run)` returns what `loop.speculate` runs (a `Speculator`: draft, then verify in one target forward),
from the run's target, settings and generator, its loaded drafter where the method drafts with trained weights, and
its session: a method that keeps state across a session's runs (`Method.session_state`, suffix decoding's cache) owns
that state in its module, keyed by the session, and forgets it on `forget_session`. No caller holds it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import import_module

import torch

from playground.drafting import METHODS, PLAIN, Method, method_for

from .config import GenerationConfig
from .decode import plain_generate
from .loop import Speculator, speculate
from .target import Target
from .trace import StepEvent


@dataclass
class ProposerRun:
    """What a proposer is built from for one run."""

    target: Target
    cfg: GenerationConfig
    generator: torch.Generator | None
    drafter: object | None = None  # the loaded drafter of a method that drafts with trained weights
    aux_layers: list[int] = field(default_factory=list)  # the target states it reads (none for the others)
    session: str | None = None  # whose state a stateful proposer reads and grows; None: the run's own


def speculator(method: Method, run: ProposerRun) -> Speculator:
    """The speculator `method`'s module builds for `run`."""
    if method.proposer is None:
        raise ValueError(f"{method.label} proposes nothing")
    return import_module(f"{__package__}.{method.proposer}").build_speculator(run)


def decode(target: Target, drafter: str, prompt_ids: list[int], cfg: GenerationConfig,
           should_stop: Callable[[], bool] | None = None, loaded: object | None = None,
           aux_layers: list[int] = (), session: str | None = None) -> Iterator[StepEvent]:
    """Step events of one run of `drafter` (PLAIN, a registry method, a preset's drafter or a folder, whose trained
    weights come `loaded` with the `aux_layers` they read): greedy output token-identical to plain decoding, sampled
    output distributed as the target's samples."""
    if drafter == PLAIN:
        return plain_generate(target, prompt_ids, cfg, should_stop)
    method = method_for(drafter)
    if cfg.tree is not None and not method.trees:
        raise ValueError(f"{method.label} drafts chains: set the tree's nodes to 0")
    if method.checkpoint and loaded is None:
        raise ValueError(f"{method.label} drafts with trained weights: load its drafter first")
    return speculate(target, prompt_ids, cfg, lambda generator: speculator(
        method, ProposerRun(target, cfg, generator, loaded, list(aux_layers), session)), should_stop)


def forget_session(session: str) -> None:
    """Forget what every stateful method keeps for `session` (a conversation's Clear, a finished bench record)."""
    for method in METHODS.values():
        if method.session_state and method.proposer is not None:
            import_module(f"{__package__}.{method.proposer}").forget(session)
