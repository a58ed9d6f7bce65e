"""The controls both tabs build: presets, drafters and k, adaptive drafting and trees, the generation settings, the
answer view; input components that leave value checks to RunSettings (one message, no traceback)."""

from __future__ import annotations

import contextlib
import html
from collections.abc import Callable
from dataclasses import dataclass

import gradio as gr

from playground.drafting import (
    EAGLE3,
    EAGLE3_1,
    MAX_K,
    METHODS,
    PARAMETERS,
    PLAIN,
    Parameter,
    method_for,
    offered_methods,
)
from playground.engine.templates import CHAT_TEMPLATES
from playground.engine.tree_shape import MAX_NODES, TreeShape
from playground.playback import (
    MAX_NEW_TOKENS,
)
from playground.presets import DRAFTER_LABELS, Preset, get_preset
from playground.request import backend_unavailable_reason
from playground.request.availability import offered_presets
from playground.request.check import ANY_METHOD, auto_candidates, k_auto_problem
from playground.viz import TokenPiece, legend_html, provenance_html, rendered_html

ANSWER_VIEWS = {"rendered": rendered_html, "tokens": provenance_html}


@dataclass
class AnswerView:
    """A session's choice of how answers look: rendered Markdown or raw tokens, both coloured by provenance. Changed
    in place (a State's value is shared by reference), so a run in progress renders its next update the new way."""

    mode: str = "rendered"

    def html(self, pieces: list[TokenPiece]) -> str:
        return ANSWER_VIEWS[self.mode](pieces)


def answer_view_control(elem_id: str) -> gr.Radio:
    return gr.Radio([("Rendered", "rendered"), ("Tokens", "tokens")], value=AnswerView.mode, label="Answer view",
                    elem_id=elem_id, info="rendered: Markdown and code blocks; tokens: the raw text, token by token",
                    elem_classes="answer-view")


def follow_answer_view(control: gr.Radio, view: gr.State, show: Callable, inputs: list, outputs: list) -> None:
    """When the view changes, remember it for the session and redraw what is on screen with `show(*inputs)`."""

    def change(mode: str, current: AnswerView, *values):
        if mode in ANSWER_VIEWS:
            current.mode = mode
        return show(*values, current)

    control.change(change, [control, view, *inputs], outputs, queue=False, api_visibility="private")


AUTO_LABEL = "auto: the fastest here"  # the drafter choice that lets k auto choose the method and its k


def chooses_among(preset: Preset) -> bool:
    """Whether k auto can choose the method on this preset (our engine, something it can price)."""
    return preset.backend == "local" and bool(auto_candidates(preset))


def offered_drafters(preset: Preset) -> list[str]:
    """`auto` where k auto can choose among methods, the preset's drafters, the methods its backend runs without
    weights (drafting.offered_methods), then plain decoding."""
    return [*([ANY_METHOD] if chooses_among(preset) else []), *offered_methods(preset.backend, preset.drafters), PLAIN]


def default_drafter(preset: Preset) -> str:
    """What a Chat starts with: `auto` where k auto can choose the method (the configuration predicted fastest on this
    machine, plain decoding where nothing pays), else the preset's drafter."""
    return ANY_METHOD if chooses_among(preset) else preset.default_drafter


def drafter_choices(preset: Preset) -> list[tuple[str, str]]:
    """(label, name) pairs of offered_drafters, labelled as the registry (or the preset) names them."""
    return [(AUTO_LABEL if n == ANY_METHOD else DRAFTER_LABELS.get(n, n), n) for n in offered_drafters(preset)]


def compare_drafters(preset: Preset) -> tuple[str, str]:
    """Default left and right drafters: EAGLE-3 vs EAGLE-3.1 where the preset has both, else its drafter vs none."""
    if {EAGLE3, EAGLE3_1} <= set(preset.drafters):
        return EAGLE3, EAGLE3_1
    return preset.default_drafter, PLAIN


def preset_info(preset: Preset) -> str:
    """Markdown under the preset menu: what it is, and why it cannot run here or lacks a drafter."""
    lines = [preset.description] if preset.description else []
    unavailable = backend_unavailable_reason(preset)
    if unavailable:
        lines.append(f"**Not available here:** {unavailable}.")
    lines += [f"**No {DRAFTER_LABELS.get(name, name)} drafter:** {why}"
              for name, why in preset.missing_drafters.items()]
    if preset.notes:
        lines.append(preset.notes)
    return "\n\n".join(lines)


class CheckedSlider(gr.Slider):
    is_template = True

    def preprocess(self, payload: float) -> float:
        return payload


class CheckedRadio(gr.Radio):
    is_template = True

    def preprocess(self, payload: str | None) -> str | None:
        return payload


class CheckedNumber(gr.Number):
    """A number box that sends what was typed: Gradio's slider clamps a typed value to its range without a word."""

    is_template = True

    def preprocess(self, payload: float | None) -> float | None:
        return payload


class CheckedDropdown(gr.Dropdown):
    is_template = True

    def preprocess(self, payload: str | None) -> str | None:
        return payload


@dataclass
class GenerationControls:
    """Settings shared by a tab's runs, named as RunSettings' fields (how a run drafts is set per run:
    DraftingControls)."""

    preset: gr.Dropdown
    preset_info: gr.Markdown
    temperature: gr.Slider
    top_p: gr.Slider
    max_new_tokens: gr.Slider
    chat_template: gr.Radio
    system: gr.Textbox
    seed: gr.Textbox
    not_offered: gr.Markdown  # the presets this machine cannot run, and why


def not_offered_markdown(refused: dict[str, tuple[str, str]]) -> str:
    """'Not offered on this machine: kimi-k2.6 (needs 4 GPUs) · …', each with its full reason as a tooltip."""
    if not refused:
        return ""
    items = " · ".join(f'<span title="{html.escape(sentence, quote=True)}">`{name}` ({html.escape(short)})</span>'
                       for name, (short, sentence) in refused.items())
    return f"**Not offered on this machine:** {items}"


def generation_controls(prefix: str, preset: Preset) -> GenerationControls:
    offered, refused = offered_presets(always=preset.name)
    return GenerationControls(
        preset=CheckedDropdown([(p.title, p.name) for p in offered], value=preset.name, label="Preset",
                               elem_id=f"{prefix}preset", interactive=len(offered) > 1,
                               info="the presets this machine can run"),
        preset_info=gr.Markdown(preset_info(preset), elem_classes="preset-info"),
        not_offered=gr.Markdown(not_offered_markdown(refused), elem_id=f"{prefix}not-offered",
                                elem_classes="preset-info"),
        temperature=CheckedSlider(0.0, 2.0, value=0.0, step=0.05, label="Temperature (0 = greedy)",
                              elem_id=f"{prefix}temperature"),
        top_p=CheckedSlider(0.05, 1.0, value=1.0, step=0.05, label="Top-p", elem_id=f"{prefix}top-p"),
        max_new_tokens=CheckedSlider(1, MAX_NEW_TOKENS, value=256, step=1, label="Max new tokens",
                                 elem_id=f"{prefix}max-new-tokens"),
        chat_template=CheckedRadio(list(CHAT_TEMPLATES), value="default", label="Chat template",
                               info="alt: the same conversation in a format the model saw less of",
                               elem_id=f"{prefix}chat-template"),
        system=gr.Textbox(label="System prompt", lines=2, placeholder="(none)", elem_id=f"{prefix}system"),
        # a textbox, not gr.Number: the browser sends a Number's empty value as 0, and empty must mean "random"
        seed=gr.Textbox("", label="Seed (sampling)", placeholder="random", max_lines=1, elem_id=f"{prefix}seed",
                        info="empty: a fresh random answer each time; a number repeats it (and gives both sides of a "
                             "comparison the same seed)"),
    )


def follow_preset(controls: GenerationControls, *drafters: tuple[gr.Radio, Callable[[Preset], str]]) -> None:
    """When another preset is chosen, show its description and offer its drafters: each radio keeps its choice where
    the new preset has that drafter too, else takes its default."""

    def update(name: str, *chosen: str):
        preset = get_preset(name)
        radios = [gr.Radio(choices=drafter_choices(preset),
                           value=now if now in offered_drafters(preset) else default(preset))
                  for (_, default), now in zip(drafters, chosen)]
        return preset_info(preset), *radios

    radios = [radio for radio, _ in drafters]
    controls.preset.change(update, [controls.preset, *radios], [controls.preset_info, *radios], queue=False,
                           api_visibility="private")


def depth_legend(*sides: tuple[str, float]) -> str:
    """The depth legend for (drafter, k) sides: depths up to the largest k that drafts; none for plain decoding (nor for
    a k the run would refuse)."""
    ks = [int(k) for drafter, k in sides if drafter != PLAIN and k is not None and k == int(k) and 1 <= k <= MAX_K]
    return legend_html(max(ks)) if ks else ""


def drafter_control(preset: Preset, value: str, elem_id: str, label: str = "Drafter") -> gr.Radio:
    return CheckedRadio(drafter_choices(preset), value=value, label=label, elem_id=elem_id)


def k_control(elem_id: str, label: str = "k: draft tokens per step") -> gr.Number:
    return CheckedNumber(4, label=f"{label} (1–{MAX_K})", minimum=1, maximum=MAX_K, step=1, elem_id=elem_id)


K_AUTO_INFO = ("from the method's acceptance (or its replay over the text) and this machine's measured step costs "
               "(measured once, a few seconds); plain decoding where no k pays. Our engine, chains")


def k_auto_control(elem_id: str, label: str = "k auto", value: bool = False) -> gr.Checkbox:
    return gr.Checkbox(value, label=f"{label}: the k predicted fastest on this machine", elem_id=elem_id,
                       info=K_AUTO_INFO)


def drafting_updates(preset: Preset, name: str, k_auto: bool) -> tuple[dict, dict, dict, dict]:
    """What the k box, the adaptive stop, the tree box and k auto allow for `name` on `preset`, from the method's
    capabilities (drafting.Method) and k auto's (request.check), each disabled one saying why in its info line:
    the same rules the run's own check applies, so the controls cannot offer what a run refuses."""
    if name == PLAIN:
        why = "plain decoding drafts nothing"
        return (gr.update(interactive=False), gr.update(interactive=False, value=0.0, info=why),
                gr.update(interactive=False, value=0, info=why), gr.update(interactive=False, value=False, info=why))
    if name == ANY_METHOD:
        why = "auto chooses a chain's method and k"
        return (gr.update(interactive=False), gr.update(interactive=False, value=0.0, info=why),
                gr.update(interactive=False, value=0, info=why),
                gr.update(interactive=False, value=True, info="auto: k auto chooses the method as well as k"))
    method = method_for(name)
    adaptive = (gr.update(interactive=True, info=MIN_DRAFT_PROB_INFO) if method.probabilities else
                gr.update(interactive=False, value=0.0, info=f"{method.label} proposes without probabilities"))
    tree = (gr.update(interactive=True, info=TREE_INFO) if method.trees else
            gr.update(interactive=False, value=0, info=f"{method.label} drafts chains"))
    problem = k_auto_problem(preset, name) if preset.backend == "local" else "k auto prices our engine's steps"
    auto = (gr.update(interactive=True, info=K_AUTO_INFO) if problem is None else
            gr.update(interactive=False, value=False, info=f"k {problem}"))
    return gr.update(interactive=not (k_auto and problem is None)), adaptive, tree, auto


def follow_drafter(controls: DraftingControls, preset: gr.Dropdown) -> None:
    """The controls follow the method chosen (`drafting_updates`) and k auto (the k box waits while it chooses);
    each method's own settings (`settings`, a row per method) show only while it is chosen."""
    chained = [controls.min_draft_prob, controls.tree_nodes, controls.k_auto]
    settings = controls.setting_rows or {}

    def update(name: str, preset_name: str, k_auto: bool):
        return (*drafting_updates(get_preset(preset_name), name, k_auto),
                *(gr.update(visible=method == name) for method in settings))

    controls.drafter.change(update, [controls.drafter, preset, controls.k_auto],
                            [controls.k, *chained, *settings.values()], queue=False, api_visibility="private")

    def k_box(name: str, k_auto: bool):
        return gr.update(interactive=name not in (PLAIN, ANY_METHOD) and not k_auto)

    controls.k_auto.change(k_box, [controls.drafter, controls.k_auto], controls.k, queue=False,
                           api_visibility="private")


def parameter_control(parameter: Parameter, elem_id: str, label: str) -> gr.Number:
    """One setting of a drafting method, its range and meaning from the registry (values checked by the run)."""
    return CheckedNumber(parameter.default, label=f"{label} ({parameter.low}–{parameter.high})",
                         minimum=parameter.low, maximum=parameter.high, step=1 if parameter.whole else 0.05,
                         elem_id=elem_id, info=parameter.meaning)


def method_settings_controls(drafter: str, elem_prefix: str, side: str) -> tuple[dict[str, gr.Number],
                                                                                  dict[str, gr.Row]]:
    """A control per setting of each weightless method (elem ids <elem_prefix><setting name with dashes>), in a
    row per method, shown while that method is `drafter`; (controls by setting name, rows by method name)."""
    controls, rows = {}, {}
    for name in (name for name, method in METHODS.items() if method.parameters):
        method = METHODS[name]
        with gr.Row(visible=name == drafter, elem_id=f"{elem_prefix}{name}-settings") as rows[name]:
            for parameter in method.parameters:
                label = f"{method.label}: {parameter.name.replace('_', ' ')}"
                controls[parameter.name] = parameter_control(
                    parameter, f"{elem_prefix}{parameter.name.replace('_', '-')}",
                    f"{side.capitalize()} {label}" if side else label)
    assert set(controls) == set(PARAMETERS), "every setting of the registry has a control"
    return controls, rows


MIN_DRAFT_PROB_INFO = ("the drafter's own probability; 0 = k every step (drift charts need every depth), ~0.3 = "
                       "faster")
TREE_INFO = (f"0: a chain of k drafts per step; N: an EAGLE-2 tree of N nodes, k deep, up to {TreeShape.topk} children "
             f"each, verified in one forward (our engine)")


def min_draft_prob_control(elem_id: str, label: str = "Adaptive: end the chain after a draft below") -> gr.Slider:
    return CheckedSlider(0.0, 0.9, value=0.0, step=0.05, label=label, elem_id=elem_id, info=MIN_DRAFT_PROB_INFO)


def tree_nodes_control(elem_id: str, label: str = "Draft tree nodes") -> gr.Number:
    return CheckedNumber(0, label=f"{label} (0–{MAX_NODES})", minimum=0, maximum=MAX_NODES, step=1,
                         elem_id=elem_id, info=TREE_INFO)


@dataclass
class DraftingControls:
    """How a run drafts: one control per field of DRAFTING."""

    drafter: gr.Radio
    k: gr.Number
    min_draft_prob: gr.Slider
    tree_nodes: gr.Number
    k_auto: gr.Checkbox
    method_settings: dict[str, gr.Number]  # one per setting of a method (drafting.PARAMETERS), by name
    setting_rows: dict[str, gr.Row] | None = None  # a row of those settings per method, shown while it is chosen


def drafting_controls(preset: Preset, drafter: str, elem_prefix: str = "", side: str = "",
                      k_auto: bool = False) -> DraftingControls:
    """One run's drafter, k, adaptive stop, tree size and k auto (Chat's, or a Compare side's, labelled with `side` and
    drafter and k sharing a row), each as the method's capabilities allow it (`drafting_updates`), and the chosen
    method's settings. Elem ids: <elem_prefix>drafter, -k, -min-draft-prob, -tree-nodes, -k-auto, and -<setting> per
    setting (method_settings_controls). The tab wires them to its preset menu (`follow_drafter`)."""
    named = (lambda label: f"{side.capitalize()} {label}") if side else (lambda label: label)
    k_update, adaptive, tree, auto = (_settable(u) for u in drafting_updates(preset, drafter, k_auto))
    with gr.Row() if side else contextlib.nullcontext():
        choice = drafter_control(preset, drafter, elem_id=f"{elem_prefix}drafter", label=named("drafter").capitalize())
        k = k_control(elem_id=f"{elem_prefix}k", label=named("k") if side else "k: draft tokens per step")
        k.interactive = k_update.get("interactive", True)
    drafting = DraftingControls(
        drafter=choice, k=k,
        min_draft_prob=min_draft_prob_control(
            elem_id=f"{elem_prefix}min-draft-prob",
            label=f"{side.capitalize()}: end the chain after a draft below" if side
            else "Adaptive: end the chain after a draft below"),
        tree_nodes=tree_nodes_control(elem_id=f"{elem_prefix}tree-nodes",
                                      label=f"{side.capitalize()}: draft tree nodes" if side else "Draft tree nodes"),
        k_auto=k_auto_control(elem_id=f"{elem_prefix}k-auto", label=f"{side.capitalize()}: k auto" if side
                              else "k auto", value=auto.get("value", k_auto)),
        method_settings={})
    for control, update in ((drafting.min_draft_prob, adaptive), (drafting.tree_nodes, tree),
                            (drafting.k_auto, auto)):
        control.interactive = update.get("interactive", True)
        control.info = update.get("info", control.info)
    drafting.method_settings, drafting.setting_rows = method_settings_controls(drafter, elem_prefix, side)
    return drafting


def _settable(update: dict) -> dict:
    """A gr.update's fields, for a control being made."""
    return {key: value for key, value in update.items() if key != "__type__"}
