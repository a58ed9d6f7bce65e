"""k auto choosing the method (the default with nothing said) decodes the answer's first tokens plainly to choose;
the answer goes on from them (`auto_k.answer_stream`) instead of decoding them again: the same greedy answer as
plain decoding, its steps, tokens and times counted on from the probe's, and a sampled answer, whose start the greedy
probe is not, decoded whole. On the tests' tiny pair, with step costs written by hand (no timing is asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from playground.auto_k import PROBE_TOKENS, answer_stream, reusable_probe
from playground.backends import shared_backend
from playground.drafting import PLAIN
from playground.engine import GenerationConfig
from playground.presets import get_preset
from playground.request import resolve_request
from playground.request.check import ANY_METHOD
from tests.support.step_costs import use_hand_costs

PROMPT = [{"role": "user", "content": "Tell me about the sea, then about the sea again."}]


@pytest.fixture
def backend(pair_models: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path))
    use_hand_costs(monkeypatch)
    return shared_backend(get_preset("smollm2-135m"))


def answer(backend, cfg: GenerationConfig):
    from playground.auto_k import auto_k

    prompt_ids = backend.encode(PROMPT)
    request = resolve_request(backend.preset, ANY_METHOD, cfg, None,
                              lambda: auto_k(backend, ANY_METHOD, prompt_ids, len(prompt_ids) + 32))
    stream = answer_stream(backend, prompt_ids, request.drafter, request.config, auto=request.auto)
    return prompt_ids, request, list(stream)


def test_a_greedy_answer_goes_on_from_the_probe_and_equals_plain_decoding(backend, monkeypatch) -> None:
    """... from the probe's own cache where the target keeps one (int4 here: row-exact), forwarding no text twice."""
    cfg = GenerationConfig(max_new_tokens=80, k=1)
    target, taken = backend.target, []
    take = target.take_prefix
    monkeypatch.setattr(target, "take_prefix", lambda *args: taken.append(take(*args)) or taken[-1])
    prompt_ids, request, events = answer(backend, cfg)
    if target.fast is not None and target.fast.row_exact:
        assert [len(t.ids) for t in taken if t is not None] == [len(prompt_ids) + PROBE_TOKENS - 1]
    assert request.config.guard == (request.drafter != PLAIN)
    assert len(reusable_probe(request.auto, request.config)) == PROBE_TOKENS  # one event a token, the prefill's first
    plain = [t for e in backend.stream(prompt_ids, PLAIN, GenerationConfig(max_new_tokens=80)) for t in e.emitted]
    assert [t for e in events for t in e.emitted] == plain
    assert [e.step for e in events] == list(range(len(events)))
    assert all(not e.drafted for e in events[:PROBE_TOKENS])  # the probe: plain steps
    assert all(not e.finished for e in events[:-1]) and events[-1].finished
    tokens = 0
    for earlier, event in zip([None, *events], events):
        tokens += len(event.emitted)
        assert event.total_tokens == tokens
        assert earlier is None or event.elapsed_ms >= earlier.elapsed_ms
    if request.drafter != PLAIN:  # the method chosen drafted after the probe
        assert any(e.drafted for e in events[PROBE_TOKENS:])


def test_a_sampled_or_short_answer_does_not_reuse_the_greedy_probe(backend) -> None:
    for cfg in (GenerationConfig(max_new_tokens=80, k=1, temperature=0.8, seed=3),
                GenerationConfig(max_new_tokens=20, k=1),
                GenerationConfig(max_new_tokens=80, k=1, stop_strings=("sea",))):
        _, request, events = answer(backend, cfg)
        assert request.auto is not None and not reusable_probe(request.auto, request.config)
        assert events[0].step == 0 and len(events[0].emitted) == 1  # decoded from the prompt, its own prefill first


def test_an_answer_that_ended_within_the_probe_is_the_probe() -> None:
    """Where the plain probe reached the end of the answer, the answer is its steps, as timed: nothing is decoded
    again (the backend is not asked), whatever was chosen."""
    from playground.engine import StepEvent
    from playground.engine.choice import AutoK

    probe = [StepEvent(step=i, drafted=[], accepted=0, emitted=[7 + i], total_tokens=i + 1, elapsed_ms=2.0 * i,
                       verify_ms=2.0) for i in range(11)]
    probe[-1] = StepEvent(step=10, drafted=[], accepted=0, emitted=[2], total_tokens=11, elapsed_ms=20.0,
                          verify_ms=2.0, finished=True, finish_reason="eos")
    auto = AutoK(1, {1: 1.2}, "chosen", method="suffix", probe=tuple(probe))

    class Refuses:
        def stream(self, *args, **kwargs):
            raise AssertionError("decoded again")

    for budget in (11, 80):
        events = list(answer_stream(Refuses(), [1, 2, 3], "suffix", GenerationConfig(max_new_tokens=budget, k=1),
                                    auto=auto))
        assert events == probe
    assert not reusable_probe(auto, GenerationConfig(max_new_tokens=10, k=1))  # the answer's budget ends sooner
