"""What the app's Benchmark tab shows of a bench result: findings as markdown, a table of the key columns, a few
figures, and the three output files in a fresh folder. No gradio here; the tab only wires these to components.
"""

from __future__ import annotations

import json
import queue
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import plotly.graph_objects as go

from playground.bench import figures
from playground.bench.config import ProgressCallback, with_overrides
from playground.bench.figures import speedup_range_text
from playground.bench.findings import deepest_pairs, findings, fixed_k_eagle_rows, pairs, study_rows
from playground.bench.methods import describe_method
from playground.bench.profiles import DURATIONS, app_profiles, measured_durations, profile_label
from playground.bench.public import check_offered
from playground.bench.report import deepest_rows, write_outputs
from playground.bench.rows import BenchResult, BenchRow
from playground.viz.figures import message_figure

REPO_ROOT = Path(__file__).resolve().parents[2]
DRIFT_STUDY = REPO_ROOT / "assets" / "bench" / "drift" / "results.json"
# (result field, column header) of the tab's table; `note` says why a row has no numbers
TAB_COLUMNS = (("drafter", "drafter"), ("k_text", "k"), ("prompt_set", "prompt set"), ("template", "template"),
               ("context_tokens", "context tokens"), ("tokens_per_second", "tokens/s"), ("speedup", "speedup vs plain"),
               ("speedup_range", "speedup range (passes)"), ("predicted_speedup", "predicted (step costs)"),
               ("mean_acceptance_length", "mean acceptance length"), ("lossless", "lossless"), ("note", "note"))
TAB_HEADERS = [header for _, header in TAB_COLUMNS]
STARTING = "starting: the model and the prompt sets load, then every method warms up…"


def tab_profiles(durations: Path = DURATIONS) -> tuple[tuple[str, str], ...]:
    """(label, profile) for the tab's menu: what each profile runs and how long it took where it was measured."""
    measured = measured_durations(durations)
    return tuple((profile_label(name, measured), name) for name in app_profiles())


TAB_PROFILES = tab_profiles()


@dataclass
class BenchView:
    """A bench result as the tab shows it."""

    findings_markdown: str
    table: list[list]  # rows of TAB_COLUMNS
    figures: list[go.Figure]  # speed, acceptance vs k, per-position acceptance (in this order)
    files: list[Path]  # results.csv, results.json, report.html (empty for a result read from disk)


def _cell(value):
    return round(value, 2) if isinstance(value, float) else value


def table_rows(rows: list[BenchRow]) -> list[list]:
    return [[speedup_range_text(r) if field == "speedup_range" else _cell(getattr(r, field))
             for field, _ in TAB_COLUMNS]
            for r in rows]


def findings_markdown(result: BenchResult, title: str) -> str:
    adaptive = result.config.get("min_draft_prob") or 0.0
    settings = f" · adaptive drafting: a chain ends after a draft below **{adaptive:g}**" if adaptive else ""
    head = (f"### {title}\nprofile **{result.config.get('profile')}** · preset **{result.preset}**{settings} · "
            f"{result.seconds / 60:.1f} min · started {result.started} · "
            f"{result.machine.get('cpu', 'unknown machine')}")
    return (head + "\n\n" + "\n".join(f"- {f}" for f in findings(result.rows, greedy=result.greedy))
            + "\n\n" + methods_markdown(result.rows))


def methods_markdown(rows: list[BenchRow]) -> str:
    """What each method in the table is, one line each (its name in the table's drafter column, and in the charts
    where that differs), in the table's order."""
    lines = []
    for name, label in dict.fromkeys((r.drafter, r.label) for r in rows):
        shown = "" if label.startswith(name) else f" ({label} in the charts)"
        lines.append(f"- `{name}`{shown}: {describe_method(name)}.")
    return "**The methods** (the table's *drafter* column):\n" + "\n".join(lines) if lines else ""


def tab_figures(rows: list[BenchRow]) -> list[go.Figure]:
    """Speed of every method; mean acceptance length vs k; per-position acceptance at the deepest k."""
    eagle = fixed_k_eagle_rows(rows)
    by_k = study_rows(eagle, "k") or eagle
    speed = figures.speed_figure(rows)
    if len({r.k for r in by_k}) > 1:
        vs_k = figures.acceptance_vs_k_figure(by_k)
    else:
        vs_k = message_figure("Mean acceptance length vs k", "this profile measures one k only")
    if by_k:
        deepest = [r for pair in deepest_pairs(pairs(by_k)) for r in pair] or deepest_rows(by_k)
        position = figures.per_position_figure(deepest)
    else:
        position = message_figure("Per-position acceptance rate", "no EAGLE drafter was measured")
    return [speed, vs_k, position]


def view(result: BenchResult, title: str, files: list[Path] | None = None) -> BenchView:
    return BenchView(findings_markdown(result, title), table_rows(result.rows), tab_figures(result.rows),
                     list(files or []))


def load_view(path: Path = DRIFT_STUDY, title: str = "The last full drift study") -> BenchView | None:
    """A committed results.json as the tab shows it, or None when there is none."""
    if not path.exists():
        return None
    return view(BenchResult.from_dict(json.loads(path.read_text())), title)


def check_request(profile: str, preset: str) -> None:
    """Raise ValueError (one line) for a profile the tab does not offer, or one this public host does not run."""
    if profile not in {name for _, name in TAB_PROFILES}:
        raise ValueError(f"unknown bench profile {profile!r}; offered: "
                         f"{', '.join(name for _, name in TAB_PROFILES)}")
    check_offered(profile, preset)


def save_and_view(result: BenchResult, out_dir: Path | None = None) -> BenchView:
    """Write results.csv / results.json / report.html into `out_dir` (a fresh temp folder by default)."""
    profile = result.config.get("profile") or "custom"
    out = out_dir or Path(tempfile.mkdtemp(prefix=f"eagle-bench-{profile}-{datetime.now():%Y%m%d-%H%M%S}-"))
    paths = write_outputs(result, out)
    return view(result, f"This run ({profile})", [paths["csv"], paths["json"], paths["html"]])


def run_and_view(profile: str, preset: str, progress: ProgressCallback | None = None,
                 min_draft_prob: float = 0.0, should_stop: Callable[[], bool] = lambda: False) -> BenchView:
    """Run a profile offered in the tab on a preset, every EAGLE run with `min_draft_prob` (adaptive draft length;
    0 = k drafts every step); bad names and values raise ValueError, and so does a profile a public host does not run
    (`public.check_offered`)."""
    from playground.bench import get_profile, run_profile

    check_request(profile, preset)
    config = with_overrides(get_profile(profile), min_draft_prob=min_draft_prob)  # the bench validates it
    try:
        result = run_profile(config, preset, progress, should_stop)
    except KeyError as err:  # an unknown preset
        raise ValueError(str(err.args[0]) if err.args else str(err)) from None
    return save_and_view(result)


@dataclass(frozen=True)
class BenchUpdate:
    """One update of a run in the tab: its status line; the view at the end."""

    status: str
    view: BenchView | None = None


def stream_run(profile: str, preset: str, min_draft_prob: float = 0.0,
               should_stop: Callable[[], bool] = lambda: False) -> Iterator[BenchUpdate]:
    """`run_and_view` in a thread of its own, so that its progress can be yielded: a first update at once, one before
    every generation run, then the view. Its errors (BenchStopped included) are raised here. Closing the iterator
    stops the run within a step and waits for it."""
    check_request(profile, preset)  # refused before it starts, without a first update
    updates: queue.SimpleQueue[BenchUpdate | BaseException] = queue.SimpleQueue()
    closed = threading.Event()

    def work() -> None:
        def progress(done: int, total: int, status: str) -> None:
            updates.put(BenchUpdate(status))

        try:
            view = run_and_view(profile, preset, progress, min_draft_prob, lambda: should_stop() or closed.is_set())
            updates.put(BenchUpdate("finished", view=view))
        except BaseException as err:  # raised in the consumer's thread instead
            updates.put(err)

    worker = threading.Thread(target=work, name=f"bench-{profile}", daemon=True)
    worker.start()
    try:
        yield BenchUpdate(STARTING)
        while True:
            update = updates.get()
            if isinstance(update, BaseException):
                raise update
            yield update
            if update.view is not None:
                return
    finally:
        closed.set()
        worker.join()
