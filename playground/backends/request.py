"""One check of a run request for every entry point (the app and its API, the CLI, the server, the bench): each
entry point calls `check_run` once, before any work, and every refusal of a run is worded here.

The decoding settings check themselves when made (`GenerationConfig`); this adds what depends on the preset: that it
runs on this machine, that the drafter is one of its own (or a folder given as such), and that what only our engine
does (draft trees, adaptive draft length) is asked of our engine, with a drafter."""

from __future__ import annotations

from playground.drafting import PLAIN
from playground.engine import GenerationConfig
from playground.presets import Preset

from .availability import backend_unavailable_reason


class RequestError(ValueError):
    """A request the playground cannot run; the message is meant for the user."""


class BackendUnavailable(RequestError):
    """A preset that cannot run here (no GPU, no vLLM, no server URL, ...); the message says why."""


def check_run(preset: Preset, drafter: str, cfg: GenerationConfig, drafter_path: str | None = None) -> None:
    """RequestError (or BackendUnavailable) where this run cannot go ahead, in one line; `drafter_path`: the drafter
    is a folder or Hub id given as such, checked against the target where it loads."""
    unavailable = backend_unavailable_reason(preset)
    if unavailable:
        raise BackendUnavailable(unavailable)
    if drafter != PLAIN and not drafter_path and drafter not in preset.drafters:
        raise RequestError(f"unknown drafter {drafter!r} for preset {preset.name!r}; choose one of "
                           f"{', '.join(preset.drafter_names)}")
    if cfg.tree is not None and drafter == PLAIN and not drafter_path:
        raise RequestError("draft trees need a drafter: choose one, or set the tree's nodes to 0")
    require_local_engine_options(preset.backend, cfg)


def require_local_engine_options(backend: str, cfg: GenerationConfig) -> None:
    """BackendUnavailable when a vLLM or remote engine, which drafts a chain of k tokens every step, is asked for
    adaptive draft length or a draft tree: our engine alone does those."""
    if cfg.tree is not None and backend != "local":
        raise BackendUnavailable(f"the {backend} backend drafts chains; draft trees run on our engine (a local "
                                 f"preset), so set the tree's nodes to 0")
    if cfg.min_draft_prob and backend != "local":
        raise BackendUnavailable(f"the {backend} backend drafts k tokens every step; adaptive draft length (minimum "
                                 f"draft probability {cfg.min_draft_prob:g}) runs on the local engine, so set it to 0")
