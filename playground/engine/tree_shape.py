"""The shape of a draft tree (engine/tree.py drafts and verifies it); apart from tree.py so that GenerationConfig
(engine/config.py) can carry a shape."""

from __future__ import annotations

from dataclasses import dataclass

from playground.drafting import MAX_K

MAX_DEPTH = MAX_K  # a tree is as deep as a chain is long
MAX_TOPK = 16
MAX_NODES = 256


@dataclass(frozen=True)
class TreeShape:
    depth: int = 5  # drafter calls per step, and the longest branch
    topk: int = 4  # children per expanded node, and frontier nodes expanded per depth
    nodes: int = 16  # nodes verified per step (the root, the last emitted token, comes on top)

    @classmethod
    def k_deep(cls, k: int, nodes: int) -> TreeShape:
        """The tree the UI, its API and the bench draft where a chain would draft k: `nodes` nodes, k deep (so the
        charts by depth keep their meaning), the default children per node."""
        return cls(depth=k, nodes=nodes)

    def problem(self) -> str | None:
        for name, most in (("depth", MAX_DEPTH), ("topk", MAX_TOPK), ("nodes", MAX_NODES)):
            value = getattr(self, name)
            if not isinstance(value, int) or not 1 <= value <= most:
                return f"the tree's {name} must be a whole number from 1 to {most}, got {value!r}"
        return None

    @property
    def max_nodes(self) -> int:
        """Nodes a greedy step verifies at most: `nodes`, or every node drafted where fewer are (a sampled tree verifies
        its rank template's nodes: engine/tree.py)."""
        return min(self.nodes, self.topk + (self.depth - 1) * self.topk**2)
