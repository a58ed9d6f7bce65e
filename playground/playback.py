"""Runs as the playground plays them: settings → backend stream → a live run record, plus exports.

Gradio-free so it can be tested on its own; the UI turns `Run` records into components with `playground.viz`.

Timing: a run's `elapsed_ms` (and so its tokens/s) counts only time spent inside the decode loop. Time the loop
sits paused between steps — while the UI renders, or while the other side of a comparison takes its step — is
left out, so two interleaved runs each report the speed they would have alone, comparable with the baseline.
"""

from __future__ import annotations

import csv
import json
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Iterator

from playground.backends import Backend, backend_unavailable_reason, shared_backend
from playground.backends.availability import on_zerogpu
from playground.engine import GenerationConfig, StepEvent
from playground.engine.templates import CHAT_TEMPLATES
from playground.presets import DRAFTER_LABELS, Preset, default_preset_name, get_preset
from playground.viz import ProvenanceBuilder, RunView, TokenPiece

UI_MAX_K = 10
MAX_NEW_TOKENS = 1024
RENDER_INTERVAL_S = 0.15  # at most ~7 UI updates a second; a UI update costs more than a decode step


class RequestError(ValueError):
    """A request the playground cannot run; the message is meant for the user."""


@dataclass(frozen=True)
class RunSettings:
    """What the user picked for one run."""

    drafter: str = "eagle3.1"  # a drafter name of the preset, or "none" for plain decoding
    k: int = 4
    preset: str = field(default_factory=default_preset_name)
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    chat_template: str = "default"  # "default" (the tokenizer's) or a shipped one (engine.templates)
    system: str = ""
    seed: int | None = None  # sampling only: the same seed repeats the same answer

    @property
    def plain(self) -> bool:
        return self.drafter == "none"

    @property
    def drafter_label(self) -> str:
        return "plain decoding" if self.plain else DRAFTER_LABELS.get(self.drafter, self.drafter)

    def checked_preset(self) -> Preset:
        """The preset, after checking every field; raises RequestError with a message for the user."""
        try:
            preset = get_preset(self.preset)
        except KeyError as err:
            raise RequestError(err.args[0]) from None
        unavailable = backend_unavailable_reason(preset)
        if unavailable:
            raise RequestError(unavailable)
        if self.drafter not in preset.drafter_names:
            raise RequestError(f"unknown drafter {self.drafter!r}; choose one of {', '.join(preset.drafter_names)}")
        if not isinstance(self.k, int) or not 1 <= self.k <= UI_MAX_K:
            raise RequestError(f"k (speculative tokens per step) must be between 1 and {UI_MAX_K}, got {self.k}")
        if not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS:
            raise RequestError(f"max new tokens must be between 1 and {MAX_NEW_TOKENS}, got {self.max_new_tokens}")
        if self.chat_template not in CHAT_TEMPLATES:
            raise RequestError(f"unknown chat template {self.chat_template!r}; "
                               f"choose one of {', '.join(CHAT_TEMPLATES)}")
        try:
            self.generation_config().validate()
        except ValueError as err:
            raise RequestError(str(err)) from None
        return preset

    def generation_config(self) -> GenerationConfig:
        return GenerationConfig(max_new_tokens=self.max_new_tokens, k=self.k, temperature=self.temperature,
                                top_p=self.top_p, seed=self.seed)

    @property
    def template_name(self) -> str | None:
        return None if self.chat_template == "default" else self.chat_template


FINISH_REASONS = {
    "eos": "finished: end of answer",
    "length": "finished: reached max new tokens",
    "stop": "finished: stop string",
    "cancelled": "stopped",
}


@dataclass
class Run:
    """One generation as recorded so far: events, decoded pieces, and the measured baseline."""

    settings: RunSettings
    prompt_tokens: int
    events: list[StepEvent] = field(default_factory=list)
    pieces: list[TokenPiece] = field(default_factory=list)
    baseline_tokens_per_second: float | None = None
    missing_fields: dict[str, str] = field(default_factory=dict)  # what the backend cannot report, and why
    phase: str = "starting"  # "starting" | "measuring baseline" | "generating" | "done"
    seen_seconds: float | None = None  # wall clock from asking for the first step to the latest one

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.pieces)

    @property
    def token_ids(self) -> list[int]:
        return [t for e in self.events for t in e.emitted]

    @property
    def finished(self) -> bool:
        return bool(self.events) and self.events[-1].finished

    @property
    def finish_reason(self) -> str | None:
        return self.events[-1].finish_reason if self.events else None

    @property
    def status(self) -> str:
        if self.finished:
            return FINISH_REASONS.get(self.finish_reason or "", "finished")
        if self.phase == "measuring baseline":
            return "measuring the plain-decoding baseline on this machine…"
        if self.events:
            return f"generating… {self.events[-1].total_tokens} tokens"
        return "starting…" if self.phase == "starting" else "generating…"

    @property
    def seen_tokens_per_second(self) -> float | None:
        """Tokens / wall-clock seconds, rendering pauses included: the rate the user saw (the engine's excludes them)."""
        return len(self.token_ids) / self.seen_seconds if self.seen_seconds else None

    def view(self) -> RunView:
        s = self.settings
        return RunView.from_events(s.drafter_label, s.plain, s.k, self.events, self.baseline_tokens_per_second,
                                   self.missing_fields, self.seen_tokens_per_second)

    def record(self, name: str, with_steps: bool = True, view: RunView | None = None) -> dict:
        """The run as JSON-ready data: text, config, metrics and (for exports) the per-step trace. Pass the `view`
        already built for this render, so the events are summarised once."""
        view = view or self.view()
        record = {
            "run": name, "status": self.status, "settings": asdict(self.settings),
            "config": asdict(self.settings.generation_config()), "prompt_tokens": self.prompt_tokens,
            "text": self.text, "token_ids": self.token_ids, "finish_reason": self.finish_reason,
            "baseline_tokens_per_second": self.baseline_tokens_per_second, "speedup": view.speedup,
            "seen_tokens_per_second": self.seen_tokens_per_second,
            "metrics": view.metrics.to_dict(),
        }
        if with_steps:
            record["steps"] = [e.to_dict() for e in self.events]
        return record


class _ActiveTimeEvents:
    """Rewrites each event's elapsed_ms to exclude the time the decode loop sat paused between steps."""

    def __init__(self, events: Iterable[StepEvent]) -> None:
        self._events = iter(events)
        self._paused_s = 0.0
        self._paused_since: float | None = None

    def __iter__(self) -> "_ActiveTimeEvents":
        return self

    def __next__(self) -> StepEvent:
        if self._paused_since is not None:
            self._paused_s += time.perf_counter() - self._paused_since
        event = next(self._events)
        self._paused_since = time.perf_counter()
        return replace(event, elapsed_ms=max(event.elapsed_ms - self._paused_s * 1000, 0.0))

    def close(self) -> None:
        getattr(self._events, "close", lambda: None)()


class RunDriver:
    """Advances one backend stream a step at a time and keeps its Run up to date."""

    def __init__(self, backend: Backend, settings: RunSettings, prompt_ids: list[int],
                 should_stop: Callable[[], bool]) -> None:
        self.run = Run(settings, len(prompt_ids), missing_fields=dict(backend.missing_fields))
        self._backend, self._prompt_ids, self._should_stop = backend, prompt_ids, should_stop
        self._provenance = ProvenanceBuilder(backend.decode)
        self._events: _ActiveTimeEvents | None = None
        self._engine_checks_stop = True
        self._first_step_asked: float | None = None

    def open(self) -> None:
        """Load the drafter (and check that it fits the target) before anything is measured."""
        s = self.run.settings
        if on_zerogpu() and self._backend.name == "local":  # the GPU exists only inside a spaces.GPU call
            from playground.backends.zerogpu import stream_local

            # the engine runs in a forked worker that cannot see the stop switch: the driver stops pulling instead
            stream = stream_local(s.preset, self._prompt_ids, s.drafter, s.generation_config())
            self._engine_checks_stop = False
        else:
            stream = self._backend.stream(self._prompt_ids, s.drafter, s.generation_config(), self._should_stop)
        self._events = _ActiveTimeEvents(stream)

    def measure_baseline(self) -> None:
        self.run.baseline_tokens_per_second = self._backend.baseline_tokens_per_second(self._prompt_ids)
        self.run.phase = "generating"

    def advance(self) -> bool:
        """Take one step; False once the run has finished."""
        if self.run.finished:
            return False
        assert self._events is not None, "open() first"
        if not self._engine_checks_stop and self.run.events and self._should_stop():
            self._events.close()
            self.run.events[-1] = replace(self.run.events[-1], finished=True, finish_reason="cancelled")
            self.run.phase = "done"
            return False
        if self._first_step_asked is None:
            self._first_step_asked = time.perf_counter()
        event = next(self._events, None)
        self.run.seen_seconds = time.perf_counter() - self._first_step_asked
        if event is None:
            self.run.phase = "done"
            return False
        self._provenance.add(event)
        self.run.events.append(event)
        self.run.pieces = self._provenance.pieces
        if event.finished:
            self.run.phase = "done"
        return not event.finished


def play(drivers: list[RunDriver], interval_s: float = RENDER_INTERVAL_S) -> Iterator[None]:
    """Advance the drivers in turn, one step each; yield when a UI update is due, and once at the end."""
    active = list(drivers)
    last_render = float("-inf")
    while active:
        active = [d for d in active if d.advance()]
        if active and time.perf_counter() - last_render >= interval_s:
            yield
            last_render = time.perf_counter()
    yield


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


# --- chat ---------------------------------------------------------------------------------------------------------


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
    except Exception:
        if not driver.run.events:  # failed before answering (e.g. the prompt is too long): forget the question
            conversation.exchanges.pop()
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
    """Shared by chat and compare: the baseline (announced, then measured), then the interleaved steps."""
    for d in drivers:
        d.run.phase = "measuring baseline"
    yield
    for d in drivers:  # one measurement per preset and prompt-length bucket: later calls hit the backend's cache
        d.measure_baseline()
    yield from play(drivers)


# --- compare ------------------------------------------------------------------------------------------------------


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
    for _ in _play(drivers):
        yield comparison


# --- stopping -----------------------------------------------------------------------------------------------------


class StopSwitches:
    """One threading.Event per (session, tab). Stop sets it; the engine checks it between steps.

    Stop also counts for a run still waiting in the queue: each switch remembers when Stop was last pressed, and a
    run armed later but submitted before that press starts already stopped."""

    def __init__(self) -> None:
        self._events: dict[tuple[str, str], threading.Event] = {}
        self._stopped_at: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def arm(self, session: str, tab: str, submitted_at: float) -> threading.Event:
        """The switch of a run submitted at `submitted_at` (time.monotonic()), set if Stop was pressed since."""
        with self._lock:
            event = self._events[(session, tab)] = threading.Event()
            if self._stopped_at.get((session, tab), float("-inf")) >= submitted_at:
                event.set()
            return event

    def trip(self, session: str, tab: str) -> None:
        with self._lock:
            self._stopped_at[(session, tab)] = time.monotonic()
            event = self._events.get((session, tab))
        if event is not None:
            event.set()

    def forget(self, session: str) -> None:
        with self._lock:
            for table in (self._events, self._stopped_at):
                for key in [key for key in table if key[0] == session]:
                    del table[key]


# --- export -------------------------------------------------------------------------------------------------------

CSV_COLUMNS = [
    "run", "drafter", "k", "step", "drafted", "accepted", "emitted", "emitted_text", "draft_probs", "attention_sink",
    "attention_context", "attention_draft", "hidden_rms", "draft_ms", "verify_ms", "total_tokens", "elapsed_ms",
    "finished", "finish_reason",
]
TIMING_NOTE = ("elapsed_ms counts time inside the decode loop only (pauses for UI rendering or for the other side "
               "of a comparison are excluded); tokens_per_second = generated tokens / elapsed time; "
               "seen_tokens_per_second = generated tokens / wall-clock time with those pauses, as the user saw it.")


def _joined(values: Iterable | None, pattern: str = "{}") -> str:
    return "" if values is None else " ".join(pattern.format(v) for v in values)


def _csv_rows(name: str, run: Run) -> Iterator[list]:
    text_by_step: dict[int, str] = {}
    for piece in run.pieces:
        text_by_step[piece.step] = text_by_step.get(piece.step, "") + piece.text
    for e in run.events:
        attention = e.attention
        yield [
            name, run.settings.drafter, run.settings.k, e.step, _joined(e.drafted), e.accepted, _joined(e.emitted),
            text_by_step.get(e.step, ""), _joined(e.draft_probs, "{:.4f}"),
            _joined(attention and [a.sink for a in attention], "{:.4f}"),
            _joined(attention and [a.context for a in attention], "{:.4f}"),
            _joined(attention and [a.draft for a in attention], "{:.4f}"),
            _joined(e.hidden_rms, "{:.4f}"), e.draft_ms, e.verify_ms, e.total_tokens, e.elapsed_ms, e.finished,
            e.finish_reason or "",
        ]


def _shareable(model: str) -> str:
    """A Hub id as it is; a local folder by its name only (exports are shared; local paths are private)."""
    return Path(model).name if Path(model).is_absolute() else model


def export_runs(runs: dict[str, Run], messages: list[dict], folder: Path, stem: str) -> list[Path]:
    """Write `<stem>.json` (text, config, metrics, per-step trace) and `<stem>.csv` (one row per step)."""
    if not runs:
        raise RequestError("nothing to export yet: run a prompt first")
    folder.mkdir(parents=True, exist_ok=True)
    first = next(iter(runs.values()))
    preset = get_preset(first.settings.preset)
    payload = {
        "app": "EAGLE Playground", "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "preset": preset.name, "target": _shareable(preset.target), "messages": messages, "timing_note": TIMING_NOTE,
        "runs": [run.record(name) for name, run in runs.items()],
    }
    json_path, csv_path = folder / f"{stem}.json", folder / f"{stem}.csv"
    json_path.write_text(json.dumps(payload, indent=1, ensure_ascii=False))
    with csv_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for name, run in runs.items():
            writer.writerows(_csv_rows(name, run))
    return [json_path, csv_path]
