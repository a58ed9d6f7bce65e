"""A tab's runs written as JSON and CSV files for download."""

from __future__ import annotations

import tempfile
from datetime import datetime
from pathlib import Path

from playground.playback import (
    Run,
    export_runs,
)


def export_files(runs: dict[str, Run], messages: list[dict], tab: str, comparison: dict | None = None) -> list[str]:
    folder = Path(tempfile.mkdtemp(prefix="eagle-playground-"))
    stem = f"eagle-playground-{tab}-{datetime.now():%Y%m%d-%H%M%S}"
    return [str(p) for p in export_runs(runs, messages, folder, stem, comparison)]
