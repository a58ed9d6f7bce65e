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

Sampling: a tree's shape must not depend on the tokens drawn, or trying a sibling would depend on its own value and
rejection sampling would no longer be exact; so the shape is a template of sibling ranks fixed before drafting
(`rank_template`), each expanded node draws its children from the drafter's q without replacement, and the target
walks the tree by recursive rejection sampling over siblings (`sampling.accept_sampled_tree`).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import torch

from .cache import DrafterCache, TargetCache
from .config import GenerationConfig, tree_problem
from .decode import eagle_inputs
from .drafter import Eagle3Drafter
from .loop import Pending, Verified, speculate
from .sampling import accept_sampled_tree, probabilities, sample_without_replacement
from .target import Target, TargetOutput
from .trace import AttentionMass, StepEvent
from .tree_shape import TreeShape


@dataclass
class DraftTree:
    """Kept nodes in depth order (a parent before its children)."""

    tokens: list[int]
    parents: list[int]  # index of the parent in `tokens`; -1 = the root
    depths: list[int]  # 1 = a child of the root
    probs: list[float]  # the drafter's probability of the node given its parent
    scores: list[float]  # greedy: summed log-probabilities of the branch; sampling: the rank template's prior
    proposals: dict[int, torch.Tensor] = field(default_factory=dict)  # sampling: node -> q its children came from
    # instrumented: node (-1 the root) -> ([sink, context, draft] attention of the query that drafted its children,
    # RMS of the hidden state fed there): what a chain reports per depth, here along any branch
    queries: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    def drift(self, branch: list[int]) -> tuple[list[AttentionMass], list[float]] | None:
        """Attention masses and hidden RMS per depth along `branch` (each depth's from the query that drafted it)."""
        if not self.queries or not branch:
            return None
        drafted_by = [self.queries[self.parents[node]] for node in branch]
        return ([AttentionMass(*mass.tolist()) for mass, _ in drafted_by], [float(rms) for _, rms in drafted_by])

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

    def step_fields(self, path: list[int]) -> dict:
        """The StepEvent's tree_* fields for this tree and its accepted `path`."""
        return {"tree_tokens": self.tokens, "tree_parents": self.parents, "tree_depths": self.depths,
                "tree_probs": self.probs, "tree_path": path}

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


def _keep(nodes: list[_Node], n: int, queries: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> DraftTree:
    """The n best-scored nodes, in depth order. Ties go to the shallower node, so a parent, never scored below its
    child, is always kept before it."""
    best = sorted(range(len(nodes)), key=lambda i: (-nodes[i].score, nodes[i].depth))[:n]
    best.sort(key=lambda i: nodes[i].depth)
    return _tree(nodes, best, {}, queries)


def _tree(nodes: list[_Node], kept: list[int], proposals: dict[int, torch.Tensor],
          queries: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> DraftTree:
    """A DraftTree of the nodes `kept` (indices into `nodes`, in depth order); `proposals` and `queries` by index into
    `nodes` (-1 the root), those of nodes not kept dropped."""
    index = {old: new for new, old in enumerate(kept)} | {-1: -1}
    chosen = [nodes[i] for i in kept]
    return DraftTree(tokens=[node.token for node in chosen], parents=[index[node.parent] for node in chosen],
                     depths=[node.depth for node in chosen], probs=[math.exp(node.logprob) for node in chosen],
                     scores=[node.score for node in chosen],
                     proposals={index[node]: q for node, q in proposals.items() if node in index},
                     queries={index[node]: stats for node, stats in queries.items() if node in index})


class _TreeDrafter:
    """The drafter calls of one tree: the pending target features first (as a chain's first call), then one call per
    depth for every frontier node, each fed its parent's state and attending to the context and its own branch.
    Instrumented, it keeps each call's query stats by node (-1 the root)."""

    def __init__(self, drafter: Eagle3Drafter, draft_cache: DrafterCache, tokens: list[int], pending: Pending,
                 instrument: bool) -> None:
        self.drafter, self.cache, self.instrument = drafter, draft_cache, instrument
        self.device, self.context = pending.aux.device, len(tokens) - 1
        self.queries: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        ids, hidden = eagle_inputs(pending, drafter, draft_cache, tokens)
        out = drafter(ids, hidden, torch.arange(pending.start, self.context, device=self.device), draft_cache,
                      attention_rows=int(instrument), logits_rows=1, context=self.context)
        self._keep_stats(out, hidden, [-1])
        self.fed, self.logits, self.feedback = [-1], out.logits[0, -1:], out.feedback[0, -1:]

    def feed(self, nodes: list[_Node], frontier: list[int], depth: int) -> None:
        """Draft after each frontier node of `depth`: `logits` and `feedback` then hold their rows."""
        start = self.cache.length
        for row, index in enumerate(frontier):
            nodes[index].row = start + row
        fed_row = {node: row for row, node in enumerate(self.fed)}
        hidden = self.feedback[[fed_row[nodes[i].parent] for i in frontier]][None]
        ids = torch.tensor([[nodes[i].token for i in frontier]], device=self.device)
        positions = torch.full((len(frontier),), self.context + depth - 1, device=self.device)
        mask = _draft_mask(nodes, frontier, self.context, start).to(self.device)
        out = self.drafter(ids, hidden, positions, self.cache, mask=mask,
                           attention_rows=len(frontier) if self.instrument else 0, context=self.context)
        self._keep_stats(out, hidden, frontier)
        self.fed, self.logits, self.feedback = frontier, out.logits[0], out.feedback[0]

    def _keep_stats(self, out, hidden: torch.Tensor, queried: list[int]) -> None:
        """Per query of the call's last rows: its attention masses and the RMS of the hidden state fed to it."""
        if self.instrument:
            rows = len(queried)
            self.queries |= {node: (out.mass(row, self.context),
                                    hidden[0, row - rows].pow(2).mean().sqrt()) for row, node in enumerate(queried)}


@torch.inference_mode()
def draft_tree(drafter: Eagle3Drafter, draft_cache: DrafterCache, tokens: list[int], pending: Pending,
               shape: TreeShape, vocab_map: torch.Tensor, instrument: bool = False) -> DraftTree:
    """Draft a tree of `shape` after `tokens`; the first call feeds the pending target features, as a chain's does."""
    calls = _TreeDrafter(drafter, draft_cache, tokens, pending, instrument)
    nodes: list[_Node] = []
    frontier = [-1]
    for depth in range(1, shape.depth + 1):
        made = _expand(nodes, frontier, calls.logits, shape.topk, depth, vocab_map)
        if depth == shape.depth:
            break
        frontier = sorted(made, key=lambda i: -nodes[i].score)[: shape.topk]
        calls.feed(nodes, frontier, depth)
    return _keep(nodes, shape.nodes, calls.queries)


def _prior(path: tuple[int, ...]) -> float:
    return -sum(math.log(rank + 2) for rank in path)


def template_widths(template: set[tuple[int, ...]]) -> dict[tuple[int, ...], int]:
    """How many children each node of a rank template has (the root is `()`; leaves are absent)."""
    return Counter(path[:-1] for path in template)


def rank_template(shape: TreeShape) -> set[tuple[int, ...]]:
    """For sampling: which nodes a tree has, named by their path of sibling ranks ((0,) the first child of the root,
    (0, 1) its second child, ...), decided before any token is drawn. A node of ranks r1..rd has the prior
    -sum(log(r + 2)), and the `nodes` best are kept (best-first, so the set holds each node's parent and earlier
    siblings). Drafted values never choose the shape: a sibling is tried only if it would have been tried whatever
    the earlier siblings' tokens were, which rejection sampling over siblings needs to stay exact."""
    heap, kept = [(-_prior((0,)), (0,))], set()
    while heap and len(kept) < shape.nodes:
        _, path = heapq.heappop(heap)
        kept.add(path)
        if len(path) < shape.depth:
            heapq.heappush(heap, (-_prior(path + (0,)), path + (0,)))
        if path[-1] + 1 < shape.topk:
            sibling = path[:-1] + (path[-1] + 1,)
            heapq.heappush(heap, (-_prior(sibling), sibling))
    return kept


@torch.inference_mode()
def draft_sampled_tree(drafter: Eagle3Drafter, draft_cache: DrafterCache, tokens: list[int], pending: Pending,
                       widths: dict[tuple[int, ...], int], depth: int, cfg: GenerationConfig, vocab_map: torch.Tensor,
                       vocab_size: int, generator: torch.Generator | None) -> DraftTree:
    """Draft a rank template's nodes (`widths`: template_widths) down to `depth`: each expanded node draws its children
    from the drafter's q there (temperature and top-p as the target's), without replacement, in rank order; q,
    scattered into the target vocabulary, is kept for verification. Fewer children where q has fewer tokens."""
    calls = _TreeDrafter(drafter, draft_cache, tokens, pending, cfg.instrument)
    nodes: list[_Node] = []
    paths = {-1: ()}
    proposals: dict[int, torch.Tensor] = {}
    frontier = [-1]
    for level in range(1, depth + 1):
        made = []
        for parent, row in zip(frontier, calls.logits.float()):
            q = probabilities(row, cfg.temperature, cfg.top_p)
            proposals[parent] = torch.zeros(vocab_size, device=q.device).index_copy_(0, vocab_map, q)
            for rank, choice in enumerate(sample_without_replacement(q, widths[paths[parent]], generator)):
                path = paths[parent] + (rank,)
                nodes.append(_Node(int(vocab_map[choice]), parent, level, math.log(float(q[choice])), _prior(path)))
                paths[len(nodes) - 1] = path
                made.append(len(nodes) - 1)
        frontier = [i for i in made if paths[i] in widths]
        if level == depth or not frontier:
            break
        calls.feed(nodes, frontier, level)
    return _tree(nodes, list(range(len(nodes))), proposals, calls.queries)  # made depth by depth: in depth order


NO_TREE = DraftTree([], [], [], [], [])


class TreeDrafting:
    """A tree step's drafting and verification, for `speculate`: greedy, a dynamic tree (`draft_tree`) accepted down
    the target's choices; sampling, the rank template's tree (`draft_sampled_tree`) accepted by recursive rejection
    sampling over siblings (`accept_sampled_tree`)."""

    def __init__(self, drafter: Eagle3Drafter, cfg: GenerationConfig, tree: TreeShape, target: Target,
                 aux_layers: list[int], generator: torch.Generator | None) -> None:
        self.drafter, self.cfg, self.tree, self.target, self.aux_layers = drafter, cfg, tree, target, aux_layers
        self.generator, self.cache = generator, drafter.new_cache()
        self.template = None if cfg.greedy else rank_template(tree)
        self.widths = template_widths(self.template) if self.template else {}
        self.vocab_map = drafter.to_target_ids(torch.arange(drafter.config.draft_vocab_size, device=target.device))
        self.rows = (tree.max_nodes if self.template is None else len(self.template)) + 1  # the root and every node

    def draft(self, tokens: list[int], pending: Pending, budget: int) -> DraftTree:
        depth = min(self.tree.depth, budget)
        if depth <= 0:
            return NO_TREE
        if self.template is None:
            return draft_tree(self.drafter, self.cache, tokens, pending, replace(self.tree, depth=depth),
                              self.vocab_map, self.cfg.instrument)
        return draft_sampled_tree(self.drafter, self.cache, tokens, pending, self.widths, depth, self.cfg,
                                  self.vocab_map, self.target.vocab_size, self.generator)

    def verify(self, drafts: DraftTree, tokens: list[int], context: int, cache: TargetCache) -> Verified:
        cfg = self.cfg
        sampled = None if self.template is None else lambda logits: accept_sampled_tree(
            drafts.children, drafts.tokens, drafts.proposals, probabilities(logits, cfg.temperature, cfg.top_p),
            self.generator)
        verdict = verify_tree(self.target, drafts, tokens[-1], context, cache, self.aux_layers, sampled)
        attention, hidden_rms = drafts.drift(verdict.branch) or (None, None)
        fields = {**verdict.fields(drafts), "attention": attention, "hidden_rms": hidden_rms,
                  "draft_probs": [drafts.probs[i] for i in verdict.branch] if cfg.instrument else None}
        return Verified(verdict.emitted(drafts), Pending(verdict.out.aux[verdict.rows], context), fields,
                        verdict.out)


@dataclass
class TreeVerdict:
    """A tree's verification: the target's forward over it, the accepted path (node indices), the bonus token, the
    forward's rows the cache kept (the root's and the path's) and the branch the step reports (DraftTree.branch)."""

    out: TargetOutput
    path: list[int]
    bonus: int
    rows: torch.Tensor
    branch: list[int]

    def emitted(self, drafts: DraftTree) -> list[int]:
        return [drafts.tokens[i] for i in self.path] + [self.bonus]

    def fields(self, drafts: DraftTree) -> dict:
        """The step's fields every tree fills: the branch drafted, how much of it was accepted, the tree itself."""
        return {"drafted": [drafts.tokens[i] for i in self.branch], "accepted": len(self.path),
                **(drafts.step_fields(self.path) if len(drafts) else {})}


def verify_tree(target: Target, drafts: DraftTree, last_token: int, context: int, cache: TargetCache,
                aux_layers: list[int] | None = None,
                sampled: Callable[[torch.Tensor], tuple[list[int], int]] | None = None) -> TreeVerdict:
    """`last_token` and the tree through the target in one forward under the tree's mask; the path accepted, greedy
    (each child that equals the target's choice at its parent) or, with `sampled`, as it walks the logits; the
    target's cache kept to the root and that path."""
    device = target.device
    out = target.forward(torch.tensor([last_token, *drafts.tokens], device=device), cache, aux_layers,
                         tree=(drafts.positions(context, device), drafts.sees(device)))
    if sampled is None:
        choices = out.logits.argmax(-1).tolist()
        path = drafts.accept(choices)
        bonus = choices[path[-1] + 1 if path else 0]
    else:
        path, bonus = sampled(out.logits)
    rows = torch.tensor([0] + [i + 1 for i in path], device=device)
    cache.keep(context, rows)
    return TreeVerdict(out, path, bonus, rows, drafts.branch(path))


def tree_generate(target: Target, drafter: Eagle3Drafter, aux_layers: list[int], prompt_ids: list[int],
                  cfg: GenerationConfig, tree: TreeShape, should_stop: Callable[[], bool] | None = None
                  ) -> Iterator[StepEvent]:
    """Speculative decoding with a draft tree per step (`TreeDrafting`): greedy output token-identical to
    `plain_generate`, sampled output distributed as the target's samples.

    `drafted` in each StepEvent is the tree's branch through the accepted path (`DraftTree.branch`), so `accepted`
    and acceptance length count tokens per step as for chains; the whole tree rides in the `tree_*` fields."""
    problem = tree_problem(cfg, tree)  # `tree` may differ from cfg.tree, which checked itself
    if problem:
        raise ValueError(problem)
    return speculate(target, prompt_ids, cfg,
                     lambda generator: TreeDrafting(drafter, cfg, tree, target, aux_layers, generator), should_stop)
