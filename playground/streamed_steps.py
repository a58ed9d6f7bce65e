"""Streamed token-id deltas -> StepEvents, for backends that see only the tokens of each engine step (vLLM, remote).

vLLM streams one delta per engine step (stream_interval 1, consumer keeping up): after the prefill delta (one token,
no draft) each delta holds the accepted drafts plus the target's bonus token, so accepted = len(delta) - 1.
What such a backend cannot know is marked, never invented:

- the rejected draft tokens are not reported: `drafted` holds the accepted ids, then UNKNOWN_DRAFT (-1) up to k;
- attention, hidden RMS, draft probabilities and draft/verify timings are None;
- a delta longer than k + 1 spans several steps (the consumer fell behind and vLLM merged outputs): it becomes one
  event without a draft (`drafted == []`), so it does not enter the acceptance metrics, and is counted in
  `DeltaStepper.unresolved`;
- the last step is cut at EOS, a stop string or max_tokens, so its accepted count is a lower bound. The server's
  per-request metrics (`per_step_accepted`), where offered, are exact.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from playground.engine.trace import StepEvent

UNKNOWN_DRAFT = -1  # a draft position whose token the backend does not report (it was rejected)

MISSING_FIELDS = {
    "drafted": "the rejected draft tokens are not reported by vLLM; they show as -1",
    "draft_probs": "vLLM does not expose draft probabilities",
    "attention": "vLLM does not expose the drafter's attention weights",
    "hidden_rms": "vLLM does not expose the drafter's hidden states",
    "draft_ms": "vLLM times draft and verification together; only the step's arrival time is known",
    "verify_ms": "vLLM times draft and verification together; only the step's arrival time is known",
}


def finish_reason(reason: str | None, stop_reason: object = None) -> str | None:
    """vLLM / OpenAI finish reasons -> the engine's: 'stop' with no stop_reason is EOS."""
    if reason is None:
        return None
    if reason == "stop":
        return "stop" if isinstance(stop_reason, str) else "eos"
    return {"length": "length", "abort": "cancelled", "cancelled": "cancelled"}.get(reason, reason)


@dataclass
class DeltaStepper:
    """Turns each streamed delta of token ids into one StepEvent. `k` = 0 means plain decoding."""

    k: int
    clock: Callable[[], float] = time.perf_counter
    start: float = field(default=0.0)
    step: int = 0
    total_tokens: int = 0
    unresolved: int = 0
    seen_first: bool = False

    def __post_init__(self) -> None:
        if not self.start:
            self.start = self.clock()

    def feed(self, token_ids: list[int], reason: str | None = None, at: float | None = None) -> StepEvent | None:
        """One delta (and the engine's finish reason, when it ends the request) -> a StepEvent, or None if empty.
        `at`: when the delta arrived, on `clock` (default: now)."""
        ids = list(token_ids)
        if not ids and reason is None:
            return None
        drafted: list[int] = []
        accepted = 0
        if self.seen_first and self.k > 0 and ids:
            if len(ids) <= self.k + 1:
                accepted = len(ids) - 1
                drafted = ids[:accepted] + [UNKNOWN_DRAFT] * (self.k - accepted)
            else:
                self.unresolved += 1
        self.seen_first = self.seen_first or bool(ids)
        self.total_tokens += len(ids)
        at = self.clock() if at is None else at
        event = StepEvent(step=self.step, drafted=drafted, accepted=accepted, emitted=ids,
                          total_tokens=self.total_tokens, elapsed_ms=(at - self.start) * 1000,
                          finished=reason is not None, finish_reason=reason)
        self.step += 1
        return event
