"""EAGLE-2-style dynamic draft trees: draft a tree of candidate continuations, verify all of it in one target forward.

Drafting: every node scores the sum of the drafter's log-probabilities along its branch. Depth 1 is the drafter's
top-`topk` tokens after the last emitted token (the root); at each further depth the `topk` best-scored nodes just
made (the frontier) go through the drafter together, in one call, each attending to the context and to its own
branch only (a tree mask over the drafter's cache), and each proposes its top-`topk` children. Of all nodes made, the
`nodes` best-scored are kept (EAGLE-2's reranking): a child never scores above its parent, so they form a tree.

Verification: the root and the kept nodes go through the target in one forward, each node at position
context + depth and seeing the context and its ancestors. The accepted path descends from the root while a child
equals the target's greedy choice at its parent; the target's choice at the path's end is the bonus token. The target
cache keeps the path's entries, moved into place. The drafter's cache is cut back to the context and re-fed the
target's features of the path at the next step, as for chains, so no drafter entry of the tree survives.

Greedy only: sampling over a tree needs recursive rejection over siblings, which is not built.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import torch

from .cache import DrafterCache
from .decode import GenerationConfig, _check_prompt, _Stopper, cancelled_event, prefill_event
from .drafter import Eagle3Drafter
from .target import Target
from .trace import StepEvent
from .tree_shape import TreeShape, tree_problem


@dataclass
class DraftTree:
    """Kept nodes in depth order (a parent before its children)."""

    tokens: list[int]
    parents: list[int]  # index of the parent in `tokens`; -1 = the root
    depths: list[int]  # 1 = a child of the root
    probs: list[float]  # the drafter's probability of the node given its parent
    scores: list[float]  # summed log-probabilities of the branch

    def __len__(self) -> int:
        return len(self.tokens)

    def sees(self, device: torch.device) -> torch.Tensor:
        """[n + 1, n + 1] bool over the root (row/column 0) and the nodes (i + 1): what each attends to among them —
        the root, its ancestors and itself."""
        sees = torch.zeros(len(self) + 1, len(self) + 1, dtype=torch.bool)
        sees[0, 0] = True
        for i, parent in enumerate(self.parents):
            sees[i + 1] = sees[parent + 1]
            sees[i + 1, i + 1] = True
        return sees.to(device)

    def positions(self, context: int, device: torch.device) -> torch.Tensor:
        """Target positions of the root (the context's length) and of the nodes (that plus their depth)."""
        return torch.tensor([context] + [context + d for d in self.depths], device=device)

    def children(self, node: int) -> list[int]:
        return [i for i, parent in enumerate(self.parents) if parent == node]

    def accept(self, choices: list[int]) -> list[int]:
        """The accepted path (node indices, shallowest first), for the target's greedy choice after the root
        (choices[0]) and after each node i (choices[i + 1])."""
        path, node = [], -1
        while True:
            child = next((i for i in self.children(node) if self.tokens[i] == choices[node + 1]), None)
            if child is None:
                return path
            path.append(child)
            node = child

    def branch(self, path: list[int]) -> list[int]:
        """The branch through `path`: the path, then the best-scored child at each further depth."""
        branch, node = list(path), path[-1] if path else -1
        while children := self.children(node):
            node = max(children, key=self.scores.__getitem__)
            branch.append(node)
        return branch


@dataclass
class _Node:
    token: int
    parent: int  # index among all nodes drafted; -1 = the root
    depth: int
    logprob: float
    score: float
    row: int = -1  # the drafter cache row it was fed at; frontier nodes only


def _expand(nodes: list[_Node], frontier: list[int], logits: torch.Tensor, topk: int, depth: int,
            vocab_map: torch.Tensor) -> list[int]:
    """Add the top-`topk` children of each frontier node (logits row by row); return their indices."""
    top = torch.log_softmax(logits.float(), dim=-1).topk(topk, dim=-1)
    made = []
    for parent, logprobs, tokens in zip(frontier, top.values.tolist(), vocab_map[top.indices].tolist()):
        base = nodes[parent].score if parent >= 0 else 0.0
        for logprob, token in zip(logprobs, tokens):
            nodes.append(_Node(token, parent, depth, logprob, base + logprob))
            made.append(len(nodes) - 1)
    return made


def _draft_mask(nodes: list[_Node], frontier: list[int], context: int, start: int) -> torch.Tensor:
    """[frontier, start + frontier] bool over the drafter cache: the context, each node's ancestors, itself."""
    mask = torch.zeros(len(frontier), start + len(frontier), dtype=torch.bool)
    mask[:, :context] = True
    for row, index in enumerate(frontier):
        while index >= 0:
            mask[row, nodes[index].row] = True
            index = nodes[index].parent
    return mask


def _keep(nodes: list[_Node], n: int) -> DraftTree:
    """The n best-scored nodes, in depth order. Ties go to the shallower node, so a parent, never scored below its
    child, is always kept before it."""
    best = sorted(range(len(nodes)), key=lambda i: (-nodes[i].score, nodes[i].depth))[:n]
    best.sort(key=lambda i: nodes[i].depth)
    index = {old: new for new, old in enumerate(best)}
    kept = [nodes[i] for i in best]
    return DraftTree(tokens=[node.token for node in kept], parents=[index.get(node.parent, -1) for node in kept],
                     depths=[node.depth for node in kept], probs=[math.exp(node.logprob) for node in kept],
                     scores=[node.score for node in kept])


@torch.inference_mode()
def draft_tree(drafter: Eagle3Drafter, draft_cache: DrafterCache, tokens: list[int], pending_aux: torch.Tensor,
               pending_start: int, shape: TreeShape, vocab_map: torch.Tensor) -> DraftTree:
    """Draft a tree of `shape` after `tokens`; the first call feeds the pending target features, as a chain's does."""
    device = pending_aux.device
    context = len(tokens) - 1
    draft_cache.rollback(pending_start)
    hidden = drafter.project(pending_aux.to(drafter.fc.weight.dtype))[None]
    ids = torch.tensor([tokens[pending_start + 1 :]], device=device)
    out = drafter(ids, hidden, torch.arange(pending_start, context, device=device), draft_cache)
    nodes: list[_Node] = []
    frontier, logits, feedback = [-1], out.logits[0, -1:], out.feedback[0, -1:]
    for depth in range(1, shape.depth + 1):
        made = _expand(nodes, frontier, logits, shape.topk, depth, vocab_map)
        if depth == shape.depth:
            break
        fed_row = {node: row for row, node in enumerate(frontier)}
        frontier = sorted(made, key=lambda i: -nodes[i].score)[: shape.topk]
        start = draft_cache.length
        for row, index in enumerate(frontier):
            nodes[index].row = start + row
        hidden = feedback[[fed_row[nodes[i].parent] for i in frontier]][None]
        ids = torch.tensor([[nodes[i].token for i in frontier]], device=device)
        positions = torch.full((len(frontier),), context + depth - 1, device=device)
        out = drafter(ids, hidden, positions, draft_cache, mask=_draft_mask(nodes, frontier, context, start).to(device))
        logits, feedback = out.logits[0], out.feedback[0]
    return _keep(nodes, shape.nodes)


NO_TREE = DraftTree([], [], [], [], [])


def tree_generate(target: Target, drafter: Eagle3Drafter, aux_layers: list[int], prompt_ids: list[int],
                  cfg: GenerationConfig, tree: TreeShape, should_stop: Callable[[], bool] | None = None
                  ) -> Iterator[StepEvent]:
    """Greedy speculative decoding with a draft tree per step; output token-identical to `plain_generate`.

    `drafted` in each StepEvent is the tree's branch through the accepted path (`DraftTree.branch`), so `accepted`
    and acceptance length count tokens per step as for chains; the whole tree rides in the `tree_*` fields."""
    cfg.validate()
    problem = tree_problem(cfg, tree)
    if problem:
        raise ValueError(problem)
    _check_prompt(target, prompt_ids)
    stopper, device = _Stopper(target, cfg, len(prompt_ids)), target.device
    vocab_map = drafter.to_target_ids(torch.arange(drafter.config.draft_vocab_size, device=device))
    target.expect_rows(tree.max_nodes + 1)
    cache, draft_cache = target.new_cache(), drafter.new_cache()
    start = target.clock()

    prefill = target.forward(prompt_ids, cache, aux_layers, last_only=True)
    tokens = list(prompt_ids) + [int(prefill.logits[-1].argmax())]
    generated, reason = stopper.clip([], tokens[-1:])
    yield prefill_event(generated, reason, start, target.clock())
    pending_aux, pending_start, step = prefill.aux, 0, 0

    while reason is None:
        if should_stop is not None and should_stop():
            yield cancelled_event(step + 1, generated, start, target.clock())
            return
        step += 1
        context = len(tokens) - 1
        # Never draft past the token budget or the context; depth reaches 0 only on the final step.
        depth = min(tree.depth, stopper.limit - len(generated) - 1, target.max_positions - len(tokens) - 1)

        t0 = target.clock()
        drafts = draft_tree(drafter, draft_cache, tokens, pending_aux, pending_start, replace(tree, depth=depth),
                            vocab_map) if depth > 0 else NO_TREE
        t1 = target.clock()

        ids = torch.tensor([tokens[-1]] + drafts.tokens, device=device)
        verify = target.forward(ids, cache, aux_layers, tree=(drafts.positions(context, device), drafts.sees(device)))
        choices = verify.logits.argmax(-1).tolist()
        path = drafts.accept(choices)
        rows = torch.tensor([0] + [i + 1 for i in path], device=device)
        cache.keep(context, rows)
        pending_aux, pending_start = verify.aux[rows], context
        branch = drafts.branch(path)
        bonus = choices[path[-1] + 1 if path else 0]
        emitted, reason = stopper.clip(generated, [drafts.tokens[i] for i in path] + [bonus])
        generated += emitted
        tokens += emitted
        t2 = target.clock()

        yield StepEvent(
            step=step, drafted=[drafts.tokens[i] for i in branch], accepted=len(path), emitted=emitted,
            draft_probs=[drafts.probs[i] for i in branch] if cfg.instrument else None,
            draft_ms=(t1 - t0) * 1000, verify_ms=(t2 - t1) * 1000,
            total_tokens=len(generated), elapsed_ms=(t2 - start) * 1000,
            finished=reason is not None, finish_reason=reason,
            **(_tree_fields(drafts, path) if len(drafts) else {}),
        )


def _tree_fields(drafts: DraftTree, path: list[int]) -> dict:
    return {"tree_tokens": drafts.tokens, "tree_parents": drafts.parents, "tree_depths": drafts.depths,
            "tree_probs": drafts.probs, "tree_path": path}
