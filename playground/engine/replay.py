"""Replay a finished greedy answer under any drafter, k or draft tree: the steps a live greedy run of that
configuration would have taken over the same text, without running it.

A greedy answer fixes what the target accepts: at every position its choice is the argmax of its logits after the
answer's prefix. One teacher-forced target pass over prompt + answer gives those choices and the target features
the drafter reads (`teacher_force`); `replay` then runs the real drafting code (`ChainDrafter`, `draft_tree`) step by
step, accepting as verification would — the longest run of drafts that equals the target's choices — and feeding the
drafter the features of the accepted positions, as the live loop does. So the step boundaries, the drafter's inputs
and the acceptance at every step are a live run's, up to floating-point rounding: the teacher-forced pass computes
the same features in one forward where a live run computes them k + 1 rows at a time, which can move a drafter's
argmax where two of its tokens tie to within rounding (tests/engine/test_replay.py measures it). On a target that
verifies row-exactly (bfloat16 or int4 where probed so) the pass reads the answer a verification at a time, so the
target's choices and features are exactly those plain decoding computed (`_read_through`).

A weightless method (prompt lookup, suffix decoding) proposes from the text alone, so `replay_weightless` replays it
exactly: its proposals at every step are a live run's, and so is what the target accepts of them.

Cost: one target forward over the text, then the drafter's own work per configuration; no verification forwards.
Sampled answers are not replayed: their acceptance depends on the random draws. For them `expected_first_acceptance`
gives the expectation of the first draft's acceptance at each position, Σ min(p, q).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from .config import GenerationConfig
from .decode import ChainDrafter
from .drafter import Eagle3Drafter
from .llama import MAX_EXACT_ROWS
from .loop import Pending
from .sampling import probabilities
from .target import Target, TargetOutput
from .trace import StepEvent
from .tree import draft_tree
from .tree_shape import TreeShape
from .weightless import proposer_for


@dataclass(frozen=True)
class Forced:
    """The target over prompt + answer, teacher-forced: its greedy choice after each position, and its features."""

    ids: list[int]  # prompt + answer
    prompt_len: int
    choices: list[int]  # choices[t]: the target's argmax after position t
    aux: torch.Tensor  # [len(ids), 3 * hidden]: the target features the drafter reads

    @property
    def answer(self) -> list[int]:
        return self.ids[self.prompt_len :]

    def choice(self, position: int) -> int:
        """The target's choice after `position`; -1 (no token) past the text."""
        return self.choices[position] if position < len(self.choices) else -1


def _read_through(target: Target, aux_layers: list[int], prompt_ids: list[int],
                  answer_ids: list[int]) -> tuple[list[int], TargetOutput]:
    """Prompt + answer through the target (logits and the drafter's features at every position): in one forward, or,
    on a target that verifies row-exactly (`FastLlama.row_exact`: bfloat16 or int4 where probed so), the prompt as a
    live run's prefill and then the answer in verifications of at most MAX_EXACT_ROWS rows, each row computed bit for
    bit as plain decoding computed it. One forward there rounds differently (its attention is one masked product),
    and on SmolLM2's int4 target 31 of 48 greedy answers then read a near-tie the other way somewhere."""
    ids = list(prompt_ids) + list(answer_ids)
    if len(ids) > target.max_positions:
        raise ValueError(f"prompt and answer have {len(ids)} tokens; the target's context is {target.max_positions}")
    cache = target.new_cache()
    if target.fast is None or not target.fast.row_exact:
        target.expect_rows(len(ids))
        return ids, target.forward(ids, cache, aux_layers)
    parts = [target.forward(list(prompt_ids), cache, aux_layers)]
    parts += [target.forward(list(answer_ids[i : i + MAX_EXACT_ROWS]), cache, aux_layers)
              for i in range(0, len(answer_ids), MAX_EXACT_ROWS)]
    return ids, replace(parts[0], logits=torch.cat([p.logits for p in parts]),
                        aux=torch.cat([p.aux for p in parts]) if aux_layers else None)


@torch.inference_mode()
def teacher_force(target: Target, aux_layers: list[int], prompt_ids: list[int], answer_ids: list[int]) -> Forced:
    """One target forward over prompt + answer. The answer's tokens must be the target's greedy ones: a ValueError
    names the first position where they are not (a sampled answer, another target, or a float near-tie)."""
    if not prompt_ids or not answer_ids:
        raise ValueError("nothing to replay: the prompt and the answer must both have tokens")
    ids, out = _read_through(target, aux_layers, prompt_ids, answer_ids)
    choices = out.logits.argmax(-1).tolist()
    prompt_len = len(prompt_ids)
    differ = next((i for i, token in enumerate(answer_ids) if choices[prompt_len - 1 + i] != token), None)
    if differ is not None:
        raise ValueError(f"the answer is not this target's greedy output: at answer token {differ} the target "
                         f"chooses {choices[prompt_len - 1 + differ]}, the answer has {answer_ids[differ]}")
    return Forced(ids, prompt_len, choices, out.aux)


def forced_from_run(prompt_ids: list[int], answer_ids: list[int], features: list[torch.Tensor]) -> Forced:
    """A plain greedy run's own pass as a replay reads it, in place of `teacher_force`'s second one: its features at
    every position it read (plain_generate's `features`) and its choices, which are the answer (after its last token
    none is known)."""
    return Forced(list(prompt_ids) + list(answer_ids), len(prompt_ids),
                  [-1] * (len(prompt_ids) - 1) + list(answer_ids) + [-1], torch.cat(features))


Propose = Callable[[list[int], int, int], tuple[list[int], int, dict]]


def _replay_steps(forced: Forced, target: Target, limit: int, propose: Propose) -> list[StepEvent]:
    """The loop every replay shares: step by step over the forced answer, `propose(tokens, context, budget)` drafts
    within the live loop's budget and says how many of its drafts the target's choices accept (and the step's own
    fields); the step emits those and the target's next choice, as a live greedy step would."""
    answer = forced.answer
    tokens = forced.ids[: forced.prompt_len] + answer[:1]  # the prefill's token
    events = [StepEvent(step=0, drafted=[], accepted=0, emitted=answer[:1], total_tokens=1,
                        finished=len(answer) == 1)]
    while len(tokens) - forced.prompt_len < len(answer):
        generated, context = len(tokens) - forced.prompt_len, len(tokens) - 1
        budget = min(limit - generated - 1, target.max_positions - len(tokens) - 1)
        drafted, accepted, fields = propose(tokens, context, budget)
        emitted = answer[generated : generated + accepted + 1]  # the live stopper ends where the answer ends
        tokens += emitted
        done = len(tokens) - forced.prompt_len >= len(answer)
        events.append(StepEvent(step=len(events), drafted=drafted, accepted=accepted, emitted=emitted,
                                total_tokens=len(tokens) - forced.prompt_len, finished=done, **fields))
    return events


def _chain_accepted(forced: Forced, drafted: list[int], context: int) -> int:
    """How many of a chain's drafts the target's choices accept: the longest prefix that equals them."""
    return next((i for i, token in enumerate(drafted) if token != forced.choice(context + i)), len(drafted))


def _replay_limit(forced: Forced, target: Target, max_new_tokens: int | None) -> int:
    return min(max_new_tokens or len(forced.answer), target.max_positions - forced.prompt_len)


@torch.inference_mode()
def replay(forced: Forced, target: Target, drafter: Eagle3Drafter, k: int, tree: TreeShape | None = None,
           max_new_tokens: int | None = None, acceptance_only: bool = False) -> list[StepEvent]:
    """The step events (drafted, accepted, emitted; no timings) a live greedy run of this drafter would produce over
    the forced answer: chains of k, or trees of `tree` (its own depth; k is then unused). Drafting stops
    where the live loop's budget does: `max_new_tokens` (the answer's length where None) and the target's context.
    `acceptance_only`: a chain ends after its first rejected draft (its steps and acceptance by position are the
    same; its drafted tokens and so its draft acceptance rate are not), for a reader of acceptance alone (k auto)."""
    limit = _replay_limit(forced, target, max_new_tokens)
    cfg = GenerationConfig(max_new_tokens=max(limit, 1), k=k, instrument=False)
    chains = ChainDrafter(drafter, cfg, target, None)
    unread = [0]  # the first position whose target features the drafter has not read yet

    def propose(tokens: list[int], context: int, budget: int) -> tuple[list[int], int, dict]:
        pending = Pending(forced.aux[unread[0] : context], unread[0])  # the features of the last accepted rows
        unread[0] = context
        if tree is None:
            agrees = (lambda depth, token: token == forced.choice(context + depth)) if acceptance_only else None
            drafted = chains.draft(tokens, pending, min(k, budget), agrees).drafted.tolist()
            return drafted, _chain_accepted(forced, drafted, context), {}
        depth = min(tree.depth, budget)
        drafts = draft_tree(drafter, chains.cache, tokens, pending, replace(tree, depth=depth),
                            chains.vocab_map) if depth > 0 else None
        if drafts is None or not len(drafts):
            return [], 0, {}
        path = drafts.accept([forced.choice(context)] + [forced.choice(context + d) for d in drafts.depths])
        return [drafts.tokens[i] for i in drafts.branch(path)], len(path), drafts.step_fields(path)

    return _replay_steps(forced, target, limit, propose)


@torch.inference_mode()
def expected_first_acceptance(target: Target, aux_layers: list[int], drafter: Eagle3Drafter, prompt_ids: list[int],
                              answer_ids: list[int], temperature: float, top_p: float = 1.0) -> list[float]:
    """A sampled answer's expected first-draft acceptance at each of its positions after the first: the chance
    that a step starting there has its first draft accepted, Σ_x min(p(x), q(x)) — p the target's sampling
    distribution after the prefix, q the drafter's for its first draft, both at the answer's temperature and top-p
    (speculative sampling keeps a draft x with probability min(1, p(x) / q(x))). An expectation over the draws, not
    a replay: which steps a live run takes depends on them, and deeper drafts follow the drafter's own samples."""
    if temperature <= 0:
        raise ValueError("a greedy answer replays exactly (replay); this is for sampled ones")
    if not prompt_ids or len(answer_ids) < 2:
        raise ValueError("nothing to measure: the answer needs at least two tokens after a prompt")
    ids, out = _read_through(target, aux_layers, prompt_ids, answer_ids)
    cfg = GenerationConfig(max_new_tokens=len(answer_ids), k=1, temperature=temperature, top_p=top_p,
                           instrument=False)
    chains = ChainDrafter(drafter, cfg, target, torch.Generator(device=target.device).manual_seed(0))
    prompt_len = len(prompt_ids)
    tokens = ids[: prompt_len + 1]  # after the prefill's token
    pending = Pending(out.aux[:prompt_len], 0)
    expected = []
    for token in answer_ids[1:]:
        context = len(tokens) - 1
        q = chains.draft(tokens, pending, 1).draft_probs[0]
        p = probabilities(out.logits[context].float(), temperature, top_p)
        expected.append(float(torch.minimum(p, q).sum()))
        tokens.append(token)
        pending = Pending(out.aux[context : context + 1], context)
    return expected


def replay_weightless(forced: Forced, target: Target, method: str, k: int,
                      method_settings: tuple[tuple[str, int | float], ...] = (),
                      max_new_tokens: int | None = None) -> list[StepEvent]:
    """The step events a live greedy run of a weightless method ("ngram", "suffix", with these settings) would produce
    over the forced answer, chains of up to k, drafting within the live loop's budget as `replay` does. Suffix
    decoding replays with a fresh session cache, as the local backend runs it."""
    limit = _replay_limit(forced, target, max_new_tokens)
    proposer = proposer_for(method, GenerationConfig(max_new_tokens=max(limit, 1), k=k, instrument=False,
                                                     method_settings=method_settings), target=target)

    def propose(tokens: list[int], context: int, budget: int) -> tuple[list[int], int, dict]:
        budget = min(k, budget)
        drafted = proposer.propose(tokens, budget)[:budget] if budget > 0 else []
        return drafted, _chain_accepted(forced, drafted, context), {}

    return _replay_steps(forced, target, limit, propose)
