"""`python -m playground serve` under bad input and limits: every request gets an HTTP answer with the right status and
an OpenAI-style error object, oversized and slow bodies are refused early, only served prompts are counted, and the
server log holds no traceback. A real uvicorn server in a subprocess over the tiny models, on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from playground.engine import GenerationConfig, SpecCounters, speculative_generate
from playground.serve.app import Admission, ApiError
from playground.serve.requests import ChatCompletionRequest, CompletionRequest
from tests.support.appserver import running_server
from tests.support.step_costs import CHOSEN_K, use_hand_costs

MESSAGES = [{"role": "user", "content": "def add(a, b):"}]
DRAFT_COUNTERS = ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total")


@pytest.fixture(scope="module")
def server(tiny_root: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """(URL, process); at teardown, the server's log must hold no traceback."""
    log: list[str] = []
    with running_server(tiny_root, "--drafter", "eagle3.1", "--k", "3", "--min-draft-prob", "0.5",
                        "--body-timeout", "1") as (url, proc):
        yield url, proc
        proc.terminate()
        log += proc.stderr.read().splitlines()
    assert not [line for line in log if "Traceback" in line], "\n".join(log[-40:])


def post_raw(url: str, path: str, body: str) -> httpx.Response:
    return httpx.post(url + path, content=body, headers={"Content-Type": "application/json"}, timeout=30)


BAD_REQUESTS = [
    ("/v1/completions", '{"prompt": "hi", "max_tokens": 1e999}', 400, "max_tokens"),
    ("/v1/completions", '{"prompt": "hi", "temperature": NaN}', 400, "temperature"),
    ("/v1/completions", '{"prompt": "hi", "temperature": 5}', 400, "temperature"),  # vLLM's range is [0, 2]
    ("/v1/completions", '{"prompt": "hi", "top_p": 0}', 400, "top_p"),
    ("/v1/completions", '{"prompt": [-1, 5]}', 400, "prompt"),
    ("/v1/completions", '{"prompt": [1000000]}', 400, "prompt"),
    ("/v1/completions", '{"prompt": ""}', 400, "prompt"),
    ("/v1/completions", '{"prompt": ["a", "b"]}', 400, "prompt"),
    ("/v1/completions", '{"prompt": "hi", "stop": 5}', 400, "stop"),
    ("/v1/completions", '{"prompt": "hi", "seed": "abc"}', 400, "seed"),
    ("/v1/completions", '{"prompt": "hi", "max_tokens": 0}', 400, "max_tokens"),
    ("/v1/completions", '{"prompt": "hi", "max_tokens": 1000000000}', 400, "max_tokens"),
    ("/v1/completions", '{"prompt": "hi", "n": 5}', 400, "n"),
    ("/v1/completions", '{"prompt": "hi", "logprobs": 5}', 400, "logprobs"),
    ("/v1/completions", '{"prompt": "hi", "stream": "no"}', 400, "stream"),
    ("/v1/completions", '{"prompt": "hi", "model": "gpt-5"}', 404, "model"),
    ("/v1/completions", '{"prompt": "hi"', 400, None),
    ("/v1/completions", "[1, 2]", 400, None),
    ("/v1/chat/completions", '{"messages": []}', 400, "messages"),
    ("/v1/chat/completions", json.dumps({"messages": MESSAGES, "tool_choice": "required"}), 400, "tool_choice"),
    ("/v1/chat/completions", json.dumps({"messages": MESSAGES, "modalities": ["text", "audio"]}), 400, "modalities"),
    ("/v1/chat/completions", '{"messages": [{"role": "tool", "content": "x"}]}', 400, "messages"),
    ("/v1/chat/completions", '{"messages": [{"role": "robot", "content": "x"}]}', 400, "messages"),
    ("/v1/chat/completions", json.dumps({"messages": MESSAGES, "chat_template": "nope"}), 400, "chat_template"),
    ("/detokenize", '{"tokens": [-1]}', 400, "tokens"),
    ("/detokenize", '{"tokens": [1000000000000]}', 400, "tokens"),
    ("/tokenize", "{}", 400, None),
    ("/v1/embeddings", "{}", 404, None),
]


@pytest.mark.parametrize(("path", "body", "status", "param"), BAD_REQUESTS)
def test_bad_requests_get_an_error_object(server, path: str, body: str, status: int, param: str | None) -> None:
    response = post_raw(server[0], path, body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"] and "\n" not in error["message"] and error["code"] == status
    if param:
        assert error["param"] == param


@pytest.mark.parametrize(("body", "words"), [
    ("not json", "is not valid JSON (Expecting value at character 0)"),
    ('{"prompt": "hi"', "is not valid JSON (Expecting ',' delimiter at character 15)"),
    ("[1, 2]", "must be a JSON object of the request's fields, not an array"),
    ('"hi"', "not a string"),
    ("", "is empty (or null)"),
])
def test_a_body_that_is_not_a_json_object_is_refused_in_words(server, body: str, words: str) -> None:
    """Issue 55: a non-JSON body was answered {"message": "0: JSON decode error", "param": "0"} (pydantic's
    location, a character, read as a field)."""
    error = post_raw(server[0], "/v1/completions", body).json()["error"]
    assert error["message"].startswith("the request body ") and words in error["message"], error
    assert error["param"] is None and error["code"] == 400


def test_a_bad_header_gets_an_answer(server) -> None:
    host, port = server[0].removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}")
        assert sock.recv(4096).startswith(b"HTTP/1.1 400")


def test_oversized_body_is_refused_at_once(server) -> None:
    body = b'{"prompt": "' + b"a" * (20 << 20) + b'"}'
    started = time.monotonic()
    response = httpx.post(server[0] + "/v1/completions", content=body, timeout=30)
    assert response.status_code == 413 and "larger than this server accepts" in response.json()["error"]["message"]
    assert time.monotonic() - started < 2
    peak_kib = next(int(line.split()[1]) for line in Path(f"/proc/{server[1].pid}/status").read_text().splitlines()
                    if line.startswith("VmHWM:"))
    assert peak_kib < 1 << 20, f"server peak memory {peak_kib >> 10} MiB"


def test_slow_body_times_out(server) -> None:
    host, port = server[0].removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"prompt\": ")
        started = time.monotonic()
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408") and time.monotonic() - started < 5


def metric(url: str, name: str) -> float:
    lines = [line for line in httpx.get(url + "/metrics", timeout=30).text.splitlines() if line.startswith(name)]
    return float(lines[0].rsplit(" ", 1)[1])


def test_only_served_prompts_are_counted(server) -> None:
    url = server[0]
    before = metric(url, "vllm:prompt_tokens_total")
    refused = httpx.post(url + "/v1/completions", json={"prompt": [5] * 600, "max_tokens": 4}, timeout=30)
    assert refused.status_code == 400 and "context length" in refused.json()["error"]["message"]
    assert metric(url, "vllm:prompt_tokens_total") == before
    served = httpx.post(url + "/v1/completions", json={"prompt": [5, 6, 7], "max_tokens": 4, "temperature": 0},
                        timeout=60)
    assert served.status_code == 200 and served.json()["usage"]["completion_tokens"] >= 1
    assert metric(url, "vllm:prompt_tokens_total") == before + 3


def test_adaptive_drafting_counts_what_the_engine_drafts(server, tiny) -> None:
    """The server runs with --min-draft-prob 0.5: its draft counters equal the local engine's with the same setting,
    which ends some chains before k = 3 (the same run at fixed k drafts more)."""
    url, prompt = server[0], tiny.training_prompts[0]
    before = [metric(url, name) for name in DRAFT_COUNTERS]
    served = httpx.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": 32, "temperature": 0},
                        timeout=60)
    assert served.status_code == 200
    drafts, draft_tokens = (metric(url, name) - b for name, b in zip(DRAFT_COUNTERS, before))
    loaded = tiny.drafters["eagle3.1"]

    def local(min_draft_prob: float) -> SpecCounters:
        cfg = GenerationConfig(max_new_tokens=32, k=3, min_draft_prob=min_draft_prob)
        return SpecCounters.from_events(speculative_generate(tiny.target, loaded.drafter, loaded.aux_layers, prompt,
                                                             cfg), 3)

    adaptive = local(0.5)
    assert (drafts, draft_tokens) == (adaptive.drafts, adaptive.draft_tokens)
    fixed = local(0.0)
    assert adaptive.draft_tokens / adaptive.drafts < fixed.draft_tokens / fixed.drafts


def departures(url: str) -> tuple[float, float]:
    """(requests abandoned by their client, engine steps that finished after a client's leaving was seen), as the
    server counts them."""
    return metric(url, "playground:abandoned_requests_total"), metric(url, "playground:steps_after_client_left_total")


def settled(url: str) -> None:
    """Until nothing decodes or waits (the server's own gauges), 30 s at most."""
    deadline = time.monotonic() + 30
    while (metric(url, "vllm:num_requests_running") or metric(url, "vllm:num_requests_waiting")) and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    assert metric(url, "vllm:num_requests_running") == 0 and metric(url, "vllm:num_requests_waiting") == 0


def test_a_client_that_leaves_mid_stream_stops_its_decoding_within_a_step(server) -> None:
    """Counted in steps, not tokens or seconds: the client leaves after the first text of a 450-token answer, and
    the server's own count says at most one more step finished after it saw the leaving (the one in flight)."""
    url = server[0]
    body = {"messages": MESSAGES, "max_tokens": 450, "temperature": 0, "stream": True}
    abandoned, after = departures(url)
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["delta"].get("content"):
                break
    settled(url)
    now_abandoned, now_after = departures(url)
    assert now_abandoned == abandoned + 1, "the answer finished before its client left"
    assert now_after - after <= 1  # the step in flight when the leaving was seen
    assert httpx.get(url + "/health", timeout=30).status_code == 200  # and the teardown checks the log


def stream_answer(url: str, body: dict) -> list[int]:
    ids = []
    with httpx.stream("POST", url + "/v1/chat/completions", json={**body, "stream": True}, timeout=120) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                ids += json.loads(line[6:])["choices"][0].get("token_ids") or []
    return ids


def test_concurrent_streams_equal_their_solo_answers(server) -> None:
    url = server[0]
    bodies = [{"messages": [{"role": "user", "content": f"Write a list of {n} fruits."}], "max_tokens": 32,
               "temperature": 0, "return_token_ids": True} for n in range(6)]
    solo = [stream_answer(url, body) for body in bodies]
    with ThreadPoolExecutor(len(bodies)) as pool:
        together = list(pool.map(lambda body: stream_answer(url, body), bodies))
    assert together == solo and all(solo)


def test_a_cancel_storm_leaves_nothing_running(server) -> None:
    """Twelve clients (four decode at once, eight wait) each leave after the stream's first chunk: nothing is left
    running or waiting, and each request the server saw abandoned finished at most one step (the one in flight)
    after it saw so."""
    url = server[0]
    body = {"messages": MESSAGES, "max_tokens": 450, "temperature": 0, "stream": True}
    abandoned, after = departures(url)

    def leave_after_first_chunk(_: int) -> None:
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as response:
            next(response.iter_lines())

    with ThreadPoolExecutor(12) as pool:
        list(pool.map(leave_after_first_chunk, range(12)))
    settled(url)
    now_abandoned, now_after = departures(url)
    assert 0 < now_abandoned - abandoned <= 12  # a stream cancelled before it decoded is not an abandoned request
    assert now_after - after <= now_abandoned - abandoned


def test_a_non_streaming_request_stops_within_a_step_of_its_client_leaving(server) -> None:
    """The client sends a 450-token request, waits until the server has started decoding it (its generation count
    moves), and closes the connection: the server counts it abandoned, with at most one step (the one in flight)
    finished after it saw the leaving, however fast or busy the machine."""
    url = server[0]
    host, port = url.removeprefix("http://").rsplit(":", 1)
    abandoned, after = departures(url)
    generated = metric(url, "vllm:generation_tokens_total")
    payload = json.dumps({"messages": MESSAGES, "max_tokens": 450, "temperature": 0}).encode()
    client = socket.create_connection((host, int(port)), timeout=30)
    try:
        client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload))
        deadline = time.monotonic() + 30
        while metric(url, "vllm:generation_tokens_total") == generated and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
        client.close()
    settled(url)
    now_abandoned, now_after = departures(url)
    assert now_abandoned == abandoned + 1, "the answer finished before its client left"
    assert now_after - after <= 1  # the step in flight when the leaving was seen


def test_seeded_sampling_repeats(server) -> None:
    body = {"messages": MESSAGES, "max_tokens": 16, "temperature": 1.0, "seed": 7, "return_token_ids": True}
    first, second = (httpx.post(server[0] + "/v1/chat/completions", json=body, timeout=60).json() for _ in range(2))
    assert first["choices"][0]["token_ids"] == second["choices"][0]["token_ids"]


def test_admission_queues_then_refuses() -> None:
    async def scenario() -> list[str]:
        admission, seen = Admission(running=1, waiting=1), []

        async def run(name: str, hold: asyncio.Event) -> None:
            try:
                async with admission.slot():
                    seen.append(f"{name} runs")
                    await hold.wait()
            except ApiError as err:
                seen.append(f"{name} {err.status_code}")

        release = asyncio.Event()
        tasks = [asyncio.create_task(run(name, release)) for name in ("a", "b", "c")]
        await asyncio.sleep(0.05)
        release.set()
        await asyncio.gather(*tasks)
        return seen

    assert asyncio.run(scenario()) == ["a runs", "c 429", "b runs"]


def test_a_developer_message_is_the_system_turn(server) -> None:
    def answer(role: str) -> tuple[list[int], str]:
        messages = [{"role": role, "content": "Answer in one word."}, *MESSAGES]
        ids = httpx.post(server[0] + "/tokenize", json={"messages": messages}, timeout=30).json()["tokens"]
        response = httpx.post(server[0] + "/v1/chat/completions", timeout=60, json={
            "messages": messages, "max_tokens": 8, "temperature": 0})
        assert response.status_code == 200, response.text
        return ids, response.json()["choices"][0]["message"]["content"]

    without_system = httpx.post(server[0] + "/tokenize", json={"messages": MESSAGES}, timeout=30).json()["tokens"]
    assert answer("developer") == answer("system") and answer("system")[0] != without_system


def test_a_model_is_found_by_its_id(server) -> None:
    listed = httpx.get(server[0] + "/v1/models", timeout=30).json()["data"]
    found = httpx.get(server[0] + f"/v1/models/{listed[0]['id']}", timeout=30)
    assert found.status_code == 200 and found.json() == listed[0]
    missing = httpx.get(server[0] + "/v1/models/gpt-5", timeout=30)
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "model"


def test_request_models_keep_types_strict() -> None:
    assert CompletionRequest.model_validate_json('{"prompt": [[1, 2]], "stop": "x"}').prompt == [1, 2]
    assert CompletionRequest.model_validate_json('{"prompt": "x", "temperature": 0}').temperature == 0.0
    assert CompletionRequest.model_validate_json('{"prompt": "x", "n": 1, "logprobs": null}').stop_strings == ()
    ignored = {"user": "u1", "store": False, "metadata": {"a": "b"}, "parallel_tool_calls": True,
               "tool_choice": "none", "modalities": ["text"]}  # change nothing in the answer: accepted, as vLLM does
    assert ChatCompletionRequest.model_validate({"messages": MESSAGES, **ignored}).messages[0].content


def test_serve_takes_a_target_and_drafter_folder_of_ones_own(tiny_root: Path, tiny) -> None:
    """`serve --target FOLDER --drafter-path FOLDER` serves that pair, named as given (as `vllm serve MODEL` does); its
    greedy answer equals the target's plain decoding, with drafts accepted. A drafter path that does not fit the
    target is refused in one line before serving."""
    from playground.engine import GenerationConfig, emitted_ids, plain_generate

    target, drafter = str(tiny_root / "target"), str(tiny_root / "eagle3.1")
    prompt = tiny.training_prompts[0]
    with running_server(tiny_root, "--target", target, "--drafter-path", drafter, "--k", "3") as (url, _):
        assert [m["id"] for m in httpx.get(url + "/v1/models", timeout=30).json()["data"]] == [target]
        answer = httpx.post(url + "/v1/completions", timeout=60, json={
            "model": target, "prompt": prompt, "max_tokens": 24, "temperature": 0, "return_token_ids": True,
            "stream_options": {"include_usage": True}, "stream": False}).json()
    plain = emitted_ids(list(plain_generate(tiny.target, prompt, GenerationConfig(max_new_tokens=24))))
    assert answer["choices"][0]["token_ids"] == plain
    assert answer["metrics"]["speculative_decoding"]["num_accepted_draft_tokens"] > 0  # the drafter was used
    health = answer["metrics"]["drafter_health"]  # the tests' tiny drafter has no fingerprint: said, not guessed
    assert health["status"] == "not checked" and "no fingerprint" in health["text"]
    refused = subprocess.run([sys.executable, "-m", "playground", "serve", "--target", target, "--drafter-path",
                              str(tiny_root / "target"), "--port", "0"], capture_output=True, text=True, timeout=120)
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), refused.stderr[-2000:]


def test_a_server_that_drafts_trees_answers_as_plain_decoding(pair_models: Path, tiny) -> None:
    """`serve --tree-nodes N`: every request drafts a tree (in process, through the app itself); the greedy answer
    equals plain decoding's, the request's metrics count the accepted paths by depth, a sampled request repeats with
    its seed; a tree without a drafter, or with adaptive drafting, is refused before serving."""
    from fastapi.testclient import TestClient

    from playground.engine import GenerationConfig, TreeShape, emitted_ids, plain_generate
    from playground.presets import get_preset
    from playground.serve.app import build_app
    from playground.serve.engine import load_engine

    shape = TreeShape(depth=3, topk=2, nodes=8)
    engine = load_engine(get_preset("smollm2-135m"), "eagle3.1", 4, None, tree=shape)
    assert engine.draft_depth == 3 and len(engine.counters.accepted_per_pos) == 3
    prompt = tiny.training_prompts[0]
    with TestClient(build_app(engine)) as client:
        answer = client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 24, "temperature": 0,
                                                      "return_token_ids": True}).json()
        sampled = [client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 12, "temperature": 0.8,
                                                        "seed": 7, "return_token_ids": True}).json()
                   for _ in range(2)]
    plain = emitted_ids(list(plain_generate(engine.backend.target, prompt, GenerationConfig(max_new_tokens=24))))
    assert answer["choices"][0]["token_ids"] == plain
    metrics = answer["metrics"]["speculative_decoding"]
    assert metrics["num_spec_tokens"] == 3 and len(metrics["acceptance_histogram"]) == 4
    assert metrics["num_accepted_draft_tokens"] > 0
    assert sampled[0]["choices"][0]["token_ids"] == sampled[1]["choices"][0]["token_ids"]
    for drafter, adaptive, message in (("none", 0.0, "need a drafter"), ("eagle3.1", 0.3, "chains")):
        with pytest.raises(ValueError, match=message):
            load_engine(get_preset("smollm2-135m"), drafter, 4, None, adaptive, tree=shape)


def test_a_suffix_decoding_server_drafts_from_its_earlier_answers(pair_models: Path, tiny) -> None:
    """`serve --drafter suffix`: every greedy answer equals plain decoding's, and a prompt asked again drafts from
    the server's cache of the first answer (more drafts accepted than the first time, when only its own prompt and
    answer so far were there)."""
    from fastapi.testclient import TestClient

    from playground.engine import GenerationConfig, emitted_ids, plain_generate
    from playground.presets import get_preset
    from playground.serve.app import build_app
    from playground.serve.engine import load_engine

    engine = load_engine(get_preset("smollm2-135m"), "suffix", 4, None)
    prompt = tiny.training_prompts[1]
    with TestClient(build_app(engine)) as client:
        answers = [client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 32, "temperature": 0,
                                                        "return_token_ids": True}).json() for _ in range(2)]
    plain = emitted_ids(list(plain_generate(engine.backend.target, prompt, GenerationConfig(max_new_tokens=32))))
    assert [a["choices"][0]["token_ids"] for a in answers] == [plain, plain]
    accepted = [a["metrics"]["speculative_decoding"]["num_accepted_draft_tokens"] for a in answers]
    assert accepted[1] > accepted[0], accepted


def test_sampling_defaults_come_from_the_model_then_the_preset_then_openai(tmp_path: Path) -> None:
    """A request that leaves temperature or top_p out gets the model's generation_config.json values, else the
    preset's shipped ones, else OpenAI's; --generation-config vllm skips the model's; an override wins."""
    from playground.presets import SMOLLM2_SAMPLING
    from playground.serve.defaults import parse_override, sampling_defaults

    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": 0.6, "do_sample": True}))
    model = sampling_defaults(str(tmp_path), SMOLLM2_SAMPLING)
    assert (model.temperature, model.top_p) == (0.6, 1.0) and "generation_config.json" in model.source
    shipped = sampling_defaults(str(tmp_path / "none"), SMOLLM2_SAMPLING, shipped_source="its card")
    assert (shipped.temperature, shipped.top_p, shipped.source) == (0.2, 0.9, "its card")
    assert sampling_defaults(str(tmp_path), SMOLLM2_SAMPLING, "vllm").to_dict() == {
        "temperature": 1.0, "top_p": 1.0, "source": "OpenAI's defaults"}
    over = sampling_defaults(str(tmp_path), {}, "auto", parse_override('{"top_p": 0.5}'))
    assert (over.temperature, over.top_p) == (0.6, 0.5) and over.source.startswith("--override-generation-config")
    for bad, message in (("{", "not JSON"), ("[1]", "JSON object"), ('{"top_k": 5}', "top_k"),
                         ('{"temperature": "hot"}', "a number"), ('{"top_p": 0}', "top_p must be in")):
        with pytest.raises(ValueError, match=message):
            parse_override(bad)


def test_a_request_without_sampling_fields_gets_the_servers_defaults_and_a_key_guards_the_paths_vllm_guards(
        pair_models: Path, tiny) -> None:
    """In process, through the app itself: with the defaults overridden to greedy, a request that names no
    temperature equals plain greedy decoding, and /v1/models says which defaults apply and why; with API keys, as
    vLLM 0.32 applies them: /v1 paths (a route or not) refuse a missing or wrong key with 401 {"error":
    "Unauthorized"}, /health, /metrics, /tokenize and /detokenize answer without one, either key gets through and the
    scheme's case does not matter."""
    from fastapi.testclient import TestClient

    from playground.engine import emitted_ids, plain_generate
    from playground.presets import get_preset
    from playground.serve.app import build_app
    from playground.serve.engine import load_engine

    engine = load_engine(get_preset("smollm2-135m"), "eagle3.1", 4, None, override={"temperature": 0.0})
    prompt = tiny.training_prompts[0]
    plain = emitted_ids(list(plain_generate(engine.backend.target, prompt, GenerationConfig(max_new_tokens=16))))
    with TestClient(build_app(engine, api_keys=["s3cret", "other"])) as client:
        key = {"Authorization": "Bearer s3cret"}
        assert client.get("/health").status_code == 200
        assert client.get("/metrics").status_code == 200
        assert client.post("/tokenize", json={"prompt": "def add(a, b):"}).json()["count"] > 0
        assert client.post("/detokenize", json={"tokens": [1, 2]}).status_code == 200
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"},
                        {"Authorization": "Basic s3cret"}, {"Authorization": "Bearer  s3cret"}):
            refused = client.get("/v1/models", headers=headers)
            assert (refused.status_code, refused.json()) == (401, {"error": "Unauthorized"}), headers
            assert client.post("/v1/completions", json={"prompt": prompt}, headers=headers).status_code == 401
            assert client.post("/v1/chat/completions", json={"messages": MESSAGES}, headers=headers).status_code == 401
            assert client.get("/v1/no-such-route", headers=headers).status_code == 401
        assert client.get("/v1/no-such-route", headers=key).status_code == 404
        assert client.options("/v1/models").status_code == 405  # passed by the check; no CORS here (docs/serve.md)
        for headers in ({"Authorization": "bearer s3cret"}, {"Authorization": "BEARER other"}):
            assert client.get("/v1/models", headers=headers).status_code == 200
        card = client.get("/v1/models", headers=key).json()["data"][0]
        assert card["sampling_defaults"]["temperature"] == 0.0
        assert "--override-generation-config" in card["sampling_defaults"]["source"]
        answer = client.post("/v1/completions", headers=key,
                             json={"prompt": prompt, "max_tokens": 16, "return_token_ids": True}).json()
        assert answer["choices"][0]["token_ids"] == plain
    with TestClient(build_app(engine, api_keys=[""])) as client:  # an empty VLLM_API_KEY sets no key, as in vLLM
        assert client.get("/v1/models").status_code == 200


@pytest.mark.slow  # a server in a subprocess
def test_serve_api_key_flag_and_its_start_line(tiny_root: Path) -> None:
    """`serve --api-key K` (with an override of the sampling defaults, which the start-up line names before its
    URL): on /v1 paths 401 without the key and with a wrong one, 200 with it; /health, /metrics and /tokenize answer
    without it, as vLLM's do."""
    with running_server(tiny_root, "--api-key", "K", "--override-generation-config", '{"temperature": 0}') as (
            url, proc):
        refused = httpx.get(f"{url}/v1/models")
        assert (refused.status_code, refused.json()) == (401, {"error": "Unauthorized"})
        assert httpx.get(f"{url}/v1/models", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert httpx.get(f"{url}/v1/models", headers={"Authorization": "Bearer K"}).status_code == 200
        assert httpx.get(f"{url}/health").status_code == 200
        assert httpx.get(f"{url}/metrics").status_code == 200
        assert httpx.post(f"{url}/tokenize", json={"prompt": "hi"}, timeout=30).status_code == 200


def test_an_unsupported_parameter_is_refused_for_its_own_reason() -> None:
    from pydantic import ValidationError

    for name, value, reason in (("tools", [{"type": "function"}], "calls no tools"), ("n", 2, "one answer"),
                                ("logprobs", True, "log-probabilities"), ("presence_penalty", 0.5, "penalties")):
        with pytest.raises(ValidationError, match=reason):
            ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "hi"}], name: value})


def test_serve_k_auto_serves_the_k_predicted_fastest_or_plain_decoding_and_says_why(
        pair_models: Path, tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`serve --k auto` chooses at start-up from the drafter's acceptance by position (evaluation.json beside the
    drafters) and the pair's step costs (written by hand: timed here they move with the machine's load): an
    untrained drafter's is served as plain decoding, a drafter that accepts nearly every draft gets the k those
    costs make fastest; /v1/models says what was chosen and why. A drafter folder has no acceptance to choose from
    and is refused in one line."""
    from fastapi.testclient import TestClient

    from playground.presets import get_preset
    from playground.serve.app import build_app
    from playground.serve.engine import load_engine

    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path / "cache"))
    use_hand_costs(monkeypatch)
    evaluation = pair_models / "evaluation.json"
    preset = get_preset("smollm2-135m")
    try:
        for rate, served in ((0.01, "none"), (0.99, "eagle3.1")):
            evaluation.write_text(json.dumps({"acceptance": {"eagle3.1": {"8": {
                "per_position_acceptance": [rate] * 8}}}}))
            engine = load_engine(preset, "eagle3.1", 1, None, k_auto=True)
            assert engine.drafter == served and engine.speculating == (served != "none")
            with TestClient(build_app(engine)) as client:
                card = client.get("/v1/models").json()["data"][0]["speculative"]
            assert card["drafter"] == served and card["auto_k"]["why"] == engine.auto.why
            assert card["k"] == (CHOSEN_K if served != "none" else None) and engine.auto.k == card["k"]
            assert ("plain decoding" in engine.auto.why) == (served == "none")
        with pytest.raises(ValueError, match="auto chooses k for a preset drafter"):
            load_engine(preset, "eagle3.1", 1, None, drafter_path=str(pair_models / "eagle3.1"), k_auto=True)
    finally:
        evaluation.unlink(missing_ok=True)
