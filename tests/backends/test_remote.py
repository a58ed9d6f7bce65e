"""The remote backend against a real HTTP server: `python -m playground serve` over the tiny models, in a subprocess.

The server speaks vLLM's dialect (token ids per streamed chunk, spec-decode counters on /metrics, per-request
metrics in the usage chunk), so this checks the client end to end; tests/serve/test_vllm_serve.py runs it against a real
`vllm serve` (vLLM's CPU build)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from playground.backends.remote import RemoteBackend, RemoteError, base_url
from playground.engine import GenerationConfig, SpecCounters, speculative_generate, summarize
from playground.presets import Preset
from playground.request import RequestError
from playground.request.fit import DrafterMismatch
from playground.specstats import request_metrics
from tests.support.appserver import running_server

K = 4
MESSAGES = [{"role": "user", "content": "def add(a, b):"}]


@pytest.fixture(scope="module")
def server(tiny_root: Path) -> Iterator[str]:
    with running_server(tiny_root, "--drafter", "eagle3.1", "--k", str(K)) as (url, _):
        yield url


def remote(url: str, drafter: str = "server") -> RemoteBackend:
    return RemoteBackend(Preset(name="remote", title="remote", target="", drafters={"served": drafter},
                                backend="remote", url=url + "/v1"))


def local_events(tiny, prompt_ids: list[int], cfg: GenerationConfig):
    loaded = tiny.drafters["eagle3.1"]
    return list(speculative_generate(tiny.target, loaded.drafter, loaded.aux_layers, prompt_ids, cfg))


def test_base_url() -> None:
    assert base_url(" http://h:8000/v1/ ") == "http://h:8000" and base_url("https://h/x") == "https://h/x"


def test_remote_stream_equals_the_local_engine(server: str, tiny) -> None:
    backend = remote(server)
    backend.preload()
    assert backend.model == "smollm2-135m"
    chat_ids = backend.encode(MESSAGES)
    assert chat_ids == tiny.target.encode_chat(MESSAGES)  # the server applies the same chat template
    for prompt_ids in [chat_ids, *tiny.training_prompts[:2]]:
        cfg = GenerationConfig(max_new_tokens=40, k=K)
        stream = backend.stream(prompt_ids, "served", cfg)
        events = list(stream)
        local = local_events(tiny, prompt_ids, cfg)
        ids = [t for e in events for t in e.emitted]
        assert ids == [t for e in local for t in e.emitted]  # greedy: token-identical
        assert len(events) == len(local) and events[-1].finish_reason == local[-1].finish_reason
        # one chunk per engine step: accepted = tokens - 1 (the last step may be cut at a stop)
        assert [e.accepted for e in events[1:-1]] == [e.accepted for e in local[1:-1]]
        # /metrics diffs and the per-request metrics are exact
        assert stream.server_counters == SpecCounters.from_events(local, K)
        assert stream.request_metrics == request_metrics(local, K)
        run = summarize(local, K)
        assert stream.server_counters.mean_acceptance_length == run.mean_acceptance_length
        assert stream.server_counters.per_position_acceptance == run.per_position_acceptance
        # the streamed text: the ids' text less a character the budget cut short (as a vLLM server streams it)
        assert backend.decode(ids) == tiny.target.decode(ids).rstrip("\ufffd")
    assert backend.served_k == K
    assert any(e.accepted > 0 for e in events)  # the drafter is trained on these prompts: drafts get accepted


def test_chat_completions_endpoint_streams_token_ids(server: str, tiny) -> None:
    body = {"model": "smollm2-135m", "messages": MESSAGES, "max_tokens": 24, "temperature": 0, "return_token_ids": True}
    whole = httpx.post(server + "/v1/chat/completions", json=body, timeout=60).json()
    chunks = []
    with httpx.stream("POST", server + "/v1/chat/completions", json={**body, "stream": True}, timeout=60) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[len("data: "):]))
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    streamed = [t for c in chunks for t in c["choices"][0].get("token_ids", [])]
    local = [t for e in local_events(tiny, tiny.target.encode_chat(MESSAGES), GenerationConfig(max_new_tokens=24, k=K))
             for t in e.emitted]
    assert streamed == whole["choices"][0]["token_ids"] == local
    streamed_text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert streamed_text == whole["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert whole["usage"]["completion_tokens"] == len(local)


def test_server_refusals(server: str, tiny, tmp_path: Path) -> None:
    response = httpx.post(server + "/v1/completions", json={"model": "gpt-5", "prompt": "x"}, timeout=30)
    assert response.status_code == 404 and "does not exist" in response.json()["error"]["message"]
    response = httpx.post(server + "/v1/completions", json={"prompt": [5] * 600, "max_tokens": 4}, timeout=30)
    assert response.status_code == 400 and "context" in response.json()["error"]["message"]
    backend = remote(server)
    with pytest.raises(RemoteError, match="plain decoding"):
        backend.stream([5, 6], "none", GenerationConfig())
    for stray in ("eagle3", "ngram"):  # refused in check_run's words: the server runs its own drafter only
        with pytest.raises(RequestError, match=f"unknown drafter '{stray}' for preset 'remote'; choose one of none, "
                                               "served$"):
            backend.stream([5, 6], stray, GenerationConfig())
    with pytest.raises(RemoteError, match="failed \\(400\\)"):
        list(backend.stream([5] * 600, "served", GenerationConfig(max_new_tokens=4)))
    # a drafter named for the server is checked against the served target, from the two config.json files
    bad = tmp_path / "bad-drafter"
    bad.mkdir()
    config = json.loads((tiny.root / "eagle3.1" / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "target_hidden_size": 4096}))
    with pytest.raises(DrafterMismatch, match="expects target hidden size 4096, target has 64"):
        remote(server, drafter=str(bad)).preload()
    remote(server, drafter=str(tiny.root / "eagle3.1")).preload()  # the right one passes


def test_unreachable_server() -> None:
    backend = remote("http://127.0.0.1:9")
    with pytest.raises(RemoteError, match="cannot reach the server at http://127.0.0.1:9"):
        backend.encode(MESSAGES)
