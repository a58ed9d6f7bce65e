"""vLLM's CPU build through the app's API (chat, and Compare of our engine beside vLLM) and through the remote
backend against a real `vllm serve`, on the real default pair. Apart from tests/test_vllm_cpu.py so that its
in-process engine is shut down before these start theirs (each vLLM engine holds ~3 GB here). Skipped where vLLM is
not installed; required in CI (conftest)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Iterator

import pytest
from gradio_client import Client

from playground.backends.availability import vllm_installed
from playground.engine import GenerationConfig, SpecCounters
from playground.presets import Preset
from playground.smollm2 import unavailable_reason
from tests.appserver import free_port, running_process
from tests.test_vllm_cpu import K, PROMPTS, ids_of, real_pair_presets

pytestmark = pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (pip install -r "
                                "requirements-vllm-cpu.txt)")

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
    url = f"http://127.0.0.1:{port}"
    with running_process(command, {**CPU_ENVIRONMENT, **os.environ}, log_path, url + "/health", "vllm serve",
                         timeout_s=420, stop_s=30):
        yield url


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
