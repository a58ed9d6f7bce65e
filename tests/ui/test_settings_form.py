"""The settings form (ui/settings_form.py): every run setting is set by exactly one control per side, and a handler
that takes RunSettings is called by Gradio with one value per component, in the declared order, by name."""

from __future__ import annotations

import inspect
from dataclasses import fields

import gradio as gr
import pytest

from playground.drafting import (
    NGRAM_MAX,
    NGRAM_MIN,
    PARAMETERS,
    SUFFIX_CACHE,
    SUFFIX_DEPTH,
    SUFFIX_MIN_PROB,
)
from playground.playback import RequestError, RunSettings
from playground.presets import get_preset
from playground.ui.controls import (
    GenerationControls,
    drafter_control,
    generation_controls,
    k_auto_control,
    k_control,
    method_settings_controls,
    min_draft_prob_control,
    tree_nodes_control,
)
from playground.ui.settings_form import DRAFTING, DraftingControls, SettingsForm


def test_every_run_setting_has_one_control() -> None:
    shared = {f.name for f in fields(GenerationControls)} & {f.name for f in fields(RunSettings)}
    layout = {"setting_rows"}  # rows that show a method's settings while it is chosen: they set nothing
    assert {f.name for f in fields(DraftingControls)} - layout == set(DRAFTING)
    assert shared | set(DRAFTING) == {f.name for f in fields(RunSettings)} and not shared & set(DRAFTING)


def _drafting(side: str) -> DraftingControls:
    preset = get_preset("smollm2-135m")
    return DraftingControls(drafter=drafter_control(preset, "eagle3.1", elem_id=f"{side}drafter"),
                            k=k_control(elem_id=f"{side}k"), min_draft_prob=min_draft_prob_control(f"{side}min"),
                            tree_nodes=tree_nodes_control(f"{side}tree"), k_auto=k_auto_control(f"{side}auto"),
                            method_settings=method_settings_controls("eagle3.1", side, side)[0])


def test_a_handler_gets_each_sides_settings_from_the_values_in_declared_order() -> None:
    seen = {}

    def handler(prompt: str, left: RunSettings, right: RunSettings, view: str, engine: str | None = None,
                request: gr.Request = None):
        seen.update(prompt=prompt, left=left, right=right, view=view, engine=engine)
        yield "done"

    with gr.Blocks():
        form = SettingsForm(generation_controls("", get_preset("smollm2-135m")),
                            {"left": _drafting("l-"), "right": _drafting("r-")})
    wrapped = form.handler(handler)
    names = list(inspect.signature(wrapped).parameters)
    assert names[0] == "prompt" and names[-3:] == ["view", "engine", "request"]
    assert names[1:-3] == form.names() and len(form.names()) == len(form.components())
    assert form.names()[:4] == ["left_drafter", "right_drafter", "left_k", "right_k"]
    assert inspect.isgeneratorfunction(wrapped)
    values = {"left_drafter": "eagle3", "right_drafter": "eagle3.1", "left_k": 2.0, "right_k": 5.0,
              "preset": "smollm2-135m", "temperature": 0.5, "top_p": 0.9, "max_new_tokens": 32.0,
              "chat_template": "default", "system": "be brief", "seed": "7", "left_min_draft_prob": 0.25,
              "right_min_draft_prob": 0.0, "left_tree_nodes": 0, "right_tree_nodes": 16.0, "left_k_auto": False,
              "right_k_auto": True, **{f"{side}_{name}": parameter.default for name, (_, parameter)
                                       in PARAMETERS.items() for side in ("left", "right")}}
    assert list(wrapped("hi", *(values[n] for n in form.names()), "tokens", "vllm")) == ["done"]
    assert seen["prompt"] == "hi" and seen["view"] == "tokens" and seen["engine"] == "vllm"
    assert seen["left"] == RunSettings(drafter="eagle3", k=2, preset="smollm2-135m", temperature=0.5, top_p=0.9,
                                       max_new_tokens=32, system="be brief", seed=7, min_draft_prob=0.25)
    assert (seen["right"].drafter, seen["right"].k, seen["right"].tree_nodes, seen["right"].seed) == ("eagle3.1", 5,
                                                                                                      16, 7)
    assert seen["right"].k_auto and not seen["left"].k_auto
    with pytest.raises(RequestError, match="k must be a whole number, got 2.5"):
        next(wrapped("hi", *(values[n] if n != "left_k" else 2.5 for n in form.names()), "tokens"))


def test_a_one_sided_form_keeps_run_settings_order_and_shows_settings_back() -> None:
    with gr.Blocks():
        form = SettingsForm(generation_controls("", get_preset("smollm2-135m")), {"": _drafting("")})
    assert form.names() == [name for f in fields(RunSettings)
                            for name in (PARAMETERS if f.name == "method_settings" else [f.name])]
    settings = RunSettings(drafter="eagle3", k=3, seed=None, tree_nodes=8)
    shown = dict(zip(form.names(), form.values(settings)))
    assert shown["seed"] == "" and shown["k"] == 3 and shown["tree_nodes"] == 8
    assert shown[SUFFIX_DEPTH.name] == SUFFIX_DEPTH.default  # a method's setting not given: the registry's default
    assert dict(zip(form.names(), form.values(RunSettings(seed=12))))["seed"] == "12"
    suffix = RunSettings(drafter="suffix", method_settings=((SUFFIX_DEPTH.name, 32),))
    assert dict(zip(form.names(), form.values(suffix)))[SUFFIX_DEPTH.name] == 32


def _values(form: SettingsForm, **chosen) -> list:
    defaults = {"drafter": "eagle3.1", "k": 4, "preset": "smollm2-135m", "temperature": 0.0, "top_p": 1.0,
                "max_new_tokens": 16, "chat_template": "default", "system": "", "seed": "", "min_draft_prob": 0.0,
                "tree_nodes": 0, "k_auto": False, **{name: p.default for name, (_, p) in PARAMETERS.items()}}
    return [{**defaults, **chosen}[name] for name in form.names()]


def test_a_run_takes_its_own_methods_settings_and_refuses_bad_ones_in_one_line() -> None:
    seen = {}

    def handler(settings: RunSettings):
        seen["settings"] = settings
        settings.checked_preset()

    with gr.Blocks():
        form = SettingsForm(generation_controls("", get_preset("smollm2-135m")), {"": _drafting("")})
    wrapped = form.handler(handler)
    wrapped(*_values(form, drafter="suffix", suffix_decoding_max_tree_depth=32.0))
    assert seen["settings"].method_settings == (
        (SUFFIX_DEPTH.name, 32), (SUFFIX_MIN_PROB.name, SUFFIX_MIN_PROB.default),
        (SUFFIX_CACHE.name, SUFFIX_CACHE.default))
    wrapped(*_values(form, drafter="eagle3.1", suffix_decoding_max_tree_depth=32.0))
    assert seen["settings"].method_settings == ()  # another method's settings stay behind
    wrapped(*_values(form, drafter="ngram", prompt_lookup_min=3.0))
    assert dict(seen["settings"].method_settings) == {NGRAM_MIN.name: 3, NGRAM_MAX.name: NGRAM_MAX.default}
    for chosen, message in [
        ({"drafter": "suffix", SUFFIX_DEPTH.name: 100.0}, "suffix_decoding_max_tree_depth .* must be from 2 to 64"),
        ({"drafter": "suffix", SUFFIX_DEPTH.name: 3.5}, "suffix_decoding_max_tree_depth must be a whole number"),
        ({"drafter": "suffix", SUFFIX_MIN_PROB.name: 1.5}, "suffix_decoding_min_token_prob .* from 0.0 to 1.0"),
        ({"drafter": "suffix", SUFFIX_CACHE.name: None}, "suffix_decoding_max_cached_tokens is empty"),
        ({"drafter": "ngram", NGRAM_MIN.name: 6.0, NGRAM_MAX.name: 3.0}, "prompt_lookup_min .* must not exceed"),
        ({"drafter": "ngram", "tree_nodes": 8.0}, "drafts chains"),
    ]:
        with pytest.raises(RequestError, match=message) as refused:
            wrapped(*_values(form, **chosen))
        assert "\n" not in str(refused.value)

