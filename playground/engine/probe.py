"""The live speedup's baseline in our engine: plain decode steps timed at the position a run has reached."""

from __future__ import annotations

import torch

from .target import Target


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
