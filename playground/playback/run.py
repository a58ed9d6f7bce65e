"""One run as the playground plays it: a backend stream advanced a step at a time into a live record.

Timing: a run's `elapsed_ms` (and so its tokens/s) counts only time spent inside the decode loop. Time the loop
sits paused between steps — while the UI renders, or while the other side of a comparison takes its step — is
left out, so two interleaved runs each report the speed they would have alone, comparable with the baseline.
A backend that `paces_itself` (vLLM: its engine decodes on while we render) stamps each step with its arrival and is
not rewritten; its plain baseline is timed after the run, and a comparison plays its sides one after the other.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace

from playground.auto_k import answer_stream
from playground.backends import Backend, StepStream
from playground.engine import Baseline, RunRecord, RunTally, StepEvent, emitted_ids
from playground.engine.choice import AutoK
from playground.engine.threads import busy_text
from playground.health import Health, run_health
from playground.health.stats import LOOKS
from playground.run_record import exported_run, run_fields
from playground.viz import ProvenanceBuilder, RunView, TokenPiece, TreeStep, plain_verdict

from .baseline import AFTER, SHARE, SHARE_IN_CHAT, BaselineSampler, PlainPool
from .run_settings import RunSettings

RENDER_INTERVAL_S = 0.15  # at most ~7 UI updates a second; a UI update costs more than a decode step
RENDER_SHARE = 0.1  # and UI updates take at most this share of the wall time: the interval grows with their cost
CHART_INTERVAL_S = 1.0  # charts and the live JSON, the costliest outputs to send and draw, at most once a second


FINISH_REASONS = {
    "eos": "finished: end of answer",
    "length": "finished: reached max new tokens",
    "stop": "finished: stop string",
    "cancelled": "stopped",
}


@dataclass
class Run:
    """One generation as recorded so far: events, decoded pieces, and the plain baseline measured alongside."""

    settings: RunSettings
    prompt_tokens: int
    events: list[StepEvent] = field(default_factory=list)
    pieces: list[TokenPiece] = field(default_factory=list)
    baseline: Baseline | None = None  # filled in by a BaselineSampler as its samples come in
    missing_fields: dict[str, str] = field(default_factory=dict)  # what the backend cannot report, and why
    fields: dict = field(default_factory=dict)  # how it ran: precision, forward, kernels... (run_record)
    opened: bool = False  # the stream is open (drafter loaded and checked): the next step is being computed
    error: str | None = None  # why the run broke off, when it did
    seen_seconds: float | None = None  # wall clock from asking for the first step to the latest one
    starting: str | None = None  # what the run waits for before its first step (vLLM starting its engines)
    waiting: str | None = None  # why it has not started yet (a comparison's other side runs first)
    complete: bool = False  # the run and its baseline are done: this is its last update
    measuring: bool = False  # the answer is done and plain decoding is being timed after it (BaselineSampler.finish)
    trees: list[TreeStep] = field(default_factory=list)  # each step's draft tree, for a tree run
    engine: str = "local"  # the backend that ran it (local, vllm, remote)
    held: str | None = None  # what its backend held when it finished, beyond the app's process (Backend.held)
    prompt_ids: list[int] = field(default_factory=list)  # what the target read: its record carries them (replay)
    health: Health | None = None  # the drafter held against its fingerprint, at each look and at the end
    auto_k: AutoK | None = None  # what k auto chose for this run, and why (settings then hold the choice)
    replay: dict | None = None  # "what would each drafter buy on this answer?", once asked: its line, rows and costs
    tally: RunTally = field(init=False)  # the events' totals, kept as they arrive: a render reads, never re-counts

    def __post_init__(self) -> None:
        self.tally = RunTally.of(self.events, self.settings.k)

    @property
    def precision(self) -> str:
        """The weights' dtype, and whether speculation is exact in it (run_record.precision_label)."""
        return self.fields.get("precision", "")

    @property
    def tree(self) -> TreeStep | None:
        """The latest step's draft tree."""
        return self.trees[-1] if self.trees else None

    def tree_of_step(self, step: int) -> TreeStep | None:
        return next((tree for tree in self.trees if tree.step == step), None)

    def add(self, event: StepEvent) -> None:
        self.events.append(event)
        self.tally.observe(event)

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.pieces)

    @property
    def token_ids(self) -> list[int]:
        return emitted_ids(self.events)

    @property
    def finished(self) -> bool:
        return bool(self.events) and self.events[-1].finished

    @property
    def finish_reason(self) -> str | None:
        return self.events[-1].finish_reason if self.events else None

    @property
    def status(self) -> str:
        if self.error:
            return f"failed: {self.error}"
        if self.finished and self.measuring:  # "finished" comes with the final numbers
            return "answer done: timing plain decoding for the speedup…"
        if self.finished:
            notes = [note for note in (self.auto_k.short() if self.auto_k else None,
                                       busy_text(self.tally.metrics().cores_taken), self.held) if note]
            return "; ".join([FINISH_REASONS.get(self.finish_reason or "", "finished"), *notes])
        if self.events:
            return f"generating… {self.events[-1].total_tokens} tokens"
        if self.waiting:
            return self.waiting
        if self.starting:
            return self.starting
        return "generating…" if self.opened else "starting…"

    @property
    def seen_tokens_per_second(self) -> float | None:
        """Tokens / wall-clock seconds, rendering pauses included: the rate the user saw (the engine's excludes
        them)."""
        return len(self.token_ids) / self.seen_seconds if self.seen_seconds else None

    def view(self) -> RunView:
        s = self.settings
        return RunView(s.drafter_label, s.plain, s.k, self.events, self.tally.metrics(), self.baseline,
                       dict(self.missing_fields), self.seen_tokens_per_second,
                       self.health.usual_by_position if self.health else None,
                       self.health.usual_drift if self.health else None, s.features, s.proposes_from)

    def record(self, name: str, with_steps: bool = True, view: RunView | None = None) -> dict:
        """The run as JSON-ready data: text, config, metrics and (for exports) the per-step trace. Pass the `view`
        already built for this render, so the events are summarised once."""
        view = view or self.view()
        s = self.settings
        run = RunRecord(self.text, self.token_ids, self.prompt_tokens, self.finish_reason, s.drafter,
                        s.generation_config(), view.metrics, self.events, self.prompt_ids or None)
        verdict = plain_verdict(view)
        return {"run": name, "status": self.status, "settings": asdict(s),
                **exported_run(run, self.fields, self.auto_k, self.health, with_steps),
                "baseline": self.baseline.to_dict() if self.baseline else None, "speedup": view.speedup,
                "speedup_range": view.speedup_range, "speedup_not_measured": view.too_few_steps,
                "verdict": verdict.to_dict() if verdict else None, "replay": self.replay,
                "seen_tokens_per_second": self.seen_tokens_per_second}


class _ActiveTimeEvents:
    """Rewrites each event's elapsed_ms to exclude the time the decode loop sat paused between steps."""

    def __init__(self, events: StepStream, rewrite: bool = True) -> None:
        self._events = events
        self._rewrite = rewrite
        self._paused_s = 0.0
        self._paused_since: float | None = None

    def __iter__(self) -> _ActiveTimeEvents:
        return self

    def __next__(self) -> StepEvent:
        # a pause counts where the stream's clock ran through it: not after steps it replays as they were timed
        # (auto_k.ContinuedStream's probe), whose run had ended
        if self._paused_since is not None and getattr(self._events, "live", True):
            self._paused_s += time.perf_counter() - self._paused_since
        event = next(self._events)
        self._paused_since = time.perf_counter()
        if not self._rewrite:
            return event
        return replace(event, elapsed_ms=max(event.elapsed_ms - self._paused_s * 1000, 0.0))

    def close(self) -> None:
        self._events.close()


class RunDriver:
    """Advances one backend stream a step at a time and keeps its Run up to date."""

    def __init__(self, backend: Backend, settings: RunSettings, prompt_ids: list[int],
                 should_stop: Callable[[], bool], auto_k: AutoK | None = None, earlier: Sequence[Health] = (),
                 session: str | None = None) -> None:
        self.run = Run(settings, len(prompt_ids), missing_fields=dict(backend.missing_fields),
                       fields=run_fields(backend, settings.plain), engine=backend.name, prompt_ids=list(prompt_ids),
                       auto_k=auto_k)
        self._backend, self._should_stop = backend, should_stop
        self._earlier = earlier  # the session's earlier answers' health with this drafter, k and way of decoding
        self._session = session  # the conversation's key: a method that keeps state keeps it there (None: its own)
        self.paces_itself = backend.capabilities.paces_itself
        self._stops_itself = backend.capabilities.checks_stop  # else advance() asks should_stop between steps
        self._provenance = ProvenanceBuilder(backend.decode)
        self._events: _ActiveTimeEvents | None = None
        self._first_step_asked: float | None = None

    @property
    def times_plain_steps(self) -> bool:
        """Whether plain steps of this run's target can be timed in this process (not on ZeroGPU, not where the
        backend says it cannot)."""
        return self._backend.capabilities.times_plain_steps

    def baseline(self, session: PlainPool | None = None) -> BaselineSampler | None:
        """This run's own plain baseline, timed alongside it (after it on vLLM), where the backend can time plain
        steps here; with `session`, the session's earlier plain steps near this run's context pooled into it."""
        if not self.times_plain_steps:
            return None
        earlier = session.near(self.pool_key, self.typical_context) if session is not None else []
        return BaselineSampler(self._backend.plain_probe(), [(self.run.prompt_ids, self.run)], self._should_stop,
                               share_alongside=0.0 if self.paces_itself else SHARE_IN_CHAT, earlier=earlier)

    @property
    def pool_key(self) -> tuple:
        """What a session's plain steps must share to pool: the preset, its weights and the threads asked."""
        s = self.run.settings
        return s.preset, self.run.fields.get("weights"), getattr(s, "threads", None)

    @property
    def typical_context(self) -> int:
        """The context this run's steps meet, roughly: its prompt and half its token budget."""
        return len(self.run.prompt_ids) + self.run.settings.max_new_tokens // 2

    def shares_target_with(self, other: RunDriver) -> bool:
        """Both runs decode the same target on the same backend object, which does not decode on between our steps:
        one baseline, timed alongside both, serves them."""
        return (self._backend is other._backend and not self.paces_itself and self.times_plain_steps
                and other.times_plain_steps)

    def shared_baseline(self, other: RunDriver) -> BaselineSampler:
        """One plain baseline for this run and `other` (see shares_target_with), timed alongside their steps."""
        return BaselineSampler(self._backend.plain_probe(), [(self.run.prompt_ids, self.run), (other.run.prompt_ids,
                               other.run)], self._should_stop, share_alongside=SHARE)

    def open(self) -> None:
        """Load the drafter (and check that it fits the target) before anything is measured."""
        s = self.run.settings
        stream = answer_stream(self._backend, self.run.prompt_ids, s.drafter, s.generation_config(),
                               self._should_stop, self._session, self.run.auto_k)
        self._events = _ActiveTimeEvents(stream, rewrite=not self.paces_itself)
        self.run.opened = True
        self.run.starting = self._backend.starting(s.drafter, s.k)

    def prepare(self) -> Iterator[None]:
        """Start what the backend needs before the first step (vLLM: this run's engine and the plain one), so that
        the wait shows as such instead of as a first step of minutes; where the backend tells how far a start is
        (`preparing`), the run's status says so about once a second."""
        if not self.run.starting:
            return
        s = self.run.settings
        for progress in self._backend.preparing(s.drafter, s.k):
            self.run.starting = progress
            yield
        self.run.starting = None

    def cancel(self) -> None:
        """End the run where it is, as Stop does: the stream is closed and its last step marked cancelled."""
        if self._events is not None:
            self._events.close()
        if self.run.events and not self.run.finished:
            self.run.events[-1] = replace(self.run.events[-1], finished=True, finish_reason="cancelled")

    def advance(self) -> bool:
        """Take one step; False once the run has finished."""
        if self.run.finished:
            return False
        assert self._events is not None, "open() first"
        if not self._stops_itself and self.run.events and self._should_stop():
            self.cancel()
            return False
        if self._first_step_asked is None:
            self._first_step_asked = time.perf_counter()
        event = next(self._events, None)
        self.run.seen_seconds = time.perf_counter() - self._first_step_asked
        if event is None:
            return False
        self._provenance.add(event)
        self.run.add(event)
        if tree := TreeStep.of(event, self._backend.decode):
            self.run.trees.append(tree)
        self.run.pieces = self._provenance.pieces
        if event.finished or (event.drafted and self.run.tally.counters.drafts in (1, *LOOKS)):  # 1: charts' band
            s, backend = self.run.settings, self._backend
            self.run.health = run_health(backend.preset, backend, s.drafter, s.generation_config(), s.chat_template,
                                         False, self.run.prompt_tokens, self.run.events, self._earlier)
        if event.finished:
            self.run.held = self._backend.held()
        return not event.finished


def play(drivers: list[RunDriver], baselines: Iterable[BaselineSampler] = (),
         interval_s: float = RENDER_INTERVAL_S) -> Iterator[None]:
    """Advance the drivers in turn, one step each, with a baseline timed alongside keeping up between rounds; then
    the baselines' remaining steps; yield when a UI update is due, and once at the end.

    A baseline's sample comes before the drivers' steps, not after them: a step right after a UI update runs ~8 %
    slower (the page renders on the same cores), and only in this order do the samples meet those moments as often as
    the run's own steps do."""
    active, baselines = list(drivers), list(baselines)
    pace = RenderPace(interval_s)
    while active:
        for baseline in baselines:
            baseline.keep_up()
        active = [d for d in active if d.advance()]
        if active and pace.due():
            yield from pace.render()
    if any(b.timing == AFTER for b in baselines):  # said at once: the baseline's steps after the answer take a while
        yield
    for baseline in baselines:
        for _ in baseline.finish():
            if pace.due():
                yield from pace.render()
    for driver in drivers:
        driver.run.complete = True
    yield


class RenderPace:
    """When the next UI update is due: at least `interval_s` apart, and far enough apart that updates — measured as
    the time the loop waits for the page's side to take one — take at most RENDER_SHARE of the wall time. On a busy
    2-core machine a full update (answer HTML, five charts, JSON) cost as much as the decoding between updates: the
    answer then appeared at half the engine's rate, and the page answered clicks late."""

    def __init__(self, interval_s: float) -> None:
        self._least_s = self.interval_s = interval_s
        self._last = float("-inf")

    def due(self) -> bool:
        return time.perf_counter() - self._last >= self.interval_s

    def render(self) -> Iterator[None]:
        paused_at = time.perf_counter()
        yield
        self._last = time.perf_counter()
        self.interval_s = max(self._least_s, (self._last - paused_at) / RENDER_SHARE)


class ChartPace:
    """Whether a run's charts (and live JSON) should be sent with this update: at most every CHART_INTERVAL_S while
    it streams, only when a step or a baseline sample changed them, and always with its last update."""

    def __init__(self, interval_s: float = CHART_INTERVAL_S) -> None:
        self._interval_s = interval_s
        self._drawn_at = float("-inf")
        self._drawn: tuple | None = None

    def due(self, *runs: Run) -> bool:
        state = tuple((len(r.events), r.baseline.tokens if r.baseline else 0, r.complete, r.error) for r in runs)
        if state == self._drawn:
            return False
        now = time.perf_counter()
        if not all(r.complete for r in runs) and now - self._drawn_at < self._interval_s:
            return False
        self._drawn_at, self._drawn = now, state
        return True
