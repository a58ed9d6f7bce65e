"""A run's settings as the page holds them: which component sets which `RunSettings` field, declared once.

A tab's model-running handler takes `RunSettings` objects (Chat one, `settings`; Compare one per side, `left` and
`right`). Gradio calls a handler with one value per input component, in order, and names the API's parameters after
the handler's; `SettingsForm.handler` turns the one into the other. From the same declaration come the handler's
inputs (`components`), its API parameters (`names`: RunSettings' fields, each side's drafting fields prefixed with the
side, all in RunSettings' field order) and what a link fills in (`values`), so no list of components has to be kept in
the order of a function's parameters. `method_settings` stands as one parameter per setting of a weightless method,
named as the registry names it (`drafting.PARAMETERS`); a run takes those of its own method.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields

import gradio as gr

from playground.drafting import PARAMETERS
from playground.playback import RequestError, RunSettings

from .controls import DraftingControls, GenerationControls

DRAFTING = ("drafter", "k", "min_draft_prob", "tree_nodes", "k_auto", "method_settings")  # per run (per side in
# Compare); the rest shared


@dataclass
class SettingsForm:
    """The components a handler's RunSettings are read from: the tab's shared controls and each side's drafting
    controls (Chat has one side, named "", whose settings arrive as `settings`)."""

    shared: GenerationControls
    sides: dict[str, DraftingControls]

    def _fields(self) -> list[tuple[str, str, str, gr.components.Component]]:
        """(API name, side, setting, component) per parameter, in RunSettings' field order; side is "" for a shared
        field; setting is the RunSettings field, or a method's setting for `method_settings`."""
        declared = []
        for field in fields(RunSettings):
            if field.name == "method_settings":
                declared += [(_named(side, name), side, name, controls.method_settings[name])
                             for name in PARAMETERS for side, controls in self.sides.items()]
            elif field.name in DRAFTING:
                declared += [(_named(side, field.name), side, field.name, getattr(controls, field.name))
                             for side, controls in self.sides.items()]
            else:
                declared.append((field.name, "", field.name, getattr(self.shared, field.name)))
        return declared

    def names(self) -> list[str]:
        return [name for name, _, _, _ in self._fields()]

    def components(self) -> list[gr.components.Component]:
        return [component for _, _, _, component in self._fields()]

    def values(self, settings: RunSettings) -> list:
        """What each component shows for `settings`, in the order of `components()` (a one-sided form: Chat's; the
        seed box holds text; a method's setting the run did not give, the registry's default)."""
        assert len(self.sides) == 1, "a form with sides shows one RunSettings per side"
        given = dict(settings.method_settings)
        return [("" if settings.seed is None else str(settings.seed)) if name == "seed"
                else given.get(name, PARAMETERS[name][1].default) if name in PARAMETERS
                else getattr(settings, name) for _, _, name, _ in self._fields()]

    def settings(self, values: dict[str, object]) -> dict[str, RunSettings]:
        """Each side's RunSettings from the values of `names()`."""
        shared = {field: values[field] for field in _shared_fields()}
        per_run = [field for field in DRAFTING if field != "method_settings"]
        return {side or "settings": run_settings(
                    **shared, **{field: values[_named(side, field)] for field in per_run},
                    method_settings={name: values[_named(side, name)] for name in PARAMETERS})
                for side in self.sides}

    def handler(self, fn: Callable) -> Callable:
        """`fn` as Gradio calls it: its settings parameters (`settings`, or one per side) stand in its signature as
        one parameter per component, in place of the first of them."""
        signature = inspect.signature(fn)
        taken = [side or "settings" for side in self.sides]
        kept = [p for p in signature.parameters.values() if p.name not in taken]
        at = list(signature.parameters).index(taken[0])
        spelled = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in self.names()]
        exposed = signature.replace(parameters=kept[:at] + spelled + kept[at:])

        def call(args, kwargs):
            bound = exposed.bind(*args, **kwargs)
            bound.apply_defaults()
            given = dict(bound.arguments)
            read = self.settings({name: given.pop(name) for name in self.names()})
            return fn(**given, **read)

        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def wrapper(*args, **kwargs):
                yield from call(args, kwargs)
        else:
            @functools.wraps(fn)
            def wrapper(*args, **kwargs):
                return call(args, kwargs)
        wrapper.__signature__ = exposed
        wrapper.__annotations__ = {name: hint for name, hint in fn.__annotations__.items() if name not in taken}
        return wrapper


def _named(side: str, name: str) -> str:
    return f"{side}_{name}" if side else name


def _shared_fields() -> list[str]:
    return [field.name for field in fields(RunSettings) if field.name not in DRAFTING]


def run_settings(drafter: str, k: float, preset: str, temperature: float, top_p: float, max_new_tokens: float,
                 chat_template: str, system: str | None, seed: str | float | None = None,
                 min_draft_prob: float = 0.0, tree_nodes: float | None = 0, k_auto: bool | None = False,
                 method_settings: dict[str, float | None] | None = None) -> RunSettings:
    """Settings from component values (sliders deliver floats, the seed box text; a fraction is refused, never
    rounded); RunSettings.checked_preset() validates the rest. Of `method_settings` (every weightless method's, by
    name), the run keeps its own method's."""
    return RunSettings(drafter=drafter, k=_whole(k, "k"), preset=preset, temperature=float(temperature),
                       top_p=float(top_p), max_new_tokens=_whole(max_new_tokens, "max new tokens"),
                       chat_template=chat_template, system=system or "",
                       seed=_seed(seed), min_draft_prob=float(min_draft_prob),
                       tree_nodes=_whole(tree_nodes or 0, "the draft tree's nodes"), k_auto=bool(k_auto),
                       method_settings=_own_settings(drafter, method_settings or {}))


def _own_settings(drafter: str, values: dict[str, float | None]) -> tuple[tuple[str, int | float], ...]:
    """The settings of `drafter`'s method among `values`, each a whole number where the registry's is (a fraction
    refused, never rounded); settings of other methods are left out (their controls are hidden)."""
    own = []
    for name, value in values.items():
        method, parameter = PARAMETERS[name]
        if method.name == drafter:
            own.append((name, _whole(value, name) if parameter.whole else _number(value, name)))
    return tuple(own)


def _number(value: float | None, name: str) -> float:
    if value is None:
        raise RequestError(f"{name} is empty: type a number")
    return float(value)


def _seed(value: str | float | None) -> int | None:
    """None for an empty seed box (a fresh random answer each time), else a whole number."""
    text = "" if value is None else str(value).strip()
    if not text:
        return None
    try:
        number = float(text)
    except ValueError:
        raise RequestError(f"the seed must be a whole number, got {text!r}") from None
    return _whole(number, "the seed")


def _whole(value: float | None, name: str) -> int:
    if value is None:
        raise RequestError(f"{name} is empty: type a whole number")
    if not float(value).is_integer():
        raise RequestError(f"{name} must be a whole number, got {value}")
    return int(value)
