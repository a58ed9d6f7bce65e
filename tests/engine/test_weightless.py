"""Weightless drafting (engine/weightless.py): prompt lookup (lookup.py) and suffix decoding (suffix.py).

1. The proposers on their own: the longest match first, its latest occurrence, nothing where nothing matches, the
   frequency threshold, the suffix cache's bounded memory (forgetting a sequence takes out exactly its counts), and
   each built by the module its registry entry names.
2. Greedy decoding with either method is token-identical to plain decoding on the tiny target, on prompts with and
   without repetition, for several k; not vacuous: steps proposed nothing, proposals were accepted whole and
   rejected.
3. Replay (engine/replay.py, `replay_weightless`): a greedy answer replayed under either method steps exactly as a
   live run of it does.
4. Sampling is exact: thousands of short runs on a vocabulary-8 target against the exact joint distribution of its
   own samples, with two negative controls (accept every proposal; resample a rejection from p instead of p without
   the rejected token), as tests/engine/test_sampling.py does for EAGLE.
5. Suffix decoding's trees: best branch first, token-identical greedy answers that accepted side branches, and exact
   sampling down a tree of point masses, with a negative control (a walk that does not renormalise).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import pytest
import torch

from playground import drafting
from playground.engine import GenerationConfig, StepEvent, Target, plain_generate, weightless_generate
from playground.engine import weightless as weightless_module
from playground.engine.lookup import PromptLookup
from playground.engine.proposers import forget_session
from playground.engine.replay import replay_weightless, teacher_force
from playground.engine.suffix import SESSIONS, SuffixCache, SuffixTrie
from playground.engine.tree_shape import TreeShape
from playground.engine.weightless import proposer_for
from tests.engine.test_sampling import ALPHA, chi_square_pvalue, counts_of, reference_probs
from tests.engine.test_sampling import _marginal as marginal
from tests.engine.test_sampling import small_target as sampling_target
from tests.support.lossless import assert_same_or_near_tie

if TYPE_CHECKING:
    from tests.conftest import TinyModels

METHODS = ("ngram", "suffix")


# --- the proposers ------------------------------------------------------------------------------------------------


def test_prompt_lookup_prefers_the_longest_match_then_the_latest_occurrence() -> None:
    lookup = PromptLookup(1, 3)
    # "7 8 9" occurred once (followed by 1 2); "8 9" alone later (followed by 5): the 3-gram wins
    tokens = [7, 8, 9, 1, 2, 3, 8, 9, 5, 6, 0, 7, 8, 9]
    assert lookup.propose(tokens, 2) == [1, 2]
    # only the 1-gram "4" matches, twice: the latest occurrence's continuation
    assert PromptLookup(1, 3).propose([4, 1, 1, 4, 2, 2, 0, 4], 3) == [2, 2, 0]
    assert PromptLookup(1, 3).propose([4, 1, 1, 4, 2, 2, 0, 4], 1) == [2]


def test_prompt_lookup_proposes_nothing_without_a_long_enough_match() -> None:
    assert PromptLookup(1, 3).propose([1, 2, 3, 4], 4) == []  # no token repeats
    assert PromptLookup(2, 3).propose([1, 2, 3, 1], 4) == []  # "1" repeats, but the shortest match is 2
    assert PromptLookup(2, 3).propose([1, 2, 3, 1, 2], 4) == [3, 1, 2]  # the continuation runs up to the present


def test_prompt_lookup_grows_with_the_run() -> None:
    """Called step after step on a growing list, it proposes what a fresh index over the same tokens proposes."""
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, 6, (120,), generator=g).tolist()
    growing = PromptLookup(1, 4)
    for end in range(1, len(tokens) + 1, 3):
        assert growing.propose(tokens[:end], 4) == PromptLookup(1, 4).propose(tokens[:end], 4), end


def test_suffix_trie_speculates_the_most_frequent_continuation_above_the_threshold() -> None:
    cache = SuffixCache()
    for earlier in ([5, 6, 7, 8], [5, 6, 7, 8], [5, 6, 9, 9]):  # after "5 6": 7 twice, 9 once
        cache.begin(depth=8, max_tokens=100).catch_up(earlier)
    trie = cache.trie
    assert trie.speculate([1, 5, 6], 4, 0.1) == ([7, 8], [2 / 3, 1.0])
    assert trie.speculate([1, 5, 6], 4, 0.7)[0] == []  # 7's share (2/3) is under the threshold
    assert trie.speculate([1, 5, 6], 1, 0.1)[0] == [7]  # at most k
    assert trie.speculate([3, 3, 4], 4, 0.1)[0] == []  # no suffix of the context occurred before
    # the longest suffix with a continuation decides: "9 5 6" never occurred, "6" is followed by 7 and 9 ...
    assert trie.speculate([9, 6], 4, 0.1)[0] == [7, 8]
    # ... but "6 9" occurred, followed by 9
    assert trie.speculate([6, 9], 4, 0.1)[0] == [9]


def test_suffix_trie_speculates_a_tree_best_branch_first() -> None:
    """After "5 6": 7 (2/3, then 8 for sure) and 9 (1/3, then 9): best first by the product of the shares along the
    branch, a parent before its children, at most `topk` children a node, `nodes` nodes and `depth` deep."""
    cache = SuffixCache()
    for earlier in ([5, 6, 7, 8], [5, 6, 7, 8], [5, 6, 9, 9]):
        cache.begin(depth=8, max_tokens=100).catch_up(earlier)
    trie = cache.trie
    assert trie.speculate_tree([1, 5, 6], 4, 2, 8, 0.1) == [(7, -1, 1, 2 / 3), (8, 0, 2, 1.0), (9, -1, 1, 1 / 3),
                                                            (9, 2, 2, 1.0)]
    assert trie.speculate_tree([1, 5, 6], 4, 1, 8, 0.1) == [(7, -1, 1, 2 / 3), (8, 0, 2, 1.0)]  # topk 1: the chain
    assert trie.speculate_tree([1, 5, 6], 1, 2, 8, 0.1) == [(7, -1, 1, 2 / 3), (9, -1, 1, 1 / 3)]  # one deep
    assert len(trie.speculate_tree([1, 5, 6], 4, 2, 3, 0.1)) == 3  # at most `nodes`
    assert trie.speculate_tree([1, 5, 6], 4, 2, 8, 0.5) == [(7, -1, 1, 2 / 3), (8, 0, 2, 1.0)]  # 9's share is 1/3
    assert trie.speculate_tree([3, 3, 4], 4, 2, 8, 0.0) == []
    chain = trie.speculate([1, 5, 6], 4, 0.1)[0]
    tree = trie.speculate_tree([1, 5, 6], 4, 1, 8, 0.1)
    assert [token for token, *_ in tree] == chain  # one child a node: the chain


def test_suffix_depth_bounds_the_match_and_the_speculation() -> None:
    trie = SuffixTrie(4)
    open_nodes: list = []
    for token in range(10):
        open_nodes = trie.extend(open_nodes, token)
    # k = 1: a match of up to depth - 1 = 3 tokens ("0 1 2"), then the one token its window holds
    assert trie.speculate([0, 1, 2], 1, 0.0)[0] == [3]
    # k = 4: the match is cut to leave room (here to one token, "2"), and a window holds "2" and three more
    assert trie.speculate([0, 1, 2], 4, 0.0)[0] == [3, 4, 5]


def test_suffix_cache_memory_is_bounded_and_forgetting_is_exact() -> None:
    g = torch.Generator().manual_seed(5)
    sequences = [torch.randint(0, 9, (60,), generator=g).tolist() for _ in range(4)]
    cache = SuffixCache()
    alone = SuffixCache()
    alone.begin(6, 1000).catch_up(sequences[3])
    for tokens in sequences:
        cache.begin(6, 130).catch_up(tokens)  # keeps earlier sequences while they total at most 130 tokens
        assert cache.nodes() <= 6 * sum(map(len, cache.sequences))
    assert len(cache.sequences) == 3  # the oldest was forgotten when the fourth began (180 > 130)
    cache.begin(6, 0).catch_up(sequences[3])  # keep nothing earlier: their counts all taken out
    assert cache.sequences == [sequences[3]] and cache.nodes() == alone.nodes()
    assert cache.trie.speculate(sequences[3][:5], 3, 0.0) == alone.trie.speculate(sequences[3][:5], 3, 0.0)


def test_a_cleared_suffix_cache_speculates_as_a_fresh_one() -> None:
    cache, fresh = SuffixCache(), SuffixCache()
    earlier = cache.begin(6, 100)
    earlier.catch_up([1, 2, 3, 4, 5, 6, 7])
    assert cache.tokens() == 7 and cache.begin(6, 100).trie.speculate([1, 2], 3, 0.0)[0] == [3, 4, 5]
    cache.clear()
    assert cache.tokens() == 0 and cache.nodes() == 0
    earlier.catch_up([1, 2, 3, 4, 5, 6, 7, 8])  # a run still going indexes into the trie it began with, unread
    assert cache.begin(6, 100).trie.speculate([1, 2], 3, 0.0) == fresh.begin(6, 100).trie.speculate([1, 2], 3, 0.0)


def test_suffix_cache_rebuilds_for_another_depth() -> None:
    cache = SuffixCache()
    cache.begin(4, 100).catch_up([1, 2, 3, 4, 5, 6])
    cache.begin(8, 100)
    assert cache.trie.depth == 8 and cache.trie.speculate([1, 2], 8, 0.0)[0] == [3, 4, 5, 6]


@pytest.mark.parametrize("method", METHODS)
def test_each_method_is_built_by_the_module_its_registry_entry_names(method: str) -> None:
    """`proposer_for` has no branch per method: the entry's `proposer` module builds it, with the run's settings."""
    proposer = proposer_for(method, GenerationConfig(k=4))
    assert type(proposer).__module__ == f"playground.engine.{drafting.METHODS[method].proposer}"
    assert proposer.propose([1, 2, 3, 4, 1, 2], 2) == [3, 4]
    with pytest.raises(ValueError, match="not a drafting method that needs no checkpoint"):
        proposer_for(drafting.EAGLE3, GenerationConfig(k=4))


# --- greedy: token-identical to plain decoding ----------------------------------------------------------------------

NEW_TOKENS = 40


def flat(events: list[StepEvent]) -> list[int]:
    return [t for e in events for t in e.emitted]


@pytest.fixture(scope="module")
def prompts(tiny: TinyModels) -> list[tuple[str, list[int], list[int]]]:
    """(label, prompt, plain greedy answer): random, repeated (the answer likely quotes it) and training prompts."""
    g = torch.Generator().manual_seed(4321)
    rows = [(f"random-{n}", torch.randint(8, tiny.target.vocab_size, (n,), generator=g).tolist()) for n in (5, 60)]
    rows += [("repeated", tiny.training_prompts[0] * 2 + tiny.training_prompts[1] * 3)]
    rows += [(f"training-{i}", p) for i, p in enumerate(tiny.training_prompts[:3])]
    config = GenerationConfig(max_new_tokens=NEW_TOKENS)
    return [(label, p, flat(list(plain_generate(tiny.target, p, config)))) for label, p in rows]


@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("method", METHODS)
def test_greedy_output_is_token_identical(tiny: TinyModels, prompts: list, method: str, k: int) -> None:
    kinds = {"nothing": 0, "whole": 0, "rejected": 0}
    settings = (("prompt_lookup_min", 1),) if method == "ngram" else ()
    for label, prompt, want in prompts:
        cfg = GenerationConfig(max_new_tokens=NEW_TOKENS, k=k, method_settings=settings)
        events = list(weightless_generate(tiny.target, method, prompt, cfg))
        assert_same_or_near_tie(tiny.target, prompt, flat(events), want, f"{method} k={k} prompt {label}")
        for e in events[1:]:
            assert e.attention is None and e.hidden_rms is None and e.draft_probs is None  # no drafter to measure
            assert len(e.drafted) <= k
            kinds["nothing" if not e.drafted else "whole" if e.accepted == len(e.drafted) else "rejected"] += 1
    assert all(kinds.values()), kinds  # steps without a proposal, and proposals accepted whole and rejected


@pytest.mark.parametrize("shape", [TreeShape(depth=3, topk=2, nodes=6), TreeShape(depth=6, topk=3, nodes=16)])
def test_suffix_trees_are_token_identical_and_accept_side_branches(tiny: TinyModels, prompts: list,
                                                                   shape: TreeShape) -> None:
    """Suffix decoding drafting a tree per step: plain decoding's answer; not vacuous, as steps accepted a node that
    was not its parent's first child (what a chain would not have proposed)."""
    side_branches = 0
    for label, prompt, want in prompts:
        cfg = GenerationConfig(max_new_tokens=NEW_TOKENS, k=shape.depth, tree=shape,
                               method_settings=(("suffix_decoding_min_token_prob", 0.0),))
        events = list(weightless_generate(tiny.target, "suffix", prompt, cfg))
        assert_same_or_near_tie(tiny.target, prompt, flat(events), want, f"suffix tree {shape} prompt {label}")
        for e in events[1:]:
            assert e.attention is None and e.draft_probs is None and len(e.tree_tokens or []) <= shape.nodes
            for node in e.tree_path or []:
                parent = e.tree_parents[node]
                side_branches += node != min(i for i, p in enumerate(e.tree_parents) if p == parent)
    assert side_branches > 0


def test_a_session_cache_learns_from_an_earlier_answer(tiny: TinyModels, prompts: list) -> None:
    """Suffix decoding over a session's cache: the same prompt asked again accepts more, the answer unchanged."""
    label, prompt, want = next(row for row in prompts if row[0] == "random-60")
    cfg = GenerationConfig(max_new_tokens=NEW_TOKENS, k=4)
    session = "test:learns"
    first = list(weightless_generate(tiny.target, "suffix", prompt, cfg, session=session))
    again = list(weightless_generate(tiny.target, "suffix", prompt, cfg, session=session))
    alone = list(weightless_generate(tiny.target, "suffix", prompt, cfg))  # no session: a cache of its own
    assert flat(first) == flat(again) == flat(alone) == want
    assert len(again) < len(first) == len(alone)  # fewer target forwards: the earlier answer is proposed
    assert len(SESSIONS.kept(session).sequences) == 2
    forget_session(session)
    assert SESSIONS.kept(session) is None


def test_budget_and_settings(tiny: TinyModels, prompts: list) -> None:
    _, prompt, want = next(row for row in prompts if row[0] == "repeated")
    for limit in (1, 2, 5):
        events = list(weightless_generate(tiny.target, "ngram", prompt, GenerationConfig(max_new_tokens=limit, k=8)))
        assert flat(events) == want[:limit] and events[-1].finish_reason == "length"
    with pytest.raises(ValueError, match="prompt_lookup_min .* must not exceed prompt_lookup_max"):
        GenerationConfig(method_settings=(("prompt_lookup_min", 4), ("prompt_lookup_max", 2)))
    with pytest.raises(ValueError, match="suffix_decoding_min_token_prob"):
        GenerationConfig(method_settings=(("suffix_decoding_min_token_prob", 1.5),))
    with pytest.raises(ValueError, match="unknown drafting setting"):
        GenerationConfig(method_settings=(("lookahead", 3),))


@pytest.mark.parametrize("method", METHODS)
def test_replay_steps_as_live_runs(tiny: TinyModels, prompts: list, method: str) -> None:
    """The answer (plain decoding's) replayed under the method at several k equals the live runs, step by step; so
    the replayed acceptance is the live one."""
    compared = 0
    for label, prompt, answer in prompts:
        forced = teacher_force(tiny.target, [], prompt, answer)
        for k in (1, 4, 8):
            cfg = GenerationConfig(max_new_tokens=NEW_TOKENS, k=k, instrument=False)
            live = [(e.drafted, e.accepted, e.emitted, e.finished)
                    for e in weightless_generate(tiny.target, method, prompt, cfg)]
            replayed = [(e.drafted, e.accepted, e.emitted, e.finished)
                        for e in replay_weightless(forced, tiny.target, method, k, max_new_tokens=NEW_TOKENS)]
            assert replayed == live, (method, k, label)
            compared += sum(1 for step in live if step[0])
    assert compared > 20  # steps that proposed something were compared


# --- sampling: exact ----------------------------------------------------------------------------------------------

VOCAB = 8  # test_sampling's, whose counts_of this reads
PROMPT = [0, 1, 2, 3, 4, 5, 6, 7, 2, 5, 3]  # every token occurs, so a 1-gram lookup always finds a proposal
NEW = 4
K = 2


@pytest.fixture(scope="module")
def small_target() -> Target:
    return sampling_target(seed=11)


def exact_joint(target: Target, temperature: float) -> torch.Tensor:
    joint = torch.ones((), dtype=torch.float64)
    for depth in range(NEW):
        prefixes = list(itertools.product(range(VOCAB), repeat=depth))
        with torch.no_grad():
            logits = target.model(input_ids=torch.tensor([PROMPT + list(p) for p in prefixes])).logits[:, -1].float()
        joint = joint.unsqueeze(-1) * reference_probs(logits, temperature, 1.0).view(*([VOCAB] * depth), VOCAB)
    return joint


def draw(target: Target, method: str, n: int, monkeypatch: pytest.MonkeyPatch) -> tuple[torch.Tensor, ...]:
    """n runs: their outputs [n, NEW], the first token and the first step's first proposal, kept as "accept every
    proposal" would keep it [n, 2], and the same two of a sampler that replaces a rejection by a sample of p itself
    (p without the rejected token is right) [n, 2]."""
    calls: list[tuple] = []
    real_accept = weightless_module.accept_sampled

    def spy(drafted, draft_probs, target_probs, generator):
        calls.append((drafted.tolist(), target_probs.clone()))
        return real_accept(drafted, draft_probs, target_probs, generator)

    monkeypatch.setattr(weightless_module, "accept_sampled", spy)
    other = torch.Generator().manual_seed(99)
    real, naive, from_p = [], [], []
    settings = (("prompt_lookup_min", 1),) if method == "ngram" else (("suffix_decoding_min_token_prob", 0.0),)
    for seed in range(n):
        calls.clear()
        cfg = GenerationConfig(max_new_tokens=NEW, k=K, temperature=1.0, seed=seed, instrument=False,
                               method_settings=settings)
        out = flat(list(weightless_generate(target, method, PROMPT, cfg)))
        assert len(out) == NEW
        drafted, p = calls[0]
        assert drafted, "every first step proposes (every token occurred in the prompt, with a continuation)"
        real.append(out)
        first = drafted[0]
        naive.append(out[:1] + [first])
        kept = float(torch.rand((), generator=other)) < float(p[0, first])
        from_p.append(out[:1] + [first if kept else int(torch.multinomial(p[0], 1, generator=other))])
    return torch.tensor(real), torch.tensor(naive), torch.tensor(from_p)


def assert_follows(draws: torch.Tensor, exact: torch.Tensor) -> None:
    """Sampled answers (rows of tokens) follow `exact`, their joint distribution: every marginal passes a chi-square
    test."""
    report = {keep: chi_square_pvalue(marginal(counts_of(draws), keep), marginal(exact, keep))
              for keep in [(0, 1, 2, 3), (0, 1, 2), (0, 1), (1,), (2,), (3,)]}
    assert min(report.values()) > ALPHA, report


@pytest.mark.parametrize("method", METHODS)
def test_sampling_matches_the_target_and_the_controls_fail(small_target: Target, monkeypatch: pytest.MonkeyPatch,
                                                           method: str) -> None:
    exact = exact_joint(small_target, 1.0)
    real, naive, from_p = draw(small_target, method, 2000, monkeypatch)
    assert_follows(real, exact)
    assert naive[:, 1].eq(real[:, 1]).float().mean() < 0.8  # the proposals were often rejected
    naive_p = chi_square_pvalue(counts_of(naive), marginal(exact, (0, 1)))
    assert naive_p < 1e-12, f"'accept every proposal' not detected: p = {naive_p}"
    from_p_p = chi_square_pvalue(counts_of(from_p), marginal(exact, (0, 1)))
    assert from_p_p < 1e-6, f"'resample a rejection from p' not detected: p = {from_p_p}"


def tree_draws(target: Target, n: int) -> torch.Tensor:
    """n sampled runs of suffix decoding drafting trees [n, NEW]; every step's tree has several children somewhere
    (the prompt's "2" is followed by 3 and by 5)."""
    shape = TreeShape(depth=2, topk=3, nodes=6)
    runs = []
    for seed in range(n):
        cfg = GenerationConfig(max_new_tokens=NEW, k=2, tree=shape, temperature=1.0, seed=seed, instrument=False,
                               method_settings=(("suffix_decoding_min_token_prob", 0.0),))
        runs.append(flat(list(weightless_generate(target, "suffix", PROMPT, cfg))))
    return torch.tensor(runs)


def test_sampled_suffix_trees_match_the_target_and_a_walk_without_renormalising_fails(
        small_target: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sampling down a tree of point masses (`accept_point_mass_tree`) follows the target's distribution; the same
    walk keeping a later sibling with p(x) instead of p(x) over the mass left after the rejections is detected."""
    exact = exact_joint(small_target, 1.0)
    real = tree_draws(small_target, 2000)
    assert_follows(real, exact)

    def not_renormalised(children, tokens, target_probs, generator):
        path, node = [], -1
        while True:
            p = target_probs[node + 1].clone()
            for child in children(node):
                if float(torch.rand((), generator=generator)) < float(target_probs[node + 1][tokens[child]]):
                    path.append(child)
                    node = child
                    break
                p[tokens[child]] = 0
            else:
                return path, int(torch.multinomial(p, 1, generator=generator)[0])

    monkeypatch.setattr(weightless_module, "accept_point_mass_tree", not_renormalised)
    wrong = tree_draws(small_target, 6000)
    wrong_p = min(chi_square_pvalue(marginal(counts_of(wrong), keep), marginal(exact, keep))
                  for keep in [(0, 1), (0, 1, 2), (1,), (2,)])
    assert wrong_p < 1e-6, f"a walk that does not renormalise was not detected: p = {wrong_p}"
