"""One check of a run request for every entry point (the app and its API, the CLI, the server, the bench): each
entry point calls `check_run` once, before any work, and every refusal of a run is worded here.

The decoding settings check themselves when made (`GenerationConfig`); this adds what depends on the preset: that it
runs on this machine, that the drafter is one of its own (or a folder given as such), and that what only our engine
does (draft trees, adaptive draft length) is asked of our engine, with a drafter; and that a weightless method
(prompt lookup, suffix decoding: `drafting.METHODS`) runs on an engine that has it, with its own settings only."""

from __future__ import annotations

from playground.drafting import (
    METHODS,
    PLAIN,
    WEIGHTLESS,
    is_weightless,
    method_of,
    parameters_for_other_method,
)
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
    stray = parameters_for_other_method(drafter, [name for name, _ in cfg.method_settings])
    if stray:
        raise RequestError(stray)
    if is_weightless(drafter) and not drafter_path:
        check_weightless(preset, drafter, cfg)
        return
    if drafter != PLAIN and not drafter_path and drafter not in preset.drafters:
        weightless = [name for name in WEIGHTLESS if preset.backend in METHODS[name].engines]
        raise RequestError(f"unknown drafter {drafter!r} for preset {preset.name!r}; choose one of "
                           f"{', '.join([*preset.drafter_names, *weightless])}")
    if cfg.tree is not None and drafter == PLAIN and not drafter_path:
        raise RequestError("draft trees need a drafter: choose one, or set the tree's nodes to 0")
    require_local_engine_options(preset.backend, cfg)


def check_weightless(preset: Preset, drafter: str, cfg: GenerationConfig) -> None:
    """RequestError where a weightless method cannot run as asked: on an engine without it, or with what needs a
    drafter's probabilities (a draft tree, adaptive draft length)."""
    method = method_of(drafter)
    unavailable = method.engine_problem(preset.backend)
    if unavailable:
        raise RequestError(unavailable)
    if cfg.tree is not None:
        raise RequestError(f"{method.label} ({drafter}) drafts chains: draft trees need a drafter's probabilities, so "
                           f"set the tree's nodes to 0")
    if cfg.min_draft_prob:
        raise RequestError(f"{method.label} ({drafter}) proposes without probabilities: adaptive draft length "
                           f"(minimum draft probability {cfg.min_draft_prob:g}) needs a drafter's, so set it to 0")


def require_local_engine_options(backend: str, cfg: GenerationConfig) -> None:
    """BackendUnavailable when a vLLM or remote engine, which drafts a chain of k tokens every step, is asked for
    adaptive draft length or a draft tree: our engine alone does those."""
    if cfg.tree is not None and backend != "local":
        raise BackendUnavailable(f"the {backend} backend drafts chains; draft trees run on our engine (a local "
                                 f"preset), so set the tree's nodes to 0")
    if cfg.min_draft_prob and backend != "local":
        raise BackendUnavailable(f"the {backend} backend drafts k tokens every step; adaptive draft length (minimum "
                                 f"draft probability {cfg.min_draft_prob:g}) runs on the local engine, so set it to 0")
