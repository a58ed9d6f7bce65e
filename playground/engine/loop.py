"""What the plain, chain and tree loops share: where a run stops, the sampler, the prompt check, the prefill step
and the events that open and cancel a run, the target features the drafter has not seen yet, attention masses, and
the speculative loop itself (`speculate`), which chains (decode.py) and trees (tree.py) run with their own drafting
and verification."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from .cache import TargetCache
from .config import GenerationConfig
from .guard import Guarded
from .sampling import probabilities, sample
from .target import Target, TargetOutput
from .trace import StepEvent


class Stopper:
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


def choose(logits: torch.Tensor, cfg: GenerationConfig, generator: torch.Generator | None) -> int:
    if cfg.greedy:
        return int(logits.argmax())
    return int(sample(probabilities(logits, cfg.temperature, cfg.top_p), generator))


def sampler(cfg: GenerationConfig, device: torch.device) -> torch.Generator | None:
    if cfg.greedy:
        return None
    generator = torch.Generator(device=device)
    generator.manual_seed(cfg.seed if cfg.seed is not None else torch.seed())
    return generator


def prefill(target: Target, aux_layers: list[int], prompt_ids: list[int], cfg: GenerationConfig,
            generator: torch.Generator | None, stopper: Stopper, start: float
            ) -> tuple[TargetCache, list[int], list[int], str | None, StepEvent, Pending]:
    """A speculative run's first step: target features for every prompt position, and the first token from the target
    alone; over the prompt's tail alone where a kept cache holds the rest (`Target.take_prefix`). Returns (the cache,
    prompt + that token, the emitted tokens, why the run ends if it does, the step's event, the features, all pending
    for the drafter)."""
    cache, tail, kept_aux = target.start_from(prompt_ids, aux_layers)
    out = target.forward(tail, cache, aux_layers, last_only=True)
    aux = torch.cat([kept_aux, out.aux]) if kept_aux is not None and aux_layers else out.aux
    tokens = list(prompt_ids) + [choose(out.logits[-1], cfg, generator)]
    generated, reason = stopper.clip([], tokens[-1:])
    event = prefill_event(generated, reason, start, target.clock(), out)
    return cache, tokens, generated, reason, event, Pending(aux, 0)


def prefill_event(generated: list[int], reason: str | None, start: float, now: float,
                  out: TargetOutput) -> StepEvent:
    """Step 0 of a speculative run: the prefill and the first token, nothing drafted."""
    return StepEvent(step=0, drafted=[], accepted=0, emitted=list(generated), verify_ms=(now - start) * 1000,
                     total_tokens=len(generated), elapsed_ms=(now - start) * 1000, finished=reason is not None,
                     finish_reason=reason, threads=out.threads, others_running=out.others_running,
                     cores_taken=out.cores_taken)


def cancelled_event(step: int, generated: list[int], start: float, now: float) -> StepEvent:
    """The step a stopped run ends with: nothing new, marked cancelled."""
    return StepEvent(step=step, drafted=[], accepted=0, emitted=[], total_tokens=len(generated),
                     elapsed_ms=(now - start) * 1000, finished=True, finish_reason="cancelled")


EMPTY_PROMPT = "the prompt is empty: give the model some text to answer"


def prompt_text_problem(prompt: str | None) -> str | None:
    """Why a prompt's text holds nothing to answer (nothing, or only spaces), or None: the one rule, for every entry
    point that takes text (the CLI, the Chat, the server's completions), before it is encoded."""
    return EMPTY_PROMPT if prompt is None or not prompt.strip() else None


def prompt_problem(prompt_tokens: int, max_positions: int) -> str | None:
    """Why a prompt of this many tokens cannot be answered, or None: the one wording, for every entry point (the
    server's 400 included, which keeps OpenAI's words "maximum context length" that clients look for)."""
    if prompt_tokens == 0:
        return EMPTY_PROMPT
    if prompt_tokens >= max_positions:
        return (f"the prompt has {prompt_tokens} tokens and the model's maximum context length is {max_positions}: "
                f"no room for an answer")
    return None


def check_prompt(target: Target, prompt_ids: list[int]) -> None:
    problem = prompt_problem(len(prompt_ids), target.max_positions)
    if problem:
        raise ValueError(problem)


@dataclass
class Pending:
    """Target features the drafter has not read yet: those of positions `start`.. (the context up to the last
    verification, and its accepted rows). A step's first drafter call reads them all, as EAGLE aligns them: the
    feature at position t beside the embedding of token t + 1."""

    aux: torch.Tensor | None  # [positions, 3 * hidden]; None where nothing reads them (weightless.py)
    start: int


@dataclass
class Verified:
    """What a step's verification came to: the tokens it proposes to emit (accepted drafts and the target's own),
    the features the drafter reads next, this kind of drafting's StepEvent fields, and the target forward."""

    proposed: list[int]
    pending: Pending
    fields: dict
    out: TargetOutput


class Speculator(Protocol):
    """One kind of drafting (a chain, a tree) as `speculate` runs it: draft after the tokens, then verify in one
    target forward and accept."""

    rows: int  # the most rows one verification holds, the last token included
    aux_layers: list[int]  # the target states its drafting reads (none where it reads the tokens alone)

    def draft(self, tokens: list[int], pending: Pending, budget: int) -> Any: ...

    def verify(self, drafts: Any, tokens: list[int], context: int, cache: TargetCache) -> Verified: ...


def speculate(target: Target, prompt_ids: list[int], cfg: GenerationConfig,
              speculator: Callable[[torch.Generator | None], Speculator],
              should_stop: Callable[[], bool] | None = None) -> Iterator[StepEvent]:
    """The speculative loop chains and trees share: the prefill, then per step draft (on one thread: small products),
    verify in one target forward, accept, emit. Drafting never goes past the token budget or the context: the
    budget reaches 0 only on the final step."""
    check_prompt(target, prompt_ids)
    stopper, generator = Stopper(target, cfg, len(prompt_ids)), sampler(cfg, target.device)
    drafting = speculator(generator)
    if cfg.guard:
        drafting = Guarded(drafting, target.clock)
    target.expect_rows(drafting.rows)
    start = target.clock()

    cache, tokens, generated, reason, first, pending = prefill(target, drafting.aux_layers, prompt_ids, cfg,
                                                               generator, stopper, start)
    yield first
    step = 0
    while reason is None:
        if should_stop is not None and should_stop():
            yield cancelled_event(step + 1, generated, start, target.clock())
            return
        step += 1
        context = len(tokens) - 1  # positions the target has cached (and computed features for)
        budget = min(stopper.limit - len(generated) - 1, target.max_positions - len(tokens) - 1)
        t0 = target.clock()
        target.use_threads(1)
        drafts = drafting.draft(tokens, pending, budget)
        t1 = target.clock()
        verified = drafting.verify(drafts, tokens, context, cache)
        pending = verified.pending
        emitted, reason = stopper.clip(generated, verified.proposed)
        generated += emitted
        tokens += emitted
        t2 = target.clock()
        yield StepEvent(step=step, emitted=emitted, draft_ms=(t1 - t0) * 1000, verify_ms=(t2 - t1) * 1000,
                        total_tokens=len(generated), elapsed_ms=(t2 - start) * 1000, finished=reason is not None,
                        finish_reason=reason, threads=verified.out.threads,
                        others_running=verified.out.others_running, cores_taken=verified.out.cores_taken,
                        **verified.fields)
