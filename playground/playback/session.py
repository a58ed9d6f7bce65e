"""Chat and Compare as sessions: conversations, turns, regeneration and side-by-side runs."""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from playground.auto_k import auto_k
from playground.backends import Backend, shared_backend
from playground.engine.choice import AutoK
from playground.engine.proposers import forget_session
from playground.health import Health
from playground.presets import ENGINE_LABELS, Preset, get_preset
from playground.request import nonempty_prompt
from playground.viz import RunView, Verdict, comparison_verdict, engine_verdict

from .baseline import PlainPool
from .run import Run, RunDriver, play
from .run_settings import RequestError, RunSettings


def _prepare(settings: RunSettings, messages: list[dict], earlier: Sequence[Run] = ()
             ) -> tuple[Backend, list[int], RunSettings, AutoK | None]:
    """The run's backend, prompt ids and settings as resolved (RunSettings.resolved); with k auto, the k chosen (or
    plain decoding) and why, its acceptance updated with the `earlier` runs' finished greedy answers on this pair and
    our engine."""
    opened: list[tuple[Backend, list[int]]] = []

    def backend_and_prompt(preset: Preset) -> tuple[Backend, list[int]]:  # loaded once, after the checks
        if not opened:
            backend = shared_backend(preset)
            opened.append((backend, backend.encode(messages, chat_template=settings.template_name)))
        return opened[0]

    def choose_k(preset: Preset) -> AutoK:
        backend, prompt_ids = backend_and_prompt(preset)
        session = [(run.prompt_ids, run.token_ids) for run in earlier
                   if run.finished and not run.error and run.engine == "local" and run.prompt_ids
                   and run.settings.temperature == 0 and run.settings.preset == settings.preset]
        return auto_k(backend, settings.drafter, prompt_ids, len(prompt_ids) + settings.max_new_tokens // 2,
                      session=session, settings=settings.method_settings)

    request = settings.resolved(choose_k)
    backend, prompt_ids = backend_and_prompt(request.preset)
    return backend, prompt_ids, replace(settings, drafter=request.drafter, k=request.k), request.auto


def _earlier_health(conversation: Conversation, settings: RunSettings) -> list[Health]:
    """The health of the conversation's earlier answers that ran as this one will: the same pair, drafter, k and
    way of decoding (greedy or sampled); check.pooled holds them together under a shared difference (trees are
    not checked, so never pooled)."""
    return [ex.run.health for ex in conversation.exchanges
            if ex.run.health is not None
            and (ex.run.settings.preset, ex.run.settings.drafter, ex.run.settings.k)
            == (settings.preset, settings.drafter, settings.k)
            and (ex.run.settings.temperature == 0) == (settings.temperature == 0)]


def load_preset(name: str) -> str | None:
    """Load a preset's models now, so that the first request does not wait; returns what failed, if anything."""
    try:
        shared_backend(get_preset(name)).preload()
    except (ValueError, OSError) as err:  # BackendUnavailable, TargetError and CheckpointError are ValueErrors
        return str(err)
    return None


@dataclass
class Exchange:
    user: str
    run: Run


@dataclass
class Conversation:
    """A chat as plain text (what the model sees) plus the run behind each answer (what the UI shows).

    One run owns the conversation at a time: each new turn takes it over, and Clear takes it away from whichever run
    had it. A run that no longer owns the conversation stops and writes nothing more into it, so what the model sees
    next is what the screen shows, whatever a cancelled or superseded run was doing.

    It has a key of its own (`session`: one per conversation, so one per visitor, as Gradio copies a State's default
    per session), under which a method that keeps state across runs (suffix decoding's cache of the earlier prompts
    and answers) keeps it, forgotten by Clear."""

    exchanges: list[Exchange] = field(default_factory=list)

    def __post_init__(self) -> None:  # not fields: Gradio reads a State's default with dataclasses.asdict
        self._owner = 0  # the turn that may write; take_over() and clear() move it on
        self._lock = threading.Lock()
        self.session = f"chat:{uuid.uuid4().hex}"
        self.plain_steps = PlainPool()  # the session's timed plain steps, which later answers' baselines pool

    def messages(self, system: str, next_user: str | None = None) -> list[dict]:
        out = [{"role": "system", "content": system}] if system.strip() else []
        for ex in self.exchanges:
            out += [{"role": "user", "content": ex.user}, {"role": "assistant", "content": ex.run.text}]
        if next_user is not None:
            out.append({"role": "user", "content": next_user})
        return out

    def take_over(self) -> int:
        """A new turn's ownership token; the run that owned the conversation until now loses it."""
        with self._lock:
            self._owner += 1
            return self._owner

    def owned_by(self, turn: int) -> bool:
        return self._owner == turn

    def clear(self) -> None:
        """Forget every exchange, and take the conversation away from any run still writing to it."""
        with self._lock:
            self._owner += 1
            self.exchanges = []
        forget_session(self.session)
        self.plain_steps.clear()

    def append(self, turn: int, exchange: Exchange) -> bool:
        """Add `exchange` if `turn` still owns the conversation; whether it did."""
        with self._lock:
            if self._owner == turn:
                self.exchanges.append(exchange)
            return self._owner == turn

    def remove(self, turn: int, exchange: Exchange) -> None:
        with self._lock:
            if self._owner == turn and exchange in self.exchanges:
                self.exchanges.remove(exchange)

    def pop(self, turn: int) -> Exchange | None:
        """Take the last exchange off, if `turn` owns the conversation and it has one."""
        with self._lock:
            return self.exchanges.pop() if self._owner == turn and self.exchanges else None

    def __deepcopy__(self, memo: dict) -> Conversation:  # Gradio deep-copies a State's default per session
        return Conversation(copy.deepcopy(self.exchanges, memo))


def chat_turn(conversation: Conversation, prompt: str | None, settings: RunSettings,
              should_stop: Callable[[], bool]) -> Iterator[Run]:
    """Answer `prompt` in `conversation`, yielding the growing Run (the exchange is added before the first yield).
    The turn takes the conversation over; it stops, and yields nothing more, once it loses it (Clear, or a newer
    turn)."""
    yield from _answer(conversation, conversation.take_over(), prompt, settings, should_stop)


def regenerate_turn(conversation: Conversation, settings: RunSettings,
                    should_stop: Callable[[], bool]) -> Iterator[Run]:
    """Drop the last answer and answer its question again."""
    turn = conversation.take_over()
    last = conversation.pop(turn)
    if last is None:
        raise RequestError("nothing to regenerate yet: send a message first")
    before = len(conversation.exchanges)
    try:
        yield from _answer(conversation, turn, last.user, settings, should_stop)
    except Exception:
        if len(conversation.exchanges) == before:  # no new answer was started: keep the old one
            conversation.append(turn, last)
        raise


def _answer(conversation: Conversation, turn: int, prompt: str | None, settings: RunSettings,
            should_stop: Callable[[], bool]) -> Iterator[Run]:
    prompt = nonempty_prompt(prompt)
    backend, prompt_ids, settings, auto = _prepare(settings, conversation.messages(settings.system, prompt),
                                                   [ex.run for ex in conversation.exchanges])
    driver = RunDriver(backend, settings, prompt_ids, lambda: should_stop() or not conversation.owned_by(turn), auto,
                       _earlier_health(conversation, settings), conversation.session)
    driver.open()
    exchange = Exchange(prompt, driver.run)
    if not conversation.append(turn, exchange):
        return
    try:
        for _ in _play([driver], conversation.plain_steps):
            if not conversation.owned_by(turn):
                driver.cancel()
                return
            yield driver.run
    except Exception as err:
        if not driver.run.events:  # failed before answering (e.g. the prompt is too long): forget the question
            conversation.remove(turn, exchange)
        driver.run.error = str(err) or type(err).__name__
        raise


def _play(drivers: list[RunDriver], session: PlainPool | None = None) -> Iterator[None]:
    """Shared by chat and compare: the runs, stepped in turn, with plain decoding timed on their text. Two runs of one
    target share one baseline timed alongside them (a paired comparison); otherwise each run has its own (alongside
    it on our engine, after it on vLLM: RunDriver.baseline), a chat's pooled with its `session`'s earlier plain
    steps near its context, and its own steps kept there for the answers after it."""
    if len(drivers) == 2 and drivers[0].shares_target_with(drivers[1]):
        baselines = [drivers[0].shared_baseline(drivers[1])]
    else:
        baselines = [b for b in (d.baseline(session) for d in drivers) if b is not None]
    yield
    for driver in drivers:
        if driver.run.starting:
            yield from driver.prepare()
            yield
    yield from play(drivers, baselines)
    if session is not None and len(drivers) == 1 and baselines:
        session.add(drivers[0].pool_key, baselines[0].timed)


@dataclass
class Comparison:
    prompt: str
    left: Run
    right: Run

    @property
    def shared_baseline(self) -> bool:
        """Both sides read one plain baseline, timed alongside them (same target, same backend, our engine)."""
        return self.left.baseline is not None and self.left.baseline is self.right.baseline

    @property
    def of_engines(self) -> bool:
        """One configuration on two engines: the settings equal but for the preset, which names the same target."""
        a, b = self.left.settings, self.right.settings
        return (self.left.engine != self.right.engine and replace(a, preset=b.preset) == b
                and get_preset(a.preset).target == get_preset(b.preset).target)

    def verdict(self, views: tuple[RunView, RunView] | None = None) -> Verdict:
        left, right = views or (self.left.view(), self.right.view())
        if self.of_engines:
            engines = (ENGINE_LABELS.get(run.engine, run.engine) for run in (self.left, self.right))
            return engine_verdict(left, right, *engines)
        return comparison_verdict(left, right, self.shared_baseline)

    def record(self) -> dict:
        """The comparison as a whole, for its export: the one baseline both sides were measured against (or null
        where each side has its own), and the verdict."""
        baseline = self.left.baseline.to_dict() if self.shared_baseline else None
        return {"baseline_shared": self.shared_baseline, "baseline": baseline, "verdict": self.verdict().to_dict()}


def compare(prompt: str | None, left: RunSettings, right: RunSettings,
            should_stop: Callable[[], bool]) -> Iterator[Comparison]:
    """Run two configurations on one prompt at the same time (alternating steps; one after the other when a side runs
    on vLLM), yielding both as they grow."""
    prompt = nonempty_prompt(prompt)
    drivers = []
    for settings in (left, right):
        backend, prompt_ids, settings, auto = _prepare(settings, Conversation().messages(settings.system, prompt))
        drivers.append(RunDriver(backend, settings, prompt_ids, should_stop, auto))
    for driver in drivers:
        driver.open()
    comparison = Comparison(prompt, drivers[0].run, drivers[1].run)
    # a vLLM engine decodes on between our steps: beside the other side it would share the CPU with it
    turns = [[d] for d in drivers] if any(d.paces_itself for d in drivers) else [drivers]
    if len(turns) > 1:
        comparison.right.waiting = "waiting: with vLLM on a side, the sides run one after the other (vLLM's engine " \
                                   "decodes on between steps, and would share the CPU with the other side)"
    try:
        for group in turns:
            if should_stop():
                group[0].run.waiting = "stopped before it started"
                continue
            group[0].run.waiting = None
            for _ in _play(group):
                yield comparison
    except Exception as err:
        for driver in drivers:
            driver.run.error = str(err) or type(err).__name__
        raise
