"""Token choice and verification: greedy prefix matching and exact speculative rejection sampling."""

from __future__ import annotations

import torch


def probabilities(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """softmax(logits / T), restricted to the smallest top-p nucleus and renormalised. Works on [..., V]."""
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p >= 1.0:
        return probs
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    outside = sorted_probs.cumsum(-1) - sorted_probs >= top_p  # mass before this token already reaches top_p
    sorted_probs = sorted_probs.masked_fill(outside, 0.0)
    nucleus = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return nucleus / nucleus.sum(-1, keepdim=True)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.multinomial(probs, 1, generator=generator))


def accept_greedy(drafted: list[int], target_logits: torch.Tensor) -> tuple[int, int]:
    """Accept the longest prefix of `drafted` that equals the target's argmax; return (accepted, bonus)."""
    choices = target_logits.argmax(-1).tolist()  # k+1 target predictions
    n = 0
    while n < len(drafted) and drafted[n] == choices[n]:
        n += 1
    return n, choices[n]


def accept_sampled(drafted: list[int], draft_probs: torch.Tensor, target_probs: torch.Tensor,
                   generator: torch.Generator | None) -> tuple[int, int]:
    """Speculative rejection sampling (Leviathan et al. 2023; Chen et al. 2023).

    Draft i is kept with probability min(1, p_i(x) / q_i(x)); at the first rejection the replacement comes
    from normalise(max(0, p_i - q_i)); if all k are kept the bonus comes from p_k. The output tokens are
    then distributed exactly as the target's own samples. `draft_probs` is [k, V], `target_probs` [k+1, V].
    """
    for i, token in enumerate(drafted):
        p, q = float(target_probs[i, token]), float(draft_probs[i, token])
        u = float(torch.rand((), generator=generator, device=target_probs.device))  # the generator's device
        if u * q < p:  # u < p/q without dividing by zero
            continue
        residual = (target_probs[i] - draft_probs[i]).clamp_min(0.0)
        total = float(residual.sum())
        return i, sample(residual / total if total > 0 else target_probs[i], generator)
    return len(drafted), sample(target_probs[len(drafted)], generator)
