"""Backends turn (prompt ids, drafter, settings) into a stream of StepEvents.

| backend | module | where |
|---|---|---|
| local engine | local.py | CPU or one GPU; fills every StepEvent field |
| vLLM in-process | vllm/ | vLLM's CPU build or GPU(s); tokens and acceptance only (steps.MISSING_FIELDS) |
| remote vLLM server | remote.py | any `vllm serve … --speculative-config …` or `python -m playground serve` |

Every backend has the `Backend` interface (base.py): `name`, `preset`, `missing_fields` (StepEvent fields it leaves
None, and why), `capabilities` (what it can do beyond streaming, as data: playback reads it instead of probing
attributes), `exact_speculation`, `preload` (load or connect at start-up, raising what is wrong), `encode`, `decode`,
`stream`, `plain_probe()` (times plain decode steps at a run's position: the live speedup's baseline; only where
`capabilities.times_plain_steps`, else `missing_fields["baseline"]` says why), `held()` (what it holds beyond the app's
process: vLLM's engines and their memory; None elsewhere), and `starting(drafter, k)` /
`preparing(drafter, k)` (vLLM's engines start on first use: what a run waits for, and how far a start is against the
measured times; None and nothing elsewhere). On ZeroGPU the local backend is wrapped (`zerogpu.ZeroGpuBackend`): its
stream runs in a GPU call that cannot see the stop switch or time plain steps, which its capabilities say.
`backend_unavailable_reason(preset)` says, in one sentence, why a preset cannot run on this machine. Adaptive draft
length (`GenerationConfig.min_draft_prob`) and draft trees (`GenerationConfig.tree`) are the local engine's: vLLM drafts
a chain of k tokens every step, so the others refuse them (`require_local_engine_options`). Every entry point
resolves a run request once with `resolve_request` (playground/request/: `check_run`, and k auto's choice), where
each refusal of a run is worded: this package holds backends only.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from playground.presets import Preset
from playground.request import BackendUnavailable
from playground.request.availability import backend_unavailable_reason

from .base import Backend, Capabilities, StepStream

if TYPE_CHECKING:
    from .local import LocalBackend


def open_backend(preset: Preset) -> Backend:
    """A new backend for the preset, or BackendUnavailable with the reason."""
    reason = backend_unavailable_reason(preset)
    if reason:
        raise BackendUnavailable(reason)
    if preset.backend == "local":
        from playground.request.availability import on_zerogpu

        from .local import LocalBackend

        if on_zerogpu():
            from .zerogpu import ZeroGpuBackend

            return ZeroGpuBackend(LocalBackend(preset))
        return LocalBackend(preset)
    if preset.backend == "vllm":
        from .vllm import VllmBackend

        return VllmBackend(preset)
    from .remote import RemoteBackend

    return RemoteBackend(preset)


def require_local(preset: Preset, who: str, otherwise: str) -> None:
    """BackendUnavailable unless `preset` runs the local engine: `who` (a command) needs the target's weights in this
    process; `otherwise` says what to do instead."""
    if preset.backend != "local":
        raise BackendUnavailable(f"{who} runs the local engine, and preset {preset.name!r} uses the {preset.backend} "
                                 f"backend; {otherwise}")


def open_local_backend(preset: Preset, who: str, otherwise: str) -> LocalBackend:
    """A new local-engine backend for `who`, or BackendUnavailable saying why not (see require_local)."""
    require_local(preset, who, otherwise)
    return open_backend(preset)


_SHARED: dict[str, Backend] = {}
_SHARED_LOCK = threading.Lock()


def shared_backend(preset: Preset) -> Backend:
    """One backend (one copy of the weights, one engine, one connection pool) per preset for the whole process."""
    reason = backend_unavailable_reason(preset)
    if reason:
        raise BackendUnavailable(reason)
    with _SHARED_LOCK:
        if preset.name not in _SHARED or _SHARED[preset.name].preset != preset:
            _SHARED[preset.name] = open_backend(preset)
        return _SHARED[preset.name]


def forget_backend(name: str) -> None:
    """Drop the shared backend of a preset (an unloaded pair of one's own): its weights go with the last run using
    them."""
    with _SHARED_LOCK:
        _SHARED.pop(name, None)


__all__ = ["Backend", "Capabilities", "StepStream", "forget_backend", "open_backend", "open_local_backend",
           "require_local", "shared_backend"]
