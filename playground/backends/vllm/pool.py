"""The engine pool: `VllmBackend`, the app's vLLM backend, holding AsyncLLM engines on one asyncio loop thread.

num_speculative_tokens is fixed per engine, so there is one engine per (drafter, k; a weightless method: and its
settings, prompt lookup's n-gram lengths), started on first use (load and compile: minutes on 2 CPU cores, `starts`
quotes the measured times) and kept; at most MAX_ENGINES live at once, the least recently used shut down first, and
those unused for PLAYGROUND_VLLM_IDLE_S seconds stopped (IDLE_DEFAULT_S on every host; the next run that needs one
starts it again and says so). Plain decoding is an engine of its own: the live speedup's baseline (`VllmPlainProbe`).
The drafter is checked against the target from the two config.json files before vLLM starts (vLLM would silently
degrade).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Container, Iterator
from typing import Any

from playground import environment
from playground.drafting import PLAIN, method_for
from playground.engine import GenerationConfig, SpecCounters
from playground.engine.checkpoint import CheckpointError
from playground.engine.templates import encode_chat
from playground.presets import DRAFTER_LABELS, Preset
from playground.request import require_local_engine_options
from playground.request.fit import check_drafter_fits, read_config, stored_parameters
from playground.smollm2 import local_folder
from playground.streamed_steps import MISSING_FIELDS

from .. import Capabilities
from .args import CPU_ENVIRONMENT, Settings, engine_kwargs
from .memory import (
    EngineKey,
    GpuMemoryError,
    GpuPlan,
    MemoryNeed,
    engines_to_stop,
    gpu_plan,
    gpu_shares,
    gpu_total_bytes,
    memory_need,
)
from .processes import (
    child_processes_memory,
    descendant_pids,
    engine_processes,
    kill_born_since,
    kill_processes,
    stop_engine,
)
from .starts import PRESET, engine_id, expected, measured_on, remember_start, started_before
from .stream import VllmError, VllmPlainProbe, VllmStream, counters_from_snapshot

STARTING_STOP_S = 5.0  # at shutdown, how long a starting engine's killed processes and its failing start are awaited
IDLE_DEFAULT_S = 300.0  # on every host: an engine core with its worker holds ~3 GB on the CPU
log = logging.getLogger("playground.vllm")


def idle_limit_s() -> float | None:
    """How long an engine may sit unused before it is stopped (PLAYGROUND_VLLM_IDLE_S, default IDLE_DEFAULT_S on
    every host); None: never (0). An engine core with its worker holds ~3 GB on the CPU while it lives."""
    value = environment.number("PLAYGROUND_VLLM_IDLE_S")
    if value is None:
        return IDLE_DEFAULT_S
    return value if value > 0 else None


class VllmBackend:
    """AsyncLLM engines, one per (drafter, k), on one asyncio loop thread; at most MAX_ENGINES alive (on a GPU: plain
    decoding's and two drafter engines, each with its share of the GPU; one at a time where the GPU has room for one:
    `memory_plan`)."""

    name = "vllm"

    def __init__(self, preset: Preset) -> None:
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout is the CLI's (`--json`)
        self.preset = preset
        self._lock = threading.Lock()
        self._tokenizer = None
        self._engines: OrderedDict[EngineKey, Any] = OrderedDict()  # least recently used first
        self._last_used: dict[EngineKey, float] = {}  # monotonic time an engine was last asked for or let go
        self._in_use: Counter[EngineKey] = Counter()  # requests reading from each engine now
        self._released: dict[EngineKey, float] = {}  # engines stopped for sitting idle: how long they sat unused
        self.idle_s = idle_limit_s()
        self._current: tuple[EngineKey, float, str, str] | None = None  # starting: key, since, place, expectation
        self._before_start: set[int] = set()  # the child processes alive when the engine starting now began
        self._processes: dict[EngineKey, list] = {}  # each engine's own processes (core, worker), once up
        self._gpu_plan: GpuPlan | None = None  # how the engines share the GPU (`memory_plan`), once known
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="vllm-loop", daemon=True).start()
        atexit.register(self.shutdown)  # engine cores are processes: stop them before the interpreter tears down
        if self.idle_s is not None:
            threading.Thread(target=self._release_idle_forever, name="vllm-idle", daemon=True).start()

    @property
    def missing_fields(self) -> dict[str, str]:
        """MISSING_FIELDS, and the live baseline where the GPU has room for one engine (`memory_plan`)."""
        fields = dict(MISSING_FIELDS)
        try:
            note = self.memory_plan().note
        except GpuMemoryError:  # raised again where an engine would start (and at preload)
            note = None
        if note:
            fields["baseline"] = note
        return fields

    @property
    def capabilities(self) -> Capabilities:
        """Its engine decodes on without waiting for the consumer (paces itself); plain steps are timed in plain
        decoding's engine, except where the GPU has room for one engine (`memory_plan`)."""
        return Capabilities(times_plain_steps="baseline" not in self.missing_fields, paces_itself=True)

    @property
    def exact_speculation(self) -> bool:
        return self.preset.dtype == "float32"

    def memory_plan(self) -> GpuPlan:
        """How this preset's engines share the GPU (`gpu_plan`), worked out once, before the first engine starts: the
        weights from the configs against the GPU's total memory. GpuMemoryError where they cannot fit. On the CPU:
        the default plan."""
        if self._gpu_plan is None:
            if self.preset.device != "cuda":
                self._gpu_plan = GpuPlan()
            else:
                gpu_shares(self.preset)  # a preset's own share that adds above the budget: refused before any read
                self._gpu_plan = gpu_plan(self.preset, self._memory_need(),
                                          gpu_total_bytes(self.preset.tensor_parallel_size))
        return self._gpu_plan

    def _memory_need(self) -> MemoryNeed | None:
        """memory_need from the target's and the preset's drafters' config.json and safetensors headers; None where a
        config cannot be read."""
        try:
            drafters = list(self.preset.drafters.values())
            return memory_need(self.preset, read_config(self.model_folder), [read_config(d) for d in drafters],
                               stored_parameters(self.model_folder), [stored_parameters(d) for d in drafters])
        except (CheckpointError, ValueError, TypeError):
            return None

    def submit(self, coroutine) -> asyncio.Future:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    @property
    def model_folder(self) -> str:
        """The folder vLLM loads (the default target is converted once from its package, as for the local engine)."""
        return local_folder(self.preset.target)

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.model_folder,
                                                            trust_remote_code=self.preset.trust_remote_code)
        return self._tokenizer

    def encode(self, messages: list[dict], chat_template: str | None = None, raw: bool = False) -> list[int]:
        return encode_chat(self.tokenizer, messages, chat_template, raw)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def preload(self) -> None:
        """At start-up: the tokenizer, and every preset drafter checked against the target (configs only). Engines
        start with the first request that needs them, when the drafter and k are known."""
        _ = self.tokenizer
        for source in self.preset.drafters.values():
            check_drafter_fits(self.model_folder, source)
        self.memory_plan()  # on a GPU: refuse now what cannot fit

    def _key(self, drafter: str, k: int, settings: Settings = ()) -> EngineKey:
        """An engine's identity; a weightless method's own settings, each given or its default, are part of it."""
        if drafter == PLAIN:
            return (None, 0, ())
        method = method_for(drafter)
        if not method.checkpoint:
            return (drafter, k, tuple(method.settings(dict(settings)).items()))
        return (self.preset.drafters.get(drafter, drafter), k, ())

    def _needed(self, drafter: str) -> list[str]:
        """The engines a run with this drafter needs: its own, then plain decoding's (the live baseline), which a GPU
        with room for one engine goes without."""
        return [drafter] if self.memory_plan().alone else list(dict.fromkeys([drafter, PLAIN]))

    def _missing(self, drafter: str, k: int, settings: Settings = ()) -> list[EngineKey]:
        """The engines a run with this drafter, k and method settings needs that are not up."""
        return [key for key in dict.fromkeys(self._key(name, k, settings) for name in self._needed(drafter))
                if key not in self._engines]

    def _name(self, key: EngineKey) -> str:
        if key[0] is None:
            return "plain decoding, the live speedup's baseline"
        name = next((n for n, source in self.preset.drafters.items() if source == key[0]), key[0])
        return f"{DRAFTER_LABELS.get(name, name)} k={key[1]}"

    def _engine_id(self, key: EngineKey) -> str:
        applied = {k: os.environ.get(k, v) for k, v in CPU_ENVIRONMENT.items()} if self.preset.device == "cpu" else {}
        return engine_id(engine_kwargs(self.preset, key[0], key[1], model=self.model_folder, settings=key[2]), applied)

    def _expected(self, key: EngineKey) -> str:
        """How long this engine's start should take: measured on the CPU for the default pair (warm where it started
        here before and compiled graphs are cached: `starts.started_before`), not measured elsewhere."""
        if self.preset.device != "cpu":
            return "loading and compiling; start-up not measured on a GPU"
        text = expected(key[0] is None, started_before(self._engine_id(key)))
        if text is None:
            return "start-up not measured"
        return text if self.preset.name == PRESET else f"the default pair's {text}"

    def _measured_on(self) -> str:
        where = measured_on() if self.preset.device == "cpu" else None
        return f"; measured on {where}" if where else ""

    def starting(self, drafter: str, k: int, settings: Settings = ()) -> str | None:
        """What a run with this drafter and k waits for first (`prepare`), when an engine it needs is not up: which
        engines, and how long their starts took in the measurements (assets/bench/vllm-start-cpu.json)."""
        missing = self._missing(drafter, k, settings)
        if not missing:
            return None
        names = ", then ".join(f"{self._name(key)} ({self._expected(key)})" for key in missing)
        kept = ("One engine at a time on this GPU: another drafter or k starts its own…" if self.memory_plan().alone
                else "Engines are kept once started…")
        again = "".join(f"{self._stopped_idle(key)}; starting it again. " for key in missing if key in self._released)
        return f"{again}starting vLLM for {names}{self._measured_on()}. {kept}"

    def _stopped_idle(self, key: EngineKey) -> str:
        """E.g. "vLLM's EAGLE-3.1 k=4 engine was stopped after 312 s idle", for an engine the idle release stopped."""
        return f"vLLM's {self._name(key).split(',')[0]} engine was stopped after {self._released[key]:.0f} s idle"

    def start_progress(self) -> str | None:
        """While an engine starts: which, how long so far and what the measurements lead to expect, e.g. "starting
        vLLM for EAGLE-3.1 k=4 (1 of 2): 43 s so far (first start here: 3.6–10.1 min measured; measured on AMD EPYC
        with 2 cores (AVX2), …)…"; None when none is starting. Cheap, and safe from any thread (a UI timer,
        `preparing`)."""
        current = self._current
        if current is None:
            return None
        key, began, place, expectation = current
        elapsed = time.monotonic() - began
        so_far = f"{elapsed:.0f} s" if elapsed < 100 else f"{elapsed // 60:.0f} min {elapsed % 60:.0f} s"
        what = f"vLLM for {self._name(key)}{place}: {so_far} so far ({expectation})…"
        return f"{self._stopped_idle(key)}; starting {what}" if key in self._released else f"starting {what}"

    def prepare(self, drafter: str, k: int, settings: Settings = ()) -> None:
        """Start the engines a run needs: its own and plain decoding's (the baseline; not where the GPU has room
        for one engine)."""
        missing = self._missing(drafter, k, settings)
        keys = [self._key(name, k, settings) for name in self._needed(drafter)]
        for name, key in zip(self._needed(drafter), keys):
            many = key in missing and len(missing) > 1
            self.engine(name, k, f" ({missing.index(key) + 1} of {len(missing)})" if many else "", settings)
        with self._lock:  # the run's own engine waited through plain decoding's start: not idle for it
            now = time.monotonic()
            self._last_used.update({key: now for key in keys if key in self._engines})

    def preparing(self, drafter: str, k: int, every_s: float = 1.0, settings: Settings = ()) -> Iterator[str]:
        """`prepare` in a thread of its own, yielding `start_progress()` every `every_s` seconds until the engines
        are up (then it returns; a failed start raises here). Closing it early leaves the start running."""
        failure: list[BaseException] = []

        def run() -> None:
            try:
                self.prepare(drafter, k, settings)
            except BaseException as err:  # noqa: BLE001 - raised in the caller's thread below
                failure.append(err)

        thread = threading.Thread(target=run, name="vllm-prepare", daemon=True)
        thread.start()
        last = self.starting(drafter, k, settings) or ""
        thread.join(every_s)
        while thread.is_alive():
            last = self.start_progress() or last
            yield last
            thread.join(every_s)
        if failure:
            raise failure[0]

    def engine(self, drafter: str, k: int, place: str = "", settings: Settings = ()) -> Any:
        """The engine for this drafter, k and method settings, started if needed; the drafter's fit and, on a GPU,
        the memory plan are checked first. Engines make room as `engines_to_stop` says. `place`: where this start is
        among those a run waits for (" (1 of 2)"), for `start_progress`."""
        key = self._key(drafter, k, settings)
        self.release_idle(keep=key)
        with self._lock:
            self._last_used[key] = time.monotonic()
            if key not in self._engines:
                if key[0] is not None and method_for(key[0]).checkpoint:
                    check_drafter_fits(self.model_folder, key[0])
                plan = self.memory_plan()
                for victim in engines_to_stop(list(self._engines), key, self.preset.device == "cuda", plan.alone):
                    stop_engine(self._engines.pop(victim))
                self._before_start = descendant_pids()
                self._current = (key, time.monotonic(), place, self._expected(key) + self._measured_on())
                try:
                    self._engines[key] = self.submit(self._start(*key)).result()
                finally:
                    self._current = None
                self._processes[key] = engine_processes(descendant_pids() - self._before_start)
                self._released.pop(key, None)
                if self.preset.device == "cpu":
                    remember_start(self._engine_id(key))
            self._engines.move_to_end(key)
            self._last_used[key] = time.monotonic()  # not idle for the minutes its start took
            return self._engines[key]

    @contextlib.contextmanager
    def holding(self, drafter: str, k: int, settings: Settings = ()) -> Iterator[Any]:
        """The engine for this drafter, k and method settings, kept from the idle release while the block reads
        from it."""
        engine, key = self.engine(drafter, k, settings=settings), self._key(drafter, k, settings)
        with self._lock:
            self._in_use[key] += 1
        try:
            yield engine
        finally:
            with self._lock:
                self._in_use[key] -= 1
                self._last_used[key] = time.monotonic()

    def release_idle(self, now: float | None = None, keep: EngineKey | None = None) -> list[EngineKey]:
        """Stop the engines no request has used for `idle_s` seconds (none while a request reads from them, nor
        `keep`, the one being asked for); returns their keys. Their next request starts them again, and says so as
        any start does."""
        if self.idle_s is None:
            return []
        now = time.monotonic() if now is None else now
        with self._lock:
            idle = [key for key in self._engines if key != keep and not self._in_use[key]
                    and now - self._last_used.get(key, now) > self.idle_s]
            for key in idle:
                stop_engine(self._engines.pop(key), timeout=0)
                kill_processes(self._processes.pop(key, []), STARTING_STOP_S)  # a worker outlived its core
                self._released[key] = now - self._last_used.pop(key)
        for key in idle:
            log.info("%s (PLAYGROUND_VLLM_IDLE_S=%.0f)", self._stopped_idle(key), self.idle_s)
        return idle

    def held(self) -> str | None:
        """What the live engines hold beyond the app's own process, e.g. "vLLM holds 2 engines (EAGLE-3.1 k=4, plain
        decoding): 5.8 GB in 4 processes; each is stopped after 10 min unused"; None when none is up. The memory is
        the proportional set size (PSS) of this process's child processes (vLLM's engine cores and workers: nothing
        else here starts processes), so pages they share count once. About 10 ms per GB read."""
        with self._lock:
            keys = sorted(reversed(self._engines), key=lambda key: key[0] is None)  # drafters, then plain decoding's
            names = [self._name(key).split(",")[0] for key in keys]
        if not names:
            return None
        size, processes = child_processes_memory()
        if self.idle_s is None:
            release = "kept while the app runs (PLAYGROUND_VLLM_IDLE_S=0)"
        else:
            release = f"each is stopped after {_duration(self.idle_s)} unused (PLAYGROUND_VLLM_IDLE_S)"
        memory = f": {size / 1e9:.1f} GB in {processes} process{'es' * (processes > 1)}" if processes else ""
        return f"vLLM holds {len(names)} engine{'s' * (len(names) > 1)} ({', '.join(names)}){memory}; {release}"

    def _release_idle_forever(self) -> None:
        while True:
            time.sleep(min(60.0, self.idle_s / 4))
            self.release_idle()

    async def _start(self, drafter: str | None, k: int, settings: Settings) -> Any:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        if self.preset.device == "cpu":
            for key, value in CPU_ENVIRONMENT.items():
                os.environ.setdefault(key, value)
        supported = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
        return AsyncLLM.from_engine_args(AsyncEngineArgs(**self.engine_kwargs(drafter, k, supported, settings)))

    def engine_kwargs(self, drafter: str | None, k: int, supported: Container[str] | None = None,
                      settings: Settings = ()) -> dict:
        """This backend's arguments for the engine of `drafter` (a source or a weightless method's name, None =
        plain), k and the method's settings (`engine_kwargs`, with the GPU plan's share)."""
        alone = self.memory_plan().alone
        return engine_kwargs(self.preset, drafter, k, supported, model=self.model_folder, alone=alone,
                             settings=settings)

    def plain_probe(self) -> VllmPlainProbe:
        """The live baseline's probe; refused where the GPU has room for one engine (it would stop the run's)."""
        note = self.memory_plan().note
        if note:
            raise VllmError(note)
        return VllmPlainProbe(self)

    @staticmethod
    def spec_counters() -> SpecCounters | None:
        from vllm.v1.metrics.reader import get_metrics_snapshot

        return counters_from_snapshot(get_metrics_snapshot())

    def stream(self, prompt_ids: list[int], drafter: str, cfg: GenerationConfig,
               should_stop: Callable[[], bool] | None = None, session: str | None = None) -> VllmStream:
        """One request's steps (`session` is not read: vLLM keeps its engine's own state)."""
        require_local_engine_options(self.preset.backend, cfg)
        return VllmStream(self, prompt_ids, drafter, cfg, should_stop)

    def shutdown(self) -> None:
        """Stop every engine, its engine-core processes killed at once: given vLLM's default 5 s to exit, an engine
        core here was still waiting for its worker and was killed anyway (5 s per engine, one after the other). An
        engine still starting holds the lock until its start ends (minutes on a small CPU; SIGTERM waited 38-48 s
        once): its processes, those born since its start began, are killed first, so that its start fails at once."""
        locked = self._lock.acquire(timeout=0.2)
        if not locked:
            killed = kill_born_since(self._before_start, STARTING_STOP_S) if self._current else 0
            locked = self._lock.acquire(timeout=STARTING_STOP_S)
            log.info("stopped vLLM while an engine started: %d process%s killed", killed, "es" * (killed != 1))
        try:
            while self._engines:
                key, engine = self._engines.popitem()
                stop_engine(engine, timeout=0)
                kill_processes(self._processes.pop(key, []), STARTING_STOP_S)
        finally:
            if locked:
                self._lock.release()


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
