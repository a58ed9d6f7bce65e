"""A session's runs as files a user can keep: JSON (text, config, metrics, per-step trace) and CSV (one row per
step)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from playground.presets import get_preset
from playground.viz.summary import (
    BASELINE_HELP,
    SPEEDUP_RANGE_HELP,
    TOKENS_PER_SECOND_HELP,
    TOO_FEW_STEPS_HELP,
    VERDICT_HELP,
)

from .baseline import SAMPLING_HELP
from .run import Run
from .run_settings import RequestError

CSV_COLUMNS = [
    "run", "drafter", "k", "step", "drafted", "accepted", "emitted", "emitted_text", "draft_probs", "attention_sink",
    "attention_context", "attention_draft", "hidden_rms", "draft_ms", "verify_ms", "total_tokens", "elapsed_ms",
    "finished", "finish_reason",
]
TIMING_NOTE = " ".join([  # the explanations the app's cards and the About tab show, with the fields they explain
    "elapsed_ms counts time inside the decode loop only (pauses for UI rendering or for the other side of a "
    "comparison are excluded); tokens_per_second = generated tokens / elapsed time; seen_tokens_per_second = "
    "generated tokens / wall-clock time with those pauses, as the user saw it.",
    f"metrics.decode_tokens_per_second: {TOKENS_PER_SECOND_HELP}",
    f"baseline: {BASELINE_HELP} {SAMPLING_HELP} baseline.timing says which way it was timed, measuring_s its cost in "
    "wall time.",
    "speedup = metrics.decode_tokens_per_second / baseline.tokens_per_second; speedup_range: "
    f"{SPEEDUP_RANGE_HELP} {TOO_FEW_STEPS_HELP} (Both are then null, and speedup_not_measured says why.)",
    f"verdict: {VERDICT_HELP}",
])


def _joined(values: Iterable | None, pattern: str = "{}") -> str:
    return "" if values is None else " ".join(pattern.format(v) for v in values)


def _csv_rows(name: str, run: Run) -> Iterator[list]:
    text_by_step: dict[int, str] = {}
    for piece in run.pieces:
        text_by_step[piece.step] = text_by_step.get(piece.step, "") + piece.text
    for e in run.events:
        attention = e.attention
        yield [
            name, run.settings.drafter, run.settings.k, e.step, _joined(e.drafted), e.accepted, _joined(e.emitted),
            text_by_step.get(e.step, ""), _joined(e.draft_probs, "{:.4f}"),
            _joined(attention and [a.sink for a in attention], "{:.4f}"),
            _joined(attention and [a.context for a in attention], "{:.4f}"),
            _joined(attention and [a.draft for a in attention], "{:.4f}"),
            _joined(e.hidden_rms, "{:.4f}"), e.draft_ms, e.verify_ms, e.total_tokens, e.elapsed_ms, e.finished,
            e.finish_reason or "",
        ]


def _shareable(model: str) -> str:
    """A Hub id as it is; a local folder by its name only (exports are shared; local paths are private)."""
    return Path(model).name if Path(model).is_absolute() else model


def export_runs(runs: dict[str, Run], messages: list[dict], folder: Path, stem: str,
                comparison: dict | None = None) -> list[Path]:
    """Write `<stem>.json` (text, config, metrics, per-step trace; a comparison's shared baseline and verdict) and
    `<stem>.csv` (one row per step)."""
    if not runs:
        raise RequestError("nothing to export yet: run a prompt first")
    folder.mkdir(parents=True, exist_ok=True)
    first = next(iter(runs.values()))
    preset = get_preset(first.settings.preset)
    payload = {
        "app": "EAGLE Playground", "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "preset": preset.name, "target": _shareable(preset.target), "messages": messages, "timing_note": TIMING_NOTE,
        "runs": [run.record(name) for name, run in runs.items()],
        **({"comparison": comparison} if comparison is not None else {}),
    }
    json_path, csv_path = folder / f"{stem}.json", folder / f"{stem}.csv"
    json_path.write_text(json.dumps(payload, indent=1, ensure_ascii=False))
    with csv_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for name, run in runs.items():
            writer.writerows(_csv_rows(name, run))
    return [json_path, csv_path]
