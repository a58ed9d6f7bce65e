"""Speculative sampling reproduces the target's distribution exactly.

1. `accept_sampled` on hand-made p/q tables: the exact output distribution (randomness enumerated on a grid that
   represents every acceptance probability exactly) equals p, and so do many real samples.
2. End to end: thousands of short `speculative_generate` runs with a tiny target (vocabulary 8) and a deliberately
   different, untrained drafter (draft vocabulary of 6 mapped through d2t, so two tokens are never drafted). The
   empirical joint distribution of the first generated tokens is compared with the exact target distribution,
   computed here from the target's logits with an independent softmax / top-p. Negative controls: the same
   statistic rejects an "accept every draft" sampler (built from the drafts the drafter actually sampled, i.e.
   from its q) and a sampler that resamples rejections from p instead of the residual max(0, p - q).
3. Draft trees (engine/tree.py) under sampling: the same end-to-end comparison for `tree_generate`, whose steps walk
   a tree of sampled siblings by recursive rejection sampling; the negative control is a walk that tries the next
   sibling against the unchanged p instead of the residual.
"""

from __future__ import annotations

import itertools
import types
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from playground.engine import (
    DrafterConfig,
    Eagle3Drafter,
    GenerationConfig,
    Target,
    TreeShape,
    sampling,
    speculative_generate,
    tree_generate,
)
from playground.engine import decode as decode_module
from playground.engine.sampling import accept_greedy, accept_sampled

ALPHA = 1e-4  # seeds are fixed, so the tests are deterministic; a small alpha keeps them robust across platforms


# --- statistics -----------------------------------------------------------------------------------------------


def chi_square_pvalue(counts: torch.Tensor, probs: torch.Tensor, min_expected: float = 5.0) -> float:
    """Pearson chi-square goodness of fit, cells with expected count < min_expected pooled into one bin.

    An observation in a cell of probability zero is an outright failure (p-value 0)."""
    counts, probs = counts.flatten().double(), probs.flatten().double()
    assert abs(float(probs.sum()) - 1) < 1e-6
    if bool((counts[probs == 0] > 0).any()):
        return 0.0
    n = float(counts.sum())
    expected = probs * n
    big = expected >= min_expected
    obs, exp = counts[big].tolist(), expected[big].tolist()
    rest_obs, rest_exp = float(counts[~big].sum()), float(expected[~big].sum())
    if rest_exp > 0:
        if rest_exp < min_expected and exp:  # too small on its own: merge into the smallest bin
            i = exp.index(min(exp))
            obs[i] += rest_obs
            exp[i] += rest_exp
        else:
            obs.append(rest_obs)
            exp.append(rest_exp)
    df = len(exp) - 1
    if df < 1:
        return 1.0
    stat = sum((o - e) ** 2 / e for o, e in zip(obs, exp))
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


def reference_probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Independent restatement: softmax(logits / T); keep a token iff the mass ranked strictly above it is < top_p."""
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    if top_p < 1.0:
        above = (probs.unsqueeze(-1) < probs.unsqueeze(-2)).double() @ probs.unsqueeze(-1)  # mass of larger tokens
        probs = torch.where(above.squeeze(-1) < top_p, probs, torch.zeros_like(probs))
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def test_chi_square_helper_is_calibrated() -> None:
    g = torch.Generator().manual_seed(0)
    probs = torch.tensor([0.4, 0.3, 0.2, 0.05, 0.03, 0.02])
    pvalues = [chi_square_pvalue(torch.bincount(torch.multinomial(probs, 400, True, generator=g), minlength=6), probs)
               for _ in range(200)]
    rejected = sum(p < 0.05 for p in pvalues)
    assert 2 <= rejected <= 25, rejected  # about 5% of 200 under the null
    shifted = torch.tensor([0.3, 0.4, 0.2, 0.05, 0.03, 0.02])
    counts = torch.bincount(torch.multinomial(shifted, 2000, True, generator=g), minlength=6)
    assert chi_square_pvalue(counts, probs) < 1e-3
    assert chi_square_pvalue(torch.tensor([5, 0, 0]), torch.tensor([0.0, 0.5, 0.5])) == 0.0


# --- accept_sampled on hand-made distributions ------------------------------------------------------------------


class _GridRandomness:
    """Replaces `torch.rand` inside the sampling module by values from a list, and `sample` by a recorder."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.values: list[float] = []
        self.sampled_from: list[torch.Tensor] = []
        proxy = types.SimpleNamespace(**{name: getattr(torch, name) for name in dir(torch)
                                         if not name.startswith("__")})
        proxy.rand = self._rand
        monkeypatch.setattr(sampling, "torch", proxy)
        monkeypatch.setattr(sampling, "sample", self._sample)

    def _rand(self, k: int, **kwargs) -> torch.Tensor:
        return torch.tensor([self.values.pop(0) for _ in range(k)], dtype=torch.float64)

    def _sample(self, probs: torch.Tensor, generator) -> int:
        self.sampled_from.append(probs.clone())
        return -1  # a marker: "a token drawn from sampled_from[-1]"

    def run(self, drafted, q, p, us) -> tuple[int, int, torch.Tensor | None, int]:
        """(accepted, token or -1, distribution the token was drawn from, uniforms consumed)."""
        self.values, self.sampled_from = list(us), []
        accepted, token = accept_sampled(torch.tensor(drafted), q, p, None)
        consumed = len(us) - len(self.values)
        return accepted, token, self.sampled_from[-1] if token == -1 else None, consumed


def _grid(m: int) -> list[float]:
    return [(i + 0.5) / m for i in range(m)]  # exact: P(u < a/b) = a/b whenever b divides m


P8 = torch.tensor([4, 2, 1, 1, 0], dtype=torch.float64) / 8
Q8 = torch.tensor([2, 2, 3, 0, 1], dtype=torch.float64) / 8
# token 0: p > q; 1: p == q; 2: p < q (ratio 1/3); 3: q == 0 < p (never drafted); 4: p == 0 < q (always rejected)


def test_accept_sampled_single_draft_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = _GridRandomness(monkeypatch)
    bonus_row = torch.tensor([0, 1, 0, 2, 1], dtype=torch.float64) / 4
    target = torch.stack([P8, bonus_row])
    out = torch.zeros(5, dtype=torch.float64)
    grid = _grid(840)  # lcm(1..8): every ratio p/q of these tables is a multiple of 1/840
    for d in range(5):
        if Q8[d] == 0:
            continue
        for u in grid:
            accepted, token, dist, consumed = rng.run([d], Q8[None], target, [u])
            assert consumed == 1, "one uniform per draft"
            weight = float(Q8[d]) / len(grid)
            if accepted == 1:
                assert token == -1 and torch.equal(dist, bonus_row), "bonus after full acceptance comes from p_k"
                out[d] += weight
            else:
                assert accepted == 0 and token == -1
                out += weight * dist / dist.sum()
    assert torch.allclose(out, P8, atol=1e-12), out
    # and the acceptance probability itself is sum_x min(p, q)
    accepted_mass = sum(float(Q8[d]) * sum(rng.run([d], Q8[None], target, [u])[0] for u in grid) / len(grid)
                        for d in range(5) if Q8[d] > 0)
    assert accepted_mass == pytest.approx(float(torch.minimum(P8, Q8).sum()), abs=1e-12)


# Two-draft chains with quarters (every ratio has a denominator dividing 12): q1, p1 depend on the first draft.
Q0 = [Fraction(1, 4), Fraction(1, 4), Fraction(0), Fraction(1, 2)]
P0 = [Fraction(1, 2), Fraction(0), Fraction(1, 4), Fraction(1, 4)]
Q1 = {0: [Fraction(1, 4)] * 4, 1: [Fraction(1, 2), Fraction(1, 2), 0, 0], 3: [0, Fraction(1, 4), Fraction(3, 4), 0]}
P1 = {0: [Fraction(3, 4), 0, Fraction(1, 4), 0], 1: [Fraction(1, 4)] * 4, 3: [Fraction(1, 4), Fraction(3, 4), 0, 0]}
P2 = [Fraction(1, 4), Fraction(1, 4), Fraction(1, 2), Fraction(0)]


def _t(row) -> torch.Tensor:
    return torch.tensor([float(x) for x in row], dtype=torch.float64)


def test_accept_sampled_two_draft_chain_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """Exact enumeration over both drafts and both uniforms: the first output token is distributed as p0, and
    given that draft 1 = a was accepted, the second output token is distributed as p1(. | a)."""
    rng = _GridRandomness(monkeypatch)
    grid = _grid(12)
    first = torch.zeros(4, dtype=torch.float64)
    second = {a: torch.zeros(4, dtype=torch.float64) for a in Q1}
    for d1, d2 in itertools.product(range(4), range(4)):
        weight = float(Q0[d1]) * (float(Q1[d1][d2]) if d1 in Q1 else 0.0)
        if weight == 0:
            continue
        q = torch.stack([_t(Q0), _t(Q1[d1])])
        p = torch.stack([_t(P0), _t(P1[d1]), _t(P2)])
        for u1, u2 in itertools.product(grid, grid):
            accepted, token, dist, consumed = rng.run([d1, d2], q, p, [u1, u2])
            assert token == -1 and consumed == 2, "one uniform per draft, all drawn at once"
            w = weight / len(grid) ** 2
            if accepted == 0:  # rejected at the first draft: one token, from the residual
                first += w * dist / dist.sum()
                continue
            first[d1] += w
            if accepted == 2:
                assert torch.equal(dist, _t(P2)), "bonus after full acceptance comes from the last target row"
                second[d1][d2] += w
            else:
                second[d1] += w * dist / dist.sum()
    assert torch.allclose(first, _t(P0), atol=1e-12), first
    for a, row in second.items():
        if float(row.sum()) > 0:
            assert torch.allclose(row / row.sum(), _t(P1[a]), atol=1e-12), (a, row)


def test_accept_sampled_real_randomness() -> None:
    """The same chains with the real generator: chi-square of the first and (given acceptance) second tokens."""
    g = torch.Generator().manual_seed(7)
    first, second = Counter(), {a: Counter() for a in Q1}
    q0 = _t(Q0)
    for _ in range(6000):
        d1 = int(torch.multinomial(q0, 1, generator=g))
        d2 = int(torch.multinomial(_t(Q1[d1]), 1, generator=g))
        q = torch.stack([q0, _t(Q1[d1])]).float()
        p = torch.stack([_t(P0), _t(P1[d1]), _t(P2)]).float()
        accepted, bonus = accept_sampled(torch.tensor([d1, d2]), q, p, g)
        out = [d1, d2][:accepted] + [bonus]
        first[out[0]] += 1
        if accepted >= 1:
            second[d1][out[1]] += 1
    assert chi_square_pvalue(torch.tensor([first[i] for i in range(4)]), _t(P0)) > ALPHA
    for a, c in second.items():
        assert chi_square_pvalue(torch.tensor([c[i] for i in range(4)]), _t(P1[a])) > ALPHA, (a, c)


# --- end to end: speculative_generate against the exact target distribution ------------------------------------

VOCAB = 8
DRAFT_VOCAB_IDS = [0, 1, 3, 4, 5, 7]  # tokens 2 and 6 are never drafted
PROMPT = [1, 2, 3, 4, 5]
NEW = 4  # x1 from the prefill, then one step: 2 drafts + bonus
K = 2


@dataclass
class SamplingSetup:
    target: Target
    drafter: Eagle3Drafter
    aux: list[int]
    cache: dict = field(default_factory=dict)


def small_target(seed: int) -> Target:
    """A 2-layer Llama over VOCAB tokens whose distributions are spread but not flat (entropies of about 1.3-2 nats),
    with no EOS, so every run has NEW tokens."""
    torch.manual_seed(seed)
    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1, vocab_size=VOCAB, max_position_embeddings=64, tie_word_embeddings=False,
                         bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8)
    model.generation_config.eos_token_id = None
    return Target(model, types.SimpleNamespace(eos_token_id=None))


def small_drafter() -> Eagle3Drafter:
    cfg = DrafterConfig(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1,
                        vocab_size=VOCAB, draft_vocab_size=len(DRAFT_VOCAB_IDS), target_hidden_size=32,
                        aux_layer_ids=[0, 1, 2], max_position_embeddings=64)
    torch.manual_seed(100)
    drafter = Eagle3Drafter(cfg, with_embeddings=False).eval()  # untrained: q is far from p
    with torch.no_grad():
        drafter.lm_head.weight.mul_(8)
        drafter.d2t.copy_(torch.tensor(DRAFT_VOCAB_IDS) - torch.arange(len(DRAFT_VOCAB_IDS)))
    return drafter


@pytest.fixture(scope="module")
def setup() -> SamplingSetup:
    target = small_target(seed=1)
    assert target.eos_ids == set()
    drafter = small_drafter()
    return SamplingSetup(target, drafter, target.attach(drafter))


@pytest.fixture(scope="module")
def int4_setup() -> SamplingSetup:
    """The same pair with the target on int4 layers in C (engine/int4.py), as the default preset runs it: verification
    row-exact, so sampling stays exact on this other target."""
    from playground.engine import native

    lib, problem = native.load()
    if lib is None:
        pytest.skip(f"no C library here: {problem}")
    float32 = small_target(seed=1)
    target = Target(float32.model, float32.tokenizer, weights="int4")
    drafter = small_drafter()
    return SamplingSetup(target, drafter, target.attach(drafter))


def exact_joint(setup: SamplingSetup, temperature: float, top_p: float) -> torch.Tensor:
    """P(x1..x4) of the target's own sampling, [V]*4, from one batched forward per depth (no cache); a quantised
    target (whose float32 weights are gone) through its own forward, a prefix at a time."""
    model, target = setup.target.model, setup.target
    joint = torch.ones((), dtype=torch.float64)
    for depth in range(NEW):
        prefixes = list(itertools.product(range(VOCAB), repeat=depth))
        ids = torch.tensor([PROMPT + list(p) for p in prefixes])
        if target.quantised:
            logits = torch.cat([target.forward(row.tolist(), target.new_cache(), last_only=True).logits
                                for row in ids])
        else:
            with torch.no_grad():
                logits = model(input_ids=ids).logits[:, -1].float()
        probs = reference_probs(logits, temperature, top_p).view(*([VOCAB] * depth), VOCAB)
        joint = joint.unsqueeze(-1) * probs
    return joint


@dataclass
class Samples:
    real: torch.Tensor  # [n, NEW] speculative_generate outputs
    naive: torch.Tensor  # [n, 3] x1 + the two drafts: what "accept every draft" would have emitted
    residual_from_p: torch.Tensor  # [n, 2] x1 + first token of a sampler that resamples rejections from p


def _accept_from_p(drafted, draft_probs, target_probs, generator):
    """A wrong sampler: like accept_sampled, but a rejected draft is replaced by a sample from p, not max(0, p-q)."""
    for i, token in enumerate(drafted):
        if float(torch.rand((), generator=generator)) * float(draft_probs[i, token]) < float(target_probs[i, token]):
            continue
        return i, int(torch.multinomial(target_probs[i], 1, generator=generator))
    return len(drafted), int(torch.multinomial(target_probs[len(drafted)], 1, generator=generator))


def draw(setup: SamplingSetup, temperature: float, top_p: float, n: int, monkeypatch: pytest.MonkeyPatch) -> Samples:
    key = (temperature, top_p, n)
    if key in setup.cache:
        return setup.cache[key]
    calls: list[tuple] = []
    real_accept = decode_module.accept_sampled

    def spy(drafted, draft_probs, target_probs, generator):
        calls.append((list(drafted), draft_probs.clone(), target_probs.clone()))
        return real_accept(drafted, draft_probs, target_probs, generator)

    monkeypatch.setattr(decode_module, "accept_sampled", spy)
    other = torch.Generator().manual_seed(99)
    real, naive, from_p = [], [], []
    for seed in range(n):
        calls.clear()
        cfg = GenerationConfig(max_new_tokens=NEW, k=K, temperature=temperature, top_p=top_p, seed=seed,
                               instrument=False)
        events = list(speculative_generate(setup.target, setup.drafter, setup.aux, PROMPT, cfg))
        out = [t for e in events for t in e.emitted]
        assert len(out) == NEW and events[-1].finish_reason == "length"
        drafted, q, p = calls[0]
        assert len(drafted) == K and events[1].drafted == drafted
        assert all(t in DRAFT_VOCAB_IDS for t in drafted)
        real.append(out)
        naive.append(out[:1] + drafted)
        accepted, bonus = _accept_from_p(drafted, q, p, other)
        from_p.append(out[:1] + (drafted[:accepted] + [bonus])[:1])
    setup.cache[key] = Samples(torch.tensor(real), torch.tensor(naive), torch.tensor(from_p))
    return setup.cache[key]


def counts_of(tokens: torch.Tensor) -> torch.Tensor:
    """Joint counts of the columns of [n, m] tokens, as a [V]*m tensor."""
    m = tokens.shape[1]
    index = (tokens * (VOCAB ** torch.arange(m - 1, -1, -1))).sum(-1)
    return torch.bincount(index, minlength=VOCAB**m).view(*([VOCAB] * m)).double()


def _marginal(joint: torch.Tensor, keep: tuple[int, ...]) -> torch.Tensor:
    drop = tuple(d for d in range(joint.dim()) if d not in keep)
    return joint.sum(drop) if drop else joint


@pytest.mark.parametrize("temperature,top_p,n", [(1.0, 1.0, 2000), (0.7, 0.9, 1500)])
def test_speculative_sampling_matches_target_distribution(setup: SamplingSetup, monkeypatch: pytest.MonkeyPatch,
                                                          temperature: float, top_p: float, n: int) -> None:
    exact = exact_joint(setup, temperature, top_p)
    samples = draw(setup, temperature, top_p, n, monkeypatch)
    real = counts_of(samples.real)
    report = {}
    for keep in [(0, 1, 2, 3), (0, 1, 2), (0, 1), (1,), (2,), (3,), (1, 2)]:
        report[keep] = chi_square_pvalue(_marginal(real, keep), _marginal(exact, keep))
    assert min(report.values()) > ALPHA, report
    # the drafts really were different from the target (otherwise this test would prove little)
    assert samples.naive[:, 1].eq(samples.real[:, 1]).float().mean() < 0.8


def test_speculative_sampling_on_int4_layers_with_c_steps_matches_their_distribution(
        int4_setup: SamplingSetup, monkeypatch: pytest.MonkeyPatch) -> None:
    exact = exact_joint(int4_setup, 1.0, 1.0)
    samples = draw(int4_setup, 1.0, 1.0, 2000, monkeypatch)
    real = counts_of(samples.real)
    report = {keep: chi_square_pvalue(_marginal(real, keep), _marginal(exact, keep))
              for keep in [(0, 1, 2, 3), (0, 1, 2), (0, 1), (1,), (2,), (3,), (1, 2)]}
    assert min(report.values()) > ALPHA, report
    assert samples.naive[:, 1].eq(samples.real[:, 1]).float().mean() < 0.8
    naive = chi_square_pvalue(counts_of(samples.naive), _marginal(exact, (0, 1, 2)))
    assert naive < 1e-12, f"'accept every draft' sampler not detected on int4: p = {naive}"


@pytest.mark.parametrize("temperature,top_p,n", [(1.0, 1.0, 2000), (0.7, 0.9, 1500)])
def test_negative_controls_are_detected(setup: SamplingSetup, monkeypatch: pytest.MonkeyPatch,
                                        temperature: float, top_p: float, n: int) -> None:
    """The same statistic, on the same number of runs, rejects two wrong samplers."""
    exact = exact_joint(setup, temperature, top_p)
    samples = draw(setup, temperature, top_p, n, monkeypatch)
    naive = chi_square_pvalue(counts_of(samples.naive), _marginal(exact, (0, 1, 2)))
    assert naive < 1e-12, f"'accept every draft' sampler not detected: p = {naive}"
    from_p = chi_square_pvalue(counts_of(samples.residual_from_p), _marginal(exact, (0, 1)))
    assert from_p < 1e-6, f"'resample rejections from p' sampler not detected: p = {from_p}"


def test_adaptive_draft_length_keeps_sampling_exact(setup: SamplingSetup) -> None:
    """With `min_draft_prob` the chain ends after a draft the drafter found unlikely (that draft is still verified):
    whether a position is drafted depends only on the tokens before it, so the output is still the target's. (Dropping
    the unlikely draft instead biases the drafts kept towards likely ones; that rule fails this test with p ~ 1e-14.)"""
    threshold, n = 0.3, 2000
    exact = exact_joint(setup, 1.0, 1.0)
    outputs, first_chain = [], Counter()
    for seed in range(n):
        cfg = GenerationConfig(max_new_tokens=NEW, k=K, temperature=1.0, seed=seed, instrument=False,
                               min_draft_prob=threshold)
        events = list(speculative_generate(setup.target, setup.drafter, setup.aux, PROMPT, cfg))
        outputs.append([t for e in events for t in e.emitted])
        first_chain[len(events[1].drafted)] += 1
    real = counts_of(torch.tensor(outputs))
    report = {keep: chi_square_pvalue(_marginal(real, keep), _marginal(exact, keep))
              for keep in [(0, 1, 2, 3), (0, 1, 2), (0, 1), (1,), (2,), (3,)]}
    assert min(report.values()) > ALPHA, report
    assert first_chain[1] > n // 10 and first_chain[K] > n // 10, first_chain  # chains ended early and ran to k


# --- draft trees under sampling ----------------------------------------------------------------------------------

TREE = TreeShape(depth=2, topk=3, nodes=7)  # three children of the root, the first two with children of their own


def draw_tree_outputs(setup: SamplingSetup, temperature: float, top_p: float, n: int) -> tuple[torch.Tensor, Counter]:
    outputs, first_step = [], Counter()
    for seed in range(n):
        cfg = GenerationConfig(max_new_tokens=NEW, temperature=temperature, top_p=top_p, seed=seed, instrument=False)
        events = list(tree_generate(setup.target, setup.drafter, setup.aux, PROMPT, cfg, TREE))
        outputs.append([t for e in events for t in e.emitted])
        assert len(outputs[-1]) == NEW
        first = events[1]
        assert all(t in DRAFT_VOCAB_IDS for t in first.tree_tokens) and len(first.tree_tokens) <= TREE.nodes
        if first.tree_path:  # the root's children are nodes 0, 1, 2 in the order they were drawn
            first_step["later sibling kept"] += first.tree_path[0] > 0
            first_step[f"depth {first.accepted}"] += 1
        else:
            first_step["all rejected"] += 1
    return torch.tensor(outputs), first_step


@pytest.mark.parametrize("temperature,top_p,n", [(1.0, 1.0, 2000), (0.7, 0.9, 1500)])
def test_tree_sampling_matches_target_distribution(setup: SamplingSetup, temperature: float, top_p: float,
                                                   n: int) -> None:
    exact = exact_joint(setup, temperature, top_p)
    outputs, first_step = draw_tree_outputs(setup, temperature, top_p, n)
    real = counts_of(outputs)
    report = {keep: chi_square_pvalue(_marginal(real, keep), _marginal(exact, keep))
              for keep in [(0, 1, 2, 3), (0, 1, 2), (0, 1), (1,), (2,), (3,), (1, 2)]}
    assert min(report.values()) > ALPHA, report
    # every way through the walk happened: all rejected, a later sibling kept after a rejection, two levels kept
    assert min(first_step["all rejected"], first_step["later sibling kept"], first_step["depth 2"]) >= 10, first_step


def test_tree_sampling_negative_control_is_detected(setup: SamplingSetup, monkeypatch: pytest.MonkeyPatch) -> None:
    """Trying the next sibling against the target's unchanged p (not the residual) gives rejected tokens a second
    chance: the same statistic, on the same number of runs, rejects it."""

    def unchanged_p(p, q, token):
        q = q.clone()
        q[token] = 0.0
        return p, q / q.sum()

    monkeypatch.setattr(sampling, "reject_sibling", unchanged_p)
    exact = exact_joint(setup, 1.0, 1.0)
    outputs, _ = draw_tree_outputs(setup, 1.0, 1.0, 2000)
    pvalue = min(chi_square_pvalue(_marginal(counts_of(outputs), keep), _marginal(exact, keep))
                 for keep in [(0, 1, 2, 3), (0, 1), (1,)])
    assert pvalue < 1e-6, f"the 'unchanged p' tree walk was not detected: p = {pvalue}"


@pytest.mark.parametrize(("drafted", "target_argmax", "accepted", "bonus"), [
    ([5, 6, 7], [5, 6, 7, 8], 3, 8),  # a perfect match: every draft kept, the bonus is the target's next token
    ([5, 6, 7], [9, 6, 7, 8], 0, 9),  # an early mismatch: nothing kept, the target's own token instead
    ([5, 6, 7], [5, 9, 7, 8], 1, 9),  # a mismatch in the middle: later matches do not count
    ([5, 6, 7], [5, 6, 9, 8], 2, 9),
    ([], [4], 0, 4),  # nothing drafted: plain decoding's token
])
def test_accept_greedy_table(drafted: list[int], target_argmax: list[int], accepted: int, bonus: int) -> None:
    logits = torch.full((len(target_argmax), 10), -1.0)
    logits[torch.arange(len(target_argmax)), torch.tensor(target_argmax)] = 1.0
    assert accept_greedy(torch.tensor(drafted, dtype=torch.long), logits) == (accepted, bonus)
