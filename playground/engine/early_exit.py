"""Early exit, a self-speculative draft (the registry's `early-exit`): the target's own first `early_exit_layers`
layers, then its final norm and head, draft k tokens one at a time; the whole target verifies them in one forward.

No trained weights: the draft reads the target's own, in place (`first_layers` of our fast path), with a KV cache of
its own for those layers, which it brings up to date with the tokens the last verification kept (one forward of a
few rows) before drafting on. It proposes with its own probabilities, so greedy decoding keeps the longest prefix that
equals the target's choices, sampling keeps draft x with probability min(1, p(x) / q(x)) (`accept_sampled`), and the
adaptive stop applies. It reads no drafter's attention or hidden states: those views have nothing to show.

An exit the target was not trained for (LayerSkip trains for it) drafts weakly; the method is here as the model-based
method beside EAGLE, measured as it is (docs/engine.md#early-exit)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from playground.drafting import EARLY_EXIT_LAYERS

from .cache import TargetCache
from .loop import Pending, Verified
from .sampling import accept_greedy, accept_sampled, probabilities, sample


@dataclass
class Drafts:
    """One step's chain: its tokens, the draft's probability of each, and (sampling) the rows they were drawn from."""

    tokens: list[int]
    probs: list[float]
    rows: torch.Tensor | None = None  # [len(tokens), vocab] the proposals q, sampled runs only


def layers_problem(layers: int, target_layers: int) -> str | None:
    """Why the first `layers` layers cannot draft for a target of `target_layers`, in one line; None when they can."""
    if not 1 <= layers < target_layers:
        return (f"{EARLY_EXIT_LAYERS.name} must be from 1 to {target_layers - 1} for this target, which has "
                f"{target_layers} layers; got {layers}")
    return None


class EarlyExitDraft:
    """The draft model of one run: the target's first layers with a cache of their own, and the tokens it holds."""

    def __init__(self, target, layers: int, cfg, generator: torch.Generator | None) -> None:
        if target.fast is None:
            raise ValueError("early exit drafts with our fast path's layers, which this target does not run on "
                             f"({target.fast_problem})")
        problem = layers_problem(layers, target.num_layers)
        if problem:
            raise ValueError(problem)
        self.target, self.cfg, self.generator = target, cfg, generator
        self.model = target.fast.first_layers(layers)
        self.cache = self.model.new_cache(target.max_positions)
        self.held: list[int] = []  # the tokens whose keys and values the cache holds, in order
        self.known = 0  # of them, those the target has kept (they precede every later step's tokens)

    @torch.inference_mode()
    def _forward(self, ids: list[int]) -> torch.Tensor:
        """The exit's logits [vocab] after feeding `ids` on."""
        logits, _ = self.model.forward(torch.tensor(ids, device=self.target.device), self.cache, [], True)
        self.held += ids
        return logits[-1].float()

    def _catch_up(self, tokens: list[int]) -> torch.Tensor:
        """Drop the rejected drafts from the cache, feed the tokens the target kept since, and return the logits
        after the last."""
        same = self.known
        while same < min(len(self.held), len(tokens) - 1) and self.held[same] == tokens[same]:
            same += 1
        self.cache.rollback(same)
        del self.held[same:]
        self.known = len(tokens)
        return self._forward(tokens[same:])

    def draft(self, tokens: list[int], k: int) -> Drafts:
        """Up to k tokens after `tokens`, one exit forward each (the first after the catch-up), the chain ending early
        after a draft under the run's minimum draft probability."""
        cfg, drafts = self.cfg, Drafts([], [])
        if k <= 0:
            return drafts
        logits, rows = self._catch_up(tokens), []
        for depth in range(k):
            if cfg.greedy:
                choice = int(logits.argmax())
                prob = float(torch.softmax(logits, -1)[choice])
            else:
                q = probabilities(logits, cfg.temperature, cfg.top_p)
                choice = int(sample(q, self.generator))
                prob = float(q[choice])
                rows.append(q)
            drafts.tokens.append(choice)
            drafts.probs.append(prob)
            if depth + 1 == k or (cfg.min_draft_prob and prob < cfg.min_draft_prob):
                break
            logits = self._forward([choice])
        drafts.rows = torch.stack(rows) if rows else None
        return drafts

    def propose(self, tokens: list[int], k: int) -> list[int]:
        """Greedy drafts after `tokens` (what replay reads)."""
        return self.draft(tokens, k).tokens


class EarlyExitChain:
    """A run's early-exit drafting as `speculate` runs it: draft a chain, verify it in one target forward."""

    def __init__(self, draft: EarlyExitDraft, cfg, target, generator: torch.Generator | None) -> None:
        self.draft_model, self.cfg, self.target, self.generator = draft, cfg, target, generator
        self.rows, self.aux_layers = cfg.k + 1, []

    def draft(self, tokens: list[int], pending: Pending, budget: int) -> Drafts:
        return self.draft_model.draft(tokens, min(budget, self.cfg.k))

    def verify(self, drafts: Drafts, tokens: list[int], context: int, cache: TargetCache) -> Verified:
        cfg, target = self.cfg, self.target
        drafted = torch.tensor(drafts.tokens, dtype=torch.long, device=target.device)
        out = target.forward(torch.tensor([tokens[-1], *drafts.tokens], device=target.device), cache)
        if cfg.greedy:
            accepted, bonus = accept_greedy(drafted, out.logits)
        else:
            target_probs = probabilities(out.logits, cfg.temperature, cfg.top_p)
            rows = drafts.rows if drafts.rows is not None else target_probs[:0]  # nothing drafted: the bonus alone
            accepted, bonus = accept_sampled(drafted, rows, target_probs, self.generator)
        cache.rollback(context + accepted + 1)
        fields = {"drafted": list(drafts.tokens), "accepted": accepted,
                  "draft_probs": drafts.probs if cfg.instrument else None, "attention": None, "hidden_rms": None}
        return Verified(drafts.tokens[:accepted] + [bonus], Pending(None, context), fields, out)


DEFAULT_SHARE = 1 / 3  # of the target's layers, where the run leaves early_exit_layers at 0


def exit_layers(setting: int, target_layers: int) -> int:
    """The layers that draft: the setting, or (0) DEFAULT_SHARE of the target's."""
    return setting or max(1, round(target_layers * DEFAULT_SHARE))


def build_proposer(run) -> EarlyExitDraft:
    """The registry's entry names this module: the run's draft model."""
    layers = exit_layers(int(run.cfg.setting(EARLY_EXIT_LAYERS.name)), run.target.num_layers)
    return EarlyExitDraft(run.target, layers, run.cfg, run.generator)


def build_speculator(run) -> EarlyExitChain:
    return EarlyExitChain(build_proposer(run), run.cfg, run.target, run.generator)
