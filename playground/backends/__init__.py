"""Backends turn (prompt ids, drafter, settings) into a stream of StepEvents.

| backend | module | where |
|---|---|---|
| local engine | local.py | CPU or one GPU; fills every StepEvent field |
| vLLM in-process | vllm_backend.py | vLLM's CPU build or GPU(s); tokens and acceptance only (steps.MISSING_FIELDS) |
| remote vLLM server | remote.py | any `vllm serve … --speculative-config …` or `python -m playground serve` |

Every backend has `name`, `preset`, `missing_fields` (StepEvent fields it leaves None, and why), `preload` (load or
connect at start-up, raising what is wrong), `encode`, `decode` and `stream`. The local and vLLM backends also have
`plain_probe()`, which times plain decode steps at a run's position (the live speedup's baseline); the remote one
says why it cannot in `missing_fields["baseline"]`. vLLM's also has `starting(drafter, k)` / `prepare(drafter, k)`
(its engines start on first use; `start_progress()` / `preparing(drafter, k)` tell how far a start is against the
measured times) and `paces_itself` (its engine decodes on between our reads; see playback.run).
`backend_unavailable_reason(preset)` says, in one sentence, why a preset cannot run on this machine. Adaptive draft
length (`GenerationConfig.min_draft_prob`) is the local engine's: vLLM drafts k tokens every step, so the others refuse
it (`require_fixed_k_support`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable, Iterable, Protocol

from playground.engine import GenerationConfig, StepEvent
from playground.presets import Preset

from .availability import backend_unavailable_reason

if TYPE_CHECKING:
    from .local import LocalBackend


class BackendUnavailable(ValueError):
    """A preset that cannot run here (no GPU, no vLLM, no server URL, ...); the message says why."""


class Backend(Protocol):
    name: str
    preset: Preset
    missing_fields: dict[str, str]

    def preload(self) -> None: ...

    def encode(self, messages: list[dict], chat_template: str | None = None, raw: bool = False) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def stream(self, prompt_ids: list[int], drafter: str, cfg: GenerationConfig,
               should_stop: Callable[[], bool] | None = None) -> Iterable[StepEvent]: ...


def open_backend(preset: Preset) -> Backend:
    """A new backend for the preset, or BackendUnavailable with the reason."""
    reason = backend_unavailable_reason(preset)
    if reason:
        raise BackendUnavailable(reason)
    if preset.backend == "local":
        from .local import LocalBackend

        return LocalBackend(preset)
    if preset.backend == "vllm":
        from .vllm_backend import VllmBackend

        return VllmBackend(preset)
    from .remote import RemoteBackend

    return RemoteBackend(preset)


def require_local(preset: Preset, who: str, otherwise: str) -> None:
    """BackendUnavailable unless `preset` runs the local engine: `who` (a command) needs the target's weights in this
    process; `otherwise` says what to do instead."""
    if preset.backend != "local":
        raise BackendUnavailable(f"{who} runs the local engine, and preset {preset.name!r} uses the {preset.backend} "
                                 f"backend; {otherwise}")


def require_fixed_k_support(backend: str, cfg: GenerationConfig) -> None:
    """BackendUnavailable when adaptive draft length is asked of a vLLM engine, which drafts k tokens every step."""
    if cfg.min_draft_prob and backend != "local":
        raise BackendUnavailable(f"the {backend} backend drafts k tokens every step; adaptive draft length (minimum "
                                 f"draft probability {cfg.min_draft_prob:g}) runs on the local engine, so set it to 0")


def open_local_backend(preset: Preset, who: str, otherwise: str) -> "LocalBackend":
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


__all__ = ["Backend", "BackendUnavailable", "backend_unavailable_reason", "forget_backend", "open_backend",
           "open_local_backend", "require_fixed_k_support", "require_local", "shared_backend"]
