"""The "your own pair" panel: name a target and EAGLE-3 / EAGLE-3.1 drafters, load them, and pick them like a preset
in every tab of this session. The checks and loading live in `own_pair`; this wires them to the page."""

from __future__ import annotations

import html
from dataclasses import dataclass

import gradio as gr

from playground.drafting import EAGLE3, EAGLE3_1, METHODS
from playground.environment import public_host
from playground.health.measure import fingerprint_preset
from playground.own_pair import load_own_pair, size_text
from playground.presets import OWN_PAIR_PREFIX, get_preset, is_own_pair
from playground.request import RequestError

from .line import ENGINE
from .refusals import report_user_errors


@dataclass
class PairPanel:
    target: gr.Textbox
    revision: gr.Textbox
    eagle3: gr.Textbox
    eagle3_1: gr.Textbox
    load: gr.Button
    fingerprint: gr.Button  # measure the loaded pair's drafters' fingerprints (not on a public host)
    name: gr.Textbox  # the loaded pair's preset name (what /chat, /compare and /bench take as `preset`)
    status: gr.Markdown
    loaded: gr.State  # this session's pairs, by preset name: only its own menus offer them


def pair_panel() -> PairPanel:
    where = "Hugging Face model ids" if public_host() else "Hugging Face model ids or folders on this machine"
    with gr.Accordion("Your own pair", open=False, elem_id="own-pair"):
        gr.Markdown(f"A target and its EAGLE-3 and/or EAGLE-3.1 drafters ({where}; official, vLLM-export or "
                    "speculators layout). Their configs are checked first — the drafters' fit, the architecture, the "
                    "memory it needs — before any weights are read.", elem_classes="preset-info")
        target = gr.Textbox(label="Target", placeholder="e.g. meta-llama/Llama-3.1-8B-Instruct",
                            elem_id="own-target", max_lines=1)
        revision = gr.Textbox("", label="Target revision", placeholder="(latest) a branch, tag or commit of a Hub id",
                              elem_id="own-revision", max_lines=1)
        eagle3 = gr.Textbox(label=f"{METHODS[EAGLE3].label} drafter", placeholder="(none)", elem_id="own-eagle3",
                            max_lines=1)
        eagle3_1 = gr.Textbox(label=f"{METHODS[EAGLE3_1].label} drafter", placeholder="(none)", elem_id="own-eagle3-1",
                              max_lines=1)
        load = gr.Button("Load", elem_id="own-load", size="sm")
        name = gr.Textbox(label="Loaded as preset", interactive=False, elem_id="own-name", max_lines=1)
        fingerprint = gr.Button("Fingerprint its drafters (a few minutes; for the health check)", size="sm",
                                elem_id="own-fingerprint", visible=not public_host())
        status = gr.Markdown(elem_id="own-status", elem_classes="status-line")
    return PairPanel(target, revision, eagle3, eagle3_1, load, fingerprint, name, status, gr.State([]))


def wire_pair_panel(panel: PairPanel, menus: list[gr.Dropdown]) -> None:
    """Load runs beside the model's line (it never holds other users' runs), one load at a time; on success this
    session's preset menus offer the pair and select it."""

    @report_user_errors
    def load(target: str, eagle3: str, eagle3_1: str, loaded: list[str], revision: str = "",
             progress=gr.Progress()):
        def say(message: str, fraction: float | None = None) -> None:
            progress(fraction, desc=message)

        try:
            check = load_own_pair(target or "", {EAGLE3: eagle3 or "", EAGLE3_1: eagle3_1 or ""}, say,
                                  revision or "")
        except (ValueError, OSError) as err:  # kept on the panel too; report_user_errors makes it the toast
            yield (gr.skip(), f"**Not loaded:** {html.escape(str(err))}", *(gr.skip() for _ in range(1 + len(menus))))
            raise
        name = check.preset.name
        loaded = [n for n in loaded if n != name] + [name]
        notes = "".join(f" Warning: {w}." for w in check.warnings)
        status = (f"Loaded **{html.escape(check.preset.title)}** (about {size_text(check.memory_bytes)} in "
                  f"float32): it is now the preset `{name}` in Chat, Compare and the Benchmark.{html.escape(notes)}")
        yield (name, status, loaded, *(gr.Dropdown(choices=_choices(menu, loaded), value=name) for menu in menus))

    panel.load.click(load, [panel.target, panel.eagle3, panel.eagle3_1, panel.loaded, panel.revision],
                     [panel.name, panel.status, panel.loaded, *menus], api_name="load_pair",
                     concurrency_id="load_pair", concurrency_limit=1,
                     show_progress_on=panel.name)  # not over the status


    @report_user_errors
    def fingerprint(name: str, progress=gr.Progress()):
        if public_host():
            raise RequestError("a public host does not fingerprint drafters (minutes of the machine for one visitor): "
                               "run `python -m playground fingerprint --target … --drafter-path …` on your own")
        if not name:
            raise RequestError("load a pair first: its drafters are what gets fingerprinted")
        lines = fingerprint_preset(get_preset(name), lambda message, fraction: progress(fraction, desc=message))
        yield "Fingerprinted: " + html.escape("; ".join(lines)) + "."

    panel.fingerprint.click(fingerprint, panel.name, panel.status, api_name="fingerprint_pair",
                            concurrency_id=ENGINE, show_progress_on=panel.name)


def _choices(menu: gr.Dropdown, loaded: list[str]) -> list[tuple[str, str]]:
    """The menu's built-in presets, then this session's own pairs."""
    built_in = [(label, value) for label, value in menu.choices if not is_own_pair(str(value))]
    return built_in + [(f"{name.removeprefix(OWN_PAIR_PREFIX)} (your pair)", name) for name in loaded]
