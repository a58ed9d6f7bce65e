"""The exported record of a finished run, one shape for every entry point: `generate --json`, the app's live JSON and
exports, and (its run fields) the bench's rows.

`RUN_FIELDS` is the one list of what a record says about how its run ran — the precision, the forward, the kernels,
the weights, the thread policy — each under one name, read from the backend that ran it; `run_fields` reads them,
and `exported_run` puts them beside the run record (engine/record.py), k auto's choice and the drafter's health.
A field added to `RUN_FIELDS` appears in every export."""

from __future__ import annotations

from collections.abc import Callable

from playground.backends.base import Backend
from playground.engine import RunRecord
from playground.engine.choice import AutoK


def precision_label(dtype: str, exact: bool, plain: bool) -> str:
    """Which precision ran; for a speculative run whose engine does not verify drafts bit for bit as it decodes plainly
    (`exact`), also that its tokens may differ from plain decoding's there."""
    if exact or plain:
        return dtype
    return f"{dtype} (not token-identical to plain {dtype} decoding)"


def _target(backend: Backend):
    """Our engine's target, where the backend has one (vLLM and remote servers run theirs elsewhere)."""
    return getattr(backend, "target", None)


def multiplied(backend: Backend) -> str:
    """What the run's target multiplies: our engine's fast path says ("int4", "bfloat16", "float32"); other engines
    run the preset's dtype."""
    target = _target(backend)
    return target.weights if target is not None else backend.preset.dtype


def _fast(backend: Backend):
    target = _target(backend)
    return target.fast if target is not None else None


def _threads(backend: Backend) -> str | None:
    target = _target(backend)
    return target.threads.describe() if target is not None and target.threads is not None else None


# name -> how it is read from (the backend that ran the run, whether the run decoded plainly)
RUN_FIELDS: dict[str, Callable[[Backend, bool], object]] = {
    "precision": lambda backend, plain: precision_label(multiplied(backend), backend.exact_speculation, plain),
    "forward": lambda backend, plain: _target(backend).forward_path if _target(backend) is not None else backend.name,
    "kernels": lambda backend, plain: _fast(backend).kernels if _fast(backend) is not None else None,
    "weights": lambda backend, plain: _target(backend).weights if _target(backend) is not None else None,
    "weights_mb": lambda backend, plain: (round(_fast(backend).resident_bytes() / 1e6, 1)
                                          if _fast(backend) is not None else None),
    "threads": lambda backend, plain: _threads(backend),
}


def run_fields(backend: Backend, plain: bool) -> dict:
    """How a run on `backend` ran, one entry per RUN_FIELDS name (read once, when the run starts or ends)."""
    return {name: read(backend, plain) for name, read in RUN_FIELDS.items()}


def exported_run(record: RunRecord, fields: dict, auto: AutoK | None, health, with_steps: bool = True) -> dict:
    """The run as every export writes it: its run fields, k auto's choice (None for a fixed k), the drafter's health
    (health.Health, or None before it is checked) and the run record."""
    return {**fields, "auto_k": auto.to_dict() if auto else None,
            "health": health.to_dict() if health is not None else None, **record.to_dict(with_steps)}
