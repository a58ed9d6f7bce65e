"""Gradio wiring of the playground: Chat, Compare and Benchmark tabs. No decoding or plotting logic lives here."""

from __future__ import annotations

import html

import gradio as gr

from playground import environment
from playground.presets import default_preset_name, get_preset

from .about import Measurements, about_markdown
from .bench import build_bench_tab
from .chat import build_chat_tab
from .compare import build_compare_tab
from .line import LINE, STOP_SWITCHES, session_id
from .own_pair import wire_pair_panel
from .style import APP_CSS

THEME = gr.themes.Soft(primary_hue="teal", secondary_hue="slate")
SESSIONS = 32  # visitors' sessions kept (PLAYGROUND_SESSIONS): Gradio's own default, 10,000, bounds nothing here

ABOUT = about_markdown(Measurements.committed())  # read once, at start-up


def build_app(load_problem: str | None = None) -> gr.Blocks:
    """The whole UI. `load_problem` (why the default preset's models did not load at start-up) shows in a banner."""
    preset = get_preset(default_preset_name())
    with gr.Blocks(title="EAGLE Playground") as demo:
        gr.Markdown("# EAGLE Playground\nSpeculative decoding, live: **EAGLE-3 vs EAGLE-3.1** drafters. Coloured "
                    "tokens came from accepted drafts; plain ones are the target's own.", elem_id="header")
        if load_problem:
            gr.Markdown(f"**{html.escape(preset.title)}: not everything loaded** (runs that need it will say so): "
                        f"{html.escape(load_problem)}", elem_id="load-problem")
        with gr.Tabs():
            with gr.Tab("Chat", id="chat-tab"):
                chat_menu, pair_panel = build_chat_tab(preset, demo)
            with gr.Tab("Compare", id="compare-tab"):
                compare_menu = build_compare_tab(preset)
            with gr.Tab("Benchmark", id="bench-tab"):
                bench_menu = build_bench_tab(preset)
            with gr.Tab("About", id="about-tab"):
                gr.Markdown(ABOUT)
        wire_pair_panel(pair_panel, [chat_menu, compare_menu, bench_menu])
        demo.unload(_forget_session)
    return demo


def session_capacity() -> int:
    """How many visitors' sessions Gradio keeps (`launch(state_session_capacity=…)`), the least recently used dropped
    beyond it: PLAYGROUND_SESSIONS, default SESSIONS. Each holds the visitor's chat and comparison and, as Gradio
    keeps them, its own copy of every component's config with the last value sent to it (~0.3 MB as JSON after a
    chat, more as Python objects), and Gradio drops none of them otherwise: a page closed only loses its gr.State
    values, an hour later, and an API client's session never closes."""
    value = environment.number("PLAYGROUND_SESSIONS", SESSIONS)
    if value < 1 or value != int(value):
        raise ValueError(f"PLAYGROUND_SESSIONS={value:g} must be a whole number of at least 1")
    return int(value)


def _forget_session(request: gr.Request) -> None:
    STOP_SWITCHES.forget(session_id(request))
    LINE.forget(session_id(request))


__all__ = ["APP_CSS", "THEME", "build_app", "session_capacity"]
