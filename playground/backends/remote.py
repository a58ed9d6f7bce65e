"""A running OpenAI-compatible vLLM server (`vllm serve … --speculative-config …`, or `python -m playground serve`).

The interface is token-id based, like the local engine's: `encode` asks the server's `/tokenize` (with the chat
template the server applies), `stream` sends those ids to `/v1/completions` with `return_token_ids` and turns each
streamed chunk (one engine step) into a StepEvent. Per-position acceptance comes from diffing the server's
`/metrics` spec-decode counters around the request (server-wide: exact for a single user); the exact per-request
numbers ride the final usage chunk where the server offers them (`--per-request-spec-decode-metrics detailed`).

Start a matching vLLM server (not verified on GPU here; Kimi K2.6 on 4 GPUs), then point the app at it:

    # checks the fit, prints `vllm serve …`
    python -m playground vllm-command --preset kimi-k2.6 --drafter eagle3.1 --k 3
    PLAYGROUND_REMOTE_URL=http://HOST:8000 PLAYGROUND_REMOTE_K=3 python app.py
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator

import httpx
from httpx_sse import EventSource, ServerSentEvent, SSEError

from playground import environment
from playground.drafting import PLAIN
from playground.engine import GenerationConfig, SpecCounters, StepEvent
from playground.engine.templates import raw_prompt, resolve_template
from playground.presets import SERVER_DRAFTER, Preset
from playground.request import check_preset_drafter, require_local_engine_options
from playground.request.fit import check_drafter_fits
from playground.specstats import counters_from_samples, parse_prometheus
from playground.streamed_steps import MISSING_FIELDS, DeltaStepper, finish_reason

from . import Capabilities


class RemoteError(ValueError):
    """The server cannot be reached or refused a request; the message says which and why."""


def base_url(url: str) -> str:
    """The server root: 'http://h:8000/v1/' -> 'http://h:8000' (paths are added per endpoint)."""
    url = url.strip().rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def json_events(events: Iterator[ServerSentEvent]) -> Iterator[dict]:
    """The JSON payloads of an OpenAI-style event stream, up to its `[DONE]`."""
    for event in events:
        if event.data == "[DONE]":
            return
        yield json.loads(event.data)


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("message", error))
    return str(body.get("message") or body.get("detail") or body)[:200] if isinstance(body, dict) else str(body)[:200]


class RemoteStream:
    """Iterator of StepEvents for one request; after the last event, `server_counters` (the /metrics diff over the
    request) and `request_metrics` (the server's per-request `speculative_decoding` block, if offered) are set."""

    def __init__(self, backend: RemoteBackend, body: dict, k: int, should_stop: Callable[[], bool] | None) -> None:
        self.k = k
        self.server_counters: SpecCounters | None = None
        self.request_metrics: dict | None = None
        self.stepper = DeltaStepper(k)
        self._backend, self._body, self._should_stop = backend, body, should_stop
        self._events = self._run()

    def __iter__(self) -> RemoteStream:
        return self

    def __next__(self) -> StepEvent:
        return next(self._events)

    def _run(self) -> Iterator[StepEvent]:
        backend = self._backend
        before = backend.spec_counters()
        if before is None:  # the server is not speculating: every step is a plain one
            self.k = 0
        self.stepper = DeltaStepper(self.k)
        ids: list[int] = []
        text = ""
        pending: StepEvent | None = None  # the finishing event waits for the usage chunk and the metrics
        drafting_steps = 0
        with backend.open_stream("/v1/completions", self._body) as chunks:
            for chunk in chunks:
                if self._should_stop is not None and self._should_stop() and pending is None:
                    yield self.stepper.feed([], "cancelled")  # closing the stream aborts the request
                    return
                if chunk.get("metrics"):
                    self.request_metrics = chunk["metrics"].get("speculative_decoding")
                for choice in chunk.get("choices") or []:
                    if "token_ids" not in choice and choice.get("text"):
                        raise RemoteError(f"the server at {backend.base} does not stream token ids "
                                          "(return_token_ids): it needs a newer vLLM")
                    new = list(choice.get("token_ids") or [])
                    ids += new
                    text += choice.get("text") or ""
                    backend.remember_text(ids, text)
                    reason = finish_reason(choice.get("finish_reason"), choice.get("stop_reason"))
                    event = self.stepper.feed(new, reason)
                    if event is None:
                        continue
                    drafting_steps += bool(event.drafted)
                    if event.finished:
                        pending = event
                    else:
                        yield event
        if pending is None:
            raise RemoteError(f"the server at {backend.base} ended the stream without a finish reason")
        if self.request_metrics and self.request_metrics.get("num_spec_tokens"):
            backend.served_k = int(self.request_metrics["num_spec_tokens"])  # the next request pads drafts to it
        if before is not None:
            # this request's drafting steps: exact from the per-request metrics; from the stream, the last step
            # may not have drafted (an engine that shortens its last draft)
            expected = (self.request_metrics or {}).get("num_spec_steps", max(drafting_steps - 1, 0))
            self.server_counters = backend.spec_counters_after(before, expected)
        yield pending


class RemoteBackend:
    name = "remote"
    missing_fields = {
        **MISSING_FIELDS,
        "baseline": "plain decoding needs a second server started without --speculative-config",
    }
    capabilities = Capabilities(times_plain_steps=False)

    def __init__(self, preset: Preset, api_key: str | None = None, timeout_s: float = 600.0) -> None:
        if not preset.url:
            raise RemoteError(f"preset {preset.name!r} has no server URL: set PLAYGROUND_REMOTE_URL")
        self.preset = preset
        self.base = base_url(preset.url)
        key = api_key if api_key is not None else environment.text("PLAYGROUND_REMOTE_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(headers=headers, timeout=httpx.Timeout(timeout_s, connect=10.0))
        self._model: str | None = preset.target or None
        self.served_k: int | None = preset.num_speculative_tokens  # the server's k, once known
        self._texts: dict[tuple[int, ...], str] = {}
        self._fit_checked = False

    # --- HTTP -----------------------------------------------------------------------------------------------------

    def _request(self, method: str, path: str, body: dict | None = None) -> httpx.Response:
        try:
            response = self._client.request(method, self.base + path, json=body)
        except httpx.HTTPError as err:
            raise RemoteError(f"cannot reach the server at {self.base}: {type(err).__name__}: {err}") from None
        if response.status_code >= 400:
            raise RemoteError(f"{method} {path} on {self.base} failed ({response.status_code}): "
                              f"{_error_text(response)}")
        return response

    @contextlib.contextmanager
    def open_stream(self, path: str, body: dict) -> Iterator[Iterator[dict]]:
        """POST with a server-sent-event response; yields its JSON payloads. Leaving the block closes the connection,
        which aborts the request on the server."""
        try:
            with self._client.stream("POST", self.base + path, json=body) as response:
                if response.status_code >= 400:
                    response.read()
                    raise RemoteError(f"POST {path} on {self.base} failed ({response.status_code}): "
                                      f"{_error_text(response)}")
                yield json_events(EventSource(response).iter_sse())
        except (httpx.HTTPError, SSEError) as err:
            raise RemoteError(f"lost the server at {self.base}: {type(err).__name__}: {err}") from None

    # --- what the server is running -------------------------------------------------------------------------------

    @property
    def model(self) -> str:
        """The served model's name: the preset's target, else the first of /v1/models."""
        if self._model is None:
            models = self._request("GET", "/v1/models").json().get("data") or []
            if not models:
                raise RemoteError(f"the server at {self.base} serves no model")
            self._model = str(models[0]["id"])
        return self._model

    def _served_root(self) -> str:
        for entry in self._request("GET", "/v1/models").json().get("data") or []:
            if entry.get("id") == self.model:
                return str(entry.get("root") or entry["id"])
        return self.model

    def check_drafter(self) -> None:
        """If the preset names the server's drafter (PLAYGROUND_REMOTE_DRAFTER), refuse one that does not fit."""
        drafter = self.preset.drafters.get("served", SERVER_DRAFTER)
        if not self._fit_checked and drafter != SERVER_DRAFTER:
            check_drafter_fits(self._served_root(), drafter)
        self._fit_checked = True

    @property
    def exact_speculation(self) -> bool:
        return self.preset.dtype == "float32"  # the server's precision, as the preset states it

    def plain_probe(self):
        raise RemoteError(self.missing_fields["baseline"])

    def held(self) -> str | None:
        return None  # the server's memory is its own

    def starting(self, drafter: str, k: int) -> str | None:
        return None  # the server is up or it is not: preload says which

    def preparing(self, drafter: str, k: int) -> Iterator[str]:
        return iter(())

    def preload(self) -> None:
        """At start-up: reach the server, learn the served model, check the named drafter (if any) against it."""
        _ = self.model
        self.check_drafter()

    def spec_counters(self) -> SpecCounters | None:
        """The server's cumulative spec-decode counters; None if it is not speculating."""
        return counters_from_samples(parse_prometheus(self._request("GET", "/metrics").text))

    def spec_counters_after(self, before: SpecCounters, expected_drafts: int, attempts: int = 5) -> SpecCounters:
        """The counters' growth over a request. vLLM records a step's stats around the time it streams the step, so
        re-read briefly until the request's drafting steps are all counted."""
        diff = SpecCounters()
        for attempt in range(attempts):
            diff = (self.spec_counters() or SpecCounters()) - before
            if diff.drafts >= expected_drafts:
                break
            time.sleep(0.05 * (attempt + 1))
        return diff

    # --- the backend interface ------------------------------------------------------------------------------------

    def encode(self, messages: list[dict], chat_template: str | None = None, raw: bool = False) -> list[int]:
        if raw:
            body = {"model": self.model, "prompt": raw_prompt(messages), "add_special_tokens": True}
        else:
            body = {"model": self.model, "messages": messages, "add_generation_prompt": True}
            template = resolve_template(chat_template)  # the server's tokenizer knows no names of ours
            if template:
                body["chat_template"] = template
        return list(self._request("POST", "/tokenize", body).json()["tokens"])

    def remember_text(self, ids: list[int], text: str) -> None:
        self._texts[tuple(ids)] = text

    def decode(self, ids: list[int]) -> str:
        """Text of ids: from the last stream's chunks when ids end on a chunk boundary, else from /detokenize."""
        if not ids:
            return ""
        cached = self._texts.get(tuple(ids))
        if cached is not None:
            return cached
        return str(self._request("POST", "/detokenize", {"model": self.model, "tokens": list(ids)}).json()["prompt"])

    def stream(self, prompt_ids: list[int], drafter: str, cfg: GenerationConfig,
               should_stop: Callable[[], bool] | None = None, session: str | None = None) -> RemoteStream:
        """One request's steps (`session` is not read: the server keeps its own state)."""
        require_local_engine_options(self.preset.backend, cfg)
        if drafter == PLAIN:
            raise RemoteError("a remote server speculates with the drafter it was started with; for plain decoding "
                              "point a preset at a server started without --speculative-config")
        check_preset_drafter(self.preset, drafter)
        self.check_drafter()
        body: dict = {
            "model": self.model, "prompt": list(prompt_ids), "max_tokens": cfg.max_new_tokens,
            "temperature": cfg.temperature, "top_p": cfg.top_p, "stream": True, "return_token_ids": True,
            "stream_options": {"include_usage": True},
        }
        if cfg.seed is not None:
            body["seed"] = cfg.seed
        if cfg.stop_strings:
            body["stop"] = list(cfg.stop_strings)
        self._texts.clear()
        return RemoteStream(self, body, self.served_k or cfg.k, should_stop)

    def close(self) -> None:
        self._client.close()
