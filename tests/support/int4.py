"""What the int4 tests share: random prompt ids, and the check that chains and trees decode as plain decoding does."""

from __future__ import annotations

import torch

from playground.engine import GenerationConfig, Target, plain_generate, speculative_generate
from playground.engine.tree import tree_generate
from playground.engine.tree_shape import TreeShape


def ids(n: int, vocab: int, seed: int) -> list[int]:
    return torch.randint(8, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def assert_chains_and_trees_decode_plainly(target: Target, drafter, aux: list[int], seeds, ks, tree: TreeShape) -> None:
    """Chains of each k and `tree` give the target's own plain greedy tokens on a prompt per seed."""
    for seed, k in zip(seeds, ks):
        prompt = ids(24, target.vocab_size, seed)
        cfg = GenerationConfig(max_new_tokens=40, k=k)
        plain = [t for e in plain_generate(target, prompt, cfg) for t in e.emitted]
        chain = [t for e in speculative_generate(target, drafter, aux, prompt, cfg) for t in e.emitted]
        drafted = [t for e in tree_generate(target, drafter, aux, prompt, cfg, tree) for t in e.emitted]
        assert chain == plain and drafted == plain, (seed, k)
