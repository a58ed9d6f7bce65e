"""The decode loops: chain speculative decoding with an EAGLE drafter, and the plain baseline.

Both are iterators yielding one StepEvent per target forward, both run through the same Target wrapper and
KV-cache code, so the speedup one measures between them is honest.

Alignment (EAGLE): at position t the drafter reads the target's aux features f_t and the embedding of token
t+1 and predicts token t+2. After each verification the drafter's cache is rolled back to the context and
re-fed the target features of the newly accepted positions, so context keys always come from target features.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from .cache import DrafterCache, TargetCache
from .config import GenerationConfig
from .drafter import Eagle3Drafter
from .loop import Pending, Stopper, Verified, check_prompt, choose, sampler, speculate
from .sampling import accept_greedy, accept_sampled, probabilities, sample
from .target import KeptPrefix, Target
from .trace import AttentionMass, StepEvent


def plain_generate(target: Target, prompt_ids: list[int], cfg: GenerationConfig,
                   should_stop: Callable[[], bool] | None = None, aux_layers: list[int] | None = None,
                   keep: Callable[[KeptPrefix], None] | None = None) -> Iterator[StepEvent]:
    """Plain autoregressive decoding: one target forward per token. The speedup baseline. It starts from a kept cache
    where one holds the prompt's start (`Target.take_prefix`). `keep` is given the run's cache when it ends, with the
    features of `aux_layers` at every position it holds (k auto's probe: the chosen method goes on from them, and a
    replay reads them as they were computed)."""
    check_prompt(target, prompt_ids)
    stopper, generator = Stopper(target, cfg, len(prompt_ids)), sampler(cfg, target.device)
    features = [] if keep is not None and aux_layers else None
    cache, next_input, kept_aux = target.start_from(prompt_ids, aux_layers if features is not None else [])
    if kept_aux is not None and features is not None:
        features.append(kept_aux)
    generated, step = [], 0
    start = target.clock()
    while True:
        t0 = target.clock()
        out = target.forward(next_input, cache, aux_layers if features is not None else None, last_only=True)
        if features is not None:
            features.append(out.aux)
        token = choose(out.logits[-1], cfg, generator)
        emitted, reason = stopper.clip(generated, [token])
        generated += emitted
        if reason is None and should_stop is not None and should_stop():
            reason = "cancelled"
        now = target.clock()
        if reason is not None and keep is not None:
            keep(KeptPrefix(tuple((list(prompt_ids) + generated)[: cache.length]), cache, tuple(aux_layers or ()),
                            torch.cat(features) if features else None))
        yield StepEvent(step=step, drafted=[], accepted=0, emitted=emitted, verify_ms=(now - t0) * 1000,
                        total_tokens=len(generated), elapsed_ms=(now - start) * 1000,
                        finished=reason is not None, finish_reason=reason, threads=out.threads,
                        others_running=out.others_running, cores_taken=out.cores_taken)
        if reason is not None:
            return
        next_input, step = [token], step + 1


@dataclass
class Chain:
    drafted: torch.Tensor  # [k] target ids, on the device (read back once, after verification)
    draft_probs: list[torch.Tensor]  # greedy: probability of each draft; sampling: full q over the target vocab
    attention: list[torch.Tensor]  # per depth [sink, context, draft]
    hidden_rms: list[torch.Tensor]


def eagle_inputs(pending: Pending, drafter: Eagle3Drafter, draft_cache: DrafterCache,
                 tokens: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Roll the drafter's cache back to the pending features' start; a step's first drafter call's token ids [1, n]
    and projected features [1, n, hidden], aligned as EAGLE aligns them: the feature at position t beside the
    embedding of token t + 1 (the drafter may run in another dtype than the target)."""
    draft_cache.rollback(pending.start)
    hidden = pending.aux.to(drafter.fc.weight.dtype)
    return torch.tensor([tokens[pending.start + 1 :]], device=pending.aux.device), drafter.project(hidden)[None]


class ChainDrafter:
    """A run's drafting of chains: the drafter, its cache, and what every step's chain is drafted with."""

    def __init__(self, drafter: Eagle3Drafter, cfg: GenerationConfig, target: Target,
                 generator: torch.Generator | None, aux_layers: list[int] | None = None) -> None:
        self.drafter, self.cfg, self.generator = drafter, cfg, generator
        self.target, self.aux_layers, self.rows = target, aux_layers or [], cfg.k + 1
        self.cache = drafter.new_cache()
        self.vocab_map = drafter.to_target_ids(torch.arange(drafter.config.draft_vocab_size, device=target.device))
        self.vocab_size = target.vocab_size
        self.none = Chain(torch.empty(0, dtype=torch.long, device=target.device), [], [], [])
        self.unread: list[Pending] = []  # features that steps drafting nothing left for the next draft to read

    @torch.inference_mode()
    def draft(self, tokens: list[int], pending: Pending, k: int,
              agrees: Callable[[int, int], bool] | None = None) -> Chain:
        """Draft up to k tokens after `tokens`. Depth 1 feeds the pending target features; deeper steps feed the
        drafter's own state. `agrees(depth, token)`: a replay's known target choices, the chain ending after the
        first draft they reject (no deeper one could be accepted).

        Tokens stay on the device from one depth to the next: no host sync inside the chain, except one scalar per
        depth when `cfg.min_draft_prob` may end the chain early."""
        k = min(k, self.cfg.k)
        if k <= 0:  # its features wait for the next draft (engine/guard.py: plain steps between drafting ones)
            self.unread.append(pending)
            return self.none
        if self.unread:
            pending = Pending(torch.cat([p.aux for p in [*self.unread, pending]]), self.unread[0].start)
            self.unread = []
        drafter, cfg, device = self.drafter, self.cfg, pending.aux.device
        context = len(tokens) - 1
        drafted, chain = [], Chain(self.none.drafted, [], [], [])
        ids, hidden = eagle_inputs(pending, drafter, self.cache, tokens)
        all_positions = torch.arange(pending.start, context + k, device=device)  # pending features, then one a depth
        positions = all_positions[: context - pending.start]
        for depth in range(k):
            if cfg.instrument:
                chain.hidden_rms.append(hidden[0, -1].pow(2).mean().sqrt())
            out = drafter(ids, hidden, positions, self.cache, attention_rows=1 if cfg.instrument else 0, logits_rows=1,
                          context=context)
            logits = out.logits[0, -1].float()  # bf16/fp16 drafters: probabilities in float32, like the target's
            if cfg.greedy:
                choice = logits.argmax()
                prob = torch.softmax(logits, -1)[choice] if cfg.instrument or cfg.min_draft_prob else None
                if cfg.instrument:
                    chain.draft_probs.append(prob)
            else:
                q = probabilities(logits, cfg.temperature, cfg.top_p)
                choice = sample(q, self.generator)
                prob = q[choice]
                chain.draft_probs.append(torch.zeros(self.vocab_size, device=device).index_copy_(0, self.vocab_map, q))
            token = self.vocab_map[choice]
            drafted.append(token)
            if cfg.instrument:
                chain.attention.append(out.mass(-1, context))
            if cfg.min_draft_prob and float(prob) < cfg.min_draft_prob:
                break
            if agrees is not None and not agrees(depth, int(token)):
                break
            hidden = out.feedback[:, -1:]
            ids = token.view(1, 1)
            positions = all_positions[context - pending.start + depth :][:1]
        chain.drafted = torch.stack(drafted)
        return chain

    def verify(self, chain: Chain, tokens: list[int], context: int, cache: TargetCache) -> Verified:
        """All k + 1 positions in one target forward, then keep the accepted prefix."""
        cfg, target = self.cfg, self.target
        verify = target.forward(torch.cat([torch.tensor([tokens[-1]], device=target.device), chain.drafted]), cache,
                                self.aux_layers)
        if cfg.greedy:
            accepted, bonus = accept_greedy(chain.drafted, verify.logits)
            probs_of_drafts = ((torch.stack(chain.draft_probs).tolist() if chain.draft_probs else [])
                               if cfg.instrument else None)
        else:
            target_probs = probabilities(verify.logits, cfg.temperature, cfg.top_p)
            q_all = (torch.stack(chain.draft_probs) if len(chain.drafted)
                     else torch.empty(0, target.vocab_size, device=target.device))
            accepted, bonus = accept_sampled(chain.drafted, q_all, target_probs, self.generator)
            probs_of_drafts = q_all[torch.arange(len(chain.drafted), device=q_all.device), chain.drafted].tolist()
        drafted = chain.drafted.tolist()
        cache.rollback(context + accepted + 1)
        fields = {"drafted": drafted, "accepted": accepted, "draft_probs": probs_of_drafts,
                  "attention": [AttentionMass(*m) for m in torch.stack(chain.attention).tolist()]
                  if chain.attention else None,
                  "hidden_rms": torch.stack(chain.hidden_rms).tolist() if chain.hidden_rms else None}
        return Verified(drafted[:accepted] + [bonus], Pending(verify.aux[: accepted + 1], context), fields, verify)


def speculative_generate(target: Target, drafter: Eagle3Drafter, aux_layers: list[int], prompt_ids: list[int],
                         cfg: GenerationConfig, should_stop: Callable[[], bool] | None = None) -> Iterator[StepEvent]:
    """Chain speculative decoding: draft k tokens (fewer with `cfg.min_draft_prob`), verify them and the last token in
    one target forward, accept.

    Greedy output is token-identical to `plain_generate`; sampled output follows the target's distribution.
    `aux_layers` comes from `target.attach(drafter)`, which also checks that the drafter fits.
    """
    return speculate(target, prompt_ids, cfg,
                     lambda generator: ChainDrafter(drafter, cfg, target, generator, aux_layers), should_stop)
