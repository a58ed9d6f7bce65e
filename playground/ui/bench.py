"""The Benchmark tab: run a bench profile with progress, see its findings, table and charts, download its files;
and, before any run, the committed drift study. The work is in playground.bench.present."""

from __future__ import annotations

import logging

import gradio as gr

from playground.bench import BenchStopped
from playground.bench.present import TAB_HEADERS, TAB_PROFILES, BenchView, load_view, stream_run
from playground.bench.public import bench_bound_s, offered_profiles, public_note
from playground.presets import Preset
from playground.request.availability import offered_presets

from .controls import CheckedDropdown, min_draft_prob_control
from .line import ENGINE, in_line, stoppable, wire_stop
from .refusals import report_user_errors

PLOTS = ("speed", "k", "position")  # elem ids bench-plot-<name>, in the order of BenchView.figures
N_OUTPUTS = 3 + len(PLOTS) + 1  # status, findings, table, the charts, files
FINISHED = "finished"


TAB = "bench"
log = logging.getLogger("playground")


def _outputs(profile: str, view: BenchView) -> tuple:
    return (f"**{profile}**: {FINISHED}", view.findings_markdown, view.table, *view.figures,
            [str(p) for p in view.files])


def _reveal(status: str) -> tuple:
    """Table, charts and files, hidden until the first result (a stopped run has none)."""
    if not status.endswith(FINISHED):
        return (gr.skip(),) * (N_OUTPUTS - 2)
    return (gr.Dataframe(visible=True), *(gr.Plot(visible=True) for _ in PLOTS), gr.File(visible=True))


@report_user_errors
def run_profile_for_tab(profile: str, preset: str, min_draft_prob: float = 0.0, request: gr.Request = None):
    def run(should_stop):
        try:
            for update in stream_run(profile, preset, float(min_draft_prob), should_stop):
                if update.view is None:
                    yield (f"**{profile}**: {update.status}", *(gr.skip(),) * (N_OUTPUTS - 1))
                else:
                    yield _outputs(profile, update.view)
        except BenchStopped as stopped:
            gr.Info(f"Stopped: {stopped}.")
            yield (f"Stopped: {stopped}.", *(gr.skip(),) * (N_OUTPUTS - 1))
        except (ValueError, OSError):
            raise  # a refusal: report_user_errors words it
        except Exception as err:  # a failure inside the run: words on the status line, the traceback in the log
            log.exception("benchmark %s failed", profile)
            first = (str(err).strip().splitlines() or [""])[0]
            yield (f"**{profile}** failed: {type(err).__name__}{': ' + first if first else ''} (the app's log has "
                   "the details)", *(gr.skip(),) * (N_OUTPUTS - 1))

    yield from stoppable(request, TAB, f"benchmark ({profile})", run)


def _results(prefix: str, view: BenchView | None, hint: str) -> list[gr.components.Component]:
    """Findings, table and the three charts of one result; without one, the findings say `hint` (once) and the rest
    stays hidden until there is a result."""
    findings = gr.Markdown(view.findings_markdown if view else hint, elem_id=f"{prefix}findings")
    table = gr.Dataframe(value=view.table if view else None, headers=TAB_HEADERS, interactive=False,
                         label="Results", elem_id=f"{prefix}table", visible=view is not None)

    def plot(i: int) -> gr.Plot:
        return gr.Plot(view.figures[i] if view else None, show_label=False, elem_id=f"{prefix}plot-{PLOTS[i]}",
                       visible=view is not None)

    speed = plot(0)  # a bar per method: wide
    with gr.Row():
        by_k, position = plot(1), plot(2)
    return [findings, table, speed, by_k, position]


def profile_menu(preset: str) -> tuple[list[tuple[str, str]], str | None]:
    """The profile menu's (label, name) choices and its value: every profile, or on a public host those it runs
    (`bench.public`), smoke first where offered."""
    offered = set(offered_profiles(preset))
    menu = [(label, name) for label, name in TAB_PROFILES if name in offered]
    names = [name for _, name in menu]
    return menu, "smoke" if "smoke" in names else next(iter(names), None)


def build_bench_tab(preset: Preset) -> gr.Dropdown:
    """The tab; its preset menu (this machine's local-engine presets; the app adds a session's own pairs)."""
    menu, value = profile_menu(preset.name)
    with gr.Row():
        # unchecked by Gradio: a profile a public host does not run is refused with its reason, in one line
        profile = CheckedDropdown(menu, value=value, label="Profile", elem_id="bench-profile", scale=3)
        local = [p for p in offered_presets(always=preset.name)[0] if p.backend == "local"]
        preset_menu = CheckedDropdown([(p.title, p.name) for p in local], value=preset.name,
                                  label="Preset (the bench runs on the local engine)", elem_id="bench-preset",
                                  scale=2)
        with gr.Column(scale=1, min_width=140):
            run_button = gr.Button("Run benchmark", variant="primary", elem_id="bench-run", interactive=bool(menu))
            stop_button = gr.Button("Stop", variant="stop", elem_id="bench-stop")
    min_draft_prob = min_draft_prob_control(elem_id="bench-min-draft-prob",
                                            label="Adaptive: every EAGLE run ends its chain after a draft below")
    gr.Markdown("Runs every method of the profile on this machine, one after another. It holds the model meanwhile: "
                "chat and compare runs, yours and other users', wait in line and are told so. Speedup = tokens/s over "
                "plain decoding of the same target in the same run.", elem_classes="status-line")
    bounded = bench_bound_s() is not None
    note = gr.Markdown(public_note(preset.name), elem_id="bench-public", visible=bounded)
    if bounded:  # what is offered depends on the preset: another one (an own pair, say) was not measured
        preset_menu.change(public_note, preset_menu, note, queue=False, api_visibility="private",
                           show_progress="hidden")
    status = gr.Markdown(elem_id="bench-status", elem_classes="status-line")
    outputs = _results("bench-", None, "Run a profile to see its findings here.")
    files = gr.File(label="results.csv · results.json · report.html", file_count="multiple",
                    elem_id="bench-files", visible=False)
    with gr.Accordion("The last full drift study (committed results)", open=True, elem_id="bench-drift-study"):
        drift = load_view()
        _results("bench-drift-", drift, "No committed drift study (assets/bench/drift/results.json) in this copy.")

    bench_event = in_line([run_button.click], TAB, status).then(
        run_profile_for_tab, [profile, preset_menu, min_draft_prob], [status, *outputs, files], api_name="bench",
        concurrency_id=ENGINE, show_progress_on=outputs[0])  # Gradio's busy mark on the findings only
    bench_event.success(_reveal, status, [*outputs[1:], files], queue=False, api_visibility="private")
    wire_stop(stop_button, TAB, status, [bench_event], api_name="stop_bench")
    return preset_menu
