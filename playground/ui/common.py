"""What both tabs share: preset and generation controls, stop switches, error reporting, exports and styles."""

from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator

import gradio as gr

from playground.backends import backend_unavailable_reason
from playground.engine.templates import CHAT_TEMPLATES
from playground.playback import MAX_NEW_TOKENS, UI_MAX_K, Run, RunSettings, StopSwitches, export_runs
from playground.presets import DRAFTER_LABELS, Preset, get_preset, presets
from playground.viz import provenance_css, stats_css

ENGINE = "engine"  # concurrency id of every event that runs the model
STOP_SWITCHES = StopSwitches()

LAYOUT_CSS = """
.side-panel { min-height: 220px; max-height: 460px; overflow-y: auto; padding: 4px 8px; }
.side-title { font-weight: 600; margin-bottom: 4px; }
.status-line p { margin: 0; font-size: 0.9em; color: var(--body-text-color-subdued); }
.preset-info p, .preset-info li { font-size: 0.85em; color: var(--body-text-color-subdued); }
"""
APP_CSS = provenance_css() + stats_css() + LAYOUT_CSS


def session_id(request: gr.Request | None) -> str:
    return (request.session_hash if request is not None else None) or "anonymous"


def drafter_choices(preset: Preset) -> list[tuple[str, str]]:
    """(label, name) pairs: the preset's drafters, then plain decoding."""
    return [(DRAFTER_LABELS.get(n, n), n) for n in [*preset.drafters, "none"]]


def compare_drafters(preset: Preset) -> tuple[str, str]:
    """Default left and right drafters: EAGLE-3 vs EAGLE-3.1 where the preset has both, else its drafter vs none."""
    if {"eagle3", "eagle3.1"} <= set(preset.drafters):
        return "eagle3", "eagle3.1"
    return preset.default_drafter, "none"


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


def report_user_errors(handler: Callable[..., Iterator]) -> Callable[..., Iterator]:
    """Turn a bad request (empty prompt, k out of range, prompt too long, a drafter that does not fit, missing model
    files, a preset that cannot run here) into an error message for the browser and API clients; the app keeps
    serving."""

    @functools.wraps(handler)
    def wrapper(*args, **kwargs):
        try:
            yield from handler(*args, **kwargs)
        except (ValueError, OSError) as err:  # RequestError, CheckpointError, TargetError, BackendUnavailable
            raise gr.Error(str(err), title="Cannot run that") from None

    return wrapper


@dataclass
class GenerationControls:
    """Settings shared by a tab's runs (the drafter and k are per run)."""

    preset: gr.Dropdown
    preset_info: gr.Markdown
    temperature: gr.Slider
    top_p: gr.Slider
    max_new_tokens: gr.Slider
    chat_template: gr.Radio
    system: gr.Textbox

    def components(self) -> list[gr.components.Component]:
        """In the order of run_settings()'s arguments after drafter and k."""
        return [self.preset, self.temperature, self.top_p, self.max_new_tokens, self.chat_template, self.system]


def generation_controls(prefix: str, preset: Preset) -> GenerationControls:
    offered = presets()
    return GenerationControls(
        preset=gr.Dropdown([(p.title, p.name) for p in offered.values()], value=preset.name, label="Preset",
                           elem_id=f"{prefix}preset", interactive=len(offered) > 1),
        preset_info=gr.Markdown(preset_info(preset), elem_classes="preset-info"),
        temperature=gr.Slider(0.0, 2.0, value=0.0, step=0.05, label="Temperature (0 = greedy)",
                              elem_id=f"{prefix}temperature"),
        top_p=gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p", elem_id=f"{prefix}top-p"),
        max_new_tokens=gr.Slider(1, MAX_NEW_TOKENS, value=256, step=1, label="Max new tokens",
                                 elem_id=f"{prefix}max-new-tokens"),
        chat_template=gr.Radio(list(CHAT_TEMPLATES), value="default", label="Chat template",
                               info="alt: the same conversation in a format the model saw less of",
                               elem_id=f"{prefix}chat-template"),
        system=gr.Textbox(label="System prompt", lines=2, placeholder="(none)", elem_id=f"{prefix}system"),
    )


def follow_preset(controls: GenerationControls, *drafters: tuple[gr.Radio, Callable[[Preset], str]]) -> None:
    """When another preset is chosen, show its description and offer its drafters (each radio with its default)."""

    def update(name: str):
        preset = get_preset(name)
        radios = [gr.Radio(choices=drafter_choices(preset), value=default(preset)) for _, default in drafters]
        return preset_info(preset), *radios

    controls.preset.change(update, controls.preset, [controls.preset_info, *(radio for radio, _ in drafters)],
                           queue=False, api_visibility="private")


def drafter_control(preset: Preset, value: str, elem_id: str, label: str = "Drafter") -> gr.Radio:
    return gr.Radio(drafter_choices(preset), value=value, label=label, elem_id=elem_id)


def k_control(elem_id: str, label: str = "k: draft tokens per step") -> gr.Slider:
    return gr.Slider(1, UI_MAX_K, value=4, step=1, label=label, elem_id=elem_id)


def run_settings(drafter: str, k: float, preset: str, temperature: float, top_p: float, max_new_tokens: float,
                 chat_template: str, system: str | None) -> RunSettings:
    """Settings from component values (sliders deliver floats); RunSettings.checked_preset() validates them."""
    return RunSettings(drafter=drafter, k=int(k), preset=preset, temperature=float(temperature), top_p=float(top_p),
                       max_new_tokens=int(max_new_tokens), chat_template=chat_template, system=system or "")


def export_files(runs: dict[str, Run], messages: list[dict], tab: str) -> list[str]:
    folder = Path(tempfile.mkdtemp(prefix="eagle-playground-"))
    stem = f"eagle-playground-{tab}-{datetime.now():%Y%m%d-%H%M%S}"
    return [str(p) for p in export_runs(runs, messages, folder, stem)]
