"""vLLM in-process (GPU): AsyncLLM with an EAGLE-3 / EAGLE-3.1 drafter, streamed as StepEvents.

Not verified on GPU: vLLM cannot be installed in the project's CPU environment, so the pure logic (engine and
sampling arguments, the `vllm serve` command, reading outputs and metric snapshots) lives in plain functions that
are unit-tested on the CPU, and the part that touches vLLM (`VllmBackend`, `VllmStream`) is kept thin.

- EAGLE-3.1 needs no new method: `method: "eagle3"`, and vLLM reads `fc_norm` / `norm_output` from the drafter's
  config.json (vLLM #42764; speculators-format drafters need #46488).
- Per step: one DELTA output per engine step -> accepted = len(delta) - 1 (playground.backends.steps). The consumer
  only moves outputs onto a queue, so vLLM does not merge steps because we fell behind.
- Per position: vLLM's own spec-decode counters (`vllm.v1.metrics.reader.get_metrics_snapshot`), diffed around the
  request; per request: `CompletionOutput.spec_decode_metrics` on the final output, where this vLLM offers it.
- num_speculative_tokens is fixed per engine: another drafter or k restarts the engine (minutes for large targets).
- The drafter is checked against the target from the two config.json files before vLLM starts (vLLM would
  silently degrade).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import queue
import threading
import uuid
from typing import Any, Callable, Container, Iterable, Iterator

from playground.engine import GenerationConfig, SpecCounters, StepEvent
from playground.engine.templates import encode_chat
from playground.presets import Preset

from . import require_fixed_k_support
from .fit import check_drafter_fits
from .specstats import Sample, counters_from_samples
from .steps import MISSING_FIELDS, DeltaStepper, finish_reason

OPTIONAL_ENGINE_ARGS = {"per_request_spec_decode_metrics": "detailed"}  # passed only where this vLLM has them


class VllmError(RuntimeError):
    """vLLM failed while serving a request."""


# --- pure functions (unit-tested on the CPU) --------------------------------------------------------------------


def speculative_config(drafter: str, k: int) -> dict:
    """vLLM's speculative_config for an EAGLE-3 or EAGLE-3.1 drafter (the drafter's config flags select 3.1)."""
    if k < 1:
        raise ValueError(f"num_speculative_tokens must be at least 1, got {k}")
    return {"method": "eagle3", "model": drafter, "num_speculative_tokens": k}


def engine_kwargs(preset: Preset, drafter: str | None, k: int, supported: Container[str] | None = None) -> dict:
    """AsyncEngineArgs keyword arguments. `drafter` None = plain decoding. `supported` = AsyncEngineArgs' field
    names; optional arguments this vLLM lacks are left out (None = keep them all)."""
    kwargs: dict[str, Any] = {
        "model": preset.target,
        "dtype": preset.dtype,
        "tensor_parallel_size": preset.tensor_parallel_size,
        "trust_remote_code": preset.trust_remote_code,
        "disable_log_stats": False,  # the spec-decode counters need stats
        **preset.engine_options,
    }
    if drafter is not None:
        kwargs["speculative_config"] = speculative_config(drafter, k)
        for key, value in OPTIONAL_ENGINE_ARGS.items():
            if supported is None or key in supported:
                kwargs[key] = value
    return kwargs


def serve_command(preset: Preset, drafter: str | None, k: int, host: str = "0.0.0.0", port: int = 8000) -> list[str]:
    """The `vllm serve` command line equivalent to this preset (for a remote server)."""
    kwargs = engine_kwargs(preset, drafter, k)
    command = ["vllm", "serve", kwargs.pop("model")]
    kwargs.pop("disable_log_stats")  # the server logs stats by default
    spec = kwargs.pop("speculative_config", None)
    for key, value in kwargs.items():
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
    """Move outputs onto a queue and nothing else, so the engine never waits for (and merges steps behind) us."""
    try:
        async for output in engine.generate(prompt, params, request_id):
            out.put(output)
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
        future = backend.submit(_pump(engine, {"prompt_token_ids": list(prompt_ids)}, params, request_id, outputs))
        self.stepper = DeltaStepper(self.k)
        pending: StepEvent | None = None
        try:
            while (item := outputs.get()) is not _DONE:
                if isinstance(item, BaseException):
                    raise VllmError(f"vLLM failed: {type(item).__name__}: {item}") from item
                if should_stop is not None and should_stop() and pending is None:
                    yield self.stepper.feed([], "cancelled")
                    return
                ids, reason, metrics = read_output(item)
                self.request_metrics = metrics or self.request_metrics
                event = self.stepper.feed(ids, reason)
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


class VllmBackend:
    """One AsyncLLM engine at a time (for the drafter and k last asked for), on its own asyncio loop thread."""

    name = "vllm"
    missing_fields = {
        **MISSING_FIELDS,
        "baseline": "measure plain decoding by running drafter 'none' (restarts the engine without a drafter)",
    }

    def __init__(self, preset: Preset) -> None:
        self.preset = preset
        self._lock = threading.Lock()
        self._tokenizer = None
        self._engine: Any = None
        self._engine_key: tuple[str | None, int] | None = None
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="vllm-loop", daemon=True).start()

    def submit(self, coroutine) -> "asyncio.Future":
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.preset.target,
                                                            trust_remote_code=self.preset.trust_remote_code)
        return self._tokenizer

    def encode(self, messages: list[dict], chat_template: str | None = None, raw: bool = False) -> list[int]:
        return encode_chat(self.tokenizer, messages, chat_template, raw)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def preload(self) -> None:
        """At start-up: the tokenizer, and every preset drafter checked against the target (configs only). The
        engine itself starts with the first request, when the drafter and k are known."""
        _ = self.tokenizer
        for source in self.preset.drafters.values():
            check_drafter_fits(self.preset.target, source)

    def engine(self, drafter: str, k: int) -> Any:
        """The engine for this drafter and k, (re)started if needed; the drafter's fit is checked first."""
        source = None if drafter == "none" else self.preset.drafters.get(drafter, drafter)
        key = (source, k if source else 0)
        with self._lock:
            if self._engine_key != key:
                if source is not None:
                    check_drafter_fits(self.preset.target, source)
                if self._engine is not None:
                    self._engine.shutdown()
                    self._engine, self._engine_key = None, None
                self._engine = self.submit(self._start(source, k)).result()
                self._engine_key = key
            return self._engine

    async def _start(self, drafter: str | None, k: int) -> Any:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        supported = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
        return AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_kwargs(self.preset, drafter, k, supported)))

    @staticmethod
    def spec_counters() -> SpecCounters | None:
        from vllm.v1.metrics.reader import get_metrics_snapshot

        return counters_from_snapshot(get_metrics_snapshot())

    def stream(self, prompt_ids: list[int], drafter: str, cfg: GenerationConfig,
               should_stop: Callable[[], bool] | None = None) -> VllmStream:
        cfg.validate()
        require_fixed_k_support(self.preset.backend, cfg)
        return VllmStream(self, prompt_ids, drafter, cfg, should_stop)
