"""Token choice and verification: greedy prefix matching and exact speculative rejection sampling, for chains and
(recursively over siblings) for draft trees."""

from __future__ import annotations

from collections.abc import Callable

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


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token id drawn from `probs` [V], as a 0-dim tensor (no host sync)."""
    return torch.multinomial(probs, 1, generator=generator)[0]


def accept_greedy(drafted: torch.Tensor, target_logits: torch.Tensor) -> tuple[int, int]:
    """Accept the longest prefix of `drafted` [k] that equals the target's argmax; return (accepted, bonus).

    Decided with tensor ops; the one host sync is the final `tolist()`."""
    choices = target_logits.argmax(-1)  # k+1 target predictions
    k = drafted.numel()
    accepted = (drafted == choices[:k]).cumprod(0).sum() if k else choices.new_zeros(())
    n, bonus = torch.stack([accepted, choices[accepted]]).tolist()
    return n, bonus


def accept_sampled(drafted: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor,
                   generator: torch.Generator | None) -> tuple[int, int]:
    """Speculative rejection sampling (Leviathan et al. 2023; Chen et al. 2023).

    Draft i is kept with probability min(1, p_i(x) / q_i(x)); at the first rejection the replacement comes
    from normalise(max(0, p_i - q_i)); if all k are kept the bonus comes from p_k. The output tokens are
    then distributed exactly as the target's own samples. `draft_probs` is [k, V], `target_probs` [k+1, V].
    All k uniforms are drawn at once (those after the first rejection go unused, which changes nothing).
    """
    k = drafted.numel()
    rows = torch.arange(k, device=target_probs.device)
    p, q = target_probs[rows, drafted], draft_probs[rows, drafted]
    u = torch.rand(k, generator=generator, device=target_probs.device, dtype=p.dtype)  # the generator's device
    accepted = int((u * q < p).cumprod(0).sum()) if k else 0  # u < p/q without dividing by zero
    if accepted == k:
        return k, int(sample(target_probs[k], generator))
    return accepted, int(sample(residual(target_probs[accepted], draft_probs[accepted]), generator))


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """normalise(max(0, p - q)): what a rejected draft is replaced from (p itself where p - q has no positive mass,
    i.e. p == q, where no rejection can happen)."""
    rest = (p - q).clamp_min(0.0)
    total = rest.sum()
    return torch.where(total > 0, rest / total, p)


def sample_without_replacement(probs: torch.Tensor, n: int, generator: torch.Generator | None) -> list[int]:
    """Up to n distinct token ids of `probs` [V] in the order sequential sampling without replacement draws them (the
    Gumbel-top-k trick); fewer where fewer tokens have probability above zero."""
    uniform = torch.rand(probs.shape, generator=generator, device=probs.device, dtype=torch.float64)
    keys = probs.double().log() - (-uniform.clamp_min(1e-300).log()).log()  # log p + Gumbel noise
    top = keys.topk(min(n, probs.numel()))
    return [i for i, key in zip(top.indices.tolist(), top.values.tolist()) if key != float("-inf")]


def reject_sibling(p: torch.Tensor, q: torch.Tensor, token: int) -> tuple[torch.Tensor, torch.Tensor]:
    """After a sibling draft `token` was rejected: the target's residual normalise(max(0, p - q)), which gives `token`
    no mass, and the proposal the next sibling was drawn from, q without `token`, renormalised."""
    p = residual(p, q)
    q = q.clone()
    q[token] = 0.0
    left = q.sum()
    return p, torch.where(left > 0, q / left.clamp_min(1e-30), q)


def accept_point_mass_tree(children: Callable[[int], list[int]], tokens: list[int], target_probs: torch.Tensor,
                           generator: torch.Generator | None) -> tuple[list[int], int]:
    """Rejection sampling down a tree of point-mass proposals (a weightless method's: each node proposed for sure,
    q = 1 at its token). At a node, its children are tried in order: child x is kept with probability p(x) over the
    mass p has left (p being the target's distribution there, `target_probs[node + 1]`); a rejection takes x out of
    p. A kept child continues the walk; where none is kept, the bonus is drawn from what is left of p. Together that
    draws one token from p at every node — the target's own sample — and keeps it where a child proposed it.
    Returns (the kept nodes, shallowest first; the bonus token)."""
    path, node = [], -1
    while True:
        p = target_probs[node + 1].clone()
        for child in children(node):
            x = tokens[child]
            draw = float(torch.rand((), generator=generator, device=p.device, dtype=p.dtype))
            if draw * float(p.sum()) < float(p[x]):
                path.append(child)
                node = child
                break
            p[x] = 0
        else:
            return path, int(sample(p, generator))


def accept_sampled_tree(children: Callable[[int], list[int]], tokens: list[int], proposals: dict[int, torch.Tensor],
                        target_probs: torch.Tensor, generator: torch.Generator | None) -> tuple[list[int], int]:
    """Recursive rejection sampling down a draft tree (as SpecInfer verifies several drafts, in the without-replacement
    form Sequoia uses).

    From the root (-1), a node's children are tried in the order they were drawn from its proposal
    `proposals[node]` (without replacement): child x is kept with probability min(1, p(x) / q(x)), p being the
    target's distribution there (`target_probs[node + 1]`); a rejection turns p into the residual and q into q
    without x (`reject_sibling`), and the next child is tried. A kept child continues the walk; where no child is
    kept, the bonus is drawn from what p has become. Each step is one speculative sampling of p with a proposal its
    draft was truly drawn from, so the output is distributed as the target's own samples. Returns (the kept nodes,
    shallowest first; the bonus token)."""
    path, node = [], -1
    while True:
        p, q = target_probs[node + 1], proposals.get(node)
        for child in children(node):
            x = tokens[child]
            if float(torch.rand((), generator=generator, device=p.device, dtype=p.dtype)) * float(q[x]) < float(p[x]):
                path.append(child)
                node = child
                break
            p, q = reject_sibling(p, q, x)
        else:
            return path, int(sample(p, generator))
