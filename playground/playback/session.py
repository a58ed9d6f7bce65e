"""Chat and Compare as sessions: conversations, turns, regeneration and side-by-side runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

from playground.backends import Backend, shared_backend
from playground.presets import get_preset

from .run import Run, RunDriver, play
from .settings import RequestError, RunSettings


def _prepare(settings: RunSettings, messages: list[dict]) -> tuple[Backend, list[int]]:
    preset = settings.checked_preset()
    backend = shared_backend(preset)
    return backend, backend.encode(messages, chat_template=settings.template_name)


def _nonempty_prompt(prompt: str | None) -> str:
    if prompt is None or not prompt.strip():
        raise RequestError("the prompt is empty: type a message first")
    return prompt


def load_preset(name: str) -> str | None:
    """Load a preset's models now, so that the first request does not wait; returns what failed, if anything."""
    try:
        backend = shared_backend(get_preset(name))
        preload = getattr(backend, "preload", None)  # backends that hold weights in this process
        if preload is not None:
            preload()
    except (ValueError, OSError) as err:  # BackendUnavailable, TargetError and CheckpointError are ValueErrors
        return str(err)
    return None


@dataclass
class Exchange:
    user: str
    run: Run


@dataclass
class Conversation:
    """A chat as plain text (what the model sees) plus the run behind each answer (what the UI shows)."""

    exchanges: list[Exchange] = field(default_factory=list)

    def messages(self, system: str, next_user: str | None = None) -> list[dict]:
        out = [{"role": "system", "content": system}] if system.strip() else []
        for ex in self.exchanges:
            out += [{"role": "user", "content": ex.user}, {"role": "assistant", "content": ex.run.text}]
        if next_user is not None:
            out.append({"role": "user", "content": next_user})
        return out


def chat_turn(conversation: Conversation, prompt: str | None, settings: RunSettings,
              should_stop: Callable[[], bool]) -> Iterator[Run]:
    """Answer `prompt` in `conversation`, yielding the growing Run (the exchange is added before the first yield)."""
    prompt = _nonempty_prompt(prompt)
    backend, prompt_ids = _prepare(settings, conversation.messages(settings.system, prompt))
    driver = RunDriver(backend, settings, prompt_ids, should_stop)
    driver.open()
    conversation.exchanges.append(Exchange(prompt, driver.run))
    try:
        for _ in _play([driver]):
            yield driver.run
    except Exception as err:
        if not driver.run.events:  # failed before answering (e.g. the prompt is too long): forget the question
            conversation.exchanges.pop()
        driver.run.error = str(err) or type(err).__name__
        raise


def regenerate_turn(conversation: Conversation, settings: RunSettings,
                    should_stop: Callable[[], bool]) -> Iterator[Run]:
    """Drop the last answer and answer its question again."""
    if not conversation.exchanges:
        raise RequestError("nothing to regenerate yet: send a message first")
    last = conversation.exchanges.pop()
    before = len(conversation.exchanges)
    try:
        yield from chat_turn(conversation, last.user, settings, should_stop)
    except Exception:
        if len(conversation.exchanges) == before:  # no new answer was started: keep the old one
            conversation.exchanges.append(last)
        raise


def _play(drivers: list[RunDriver]) -> Iterator[None]:
    """Shared by chat and compare: the runs, stepped in turn, each with plain decoding timed alongside it."""
    baselines = [b for b in (d.baseline() for d in drivers) if b is not None]
    yield
    yield from play(drivers, baselines)


@dataclass
class Comparison:
    prompt: str
    left: Run
    right: Run


def compare(prompt: str | None, left: RunSettings, right: RunSettings,
            should_stop: Callable[[], bool]) -> Iterator[Comparison]:
    """Run two configurations on one prompt at the same time (alternating steps), yielding both as they grow."""
    prompt = _nonempty_prompt(prompt)
    drivers = []
    for settings in (left, right):
        backend, prompt_ids = _prepare(settings, Conversation().messages(settings.system, prompt))
        drivers.append(RunDriver(backend, settings, prompt_ids, should_stop))
    for driver in drivers:
        driver.open()
    comparison = Comparison(prompt, drivers[0].run, drivers[1].run)
    try:
        for _ in _play(drivers):
            yield comparison
    except Exception as err:
        for driver in drivers:
            driver.run.error = str(err) or type(err).__name__
        raise
