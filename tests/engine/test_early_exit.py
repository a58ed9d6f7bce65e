"""Early exit (engine/early_exit.py), the self-speculative method: the target's first layers draft, the whole target
verifies.

1. Its draft model is the target cut after its first layers: the same weights in place (no copy), its logits those of
   a model with only those layers, on the float32 and the int4 path; a layer count the target cannot cut is refused
   in one line.
2. Greedy decoding is token-identical to plain decoding on both paths, for several k and exits; not vacuous: drafts
   were accepted and rejected. The adaptive stop ends a chain early and changes nothing in the answer.
3. Replay steps exactly as the live run does.
4. Sampling is exact: thousands of short runs on a vocabulary-8 target against the exact joint distribution of its
   own samples, with a negative control (accept every draft).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from playground.drafting import EARLY_EXIT_LAYERS
from playground.engine import GenerationConfig, Target, plain_generate
from playground.engine import early_exit as early_exit_module
from playground.engine.proposers import decode
from playground.engine.replay import replay_weightless, teacher_force
from tests.engine.test_sampling import _marginal as marginal
from tests.engine.test_sampling import chi_square_pvalue, counts_of
from tests.engine.test_weightless import NEW, PROMPT, assert_follows, exact_joint, flat
from tests.engine.test_weightless import small_target as small_target  # noqa: F401 (a fixture)
from tests.support.lossless import assert_same_or_near_tie

METHOD = "early-exit"
NEW_TOKENS = 40


def settings(layers: int) -> tuple[tuple[str, int], ...]:
    return ((EARLY_EXIT_LAYERS.name, layers),)


@pytest.fixture(scope="module")
def int4_target(tiny_root: Path) -> Target:
    from playground.engine import native

    if native.load()[0] is None:
        pytest.skip("no C library here")
    return Target.load(str(tiny_root / "target"), weights="int4")


@pytest.fixture(scope="module", params=["float32", "int4"])
def target(request: pytest.FixtureRequest, tiny, int4_target: Target) -> Target:
    return tiny.target if request.param == "float32" else int4_target


def test_the_draft_is_the_target_cut_after_its_first_layers(tiny) -> None:
    """The first layers' logits equal those of a copy of the model with the later layers removed, and the draft reads
    the target's own weights."""
    target, layers = tiny.target, 2
    draft = target.fast.first_layers(layers)
    assert all(a is b for a, b in zip(draft.layers, target.fast.layers)) and len(draft.layers) == layers
    cut = copy.deepcopy(target.model)
    cut.model.layers = cut.model.layers[:layers]
    cut.config.num_hidden_layers = layers
    ids = torch.tensor(tiny.training_prompts[0])
    logits, _ = draft.forward(ids, draft.new_cache(64), [], False)
    with torch.no_grad():
        want = cut(input_ids=ids[None]).logits[0].float()
    torch.testing.assert_close(logits.float(), want, atol=2e-4, rtol=2e-4)


def test_a_layer_count_the_target_cannot_cut_is_refused_in_one_line(tiny) -> None:
    layers = tiny.target.num_layers
    for wrong in (layers, layers + 3):
        with pytest.raises(ValueError, match=f"from 1 to {layers - 1} for this target, which has {layers} layers"):
            list(decode(tiny.target, METHOD, tiny.training_prompts[0],
                        GenerationConfig(max_new_tokens=4, k=2, method_settings=settings(wrong))))


@pytest.mark.parametrize("k", [1, 4])
def test_greedy_output_is_token_identical_on_both_paths(tiny, target: Target, k: int) -> None:
    kinds = {"whole": 0, "rejected": 0}
    for layers in range(1, target.num_layers):
        for prompt in tiny.training_prompts[:3]:
            want = flat(list(plain_generate(target, prompt, GenerationConfig(max_new_tokens=NEW_TOKENS))))
            cfg = GenerationConfig(max_new_tokens=NEW_TOKENS, k=k, method_settings=settings(layers))
            events = list(decode(target, METHOD, prompt, cfg))
            assert_same_or_near_tie(target, prompt, flat(events), want, f"exit after {layers}, k={k}")
            for e in events[1:]:
                assert e.attention is None and e.hidden_rms is None and len(e.draft_probs) == len(e.drafted) <= k
                kinds["whole" if e.accepted == len(e.drafted) else "rejected"] += 1
    assert all(kinds.values()), kinds


def test_the_adaptive_stop_ends_chains_early_and_leaves_the_answer(tiny) -> None:
    prompt = tiny.training_prompts[1]
    want = flat(list(plain_generate(tiny.target, prompt, GenerationConfig(max_new_tokens=NEW_TOKENS))))
    cfg = GenerationConfig(max_new_tokens=NEW_TOKENS, k=6, min_draft_prob=0.6, method_settings=settings(1))
    events = list(decode(tiny.target, METHOD, prompt, cfg))
    assert_same_or_near_tie(tiny.target, prompt, flat(events), want, "adaptive stop")
    room = [e for e in events[1:] if e.total_tokens - len(e.emitted) + 7 < NEW_TOKENS]  # budget for a whole chain
    short = [e for e in room if len(e.drafted) < 6]
    assert short and all(e.draft_probs[-1] < 0.6 and min(e.draft_probs[:-1], default=1) >= 0.6 for e in short)


def test_replay_steps_as_the_live_run(tiny) -> None:
    compared = 0
    for prompt in tiny.training_prompts[:3]:
        cfg = GenerationConfig(max_new_tokens=NEW_TOKENS, k=3, method_settings=settings(2))
        live = [(e.drafted, e.accepted, e.emitted) for e in decode(tiny.target, METHOD, prompt, cfg)]
        forced = teacher_force(tiny.target, [], prompt, [t for step in live for t in step[2]])
        replayed = [(e.drafted, e.accepted, e.emitted) for e in replay_weightless(
            forced, tiny.target, METHOD, 3, settings(2), max_new_tokens=NEW_TOKENS)]
        assert replayed == live
        compared += len(live)
    assert compared > 20


def draws(target: Target, n: int, monkeypatch: pytest.MonkeyPatch) -> tuple[torch.Tensor, torch.Tensor]:
    """n sampled runs [n, NEW], and the first token with the first step's first draft, kept as "accept every draft"
    would keep it [n, 2]."""
    calls: list[list[int]] = []
    real_accept = early_exit_module.accept_sampled

    def spy(drafted, draft_probs, target_probs, generator):
        calls.append(drafted.tolist())
        return real_accept(drafted, draft_probs, target_probs, generator)

    monkeypatch.setattr(early_exit_module, "accept_sampled", spy)
    real, naive = [], []
    for seed in range(n):
        calls.clear()
        cfg = GenerationConfig(max_new_tokens=NEW, k=2, temperature=1.0, seed=seed, instrument=False,
                               method_settings=settings(1))
        out = flat(list(decode(target, METHOD, PROMPT, cfg)))
        assert len(out) == NEW
        real.append(out)
        naive.append(out[:1] + calls[0][:1])
    return torch.tensor(real), torch.tensor(naive)


def test_sampling_matches_the_target_and_accepting_every_draft_fails(small_target: Target,  # noqa: F811
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    exact = exact_joint(small_target, 1.0)
    real, naive = draws(small_target, 2000, monkeypatch)
    assert_follows(real, exact)
    assert naive[:, 1].eq(real[:, 1]).float().mean() < 0.9  # the drafts were often rejected
    naive_p = chi_square_pvalue(counts_of(naive), marginal(exact, (0, 1)))
    assert naive_p < 1e-6, f"'accept every draft' not detected: p = {naive_p}"
