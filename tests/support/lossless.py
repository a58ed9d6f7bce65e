"""Greedy output compared with plain decoding's: identical, or apart only after a float32 near-tie of the target."""

from __future__ import annotations

import warnings

import torch

from playground.engine import Target

NEAR_TIE = 1e-4  # top-2 logit gap below which float32 rounding may pick either token


def assert_same_or_near_tie(target: Target, prompt: list[int], got: list[int], want: list[int], what: str) -> bool:
    """True if identical. Otherwise the first difference must be a near-tie of the target; else fail."""
    if got == want:
        return True
    i = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), None)
    assert i is not None, f"{what}: one output is a strict prefix of the other ({len(got)} vs {len(want)} tokens)"
    with torch.no_grad():  # fresh full forward, no cache, over the common prefix
        logits = target.model(input_ids=torch.tensor([prompt + want[:i]])).logits[0, -1].float()
    top = logits.topk(2)
    gap = float(top.values[0] - top.values[1])
    assert gap < NEAR_TIE and {got[i], want[i]} <= set(top.indices.tolist()), (
        f"{what}: speculative output differs from plain decoding at generated position {i} "
        f"(speculative {got[i]}, plain {want[i]}), and it is not a float32 near-tie: top-2 logit gap {gap:.3g}, "
        f"top-2 ids {top.indices.tolist()}"
    )
    warnings.warn(f"{what}: greedy near-tie at generated position {i} (top-2 gap {gap:.2g}); outputs diverge after it",
                  stacklevel=2)
    return False
