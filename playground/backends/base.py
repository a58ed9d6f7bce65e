"""The interface every backend has (`Backend`), what it can do beyond streaming (`Capabilities`), and the stream of
step events it returns for one request (`StepStream`). The package's docstring says what each member means."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from playground.engine import GenerationConfig, StepEvent
from playground.presets import Preset


class StepStream(Protocol):
    """A backend's step events for one request; close() ends it early (a generator's close, or an engine abort)."""

    def __iter__(self) -> Iterator[StepEvent]: ...

    def __next__(self) -> StepEvent: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do beyond streaming step events."""

    times_plain_steps: bool  # plain_probe() times plain steps of its target in this process
    paces_itself: bool = False  # its engine decodes on between our reads (vLLM): a step's time is its arrival, and
    #                             plain steps are timed after a run, not beside it (they would share the CPU with it)
    checks_stop: bool = True  # the stream stops itself when should_stop() says so (not in ZeroGPU's GPU call)


class Backend(Protocol):
    name: str
    preset: Preset

    @property
    def missing_fields(self) -> dict[str, str]: ...

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def exact_speculation(self) -> bool:
        """Whether greedy speculative output equals plain decoding's in this backend's precision."""
        ...

    def preload(self) -> None: ...

    def encode(self, messages: list[dict], chat_template: str | None = None, raw: bool = False) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def stream(self, prompt_ids: list[int], drafter: str, cfg: GenerationConfig,
               should_stop: Callable[[], bool] | None = None, session: str | None = None) -> StepStream:
        """One request's step events. `session`: the key under which a method that keeps state across a session's
        requests keeps it (our engine: engine.proposers; an engine that keeps its own ignores it)."""
        ...

    def plain_probe(self): ...  # a PlainProbe-like object with time_step(context) -> seconds

    def starting(self, drafter: str, k: int) -> str | None: ...

    def held(self) -> str | None:
        """What it holds beyond the app's process (vLLM's engine processes and their memory), or None."""
        ...

    def preparing(self, drafter: str, k: int) -> Iterator[str]: ...
