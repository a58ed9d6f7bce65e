"""The HTTP side of `python -m playground serve`: a FastAPI app over one ServedEngine.

Every request gets an answer in the OpenAI error shape when it cannot be served: a body over the size limit is
refused from its Content-Length (or as soon as it grows past the limit) with 413; a body that arrives too slowly
with 408; invalid fields with 400 (pydantic, `requests.py`); a prompt outside the vocabulary or the context with
400 before any decoding; a full server with 429. At most `max_running` requests decode at once; up to
`max_waiting` more wait without holding a thread. Decoding stops within one step of the client leaving, streamed
or not: a task waits on the connection for the client's leaving (the server's `http.disconnect`) while the steps
run, and no step starts after it; the step then in flight finishes. Each abandoned request is counted in /metrics
(`playground:abandoned_requests_total`, and `playground:steps_after_client_left_total`, the engine steps that
finished after its leaving was seen). An unexpected error is one log line and a 500.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from jinja2 import TemplateError
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from playground.engine import GenerationConfig, StepEvent
from playground.engine.loop import prompt_problem
from playground.engine.text import IncrementalDecoder
from playground.health import run_health
from playground.specstats import render_prometheus

from .engine import Limits, ServedEngine
from .requests import ChatCompletionRequest, CompletionRequest, DetokenizeRequest, Sampling, TokenizeRequest
from .responses import Reply, error_body

log = logging.getLogger("playground.serve")


class ApiError(HTTPException):
    """A request this server answers with an OpenAI-style error (status, one-line message, the parameter)."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(status, message)
        self.param = param


def _error_response(status: int, message: str, param: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, status, param), status_code=status)


class Guard:
    """ASGI middleware: the request body is bounded in size (413, from Content-Length before reading, or as soon as
    it grows past the limit) and in time to arrive (408); any error that escapes a route becomes one log line and a
    500, so no request is left without an answer and no traceback reaches the log. (Starlette's own body limit
    answers in plain text, not in the OpenAI error shape.)"""

    def __init__(self, app: ASGIApp, limits: Limits) -> None:
        self.app, self.limits = app, limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = f"the request body is larger than this server accepts ({self.limits.max_body_bytes} bytes)"
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limits.max_body_bytes:
            await _error_response(413, too_large)(scope, receive, send)
            return
        received, complete, started = 0, False, False

        async def bounded_receive() -> Message:
            nonlocal received, complete
            if complete:  # after the body only http.disconnect can come: no deadline
                return await receive()
            try:
                with anyio.fail_after(self.limits.body_timeout_s):
                    message = await receive()
            except TimeoutError:
                raise ApiError(408, "the request body did not arrive within "
                                    f"{self.limits.body_timeout_s:g} s") from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limits.max_body_bytes:
                    raise ApiError(413, too_large)
            complete = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, bounded_receive, tracking_send)
        except Exception as err:  # noqa: BLE001 - the last line of defence: one log line, one answer
            log.error("%s %s failed: %s: %s", scope.get("method"), scope.get("path"), type(err).__name__, err)
            if not started:
                await _error_response(500, f"internal error: {type(err).__name__}: {err}")(scope, receive, send)


GUARDED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")  # the paths vLLM 0.32's --api-key guards


class RequireKey:
    """ASGI middleware: with API keys set (`serve --api-key KEY [KEY ...]`, else VLLM_API_KEY, as vLLM reads them),
    a request whose path starts with one of GUARDED_PREFIXES must carry `Authorization: Bearer <one of the keys>`
    (the scheme in any case) or is answered 401 `{"error": "Unauthorized"}`, as vLLM 0.32 applies its key: every
    other path (/health, /tokenize, /detokenize, /metrics) and any OPTIONS request stay open."""

    def __init__(self, app: ASGIApp, api_keys: list[str]) -> None:
        self.app = app
        self.digests = [hashlib.sha256(key.encode()).digest() for key in api_keys]

    def accepts(self, authorization: bytes) -> bool:
        scheme, _, token = authorization.decode("latin-1").partition(" ")
        if scheme.lower() != "bearer":
            return False
        given = hashlib.sha256(token.encode()).digest()  # digests of equal length: no comparison leaks a length
        return any([hmac.compare_digest(given, digest) for digest in self.digests])  # every key compared

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and scope.get("method") != "OPTIONS":
            path = scope["path"].removeprefix(scope.get("root_path", ""))
            if path.startswith(GUARDED_PREFIXES) and not self.accepts(dict(scope["headers"]).get(b"authorization",
                                                                                               b"")):
                await JSONResponse({"error": "Unauthorized"}, status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class Admission:
    """At most `running` requests decode at once; up to `waiting` more queue (awaiting, holding no thread)."""

    def __init__(self, running: int, waiting: int) -> None:
        self.slots, self.max_waiting = asyncio.Semaphore(running), waiting
        self.running = self.waiting = 0

    def counts(self) -> tuple[int, int]:
        return self.running, self.waiting

    def check(self) -> None:
        if self.slots.locked() and self.waiting >= self.max_waiting:
            raise ApiError(429, "the server is busy (every decoding slot and queue place is taken); retry shortly")

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        self.check()
        self.waiting += 1
        try:
            await self.slots.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1
            self.slots.release()


def _json_kind(value: object) -> str:
    kinds = ((bool, "true or false"), (int, "a number"), (float, "a number"), (str, "a string"), (list, "an array"))
    return "null" if value is None else next((name for kind, name in kinds if isinstance(value, kind)), "a value")


def _validation_message(err: RequestValidationError) -> tuple[str, str | None]:
    """One line for the first invalid field (a union's alternatives are merged), and the field's name."""
    errors = list(err.errors())
    first = errors[0]
    where = tuple(first.get("loc", ()))
    if first.get("type") == "json_invalid" and where[:1] == ("body",):  # its loc is a character, not a field
        at = where[1] if len(where) > 1 else None
        why = (first.get("ctx") or {}).get("error") or "JSON decode error"
        return (f"the request body is not valid JSON ({why}" + (f" at character {at}" if at is not None else "")
                + "): send a JSON object of the request's fields"), None
    if where == ("body",) and first.get("type") in ("missing", "model_attributes_type", "dict_type"):
        if first.get("type") == "missing":
            return "the request body is empty (or null): send a JSON object of the request's fields", None
        return (f"the request body must be a JSON object of the request's fields, not "
                f"{_json_kind(first.get('input'))}"), None
    loc = [str(part) for part in first.get("loc", ()) if part != "body"]
    param = (first.get("ctx") or {}).get("param") or (loc[0] if loc else None)
    same = [e["msg"] for e in errors if [str(p) for p in e.get("loc", ()) if p != "body"][:1] == loc[:1]]
    message = "; ".join(dict.fromkeys(msg.removeprefix("Value error, ") for msg in same[:3]))
    return (f"{param}: {message}" if param else message), param


def build_app(engine: ServedEngine, limits: Limits = Limits(), api_keys: list[str] | str | None = None) -> FastAPI:
    """The server's app; `api_keys`: the keys RequireKey accepts (none: open)."""
    app = FastAPI(title="EAGLE Playground server", docs_url=None, redoc_url=None, openapi_url=None)
    admission = Admission(limits.max_running, limits.max_waiting)
    target = engine.backend.target
    defaults = engine.sampling
    started = int(time.time())

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, err: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(err)
        return _error_response(400, message, param)

    @app.exception_handler(HTTPException)
    async def api_error(request: Request, err: HTTPException) -> JSONResponse:
        return _error_response(err.status_code, str(err.detail), getattr(err, "param", None))

    def check_model(body: Sampling | TokenizeRequest | DetokenizeRequest) -> None:
        if body.model and body.model != engine.model_name:
            raise ApiError(404, f"The model `{body.model}` does not exist.", "model")

    def check_ids(ids: list[int], param: str) -> None:
        bad = next((t for t in ids if not 0 <= t < target.vocab_size), None)
        if bad is not None:
            raise ApiError(400, f"token id {bad} is outside the vocabulary (0..{target.vocab_size - 1})", param)

    async def encode_text(text: str, add_special_tokens: bool = True) -> list[int]:
        return await anyio.to_thread.run_sync(
            lambda: list(target.tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]))

    async def encode_chat(messages: list, chat_template: str | None) -> list[int]:
        turns = [m.model_dump(include={"role", "content"}) for m in messages]
        try:
            return await anyio.to_thread.run_sync(lambda: engine.backend.encode(turns, chat_template=chat_template))
        except (ValueError, KeyError, TypeError, TemplateError) as err:
            raise ApiError(400, f"cannot apply the chat template: {err}", "chat_template") from None

    def generation_config(body: Sampling, answer_budget: int | None, prompt_len: int) -> GenerationConfig:
        problem = prompt_problem(prompt_len, target.max_positions)
        if problem:
            raise ApiError(400, problem, "prompt")
        room = target.max_positions - prompt_len
        if answer_budget is not None and answer_budget > room:
            raise ApiError(400, f"This model's maximum context length is {target.max_positions} tokens. However, you "
                                f"requested {prompt_len + answer_budget} tokens ({prompt_len} in the prompt, "
                                f"{answer_budget} in the completion).", "max_tokens")
        temperature = defaults.temperature if body.temperature is None else body.temperature
        return GenerationConfig(max_new_tokens=answer_budget or min(limits.default_max_tokens, room), k=engine.k,
                                temperature=temperature, top_p=defaults.top_p if body.top_p is None else body.top_p,
                                seed=body.seed, stop_strings=body.stop_strings, instrument=False,
                                min_draft_prob=engine.min_draft_prob, tree=engine.tree,
                                guard=engine.auto is not None and engine.tree is None and temperature == 0)

    async def steps(prompt_ids: list[int], cfg: GenerationConfig,
                    receive: Callable[[], Awaitable[Message]]) -> AsyncIterator[tuple[StepEvent, str]]:
        """(event, its text) per engine step, each step computed in a worker thread, while a task waits on
        `receive` for the client's leaving: once it has left no step starts (the engine's generator is closed, which
        stops decoding), and the request is counted as abandoned with the steps that finished after its leaving
        was seen (the one in flight then). A stream's own listener (Starlette's, which cancels the stream) and this
        task are woken by the same disconnect, this one before the cancelled stream resumes."""
        events = engine.generate(prompt_ids, cfg)
        decoder = IncrementalDecoder(engine.backend.decode)
        done = 0  # steps the engine has finished, counted in the worker thread (a cancelled await still counts one)
        left_at: int | None = None  # `done` when the client's leaving was seen

        def step() -> tuple[StepEvent, str] | None:
            nonlocal done
            event = next(events, None)
            if event is None:
                return None
            done += 1
            return event, decoder.extend(event.emitted) + (decoder.flush() if event.finished else "")

        async def watch() -> None:
            nonlocal left_at
            while (await receive())["type"] != "http.disconnect":
                await asyncio.sleep(0.01)  # after the body only the disconnect should come; never spin on another
            left_at = done

        watcher = asyncio.ensure_future(watch())
        try:
            while left_at is None and (item := await anyio.to_thread.run_sync(step)) is not None:
                if left_at is not None:
                    return  # left while this step ran: nobody reads it
                yield item
                if item[0].finished:
                    return
        finally:
            watcher.cancel()
            events.close()
            if left_at is not None:
                engine.client_left(left_at, done)

    async def generate(request: Request, body: Sampling, prompt_ids: list[int], answer_budget: int | None,
                       chat: bool, template: str | None = None):
        """`template`: the chat template a chat request was encoded with; None for a completion (not known)."""
        check_ids(prompt_ids, "prompt")
        cfg = generation_config(body, answer_budget, len(prompt_ids))
        backend = engine.backend
        reply = Reply(chat=chat, model=engine.model_name, stop_strings=cfg.stop_strings,
                      with_token_ids=body.return_token_ids, prompt_tokens=len(prompt_ids),
                      k=engine.draft_depth if engine.speculating else None,
                      health=lambda events: run_health(backend.preset, backend, engine.drafter, cfg, template, False,
                                                       len(prompt_ids), events).to_dict())
        if not body.stream:
            async with admission.slot():
                async for event, piece in steps(prompt_ids, cfg, request.receive):
                    reply.add(event, piece)
            if not reply.events or not reply.events[-1].finished:
                raise ApiError(499, "the client closed the request")  # nobody reads this; it ends the request
            return reply.response()
        admission.check()  # a full server says so before the stream opens

        async def sse() -> AsyncIterator[str]:
            def frame(payload: dict | str) -> str:
                return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n"

            try:
                async with admission.slot():
                    if (opening := reply.first_chunk()) is not None:
                        yield frame(opening)
                    async for event, piece in steps(prompt_ids, cfg, request.receive):
                        yield frame(reply.chunk(event, piece))
                if body.include_usage:
                    yield frame(reply.usage_chunk())
            except ApiError as err:
                yield frame(error_body(str(err.detail), err.status_code, err.param))
            except Exception as err:  # noqa: BLE001 - the stream is open: say it in the stream, log one line
                log.error("stream failed: %s: %s", type(err).__name__, err)
                yield frame(error_body(f"internal error: {type(err).__name__}: {err}", 500))
            yield frame("[DONE]")

        return StreamingResponse(sse(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    @app.post("/v1/completions")
    async def completions(request: Request, body: CompletionRequest):
        check_model(body)
        prompt_ids = await encode_text(body.prompt) if isinstance(body.prompt, str) else list(body.prompt)
        return await generate(request, body, prompt_ids, body.max_tokens, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request, body: ChatCompletionRequest):
        check_model(body)
        prompt_ids = await encode_chat(body.messages, body.chat_template)
        return await generate(request, body, prompt_ids, body.answer_budget, chat=True,
                              template=body.chat_template or "default")

    @app.post("/tokenize")
    async def tokenize(body: TokenizeRequest) -> dict:
        check_model(body)
        if body.messages is not None:
            ids = await encode_chat(body.messages, body.chat_template)
        else:
            ids = await encode_text(body.prompt, body.add_special_tokens)
        return {"count": len(ids), "max_model_len": target.max_positions, "tokens": ids}

    @app.post("/detokenize")
    async def detokenize(body: DetokenizeRequest) -> dict:
        check_model(body)
        check_ids(body.tokens, "tokens")
        return {"prompt": await anyio.to_thread.run_sync(engine.backend.decode, body.tokens)}

    @app.get("/health")
    async def health() -> dict:
        return {}

    def model_card() -> dict:
        return {"id": engine.model_name, "object": "model", "created": started, "owned_by": "playground",
                "root": engine.backend.preset.target, "max_model_len": target.max_positions,
                "sampling_defaults": defaults.to_dict(),
                "speculative": {"drafter": engine.drafter, "k": engine.k if engine.speculating else None,
                                "auto_k": engine.auto.to_dict() if engine.auto else None}}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> dict:
        if model_id != engine.model_name:
            raise ApiError(404, f"The model `{model_id}` does not exist.", "model")
        return model_card()

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(render_prometheus(engine.collector(admission.counts)) + engine.departures_text(),
                                 media_type="text/plain; version=0.0.4; charset=utf-8")

    keys = [key for key in ([api_keys] if isinstance(api_keys, str) else api_keys or ()) if key]
    if keys:
        app.add_middleware(RequireKey, api_keys=keys)
    app.add_middleware(Guard, limits=limits)
    return app
