"""OpenAI / vLLM response shapes, as pure functions of the engine's step events (no sockets, no framework)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from playground.engine import StepEvent, emitted_ids
from playground.specstats import request_metrics

FINISH = {"eos": "stop", "stop": "stop", "length": "length", "cancelled": "abort"}


def error_body(message: str, status: int, param: str | None = None) -> dict:
    kind = {400: "BadRequestError", 404: "NotFoundError", 408: "RequestTimeoutError", 413: "RequestTooLargeError",
            429: "RateLimitError"}.get(status, "InternalServerError" if status >= 500 else "BadRequestError")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def finish_reasons(event: StepEvent, stop_strings: tuple[str, ...], text: str) -> tuple[str | None, str | None]:
    """(finish_reason, stop_reason) as vLLM reports them: EOS is 'stop' with no stop_reason."""
    if not event.finished:
        return None, None
    if event.finish_reason == "stop":
        return "stop", next((s for s in stop_strings if s in text), None)
    return FINISH.get(event.finish_reason or "", event.finish_reason), None


@dataclass
class Reply:
    """One request's answer as it grows: the shapes of its chunks and of the whole response."""

    chat: bool
    model: str
    stop_strings: tuple[str, ...]
    with_token_ids: bool
    prompt_tokens: int
    k: int | None  # None when not speculating (no spec-decode metrics in the usage)
    health: Callable[[list[StepEvent]], dict] | None = None  # the drafter's health of these steps (health/)
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))
    events: list[StepEvent] = field(default_factory=list)
    text: str = ""

    def __post_init__(self) -> None:
        self.id = f"{'chatcmpl' if self.chat else 'cmpl'}-{uuid.uuid4().hex}"

    def _head(self, chunk: bool) -> dict:
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def _choice(self, text: str, token_ids: list[int], event: StepEvent, chunk: bool) -> dict:
        reason, stop_reason = finish_reasons(event, self.stop_strings, self.text)
        choice: dict = {"index": 0, "logprobs": None, "finish_reason": reason, "stop_reason": stop_reason}
        if not self.chat:
            choice["text"] = text
        elif chunk:
            choice["delta"] = {"content": text}
        else:
            choice["message"] = {"role": "assistant", "content": text}
        if self.with_token_ids:
            choice["token_ids"] = token_ids
        return choice

    def add(self, event: StepEvent, piece: str) -> None:
        self.events.append(event)
        self.text += piece

    def first_chunk(self) -> dict | None:
        """The chat stream opens with the assistant role, as OpenAI's does."""
        if not self.chat:
            return None
        return {**self._head(True), "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                 "logprobs": None, "finish_reason": None}]}

    def chunk(self, event: StepEvent, piece: str) -> dict:
        """Record one engine step and return its stream chunk."""
        self.add(event, piece)
        return {**self._head(True), "choices": [self._choice(piece, event.emitted, event, chunk=True)]}

    def usage(self) -> dict:
        completion = sum(len(e.emitted) for e in self.events)
        block: dict = {"usage": {"prompt_tokens": self.prompt_tokens, "completion_tokens": completion,
                                 "total_tokens": self.prompt_tokens + completion}}
        if self.k is not None:
            block["metrics"] = {"speculative_decoding": request_metrics(self.events, self.k)}
            if self.health is not None:
                block["metrics"]["drafter_health"] = self.health(self.events)
        return block

    def usage_chunk(self) -> dict:
        return {**self._head(True), "choices": [], **self.usage()}

    def response(self) -> dict:
        """The whole (non-streamed) response."""
        ids = emitted_ids(self.events)
        return {**self._head(False), "choices": [self._choice(self.text, ids, self.events[-1], chunk=False)],
                **self.usage()}
