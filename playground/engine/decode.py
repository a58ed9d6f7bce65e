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

from playground.drafting import k_problem

from .cache import DrafterCache, TargetCache
from .drafter import Eagle3Drafter
from .sampling import accept_greedy, accept_sampled, probabilities, sample
from .target import Target, TargetOutput
from .trace import AttentionMass, StepEvent
from .tree_shape import TreeShape, tree_problem

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

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


class _Stopper:
    """Decides where generation ends inside a batch of newly emitted tokens."""

    def __init__(self, target: Target, cfg: GenerationConfig, prompt_len: int) -> None:
        self.target, self.cfg = target, cfg
        self.limit = min(cfg.max_new_tokens, target.max_positions - prompt_len)
        self.window = max((len(s) for s in cfg.stop_strings), default=0) + 8

    def clip(self, generated: list[int], new: list[int]) -> tuple[list[int], str | None]:
        for j, token in enumerate(new):
            so_far = generated + new[: j + 1]
            if token in self.target.eos_ids:
                return new[: j + 1], "eos"
            if self.cfg.stop_strings and self._hits_stop_string(so_far):
                return new[: j + 1], "stop"
            if len(so_far) >= self.limit:
                return new[: j + 1], "length"
        return new, None

    def _hits_stop_string(self, ids: list[int]) -> bool:
        tail = ids[-self.window :]
        now, before = self.target.decode(tail), self.target.decode(tail[:-1])
        return any(s in now and s not in before for s in self.cfg.stop_strings)


def _choose(logits: torch.Tensor, cfg: GenerationConfig, generator: torch.Generator | None) -> int:
    if cfg.greedy:
        return int(logits.argmax())
    return int(sample(probabilities(logits, cfg.temperature, cfg.top_p), generator))


def _generator(cfg: GenerationConfig, device: torch.device) -> torch.Generator | None:
    if cfg.greedy:
        return None
    generator = torch.Generator(device=device)
    generator.manual_seed(cfg.seed if cfg.seed is not None else torch.seed())
    return generator


def prefill(target: Target, aux_layers: list[int], prompt_ids: list[int], cache: TargetCache, cfg: GenerationConfig,
            generator: torch.Generator | None, stopper: _Stopper, start: float
            ) -> tuple[list[int], list[int], str | None, StepEvent, torch.Tensor]:
    """A speculative run's first step: target features for every prompt position, and the first token from the target
    alone. Returns (prompt + that token, the emitted tokens, why the run ends if it does, the step's event, the
    features)."""
    out = target.forward(prompt_ids, cache, aux_layers, last_only=True)
    tokens = list(prompt_ids) + [_choose(out.logits[-1], cfg, generator)]
    generated, reason = stopper.clip([], tokens[-1:])
    return tokens, generated, reason, prefill_event(generated, reason, start, target.clock(), out), out.aux


def prefill_event(generated: list[int], reason: str | None, start: float, now: float,
                  out: TargetOutput) -> StepEvent:
    """Step 0 of a speculative run: the prefill and the first token, nothing drafted."""
    return StepEvent(step=0, drafted=[], accepted=0, emitted=list(generated), verify_ms=(now - start) * 1000,
                     total_tokens=len(generated), elapsed_ms=(now - start) * 1000, finished=reason is not None,
                     finish_reason=reason, threads=out.threads, others_running=out.others_running)


def cancelled_event(step: int, generated: list[int], start: float, now: float) -> StepEvent:
    """The step a stopped run ends with: nothing new, marked cancelled."""
    return StepEvent(step=step, drafted=[], accepted=0, emitted=[], total_tokens=len(generated),
                     elapsed_ms=(now - start) * 1000, finished=True, finish_reason="cancelled")


def _check_prompt(target: Target, prompt_ids: list[int]) -> None:
    if not prompt_ids:
        raise ValueError("the prompt is empty")
    if len(prompt_ids) >= target.max_positions:
        raise ValueError(f"the prompt has {len(prompt_ids)} tokens; the target's context is {target.max_positions}")


def plain_generate(target: Target, prompt_ids: list[int], cfg: GenerationConfig,
                   should_stop: Callable[[], bool] | None = None) -> Iterator[StepEvent]:
    """Plain autoregressive decoding: one target forward per token. The speedup baseline."""
    _check_prompt(target, prompt_ids)
    stopper, generator = _Stopper(target, cfg, len(prompt_ids)), _generator(cfg, target.device)
    cache, generated, next_input, step = target.new_cache(), [], list(prompt_ids), 0
    start = target.clock()
    while True:
        t0 = target.clock()
        out = target.forward(next_input, cache, last_only=True)
        token = _choose(out.logits[-1], cfg, generator)
        emitted, reason = stopper.clip(generated, [token])
        generated += emitted
        if reason is None and should_stop is not None and should_stop():
            reason = "cancelled"
        now = target.clock()
        yield StepEvent(step=step, drafted=[], accepted=0, emitted=emitted, verify_ms=(now - t0) * 1000,
                        total_tokens=len(generated), elapsed_ms=(now - start) * 1000,
                        finished=reason is not None, finish_reason=reason, threads=out.threads,
                        others_running=out.others_running)
        if reason is not None:
            return
        next_input, step = [token], step + 1


class PlainProbe:
    """Times plain decode steps at the position a run has reached: the live speedup's baseline.

    Each sample is one step of exactly the work `plain_generate` does per token — a one-token forward and the greedy
    choice — fed the run's own next token, so the probe's cache only ever holds the run's text. Plain decoding slows as
    its context grows, so after each timed step the probe catches up, in one untimed forward, with the tokens the run
    has produced since: the next sample is timed where the run then is. The catch-up comes after the timed step, not
    before it, so the timed step, like the run's own steps, follows other work on other caches.
    """

    def __init__(self, target: Target) -> None:
        self.target = target
        self._cache = target.new_cache()
        self._fed = 0  # the run's tokens in the probe's cache

    @torch.inference_mode()
    def time_step(self, context: list[int]) -> float:
        """Seconds of one plain step at the probe's position in `context` (the prompt and the run's tokens so far; its
        last token where the probe has caught up with all of it), then an untimed catch-up with `context`."""
        if not context:
            raise ValueError("nothing to continue: the context is empty")
        if self._fed == 0:
            self._catch_up(context)  # the first sample is timed where the run is
        if self._fed >= len(context):  # the run has not moved since the last sample: time its last position again
            self._fed = len(context) - 1
            self._cache.rollback(self._fed)
        start = self.target.clock()
        int(self.target.forward([context[self._fed]], self._cache, last_only=True).logits[-1].argmax())
        seconds = self.target.clock() - start
        self._fed += 1
        self._catch_up(context)
        return seconds

    def _catch_up(self, context: list[int]) -> None:
        """Feed the run's tokens up to the last one, which the next timed step feeds."""
        if len(context) - 1 > self._fed:
            self.target.forward(context[self._fed : -1], self._cache, last_only=True)
            self._fed = len(context) - 1


def attention_mass(probs: torch.Tensor, context: int) -> torch.Tensor:
    """[sink, context, draft] shares of one query's attention [heads, keys], averaged over heads: key 0, the keys
    before the first draft position, the rest (the drafts on the query's own branch)."""
    row = probs.mean(0)
    return torch.stack([row[0], row[:context].sum(), row[context:].sum()])


@dataclass
class _Chain:
    drafted: torch.Tensor  # [k] target ids, on the device (read back once, after verification)
    draft_probs: list[torch.Tensor]  # greedy: probability of each draft; sampling: full q over the target vocab
    attention: list[torch.Tensor]  # per depth [sink, context, draft]
    hidden_rms: list[torch.Tensor]


@torch.inference_mode()
def _draft_chain(drafter: Eagle3Drafter, draft_cache: DrafterCache, tokens: list[int], pending_aux: torch.Tensor,
                 pending_start: int, k: int, cfg: GenerationConfig, vocab_map: torch.Tensor, vocab_size: int,
                 generator: torch.Generator | None) -> _Chain:
    """Draft up to k tokens. Depth 1 feeds the pending target features; deeper steps feed the drafter's own state.

    Tokens stay on the device from one depth to the next: no host sync inside the chain, except one scalar per depth
    when `cfg.min_draft_prob` may end the chain early."""
    device = pending_aux.device
    context = len(tokens) - 1
    drafted, chain = [], _Chain(torch.empty(0, dtype=torch.long, device=device), [], [], [])
    draft_cache.rollback(pending_start)
    hidden = drafter.project(pending_aux.to(drafter.fc.weight.dtype))[None]  # the drafter may run in another dtype
    ids = torch.tensor([tokens[pending_start + 1 :]], device=device)
    all_positions = torch.arange(pending_start, context + k, device=device)  # pending features, then one per depth
    positions = all_positions[: context - pending_start]
    for depth in range(k):
        if cfg.instrument:
            chain.hidden_rms.append(hidden[0, -1].pow(2).mean().sqrt())
        out = drafter(ids, hidden, positions, draft_cache, attention_rows=1 if cfg.instrument else 0, logits_rows=1)
        logits = out.logits[0, -1].float()  # bf16/fp16 drafters: probabilities in float32, like the target's
        if cfg.greedy:
            choice = logits.argmax()
            prob = torch.softmax(logits, -1)[choice] if cfg.instrument or cfg.min_draft_prob else None
            if cfg.instrument:
                chain.draft_probs.append(prob)
        else:
            q = probabilities(logits, cfg.temperature, cfg.top_p)
            choice = sample(q, generator)
            prob = q[choice]
            chain.draft_probs.append(torch.zeros(vocab_size, device=device).index_copy_(0, vocab_map, q))
        token = vocab_map[choice]
        drafted.append(token)
        if cfg.instrument:
            chain.attention.append(attention_mass(out.attention[0, :, -1], context))
        if cfg.min_draft_prob and float(prob) < cfg.min_draft_prob:
            break
        hidden = out.feedback[:, -1:]
        ids = token.view(1, 1)
        positions = all_positions[context - pending_start + depth :][:1]
    chain.drafted = torch.stack(drafted)
    return chain


def speculative_generate(target: Target, drafter: Eagle3Drafter, aux_layers: list[int], prompt_ids: list[int],
                         cfg: GenerationConfig, should_stop: Callable[[], bool] | None = None) -> Iterator[StepEvent]:
    """Chain speculative decoding: draft k tokens (fewer with `cfg.min_draft_prob`), verify them and the last token in
    one target forward, accept.

    Greedy output is token-identical to `plain_generate`; sampled output follows the target's distribution.
    `aux_layers` comes from `target.attach(drafter)`, which also checks that the drafter fits.
    """
    _check_prompt(target, prompt_ids)
    stopper, generator = _Stopper(target, cfg, len(prompt_ids)), _generator(cfg, target.device)
    vocab_map = drafter.to_target_ids(torch.arange(drafter.config.draft_vocab_size, device=target.device))
    no_drafts = torch.empty(0, dtype=torch.long, device=target.device)
    target.expect_rows(cfg.k + 1)
    cache, draft_cache = target.new_cache(), drafter.new_cache()
    start = target.clock()

    tokens, generated, reason, first, pending_aux = prefill(target, aux_layers, prompt_ids, cache, cfg, generator,
                                                            stopper, start)
    yield first
    pending_start, step = 0, 0  # pending_aux: target features not yet seen by the drafter

    while reason is None:
        if should_stop is not None and should_stop():
            yield cancelled_event(step + 1, generated, start, target.clock())
            return
        step += 1
        context = len(tokens) - 1  # positions the target has cached (and computed features for)
        # Never draft past the token budget or the context; k reaches 0 only on the final step.
        k = min(cfg.k, stopper.limit - len(generated) - 1, target.max_positions - len(tokens) - 1)

        t0 = target.clock()
        target.use_threads(1)  # a draft is a one-row product through small weights
        chain = _draft_chain(drafter, draft_cache, tokens, pending_aux, pending_start, k, cfg, vocab_map,
                             target.vocab_size, generator) if k > 0 else _Chain(no_drafts, [], [], [])
        t1 = target.clock()

        # Verify all k+1 positions in one target forward, then keep the accepted prefix.
        verify = target.forward(torch.cat([torch.tensor([tokens[-1]], device=target.device), chain.drafted]), cache,
                                aux_layers)
        if cfg.greedy:
            accepted, bonus = accept_greedy(chain.drafted, verify.logits)
            probs_of_drafts = ((torch.stack(chain.draft_probs).tolist() if chain.draft_probs else [])
                               if cfg.instrument else None)
        else:
            target_probs = probabilities(verify.logits, cfg.temperature, cfg.top_p)
            q_all = (torch.stack(chain.draft_probs) if k > 0
                     else torch.empty(0, target.vocab_size, device=target.device))
            accepted, bonus = accept_sampled(chain.drafted, q_all, target_probs, generator)
            probs_of_drafts = q_all[torch.arange(len(chain.drafted), device=q_all.device), chain.drafted].tolist()
        drafted = chain.drafted.tolist()
        cache.rollback(context + accepted + 1)
        pending_aux, pending_start = verify.aux[: accepted + 1], context
        emitted, reason = stopper.clip(generated, drafted[:accepted] + [bonus])
        generated += emitted
        tokens += emitted
        t2 = target.clock()

        yield StepEvent(
            step=step, drafted=drafted, accepted=accepted, emitted=emitted,
            draft_probs=probs_of_drafts,
            attention=[AttentionMass(*m) for m in torch.stack(chain.attention).tolist()] if chain.attention else None,
            hidden_rms=torch.stack(chain.hidden_rms).tolist() if chain.hidden_rms else None,
            draft_ms=(t1 - t0) * 1000, verify_ms=(t2 - t1) * 1000,
            total_tokens=len(generated), elapsed_ms=(t2 - start) * 1000,
            finished=reason is not None, finish_reason=reason,
            threads=verify.threads, others_running=verify.others_running,
        )
