"""The drafting methods each tab offers (ui/controls.py): the preset's drafters, then the weightless methods its
backend runs, then plain decoding, labelled from the registry; each method's settings with the registry's ranges,
shown only while it is chosen; and the line a feature-less run's drift and RMS charts say instead of a chart."""

from __future__ import annotations

from dataclasses import replace

import gradio as gr

from playground.drafting import METHODS, PARAMETERS, WEIGHTLESS
from playground.engine import StepEvent
from playground.presets import get_preset
from playground.ui.controls import (
    AUTO_LABEL,
    default_drafter,
    drafter_choices,
    drafting_controls,
    method_settings_controls,
    offered_drafters,
)
from playground.viz import RunView, attention_drift_figure, hidden_rms_figure


def test_a_local_preset_offers_the_weightless_methods_beside_its_drafters_labelled_from_the_registry() -> None:
    local = get_preset("smollm2-135m")
    assert offered_drafters(local) == ["auto", *local.drafters, "ngram", "suffix", "early-exit", "none"]
    assert dict((name, label) for label, name in drafter_choices(local)) == {
        "auto": AUTO_LABEL, **{name: METHODS[name].label for name in offered_drafters(local)[1:]}}
    assert default_drafter(local) == "auto"  # k auto chooses the method: a Chat never starts slower than plain


def test_an_engine_is_offered_the_methods_it_runs_and_no_other() -> None:
    served = get_preset("smollm2-135m-vllm")
    assert served.backend not in METHODS["suffix"].engines  # else this test shows nothing
    offered = set(WEIGHTLESS) & set(offered_drafters(served))
    assert offered == {m for m in WEIGHTLESS if served.backend in METHODS[m].engines} == {"ngram"}
    assert not set(WEIGHTLESS) & set(offered_drafters(get_preset("remote")))
    assert offered_drafters(served)[-1] == "none"
    assert "auto" not in offered_drafters(served)  # k auto prices our engine's steps, not vLLM's
    assert default_drafter(served) == served.default_drafter


def test_each_methods_settings_take_the_registry_range_and_show_only_while_it_is_chosen() -> None:
    with gr.Blocks():
        controls, rows = method_settings_controls("suffix", "compare-left-", "left")
    assert set(controls) == set(PARAMETERS) and set(rows) == set(WEIGHTLESS)
    for name, (method, parameter) in PARAMETERS.items():
        box = controls[name]
        assert (box.minimum, box.maximum, box.value) == (parameter.low, parameter.high, parameter.default)
        assert box.elem_id == f"compare-left-{name.replace('_', '-')}" and box.label.startswith("Left ")
        assert method.label in box.label
    assert rows["suffix"].visible and not rows["ngram"].visible


def test_a_tabs_drafting_controls_hold_every_setting() -> None:
    with gr.Blocks():
        drafting = drafting_controls(get_preset("smollm2-135m"), "ngram")
    assert set(drafting.method_settings) == set(PARAMETERS)
    assert drafting.drafter.value == "ngram"


def _weightless_view() -> RunView:
    events = [StepEvent(step=0, drafted=[], accepted=0, emitted=[5]),
              StepEvent(step=1, drafted=[6, 7], accepted=1, emitted=[6, 8])]
    return replace(RunView.from_events(METHODS["suffix"].label, False, 2, events), features=False)


def test_drift_and_rms_say_in_one_line_why_a_weightless_run_has_none() -> None:
    view = _weightless_view()
    for figure, noun in ((attention_drift_figure([view]), "drafter attention"),
                         (hidden_rms_figure([view]), "drafter hidden states")):
        said = " ".join(a.text.replace("<br>", " ") for a in figure.layout.annotations)
        assert said == f"suffix decoding, k=2: proposes from the text alone, with no drafter, so no {noun} to show"
    fed_none = replace(view, features=True)  # a drafter that reported none: the backend's reason, not the method's
    said = " ".join(a.text for a in attention_drift_figure([fed_none]).layout.annotations)
    assert "proposes from the text alone" not in said
