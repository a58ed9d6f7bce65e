"""Weightless drafting (prompt lookup, suffix decoding) through the speculative loop: the proposer reads the token ids
alone, the target verifies the proposal in one forward, as it verifies an EAGLE chain. A step with nothing to
propose verifies the last token alone: a plain step through the same loop.

Such a proposal has no distribution of its own: it is a point mass (q = 1 at each proposed token). Greedy decoding
keeps the longest prefix that equals the target's choices, so its output is plain decoding's; sampling keeps a
proposed x with probability p(x) and, at the first rejection, samples p without x, renormalised: speculative
rejection sampling with that q (`accept_sampled` with one-hot rows), so the output follows the target's
distribution. The target runs without aux layers (nothing reads its hidden states), and the step's attention,
hidden-state RMS and draft probabilities are None: there is no drafter to measure."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from importlib import import_module
from typing import Protocol

import torch

from playground.drafting import METHODS, offered_methods

from .cache import TargetCache
from .config import GenerationConfig
from .loop import Pending, Verified
from .sampling import accept_greedy, accept_point_mass_tree, accept_sampled, probabilities
from .target import Target
from .trace import StepEvent
from .tree import NO_TREE, DraftTree, verify_tree
from .tree_shape import TreeShape


class Proposer(Protocol):
    def propose(self, tokens: list[int], k: int) -> list[int]: ...


class TreeProposer(Proposer, Protocol):
    def propose_tree(self, tokens: list[int], depth: int, topk: int,
                     nodes: int) -> list[tuple[int, int, int, float]]: ...  # (token, parent, depth, share) per node


def proposer_for(method: str, cfg: GenerationConfig, session: str | None = None, target: Target | None = None
                 ) -> Proposer:
    """A proposer of a method that needs no checkpoint, for one run, built by the module its registry entry names
    (`Method.proposer`: that engine module's `build_proposer`), reading `session`'s state where the method keeps some
    (None: the run's own) and the `target` where it drafts with the target's own layers; so a new method needs no
    branch here."""
    from .proposers import ProposerRun

    entry = METHODS.get(method)
    if entry is not None and entry.proposer is not None and not entry.checkpoint:
        run = ProposerRun(target, cfg, None, session=session)
        return import_module(f"{__package__}.{entry.proposer}").build_proposer(run)
    raise ValueError(f"{method!r} is not a drafting method that needs no checkpoint; those are "
                     f"{', '.join(offered_methods('local', ()))}")


def speculator_for(proposer: Proposer, run) -> WeightlessChain | WeightlessTree:
    """A proposer that reads the text alone, as `speculate` runs it: chains, or trees where the run asks one (and the
    proposer draws them: `propose_tree`)."""
    if run.cfg.tree is None:
        return WeightlessChain(proposer, run.cfg, run.target, run.generator)
    if not hasattr(proposer, "propose_tree"):
        raise ValueError("this method drafts chains: set the tree's nodes to 0")
    return WeightlessTree(proposer, run.cfg, run.cfg.tree, run.target, run.generator)


class WeightlessChain:
    """A run's drafting with a weightless proposer, as `speculate` runs it."""

    def __init__(self, proposer: Proposer, cfg: GenerationConfig, target: Target,
                 generator: torch.Generator | None) -> None:
        self.proposer, self.cfg, self.target, self.generator = proposer, cfg, target, generator
        self.rows, self.aux_layers = cfg.k + 1, []

    def draft(self, tokens: list[int], pending: Pending, budget: int) -> list[int]:
        k = min(budget, self.cfg.k)
        return self.proposer.propose(tokens, k)[:k] if k > 0 else []

    def verify(self, drafts: list[int], tokens: list[int], context: int, cache: TargetCache) -> Verified:
        """The last token and the proposal in one target forward; keep the accepted prefix."""
        cfg, target = self.cfg, self.target
        drafted = torch.tensor(drafts, dtype=torch.long, device=target.device)
        out = target.forward(torch.tensor([tokens[-1], *drafts], device=target.device), cache)
        if cfg.greedy:
            accepted, bonus = accept_greedy(drafted, out.logits)
        else:
            point_masses = torch.zeros(len(drafts), target.vocab_size, device=target.device)
            point_masses[torch.arange(len(drafts), device=target.device), drafted] = 1.0
            accepted, bonus = accept_sampled(drafted, point_masses,
                                             probabilities(out.logits, cfg.temperature, cfg.top_p), self.generator)
        cache.rollback(context + accepted + 1)
        fields = {"drafted": list(drafts), "accepted": accepted, "draft_probs": None, "attention": None,
                  "hidden_rms": None}
        return Verified(drafts[:accepted] + [bonus], Pending(out.aux, context), fields, out)


class WeightlessTree:
    """A run's drafting with a weightless proposer of trees (suffix decoding's), as `speculate` runs it: the tree's
    nodes verified in one target forward as an EAGLE tree is (engine/tree.py), accepted down the target's greedy
    choices, or, sampling, by `accept_point_mass_tree`. The tree's shape comes from the text alone, never from a
    token drawn in the step, so sampling stays exact."""

    def __init__(self, proposer: TreeProposer, cfg: GenerationConfig, tree: TreeShape, target: Target,
                 generator: torch.Generator | None) -> None:
        self.proposer, self.cfg, self.tree, self.target, self.generator = proposer, cfg, tree, target, generator
        self.rows, self.aux_layers = tree.nodes + 1, []  # the root and every node; no target states read

    def draft(self, tokens: list[int], pending: Pending, budget: int) -> DraftTree:
        depth = min(self.tree.depth, budget)
        if depth <= 0:
            return NO_TREE
        nodes = self.proposer.propose_tree(tokens, depth, self.tree.topk, self.tree.nodes)
        return DraftTree([n[0] for n in nodes], [n[1] for n in nodes], [n[2] for n in nodes],
                         [n[3] for n in nodes], [0.0] * len(nodes))

    def verify(self, drafts: DraftTree, tokens: list[int], context: int, cache: TargetCache) -> Verified:
        cfg = self.cfg
        sampled = None if cfg.greedy else lambda logits: accept_point_mass_tree(
            drafts.children, drafts.tokens, probabilities(logits, cfg.temperature, cfg.top_p), self.generator)
        verdict = verify_tree(self.target, drafts, tokens[-1], context, cache, sampled=sampled)
        fields = {**verdict.fields(drafts), "draft_probs": None, "attention": None, "hidden_rms": None}
        return Verified(verdict.emitted(drafts), Pending(verdict.out.aux, context), fields, verdict.out)


def weightless_generate(target: Target, method: str, prompt_ids: list[int], cfg: GenerationConfig,
                        should_stop: Callable[[], bool] | None = None,
                        session: str | None = None) -> Iterator[StepEvent]:
    """Speculative decoding with a method that reads the text alone ("ngram" or "suffix"): chains of up to k proposed
    tokens, or, with `cfg.tree`, a tree per step where the method proposes trees (suffix decoding).

    Greedy output is token-identical to `plain_generate`; sampled output follows the target's distribution."""
    from .proposers import decode

    return decode(target, method, prompt_ids, cfg, should_stop, session=session)
