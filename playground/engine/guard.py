"""Drafting that pays on this answer, or plain steps: a speculator watched by its own clock.

k auto chooses a method and k from a prediction (acceptance priced at measured step costs); the prediction can be
wrong for this text, and a neighbour can change what a step costs after the costs were measured. `Guarded` checks the
choice against the answer itself, in the loop that decodes it: it times plain steps (nothing drafted: one row
verified) and drafting steps side by side, and pauses drafting where it has measured clearly slower per token. A step
that drafts nothing is a plain step, so the answer is the same tokens whichever steps draft (greedy); which steps
draft depends on the clock, so `GenerationConfig.guard` is set for greedy answers alone, where a seed's answer could not
change with it.

The schedule: PLAIN_STEPS plain steps, then drafting, judged once it has run FIRST_JUDGEMENT steps and every WINDOW
steps after, over its latest JUDGED steps (their median step time over their mean tokens a step, against the median
of the latest plain steps). A step's tokens vary from 1 to k + 1, so a few dozen steps tell a large loss from noise
and not a small one: drafting pauses only where its token costs more than LOSS times a plain step (on a Zen 4, a
guard pausing at any measured loss, judged over 16 steps, took a k = 2 chain that paid 1.08x on chat down to 1.00x).
Drafting that loses pauses for a stretch of plain steps, then is tried again; each loss in a row doubles the
stretch (FIRST_PAUSE up to LONGEST_PAUSE), so trying again costs a bounded share of a long answer where drafting
never pays. The features the plain steps leave wait for the next draft (decode.ChainDrafter), which reads them in
one call. Measured (Zen 4, chat, interleaved): a k = 8 chain 0.68x plain decoding, 0.79x guarded; k = 2 1.04x and
1.05x."""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the loop builds a Guarded around its speculator
    from .cache import TargetCache
    from .loop import Pending, Speculator, Verified

PLAIN_STEPS = 4  # plain steps timed before drafting starts
FIRST_JUDGEMENT = 16  # drafting steps before drafting is first judged (after it starts or resumes)
WINDOW = 8  # drafting steps between judgements after that
JUDGED = 32  # the latest drafting steps (since drafting last resumed) a judgement reads
LOSS = 1.10  # drafting pauses where a token it emits costs more than this many plain steps' tokens
FIRST_PAUSE = 16  # plain steps after drafting first measured slower than them
LONGEST_PAUSE = 256
PLAIN_KEPT = 16  # the latest plain steps the judgement reads


class Guarded:
    """`inner` drafting only while it pays (the module's docstring); `clock` in seconds (the target's)."""

    def __init__(self, inner: Speculator, clock: Callable[[], float]) -> None:
        self.inner, self.clock = inner, clock
        self.rows, self.aux_layers = inner.rows, inner.aux_layers
        self.plain_ms: deque[float] = deque(maxlen=PLAIN_KEPT)
        self.drafting: deque[tuple[float, int]] = deque(maxlen=JUDGED)  # (ms, tokens) of the latest drafting steps
        self.unjudged = 0
        self.plain_left, self.pause = PLAIN_STEPS, FIRST_PAUSE
        self.judgements: list[bool] = []  # whether drafting paid, each time it was judged (read by tests and traces)
        self._started = 0.0

    @property
    def drafts_now(self) -> bool:
        return self.plain_left == 0

    def draft(self, tokens: list[int], pending: Pending, budget: int) -> Any:
        self._started = self.clock()
        return self.inner.draft(tokens, pending, budget if self.drafts_now else 0)

    def verify(self, drafts: Any, tokens: list[int], context: int, cache: TargetCache) -> Verified:
        verified = self.inner.verify(drafts, tokens, context, cache)
        ms = (self.clock() - self._started) * 1000
        if not self.drafts_now:
            self.plain_ms.append(ms)
            self.plain_left -= 1
        else:
            self.drafting.append((ms, len(verified.proposed)))
            self.unjudged += 1
            if self.unjudged >= WINDOW and len(self.drafting) >= FIRST_JUDGEMENT:
                self._judge()
        return verified

    def _judge(self) -> None:
        ms_per_token = statistics.median(ms for ms, _ in self.drafting) / statistics.fmean(n for _, n in self.drafting)
        pays = ms_per_token <= LOSS * statistics.median(self.plain_ms)
        self.judgements.append(pays)
        self.unjudged = 0
        if pays:
            self.pause = FIRST_PAUSE
        else:
            self.plain_left, self.pause = self.pause, min(self.pause * 2, LONGEST_PAUSE)
            self.drafting.clear()
