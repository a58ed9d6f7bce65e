"""Prompt lookup (n-gram drafting): the proposal is what followed the latest earlier occurrence of the context's newest
n tokens, n from the longest down to the shortest, in the prompt and the answer so far. Weightless: it reads only
the token ids, so it costs no model call and its proposals depend on the text alone."""

from __future__ import annotations

from playground.drafting import NGRAM_MAX, NGRAM_MIN


class PromptLookup:
    """One run's n-gram index, grown as the run's tokens grow (a run's tokens only ever grow)."""

    def __init__(self, shortest: int, longest: int) -> None:
        if not 1 <= shortest <= longest:
            raise ValueError(f"prompt lookup needs 1 <= shortest ({shortest}) <= longest ({longest})")
        self.shortest, self.longest = shortest, longest
        self.after: dict[tuple[int, ...], int] = {}  # an n-gram -> the position after its latest indexed occurrence
        self.indexed = 0  # the n-grams ending before this position are in `after`

    def propose(self, tokens: list[int], k: int) -> list[int]:
        """Up to k tokens that followed the latest earlier occurrence of the longest matching suffix of `tokens`;
        [] where no suffix of a matched length occurred before."""
        last = len(tokens) - 1  # the n-grams ending here are the query: indexed only on the next call
        self._index(tokens, last)
        for n in range(min(self.longest, len(tokens)), self.shortest - 1, -1):
            start = self.after.get(tuple(tokens[-n:]))
            if start is not None:
                return tokens[start : start + k]
        return []

    def _index(self, tokens: list[int], stop: int) -> None:
        for end in range(self.indexed, stop):  # the n-grams ending at `end`, inclusive
            for n in range(self.shortest, min(self.longest, end + 1) + 1):
                self.after[tuple(tokens[end + 1 - n : end + 1])] = end + 1
        self.indexed = max(self.indexed, stop)


def build_proposer(run) -> PromptLookup:
    """Prompt lookup with the run's settings (the registry's entry names this module); it keeps nothing between runs,
    so the session is not read."""
    return PromptLookup(int(run.cfg.setting(NGRAM_MIN.name)), int(run.cfg.setting(NGRAM_MAX.name)))


def build_speculator(run):
    from .weightless import speculator_for

    return speculator_for(build_proposer(run), run)
