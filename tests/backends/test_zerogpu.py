"""ZeroGPU support: `spaces.GPU` only on a ZeroGPU Space, and what crosses its process boundary pickles."""

from __future__ import annotations

import pickle
from pathlib import Path
from types import SimpleNamespace

import pytest

from playground.backends import zerogpu
from playground.engine import AttentionMass, GenerationConfig, StepEvent


def test_step_events_and_settings_pickle() -> None:
    event = StepEvent(step=3, drafted=[5, 6], accepted=1, emitted=[5, 9], draft_probs=[0.9, 0.2],
                      attention=[AttentionMass(0.3, 0.8, 0.2), AttentionMass(0.1, 0.6, 0.4)], hidden_rms=[1.0, 2.5],
                      draft_ms=1.5, verify_ms=2.0, total_tokens=4, elapsed_ms=9.0, finished=True, finish_reason="eos")
    assert pickle.loads(pickle.dumps(event)) == event
    cfg = GenerationConfig(max_new_tokens=8, temperature=0.5, stop_strings=("\n",))
    assert pickle.loads(pickle.dumps(cfg)) == cfg


def test_stream_local_yields_picklable_events(tiny_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLAYGROUND_MODELS_DIR", str(tiny_root))
    from playground.backends import shared_backend
    from playground.presets import get_preset

    backend = shared_backend(get_preset("smollm2-135m"))
    prompt = backend.encode([{"role": "user", "content": "def add"}])
    cfg = GenerationConfig(max_new_tokens=12, k=3)
    events = list(zerogpu.stream_local("smollm2-135m", prompt, "eagle3.1", cfg))  # identity off ZeroGPU
    direct = list(backend.stream(prompt, "eagle3.1", cfg))
    assert [(e.emitted, e.accepted) for e in events] == [(e.emitted, e.accepted) for e in direct]
    assert all(pickle.loads(pickle.dumps(e)).emitted == e.emitted for e in events)
    assert any(e.attention for e in events)  # the local engine's instrumentation crosses the boundary too


def test_gpu_decorator_uses_spaces_only_on_zerogpu(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def fake_gpu(fn, duration=None):
        calls.append(duration)
        return SimpleNamespace(wrapped=fn)

    def run() -> int:
        return 1

    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    assert zerogpu.gpu(run) is run and zerogpu.gpu(duration=30)(run) is run
    monkeypatch.setattr(zerogpu, "spaces", SimpleNamespace(GPU=fake_gpu))  # what a ZeroGPU Space imports
    assert zerogpu.gpu(run).wrapped is run
    assert zerogpu.gpu(duration=zerogpu.lease_seconds)(run).wrapped is run
    assert calls == [None, zerogpu.lease_seconds]


def test_lease_is_bounded() -> None:
    short = zerogpu.lease_seconds("smollm2-135m", [1] * 10, "eagle3.1", GenerationConfig(max_new_tokens=64))
    assert 20 <= short < 40
    assert zerogpu.lease_seconds("x", [1] * 100_000, "none", GenerationConfig(max_new_tokens=4096)) == 120


def test_stop_reaches_a_run_whose_engine_cannot_see_the_switch(tiny_root: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """On ZeroGPU the local backend is wrapped (ZeroGpuBackend): its stream runs in a forked worker that cannot read
    the stop switch, so its capabilities say so and the run driver stops pulling steps itself; nor can it time plain
    steps beside the run, which the run says. The worker is played here by stream_local on this process (off ZeroGPU
    it is the plain function), which never sees `should_stop`."""
    import playground.backends as backends
    from playground.backends.local import LocalBackend
    from playground.playback import Conversation, RunSettings, chat_turn
    from playground.presets import get_preset

    monkeypatch.setenv("PLAYGROUND_MODELS_DIR", str(tiny_root))
    preset = get_preset("smollm2-135m")
    wrapped = zerogpu.ZeroGpuBackend(LocalBackend(preset))
    assert not wrapped.capabilities.checks_stop and not wrapped.capabilities.times_plain_steps
    monkeypatch.setitem(backends._SHARED, preset.name, wrapped)  # what open_backend gives on a ZeroGPU Space
    asked = []  # Stop is pressed once the run has asked the switch three times: between its steps, however fast
    # they come (the tiny pair can finish 400 tokens inside one UI update, so a Stop pressed on a render came late)

    def pressed() -> bool:
        asked.append(True)
        return len(asked) > 3

    run = list(chat_turn(Conversation(), "Hello there", RunSettings(max_new_tokens=400), pressed))[-1]
    assert run.finish_reason == "cancelled" and run.status.split(";")[0] == "stopped"  # a busy machine adds a note
    assert 1 <= run.events[-1].total_tokens < 400
    assert run.baseline is None and "ZeroGPU" in run.missing_fields["baseline"]


def test_on_zerogpu_the_local_backend_comes_wrapped(tiny_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import playground.backends as backends
    import playground.request.availability as availability
    from playground.backends import open_backend
    from playground.presets import get_preset

    monkeypatch.setenv("PLAYGROUND_MODELS_DIR", str(tiny_root))
    monkeypatch.setattr(availability, "on_zerogpu", lambda: True)
    monkeypatch.setattr(backends, "backend_unavailable_reason", lambda preset: None)  # a GPU: not here
    backend = open_backend(get_preset("smollm2-135m"))
    assert isinstance(backend, zerogpu.ZeroGpuBackend) and backend.inner.name == backend.name == "local"
