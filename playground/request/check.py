"""One check of a run request for every entry point (the app and its API, the CLI, the server, the bench): each
entry point calls `check_run` once, before any work, and every refusal of what runs (the preset, the drafter or
method, what only our engine does, k auto) is worded here; a setting's and the prompt's are the engine's
(`engine/config.py`, `engine/loop.py`), an empty prompt refused from here (`nonempty_prompt`) before any model work.

The decoding settings check themselves when made (`GenerationConfig`); this adds what depends on the preset: that it
runs on this machine, that the drafter is one of its own (or a folder given as such), and that what only our engine
does (draft trees, adaptive draft length) is asked of our engine, with a drafter; and that a weightless method
(prompt lookup, suffix decoding: `drafting.METHODS`) runs on an engine that has it, with its own settings only.

`resolve_request` is the one step from what a user asked to what runs, for every entry point: the checks above, then
(k auto) the k chosen — or plain decoding where no k pays — so that what follows takes a `ResolvedRequest`, whose k is
a whole number, and checks nothing again. The drafter `auto` (ANY_METHOD) with k auto asks for the method too: among
the preset's drafters with an acceptance by position and the weightless methods (`auto_candidates`), or among those
a comma list names (`eagle3.1,ngram,suffix`: `chosen_among`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from playground.drafting import (
    METHODS,
    PLAIN,
    method_for,
    method_of,
    offered_methods,
    parameters_for_other_method,
)
from playground.engine import GenerationConfig
from playground.engine.choice import AutoK, shipped_acceptance
from playground.engine.loop import prompt_text_problem
from playground.presets import Preset

from .availability import backend_unavailable_reason
from .fit import check_drafter_fits

ANY_METHOD = "auto"  # the drafter name that asks k auto to choose the method as well as k
CANDIDATES_SEPARATOR = ","  # a drafter such as `eagle3.1,ngram,suffix` with k auto: choose among these


class RequestError(ValueError):
    """A request the playground cannot run; the message is meant for the user."""


class BackendUnavailable(RequestError):
    """A preset that cannot run here (no GPU, no vLLM, no server URL, ...); the message says why."""


@dataclass(frozen=True)
class ResolvedRequest:
    """A request checked, with its drafting method and k chosen: what the entry points hand their backend."""

    preset: Preset
    drafter: str  # as asked, or PLAIN where k auto found no k that pays
    config: GenerationConfig  # its k a whole number, chosen where k auto was asked
    drafter_path: str | None = None  # the drafter is a folder or Hub id given as such
    auto: AutoK | None = None  # what k auto chose and why; None for a k given

    @property
    def k(self) -> int:
        return self.config.k


def resolve_request(preset: Preset, drafter: str, cfg: GenerationConfig, drafter_path: str | None = None,
                    choose_k: Callable[[], AutoK] | None = None) -> ResolvedRequest:
    """The request checked (check_run; with k auto, check_auto_k) and resolved. `choose_k` asks for k auto: it makes
    the choice (auto_k.py, at the entry point's context) once the checks have passed, and `cfg`'s k is then
    replaced by the k chosen; plain decoding has no k to choose."""
    check_request(preset, drafter, cfg, drafter_path, k_auto=choose_k is not None)
    if choose_k is None or drafter == PLAIN:
        return ResolvedRequest(preset, drafter, cfg, drafter_path)
    auto = choose_k()
    drafter, k = (auto.method or drafter, auto.k) if auto.k is not None else (PLAIN, 1)  # none pays: plain decoding
    guard = drafter != PLAIN and cfg.greedy and cfg.tree is None  # the choice checked on the answer (engine/guard.py)
    return ResolvedRequest(preset, drafter, replace(cfg, k=k, method_settings=own_settings(drafter, cfg), guard=guard),
                           drafter_path, auto)


def own_settings(drafter: str, cfg: GenerationConfig) -> tuple[tuple[str, int | float], ...]:
    """The method settings of `cfg` that are `drafter`'s own (drafting.PARAMETERS): where settings were given for
    several methods (a choice among them, the bench's), the run takes its own alone."""
    method = method_of(drafter)
    names = {p.name for p in method.parameters} if method else set()
    return tuple((name, value) for name, value in cfg.method_settings if name in names)


def check_request(preset: Preset, drafter: str, cfg: GenerationConfig, drafter_path: str | None = None,
                  k_auto: bool = False) -> None:
    """RequestError where this request cannot run (check_run), or where k auto is asked of what it cannot choose k
    for (check_auto_k); nothing is loaded."""
    if chosen_among(drafter) and not drafter_path:
        check_any_method(preset, drafter, cfg, k_auto)
        return
    check_run(preset, drafter, cfg, drafter_path)
    if k_auto and drafter != PLAIN:
        check_auto_k(preset, drafter, cfg, drafter_path)


def chosen_among(drafter: str) -> bool:
    """Whether `drafter` asks k auto to choose the method: ANY_METHOD, or a comma list of candidates."""
    return drafter == ANY_METHOD or CANDIDATES_SEPARATOR in drafter


def candidates(preset: Preset, drafter: str) -> list[str]:
    """The methods `drafter` asks k auto to choose among: every one it can price (ANY_METHOD), or those listed."""
    if drafter == ANY_METHOD:
        return auto_candidates(preset)
    return list(dict.fromkeys(name.strip() for name in drafter.split(CANDIDATES_SEPARATOR) if name.strip()))


def check_any_method(preset: Preset, drafter: str, cfg: GenerationConfig, k_auto: bool) -> None:
    """RequestError where a choice among methods (the drafter `auto`, or a comma list) cannot be resolved: k auto
    chooses among methods it can price on our engine, as chains."""
    if not k_auto:
        raise RequestError(f"the drafter {drafter!r} asks k auto to choose the method: set k to auto, or choose one "
                           "drafter")
    unavailable = backend_unavailable_reason(preset)
    if unavailable:
        raise BackendUnavailable(unavailable)
    if cfg.min_draft_prob:
        raise RequestError(f"the drafter {drafter!r} may choose a weightless method, which has no probabilities for "
                           "adaptive draft length: set the minimum draft probability to 0")
    check_chain_on_our_engine(preset, cfg)
    possible = auto_candidates(preset)
    if not possible:
        raise RequestError(f"the drafter {ANY_METHOD} needs a preset drafter with an acceptance by position, or one "
                           "to measure the target's step costs with: choose a drafter")
    stray = [name for name in candidates(preset, drafter) if name not in possible]
    if stray:
        raise RequestError(f"k auto cannot choose {', '.join(stray)} on {preset.name}: it chooses among "
                           f"{', '.join(possible)} (a drafter with an acceptance by position, or a weightless method)")


def auto_candidates(preset: Preset) -> list[str]:
    """The methods k auto can price on this preset, and the drafter `auto` chooses among: those priced by their
    acceptance (a preset drafter with an acceptance by position), and those priced by replaying their proposals over
    the text (at the target's step costs, measured with a preset drafter: none without one)."""
    return [name for name in offered_methods(preset.backend, preset.drafters) if k_auto_problem(preset, name) is None]


def k_auto_problem(preset: Preset, drafter: str) -> str | None:
    """Why k auto cannot price `drafter` of this preset (worded to follow k's name), or None: by the method's
    `priced_by` capability."""
    method = method_for(drafter)
    if method.priced_by == "acceptance":
        return auto_k_problem(preset, drafter)
    if method.priced_by == "replay":
        return None if preset.drafters else ("auto prices it at the target's step costs, measured with a preset "
                                             f"drafter, and {preset.name} has none")
    return (f"auto cannot price {method.label}: its drafting is not in the measured step costs; give k a "
            f"number")


FIXED_K = 4  # the k a run takes where it names none and k auto cannot choose for it


def default_choice(preset: Preset, drafter: str | None = None, k: int | str | None = None,
                   chains: bool = True) -> tuple[str, bool]:
    """(drafter, k auto) of a request, where it leaves the method or k unsaid: the one home for what runs without flags
    in `generate`, the Chat and the server. `k` as asked (None: unsaid; "auto"; a number); `chains`: the request drafts
    a chain of every k (no tree, no adaptive stop), which k auto prices. With nothing said, k auto among every method it
    can price on our engine (ANY_METHOD): the configuration predicted fastest on this machine, plain decoding where
    nothing pays. A method named, or a k, and the rest follows: k auto where it can choose for that drafter, else
    FIXED_K; the preset's drafter where only k was given."""
    if drafter is None:
        if k is None and chains and preset.backend == "local" and auto_candidates(preset):
            return ANY_METHOD, True
        drafter = preset.default_drafter
    if k is not None:
        return drafter, k == "auto"
    if drafter == PLAIN or preset.backend != "local" or not chains:
        return drafter, False
    return drafter, drafter in auto_candidates(preset)


def check_chain_on_our_engine(preset: Preset, cfg: GenerationConfig) -> None:
    """RequestError where k auto is asked off our engine or of a tree: it prices chains on our engine."""
    if preset.backend != "local":
        raise RequestError("k auto chooses k for a preset drafter on our engine (a local preset, a drafter it names); "
                           "give k a number")
    if cfg.tree is not None:
        raise RequestError("k auto chooses a chain's k: set the draft tree's nodes to 0, or give k a number (the "
                           "tree's depth)")


def check_auto_k(preset: Preset, drafter: str, cfg: GenerationConfig, drafter_path: str | None = None) -> None:
    """RequestError where k auto cannot choose k for this drafter: it prices a chain of a preset's EAGLE drafter on
    our engine, from the acceptance by position shipped beside it, or of a weightless method from its replay over
    the prompt, at the target's step costs (measured with a preset drafter)."""
    if drafter_path:
        raise RequestError("k auto chooses k for a preset drafter on our engine (a local preset, a drafter it names); "
                           "give k a number")
    check_chain_on_our_engine(preset, cfg)
    problem = k_auto_problem(preset, drafter)
    if problem:
        raise RequestError(f"k {problem}: give k a number" if not problem.endswith("give k a number") else
                           f"k {problem}")


def nonempty_prompt(prompt: str | None) -> str:
    """The prompt as typed, or RequestError where it holds nothing to answer (nothing, or only spaces): the engine's
    wording, before any model work."""
    problem = prompt_text_problem(prompt)
    if problem:
        raise RequestError(problem)
    return prompt


def check_run(preset: Preset, drafter: str, cfg: GenerationConfig, drafter_path: str | None = None) -> None:
    """RequestError (or BackendUnavailable) where this run cannot go ahead, in one line; `drafter_path`: the drafter
    is a folder or Hub id given as such; with a target folder, refused (DrafterMismatch) where its config does not fit
    the target's, in the words the app's own-pair panel uses too, before anything loads."""
    unavailable = backend_unavailable_reason(preset)
    if unavailable:
        raise BackendUnavailable(unavailable)
    stray = parameters_for_other_method(drafter, [name for name, _ in cfg.method_settings])
    if stray:
        raise RequestError(stray)
    if not drafter_path and not method_for(drafter).checkpoint:
        check_method(preset, drafter, cfg)
        return
    if not drafter_path:
        check_preset_drafter(preset, drafter)
    require_local_engine_options(preset.backend, cfg)
    if drafter_path and Path(preset.target).is_dir():  # a Hub target's config is read as it loads (Target.attach)
        check_drafter_fits(preset.target, drafter_path)


def check_preset_drafter(preset: Preset, drafter: str) -> None:
    """RequestError where `drafter`, named (not a folder given as such), is none of the preset's drafters, plain
    decoding or a method its engine runs without weights; the refusal lists those, and `auto` where k auto chooses."""
    offered = offered_methods(preset.backend, preset.drafters)
    if drafter != PLAIN and drafter not in offered:
        auto = [ANY_METHOD] if preset.backend == "local" and auto_candidates(preset) else []
        raise RequestError(f"unknown drafter {drafter!r} for preset {preset.name!r}; choose one of "
                           f"{', '.join([*preset.drafter_names, *offered[len(preset.drafters):], *auto])}")


def check_method(preset: Preset, drafter: str, cfg: GenerationConfig) -> None:
    """RequestError where a registry method cannot run as asked, by what it can do: on an engine without it, a draft
    tree where it proposes chains only (`trees`), or adaptive draft length where it has no probabilities."""
    method = method_for(drafter)
    unavailable = method.engine_problem(preset.backend)
    if unavailable:
        raise RequestError(unavailable)
    if cfg.tree is not None and not method.proposes:
        raise RequestError("draft trees need a drafter: choose one, or set the tree's nodes to 0")
    if cfg.tree is not None and not method.trees:
        with_trees = ", ".join(m.label for m in METHODS.values() if m.proposes and m.trees)
        raise RequestError(f"{method.label} ({drafter}) drafts chains: set the tree's nodes to 0 (of the methods, "
                           f"{with_trees} draft trees)")
    if cfg.min_draft_prob and not method.probabilities:
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


def shipped_rates(preset: Preset, drafter: str) -> tuple[list[float], Path]:
    """The drafter's shipped acceptance by position and its file; ValueError worded to follow k's name."""
    if drafter == PLAIN or drafter not in preset.drafters:
        raise ValueError("auto chooses k for a preset drafter on our engine, named by the preset")
    folder = Path(preset.drafters[drafter]).parent
    try:
        return shipped_acceptance(folder, drafter), folder / "evaluation.json"
    except ValueError as err:
        raise ValueError(f"auto needs {drafter}'s acceptance by position: {err}; give k a number") from None


def auto_k_problem(preset: Preset, drafter: str) -> str | None:
    """Why auto cannot choose k for `drafter` of `preset` (worded to follow k's name), or None."""
    try:
        shipped_rates(preset, drafter)
    except ValueError as err:
        return str(err)
    return None
