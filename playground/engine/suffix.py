"""Suffix decoding: a trie of every window of at most `depth` tokens of the sequences a session has seen (its earlier
prompts and answers, and the running one), each node counting the occurrences of its string. A step matches the
longest suffix of the context that occurred before with a continuation, then speculates, token by token, the most
frequent continuation while its share of the continuations seen there is at least `min_prob` (the match and the
speculation together at most `depth` tokens, as vLLM's suffix_decoding_max_tree_depth bounds them). With a draft
tree (`TreeShape`), a step speculates several continuations at once: the best-scored nodes by the product of the
shares along their branch, each among its parent's `topk` most frequent continuations (`speculate_tree`).

Memory is bounded: at most `depth` nodes an indexed token, and a session keeps earlier sequences only while their
tokens total at most `max_tokens` (the oldest forgotten first, their counts taken out of the trie). The cache belongs
to one session and this module keeps it (`SESSIONS`, by the session's key: a Chat conversation's, a server's, a bench
record's; at most `MAX_SESSIONS`, the least recently used forgotten first; `forget` on a conversation's Clear), so no
caller holds it and no two sessions share one. A lock serialises its use, since a superseded run may take one more
step while the session's next run begins."""

from __future__ import annotations

import heapq
import threading
from collections import OrderedDict

from playground.drafting import SUFFIX_CACHE, SUFFIX_DEPTH, SUFFIX_MIN_PROB


class _Node:
    __slots__ = ("count", "stamp", "depth", "children")

    def __init__(self, depth: int) -> None:
        self.count, self.stamp, self.depth = 0, 0, depth
        self.children: dict[int, _Node] = {}


class SuffixTrie:
    """The windows of at most `depth` tokens of several sequences, with counts; sequences are added token by token
    (`Growing`) and taken out whole (`remove`)."""

    def __init__(self, depth: int) -> None:
        if depth < 2:
            raise ValueError(f"the suffix trie's depth must be at least 2, got {depth}")
        self.depth, self.root, self.clock = depth, _Node(0), 0

    def extend(self, open_nodes: list[_Node], token: int) -> list[_Node]:
        """Add `token` to the windows ending at `open_nodes` and start a window at it; the nodes still open."""
        self.clock += 1
        grown = []
        for node in [*open_nodes, self.root]:
            child = node.children.get(token)
            if child is None:
                child = node.children[token] = _Node(node.depth + 1)
            child.count += 1
            child.stamp = self.clock  # ties between equally frequent continuations go to the latest seen
            if child.depth < self.depth:
                grown.append(child)
        return grown

    def remove(self, tokens: list[int]) -> None:
        """Take a whole sequence's windows out (a node's count never exceeds its parent's, so a count reaching 0
        drops its subtree: every count below it came from the same windows)."""
        for start in range(len(tokens)):
            node = self.root
            for token in tokens[start : start + self.depth]:
                child = node.children[token]
                child.count -= 1
                if child.count == 0:
                    del node.children[token]
                    break
                node = child

    def speculate(self, context: list[int], k: int, min_prob: float) -> tuple[list[int], list[float]]:
        """The most frequent continuation (up to k tokens, each at least `min_prob` of the continuations seen at its
        node) of the longest suffix of `context` that occurred before with a continuation, and each token's share."""
        node = self._longest_match(context, max(1, self.depth - k))
        drafts: list[int] = []
        shares: list[float] = []
        while node is not None and node.children and len(drafts) < k:
            total = sum(child.count for child in node.children.values())
            token, child = max(node.children.items(), key=lambda item: (item[1].count, item[1].stamp))
            if child.count / total < min_prob:
                break
            drafts.append(token)
            shares.append(child.count / total)
            node = child
        return drafts, shares

    def speculate_tree(self, context: list[int], depth: int, topk: int, nodes: int,
                       min_prob: float) -> list[tuple[int, int, int, float]]:
        """A tree of continuations of the longest suffix of `context` that occurred before: best first by the product
        of the shares along a branch, each node among the `topk` most frequent continuations of its parent and at
        least `min_prob` of them, at most `nodes` nodes and `depth` deep (the match and the speculation together at
        most the trie's depth, as for a chain). Returns (token, parent index or -1, depth, share) per node, a parent
        before its children."""
        start = self._longest_match(context, max(1, self.depth - depth))
        if start is None:
            return []
        kept: list[tuple[int, int, int, float]] = []
        heap: list[tuple] = []  # (-score, order, parent index, depth, node, share, token): the best branch first
        order = 0

        def offer(node: _Node, parent: int, at_depth: int, score: float) -> None:
            nonlocal order
            if at_depth > depth or not node.children:
                return
            total = sum(child.count for child in node.children.values())
            ranked = sorted(node.children.items(), key=lambda item: (item[1].count, item[1].stamp), reverse=True)
            for token, child in ranked[:topk]:
                share = child.count / total
                if share >= min_prob:
                    heapq.heappush(heap, (-score * share, order, parent, at_depth, child, share, token))
                    order += 1

        offer(start, -1, 1, 1.0)
        while heap and len(kept) < nodes:
            negative, _, parent, at_depth, node, share, token = heapq.heappop(heap)
            kept.append((token, parent, at_depth, share))
            offer(node, len(kept) - 1, at_depth + 1, -negative)
        return kept

    def _longest_match(self, context: list[int], longest: int) -> _Node | None:
        for length in range(min(longest, len(context)), 0, -1):
            node = self.root
            for token in context[len(context) - length :]:
                node = node.children.get(token)
                if node is None:
                    break
            if node is not None and node.children:
                return node
        return None


class Growing:
    """A sequence being indexed token by token (a run's prompt, then its answer as it is accepted)."""

    def __init__(self, trie: SuffixTrie) -> None:
        self.trie, self.tokens, self.open = trie, [], []

    def catch_up(self, tokens: list[int]) -> None:
        """Index the tokens of `tokens` past those indexed already (`tokens` extends what was indexed)."""
        for token in tokens[len(self.tokens) :]:
            self.open = self.trie.extend(self.open, token)
            self.tokens.append(token)


class SuffixCache:
    """One session's suffix trie: the earlier sequences it keeps (within `max_tokens`) and the running one."""

    def __init__(self) -> None:
        self.trie: SuffixTrie | None = None
        self.sequences: list[list[int]] = []  # oldest first, the running one last
        self.lock = threading.Lock()

    def clear(self) -> None:
        """Forget every sequence (a session's Clear); a run still going indexes on into the trie it began with, which
        no later run reads."""
        with self.lock:
            self.trie, self.sequences = None, []

    def tokens(self) -> int:
        """How many tokens the kept sequences hold, the running one included."""
        return sum(map(len, self.sequences))

    def begin(self, depth: int, max_tokens: int) -> Growing:
        """A new run's sequence: earlier ones past `max_tokens` forgotten (oldest first), the trie rebuilt where the
        run asks another depth."""
        with self.lock:
            return self._begin(depth, max_tokens)

    def _begin(self, depth: int, max_tokens: int) -> Growing:
        while self.sequences and self.tokens() > max_tokens:
            forgotten = self.sequences.pop(0)
            if self.trie is not None:
                self.trie.remove(forgotten)
        if self.trie is None or self.trie.depth != depth:
            self.trie = SuffixTrie(depth)
            for tokens in self.sequences:
                Growing(self.trie).catch_up(tokens)
        running = Growing(self.trie)
        self.sequences.append(running.tokens)  # the same list: it grows as the run indexes its tokens
        return running

    def nodes(self) -> int:
        """How many nodes the trie holds (its memory, for tests and reports)."""
        stack, count = [self.trie.root] if self.trie else [], 0
        while stack:
            node = stack.pop()
            count += len(node.children)
            stack.extend(node.children.values())
        return count


class SuffixProposer:
    """One run's suffix decoding over its session's cache."""

    def __init__(self, cache: SuffixCache, depth: int, min_prob: float, max_tokens: int) -> None:
        self.cache, self.min_prob = cache, min_prob
        self.running = cache.begin(depth, max_tokens)

    def propose(self, tokens: list[int], k: int) -> list[int]:
        with self.cache.lock:
            self.running.catch_up(tokens)
            return self.running.trie.speculate(tokens, k, self.min_prob)[0]

    def propose_tree(self, tokens: list[int], depth: int, topk: int, nodes: int) -> list[tuple[int, int, int, float]]:
        """`SuffixTrie.speculate_tree` over the session's cache, the run's tokens indexed first."""
        with self.cache.lock:
            self.running.catch_up(tokens)
            return self.running.trie.speculate_tree(tokens, depth, topk, nodes, self.min_prob)


MAX_SESSIONS = 256  # sessions whose caches are kept at once (each bounded by its max_tokens)


class SessionCaches:
    """One SuffixCache per session key, the least recently used forgotten past `most`."""

    def __init__(self, most: int = MAX_SESSIONS) -> None:
        self._caches: OrderedDict[str, SuffixCache] = OrderedDict()
        self._lock, self._most = threading.Lock(), most

    def cache(self, session: str) -> SuffixCache:
        with self._lock:
            cache = self._caches.pop(session, None) or SuffixCache()
            self._caches[session] = cache
            while len(self._caches) > self._most:
                self._caches.popitem(last=False)
            return cache

    def kept(self, session: str) -> SuffixCache | None:
        """`session`'s cache where one is kept, without making one or refreshing its place."""
        with self._lock:
            return self._caches.get(session)

    def forget(self, session: str) -> None:
        with self._lock:
            cache = self._caches.pop(session, None)
        if cache is not None:
            cache.clear()

    def __len__(self) -> int:
        return len(self._caches)


SESSIONS = SessionCaches()


def forget(session: str) -> None:
    """Forget `session`'s earlier sequences (engine.proposers.forget_session)."""
    SESSIONS.forget(session)


def build_proposer(run) -> SuffixProposer:
    """Suffix decoding with the run's settings over `session`'s cache (a fresh one, holding this run alone, where
    None); the registry's entry names this module."""
    cfg = run.cfg
    cache = SESSIONS.cache(run.session) if run.session is not None else SuffixCache()
    return SuffixProposer(cache, int(cfg.setting(SUFFIX_DEPTH.name)), float(cfg.setting(SUFFIX_MIN_PROB.name)),
                          int(cfg.setting(SUFFIX_CACHE.name)))


def build_speculator(run):
    from .weightless import speculator_for

    return speculator_for(build_proposer(run), run)
