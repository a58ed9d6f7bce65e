"""One request through a vLLM engine, read as StepEvents, and the plain probe that times one plain step.

- Per step: one DELTA output per engine step -> accepted = len(delta) - 1 (playground.streamed_steps). The consumer
  only moves outputs onto a queue, so vLLM does not merge steps because we fell behind.
- Per position: vLLM's own spec-decode counters (`vllm.v1.metrics.reader.get_metrics_snapshot`), diffed around the
  request; per request: `CompletionOutput.spec_decode_metrics` on the final output, where this vLLM offers it.
"""

from __future__ import annotations

import dataclasses
import queue
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol

from playground.drafting import PLAIN
from playground.engine import GenerationConfig, SpecCounters, StepEvent
from playground.specstats import Sample, counters_from_samples
from playground.streamed_steps import DeltaStepper, finish_reason

from .args import sampling_kwargs


class EnginePool(Protocol):
    """What a stream asks of the backend that owns the engines (pool.VllmBackend): named here, so that the stream
    does not import the pool that imports it."""

    def holding(self, drafter: str, k: int, settings: tuple = ()) -> AbstractContextManager[Any]: ...

    def engine(self, drafter: str, k: int, place: str = "", settings: tuple = ()) -> Any: ...

    def submit(self, coroutine) -> Any: ...

    def spec_counters(self) -> SpecCounters | None: ...


class VllmError(RuntimeError):
    """vLLM failed while serving a request."""


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
    over the request), `request_metrics` (CompletionOutput.spec_decode_metrics, if offered) and `merged_steps` are
    set: how many of the engine's steps arrived in a delta with another (a busy consumer falls behind and vLLM merges
    outputs). Where that is above 0 the per-step view is a bound — a merged delta reads as one step accepting more —
    while the totals (tokens, drafting steps from vLLM's counters) stay exact; vLLM's `per_step_accepted` (in
    `request_metrics`) is the exact per-step record."""

    def __init__(self, backend: EnginePool, prompt_ids: list[int], drafter: str, cfg: GenerationConfig,
                 should_stop: Callable[[], bool] | None) -> None:
        self.server_counters: SpecCounters | None = None
        self.request_metrics: dict | None = None
        self.merged_steps: int | None = None  # None until the request ends, or where vLLM's counters are not read
        self.k = 0 if drafter == PLAIN else cfg.k
        self.stepper = DeltaStepper(self.k)
        self._events = self._run(backend, prompt_ids, drafter, cfg, should_stop)

    def __iter__(self) -> VllmStream:
        return self

    def __next__(self) -> StepEvent:
        return next(self._events)

    def close(self) -> None:
        """Stop reading: the request is aborted in its engine (the generator's cleanup), freeing its slot now."""
        self._events.close()

    def _run(self, backend: EnginePool, prompt_ids: list[int], drafter: str, cfg: GenerationConfig,
             should_stop: Callable[[], bool] | None) -> Iterator[StepEvent]:
        # kept from the idle release while the request reads
        with backend.holding(drafter, cfg.k, cfg.method_settings) as engine:
            yield from self._read(backend, engine, prompt_ids, cfg, should_stop)

    def _read(self, backend: EnginePool, engine: Any, prompt_ids: list[int], cfg: GenerationConfig,
              should_stop: Callable[[], bool] | None) -> Iterator[StepEvent]:
        from vllm.sampling_params import RequestOutputKind, SamplingParams

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
        self.merged_steps = merged_steps(self.request_metrics, self.server_counters, self.stepper.step - 1)
        if pending is not None:
            yield pending


def merged_steps(request_metrics: dict | None, counters: SpecCounters | None, deltas: int) -> int | None:
    """The engine's drafting steps that arrived merged into another's delta: vLLM's count of them (its per-request
    `per_step_accepted`, else its counters' drafts) less the deltas after the prefill; None where neither is read.
    Plain decoding's steps are one token each, so its merges do not change a count."""
    steps = (request_metrics or {}).get("per_step_accepted") or None
    count = len(steps) if steps else (counters.drafts if counters is not None and counters.drafts else None)
    return None if count is None else max(count - deltas, 0)


class VllmPlainProbe:
    """Times one plain vLLM decode step at the position a run has reached (the live speedup's baseline, as the
    local engine's `PlainProbe`): a request of the run's context for two tokens on the plain engine, timed from the
    first token's arrival (after the prefill, which prefix caching mostly skips) to the second's."""

    def __init__(self, backend: EnginePool) -> None:
        self._backend = backend

    def time_step(self, context: list[int]) -> float:
        from vllm.sampling_params import RequestOutputKind, SamplingParams

        if not context:
            raise ValueError("nothing to continue: the context is empty")
        engine = self._backend.engine(PLAIN, 0)
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
