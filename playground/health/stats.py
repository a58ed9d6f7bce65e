"""How far a run's depth-1 acceptance may stray from its drafter's fingerprint: answers differ from one another far
more than coin flips would (a list accepts more than a proof), so a run's accepted drafts are held against a
beta-binomial — the spread of the fingerprint's answers, plus the luck of a run this long — not a binomial.

The check looks at the run after 16, 32, 64, … drafting steps (`LOOKS`) and at its last step, each look at
`ALPHA_PER_LOOK` on either side: at most 10 looks in a 4,096-step answer, so a run that fits its fingerprint is
flagged with a chance of at most 10 × 2 × 0.0005 = 1 % where the model holds (docs/health.md measures it on answers
the fingerprint never saw).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

LOOKS = tuple(16 * 2**i for i in range(12))  # drafting steps at which a run is judged
ALPHA_PER_LOOK = 0.0005  # each side, each look
RANGE_QUANTILES = (ALPHA_PER_LOOK, 1 - ALPHA_PER_LOOK)  # the range shown: outside it at a look is a flag
MIN_CORRELATION = 0.02  # the least spread between answers assumed, however alike the fingerprint's answers were


@dataclass(frozen=True)
class BetaBinomial:
    """Answers' acceptance rates spread as Beta(a, b); a run of n steps then accepts BetaBinomial(n, a, b)."""

    a: float
    b: float

    @property
    def mean(self) -> float:
        return self.a / (self.a + self.b)

    @classmethod
    def fit(cls, counts: list[tuple[int, int]]) -> BetaBinomial:
        """Method of moments from (steps, accepted) of each answer: the pooled rate, and the correlation ρ that makes
        the answers' spread (Σ n_i (p_i − p)²) what a beta-binomial expects, μ(1 − μ) Σ (1 + ρ (n_i − 1))."""
        counts = [(n, x) for n, x in counts if n > 0]
        if len(counts) < 2:
            raise ValueError("a fingerprint needs at least two answers with drafting steps")
        steps = sum(n for n, _ in counts)
        mean = min(max(sum(x for _, x in counts) / steps, 1e-3), 1 - 1e-3)
        spread = sum(n * (x / n - mean) ** 2 for n, x in counts) / (mean * (1 - mean))
        extra = sum(n - 1 for n, _ in counts)
        rho = (spread - len(counts)) / extra if extra else 1.0
        rho = min(max(rho, MIN_CORRELATION), 0.9)
        total = 1 / rho - 1
        return cls(mean * total, (1 - mean) * total)

    def pmf(self, n: int) -> list[float]:
        """P(X = x) for x = 0..n."""
        a, b = self.a, self.b
        log_norm = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) - math.lgamma(n + a + b)
        log_choose = math.lgamma(n + 1)
        return [math.exp(log_choose - math.lgamma(x + 1) - math.lgamma(n - x + 1) + math.lgamma(x + a)
                         + math.lgamma(n - x + b) + log_norm) for x in range(n + 1)]

    def tails(self, n: int, x: int) -> tuple[float, float]:
        """(P(X ≤ x), P(X ≥ x)) for a run of n steps."""
        return _tails(self.pmf(n), x)

    def sum_pmf(self, steps: list[int]) -> list[float]:
        """P(X_1 + … + X_m = x) for independent answers of these steps (each its own rate from the spread)."""
        total = np.ones(1)
        for n in steps:
            total = np.convolve(total, self.pmf(n))
        return total.tolist()

    def sum_tails(self, steps: list[int], x: int) -> tuple[float, float]:
        """(P(X ≤ x), P(X ≥ x)) for the accepted drafts summed over answers of these steps."""
        return _tails(self.sum_pmf(steps), x)

    def sum_rate_range(self, steps: list[int]) -> tuple[float, float]:
        """The central RANGE_QUANTILES of the pooled rate ΣX / Σn over answers of these steps."""
        return _central(self.sum_pmf(steps))

    def rate_range(self, n: int) -> tuple[float, float]:
        """The central RANGE_QUANTILES of X / n: where a run of n steps that fits lands."""
        return _central(self.pmf(n))


def _tails(pmf: list[float], x: int) -> tuple[float, float]:
    """(P(X ≤ x), P(X ≥ x)) of a distribution over 0..n."""
    return min(1.0, sum(pmf[: x + 1])), min(1.0, sum(pmf[x:]))


def _central(pmf: list[float]) -> tuple[float, float]:
    """The central RANGE_QUANTILES of x / n for a distribution over x = 0..n."""
    n = len(pmf) - 1
    low_q, high_q = RANGE_QUANTILES
    cumulative, low, high = 0.0, None, n
    for x, p in enumerate(pmf):
        cumulative += p
        if low is None and cumulative >= low_q:
            low = x
        if cumulative >= high_q:
            high = x
            break
    return (low or 0) / n, high / n
