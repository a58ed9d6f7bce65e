"""Many answers at once on an int4 target: continuous batching for bulk generation (a drafter's training data).

Each active sequence keeps its own cache; a step multiplies every active sequence's next token in one forward
(`Int4Llama.forward_batch`: each row computed as that sequence's one-row step computes it, so a greedy answer is the
one plain decoding gives it alone). A finished sequence's place goes to the next job, whose prompt is read in one
forward of its own. Sampling is per job, from a generator seeded by the job, so a run repeats."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import torch

from .int4 import Int4Llama
from .sampling import probabilities


@dataclass
class Job:
    prompt: list[int]
    max_new_tokens: int
    stop_ids: frozenset[int]
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    seed: int = 0
    tag: object = None  # the caller's: handed back with the answer


@dataclass
class _Active:
    job: Job
    cache: object
    tokens: list[int] = field(default_factory=list)
    generator: torch.Generator | None = None


def _choose(logits: torch.Tensor, job: Job, generator: torch.Generator | None) -> int:
    if job.temperature <= 0:
        return int(logits.argmax())
    p = probabilities(logits, job.temperature, job.top_p)
    return int(torch.multinomial(p, 1, generator=generator))


def generate_batched(model: Int4Llama, jobs: Iterable[Job], batch: int, max_positions: int
                     ) -> Iterator[tuple[Job, list[int], str]]:
    """(job, answer tokens, why it ended: "stop", "length" or "context") for every job, as each finishes: the stop
    token is kept in the answer."""
    pending = iter(jobs)
    active: list[_Active] = []

    def start(job: Job) -> _Active | tuple[Job, list[int], str]:
        if len(job.prompt) >= max_positions or job.max_new_tokens < 1:
            return job, [], "context"
        generator = None
        if job.temperature > 0:
            generator = torch.Generator().manual_seed(job.seed)
        cache = model.new_cache(max_positions)
        logits, _ = model.forward(torch.tensor(job.prompt), cache, [], True)
        run = _Active(job, cache, [], generator)
        run.tokens.append(_choose(logits[-1], job, generator))
        return run

    def ended(run: _Active) -> str | None:
        if run.tokens[-1] in run.job.stop_ids:
            return "stop"
        if len(run.tokens) >= run.job.max_new_tokens:
            return "length"
        if run.cache.length + 1 >= max_positions:
            return "context"
        return None

    exhausted = False
    while active or not exhausted:
        while len(active) < batch and not exhausted:
            job = next(pending, None)
            if job is None:
                exhausted = True
                break
            run = start(job)
            if isinstance(run, tuple):
                yield run
            elif (why := ended(run)) is not None:
                yield run.job, run.tokens, why
            else:
                active.append(run)
        if not active:
            continue
        logits = model.forward_batch([run.tokens[-1] for run in active], [run.cache for run in active])
        still = []
        for run, row in zip(active, logits):
            run.tokens.append(_choose(row, run.job, run.generator))
            why = ended(run)
            if why is None:
                still.append(run)
            else:
                yield run.job, run.tokens, why
        active = still
