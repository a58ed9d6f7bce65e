"""``python -m playground serve``: a small OpenAI-compatible server over the local engine, speaking vLLM's dialect.

It serves one preset with one drafter and a fixed k, like `vllm serve … --speculative-config …`, so the remote
backend (and any OpenAI client) can be tried and tested without a GPU:

- POST /v1/completions, /v1/chat/completions: streaming (SSE, one chunk per engine step) or not; `return_token_ids`
  adds each chunk's token ids; `stream_options.include_usage` adds a final usage chunk with vLLM's per-request
  `metrics.speculative_decoding` ('detailed');
- POST /tokenize, /detokenize; GET /v1/models, /health;
- GET /metrics: vLLM's spec-decode counters (`vllm:spec_decode_num_drafts_total`, ...), computed from the step
  events exactly as vLLM counts them.

Also ``python -m playground vllm-command``: check a preset's drafter against its target and print the matching
`vllm serve` command line.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

from jinja2 import TemplateError

from playground.backends import backend_unavailable_reason
from playground.backends.local import LocalBackend
from playground.backends.specstats import SpecCounters, render_prometheus, request_metrics
from playground.cli import add_threads_flag
from playground.engine import MAX_K, GenerationConfig, StepEvent
from playground.presets import DEFAULT, get_preset

FINISH = {"eos": "stop", "stop": "stop", "length": "length", "cancelled": "abort"}


class RequestError(ValueError):
    """A bad request: answered with HTTP 400 (or the given status) and an OpenAI-style error body."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class ServedEngine:
    """The local engine with one drafter and k, and vLLM-style counters over everything it served."""

    backend: LocalBackend
    drafter: str
    k: int
    model_name: str
    counters: SpecCounters | None = None  # None when serving without a drafter (no spec-decode metrics)
    prompt_tokens: int = 0
    generation_tokens: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.drafter != "none":
            self.counters = SpecCounters(accepted_per_pos=[0] * self.k)

    def generate(self, prompt_ids: list[int], cfg: GenerationConfig) -> Iterator[StepEvent]:
        with self.lock:
            self.prompt_tokens += len(prompt_ids)
        for event in self.backend.stream(prompt_ids, self.drafter, cfg):
            with self.lock:  # counted before the step is sent, as vLLM records a step's stats with its output
                if self.counters is not None:
                    self.counters.add_step(event, self.k)
                self.generation_tokens += len(event.emitted)
            yield event

    def metrics_text(self) -> str:
        with self.lock:
            return render_prometheus(
                self.counters, {"engine": "0", "model_name": self.model_name},
                {"vllm:prompt_tokens": ("Number of prefill tokens processed.", self.prompt_tokens),
                 "vllm:generation_tokens": ("Number of generation tokens processed.", self.generation_tokens)})


def generation_config(body: dict, k: int) -> GenerationConfig:
    stop = body.get("stop") or []
    cfg = GenerationConfig(
        max_new_tokens=int(body.get("max_completion_tokens") or body.get("max_tokens") or 256),
        k=k,
        temperature=float(body.get("temperature", 1.0)),
        top_p=float(body.get("top_p", 1.0)),
        seed=body.get("seed"),
        stop_strings=(stop,) if isinstance(stop, str) else tuple(stop),
        instrument=False,
    )
    cfg.validate()
    return cfg


def _finish(event: StepEvent, cfg: GenerationConfig, text: str) -> tuple[str | None, str | None]:
    """(finish_reason, stop_reason) as vLLM reports them: EOS is 'stop' with no stop_reason."""
    if not event.finished:
        return None, None
    if event.finish_reason == "stop":
        return "stop", next((s for s in cfg.stop_strings if s in text), None)
    return FINISH.get(event.finish_reason or "", event.finish_reason), None


class Handler(BaseHTTPRequestHandler):
    server_version = "playground-serve/1"
    server: "PlaygroundServer"

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        if self.server.verbose:
            super().log_message(format, *args)

    # --- plumbing -------------------------------------------------------------------------------------------------

    def _send_json(self, payload: dict, status: int = 200) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, err: RequestError) -> None:
        kind = "NotFoundError" if err.status == 404 else "BadRequestError"
        self._send_json({"error": {"message": str(err), "type": kind, "code": err.status}}, err.status)

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError as err:
            raise RequestError(f"the body is not valid JSON: {err}") from None
        if not isinstance(body, dict):
            raise RequestError("the body must be a JSON object")
        model = body.get("model")
        if model and model != self.server.engine.model_name:
            raise RequestError(f"The model `{model}` does not exist.", 404)
        return body

    def _sse(self, payload: dict | str) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        self.wfile.write(f"data: {data}\n\n".encode())
        self.wfile.flush()

    # --- routes ---------------------------------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        engine = self.server.engine
        if self.path == "/health":
            self._send_json({})
        elif self.path == "/v1/models":
            target = engine.backend.target
            self._send_json({"object": "list", "data": [{
                "id": engine.model_name, "object": "model", "created": self.server.started, "owned_by": "playground",
                "root": engine.backend.preset.target, "max_model_len": target.max_positions}]})
        elif self.path == "/metrics":
            data = engine.metrics_text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._send_error(RequestError(f"no route GET {self.path}", 404))

    def do_POST(self) -> None:  # noqa: N802
        routes = {"/v1/completions": self._completions, "/v1/chat/completions": self._chat,
                  "/tokenize": self._tokenize, "/detokenize": self._detokenize}
        try:
            if self.path not in routes:
                raise RequestError(f"no route POST {self.path}", 404)
            routes[self.path](self._body())
        except RequestError as err:
            self._send_error(err)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client left; the generator was closed, which stopped decoding

    def _encode_chat(self, body: dict) -> list[int]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError("messages must be a non-empty list")
        try:
            return self.server.engine.backend.encode(messages, chat_template=body.get("chat_template"))
        except (ValueError, KeyError, TypeError, TemplateError) as err:
            raise RequestError(f"cannot apply the chat template: {err}") from None

    def _tokenize(self, body: dict) -> None:
        backend = self.server.engine.backend
        if "messages" in body:
            ids = self._encode_chat(body)
        else:
            ids = backend.target.tokenizer(str(body.get("prompt", "")),
                                           add_special_tokens=bool(body.get("add_special_tokens", True)))["input_ids"]
        self._send_json({"count": len(ids), "max_model_len": backend.target.max_positions, "tokens": list(ids)})

    def _detokenize(self, body: dict) -> None:
        self._send_json({"prompt": self.server.engine.backend.decode(list(body.get("tokens") or []))})

    def _prompt_ids(self, prompt: object) -> list[int]:
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (list, str)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            return self.server.engine.backend.target.tokenizer(prompt, add_special_tokens=True)["input_ids"]
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            return prompt
        raise RequestError("prompt must be a string or a list of token ids (one prompt per request)")

    def _completions(self, body: dict) -> None:
        self._generate(body, self._prompt_ids(body.get("prompt")), chat=False)

    def _chat(self, body: dict) -> None:
        self._generate(body, self._encode_chat(body), chat=True)

    def _generate(self, body: dict, prompt_ids: list[int], chat: bool) -> None:
        engine = self.server.engine
        try:
            cfg = generation_config(body, engine.k)
            events = engine.generate(prompt_ids, cfg)
            first = next(events)  # a prompt the engine refuses is a 400, before any bytes are sent
        except ValueError as err:
            raise RequestError(str(err)) from None
        steps = self._steps(first, events)
        if body.get("stream"):
            self._stream(body, prompt_ids, cfg, steps, chat)
        else:
            self._complete(body, prompt_ids, cfg, steps, chat)

    def _steps(self, first: StepEvent, rest: Iterator[StepEvent]) -> Iterator[tuple[StepEvent, str]]:
        """(event, this step's text) per engine step. Like vLLM's incremental detokenizer, an
        incomplete UTF-8 character at the end is held back until its remaining bytes arrive."""
        backend = self.server.engine.backend
        ids: list[int] = []
        text = ""
        for event in _chain(first, rest):
            ids += event.emitted
            full = backend.decode(ids)
            stable = full if event.finished else full.rstrip("\ufffd")
            piece = stable[len(text):] if stable.startswith(text) else ""
            yield event, piece
            text += piece

    def _usage(self, prompt_ids: list[int], events: list[StepEvent]) -> dict:
        completion = sum(len(e.emitted) for e in events)
        extra: dict = {}
        if self.server.engine.counters is not None:
            extra["metrics"] = {"speculative_decoding": request_metrics(events, self.server.engine.k)}
        usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": completion,
                 "total_tokens": len(prompt_ids) + completion}
        return {"usage": usage, **extra}

    def _stream(self, body: dict, prompt_ids: list[int], cfg: GenerationConfig,
                steps: Iterator[tuple[StepEvent, str]], chat: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        head = {"id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
                "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()), "model": self.server.engine.model_name}
        if chat:
            self._sse({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                            "logprobs": None, "finish_reason": None}]})
        events, text = [], ""
        for event, piece in steps:
            events.append(event)
            text += piece
            reason, stop_reason = _finish(event, cfg, text)
            choice: dict = {"index": 0, "logprobs": None, "finish_reason": reason, "stop_reason": stop_reason}
            choice.update({"delta": {"content": piece}} if chat else {"text": piece})
            if body.get("return_token_ids"):
                choice["token_ids"] = event.emitted
            self._sse({**head, "choices": [choice]})
        if (body.get("stream_options") or {}).get("include_usage"):
            self._sse({**head, "choices": [], **self._usage(prompt_ids, events)})
        self._sse("[DONE]")

    def _complete(self, body: dict, prompt_ids: list[int], cfg: GenerationConfig,
                  steps: Iterator[tuple[StepEvent, str]], chat: bool) -> None:
        events, text = [], ""
        for event, piece in steps:
            events.append(event)
            text += piece
        reason, stop_reason = _finish(events[-1], cfg, text)
        choice: dict = {"index": 0, "logprobs": None, "finish_reason": reason, "stop_reason": stop_reason}
        choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
        if body.get("return_token_ids"):
            choice["token_ids"] = [t for e in events for t in e.emitted]
        self._send_json({"id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
                         "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
                         "model": self.server.engine.model_name, "choices": [choice],
                         **self._usage(prompt_ids, events)})


def _chain(first: StepEvent, rest: Iterator[StepEvent]) -> Iterator[StepEvent]:
    yield first
    yield from rest


class PlaygroundServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], engine: ServedEngine, verbose: bool = False) -> None:
        super().__init__(address, Handler)
        self.engine, self.verbose, self.started = engine, verbose, int(time.time())


def load_engine(preset_name: str, drafter: str, k: int, model_name: str | None) -> ServedEngine:
    """Load (and warm up) the preset's target and drafter; refuse what cannot be served, with the reason."""
    preset = get_preset(preset_name)
    if preset.backend != "local":
        raise ValueError(f"serve runs the local engine, and preset {preset.name!r} uses {preset.backend}; for vLLM "
                         f"run `python -m playground vllm-command --preset {preset.name}`")
    reason = backend_unavailable_reason(preset)
    if reason:
        raise ValueError(reason)
    if not 1 <= k <= MAX_K:
        raise ValueError(f"--k must be between 1 and {MAX_K}, got {k}")
    if drafter != "none" and drafter not in preset.drafters:
        raise ValueError(f"drafter {drafter!r} is not in preset {preset.name!r} (choose from {preset.drafter_names})")
    backend = LocalBackend(preset)
    warm = backend.encode([{"role": "user", "content": "hello"}])
    backend.warm_up(warm, drafter)
    return ServedEngine(backend, drafter, k, model_name or preset.name)


def serve(args: argparse.Namespace) -> None:
    engine = load_engine(args.preset, args.drafter, args.k, args.served_model_name)
    server = PlaygroundServer((args.host, args.port), engine, verbose=args.verbose)
    host, port = server.server_address[:2]
    print(f"serving {engine.model_name} (drafter {engine.drafter}, k={engine.k}) on http://{host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def vllm_command(args: argparse.Namespace) -> None:
    from playground.backends.fit import check_drafter_fits
    from playground.backends.vllm_backend import serve_command

    preset = get_preset(args.preset)
    drafter = None if args.drafter == "none" else preset.drafters.get(args.drafter, args.drafter)
    if drafter is not None and not args.no_check:
        for warning in check_drafter_fits(preset.target, drafter).warnings:
            print(f"warning: {warning}", file=sys.stderr)
    print(shlex.join(serve_command(preset, drafter, args.k, args.host, args.port)))


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="an OpenAI-compatible server over the local engine (vLLM's metrics)")
    p.add_argument("--preset", default=DEFAULT, help=f"a local-engine preset (default: {DEFAULT})")
    add_threads_flag(p)
    p.add_argument("--drafter", default="eagle3.1", help="none, or a drafter name of the preset")
    p.add_argument("--k", type=int, default=4, help="speculative tokens per step (fixed for the server, as in vLLM)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 = any free port (the URL is printed)")
    p.add_argument("--served-model-name", help="the model name clients send (default: the preset's name)")
    p.add_argument("--verbose", action="store_true", help="log every request")
    p.set_defaults(func=serve)

    p = subparsers.add_parser("vllm-command", help="check a preset's drafter against its target, print `vllm serve`")
    p.add_argument("--preset", default="kimi-k2.6")
    p.add_argument("--drafter", default="eagle3.1", help="none, a drafter name of the preset, or a folder / Hub id")
    p.add_argument("--k", type=int, default=3, help="num_speculative_tokens")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--no-check", action="store_true", help="skip reading the two config.json files")
    p.set_defaults(func=vllm_command)
