"""Benchmarks: prompt sets (SPEED-Bench schema), sweeps of drafters x k x context x template, peers, report.

For the app:  result = run_profile("smoke", "smollm2-135m", progress_callback);  write_outputs(result, out_dir)
"""

from __future__ import annotations

from collections.abc import Callable

from playground.backends import require_local, shared_backend
from playground.bench.config import BenchConfig, ProgressCallback, Sweep
from playground.bench.findings import findings
from playground.bench.methods import Runner
from playground.bench.profiles import get_profile, profiles
from playground.bench.report import write_outputs
from playground.bench.rows import BenchResult, BenchRow
from playground.bench.runner import BenchStopped, run_bench
from playground.presets import DEFAULT, Preset, get_preset
from playground.prompt_sets import PromptRecord, PromptSet, builtin_sets, load_prompt_set

BENCH_NEEDS_WEIGHTS = "peers and drift need the target's weights in this process"


def run_profile(profile: str | BenchConfig, preset: str | Preset = DEFAULT,
                progress_callback: ProgressCallback | None = None,
                should_stop: Callable[[], bool] = lambda: False) -> BenchResult:
    """Run a named profile (or a BenchConfig) on a preset's shared backend (the app's copy of the weights).

    `progress_callback(done, total, message)` is called before every generation run with what it runs and the time
    left (`progress.py`), and once more at the end; once `should_stop()` is true the run ends within a step of our
    engine (or after a peer's answer) with BenchStopped."""
    config = get_profile(profile) if isinstance(profile, str) else profile
    preset = get_preset(preset) if isinstance(preset, str) else preset
    require_local(preset, "the bench", BENCH_NEEDS_WEIGHTS)
    backend = shared_backend(preset)
    return run_bench(config, Runner(backend, config.assistant, should_stop), progress_callback)


__all__ = [
    "BenchConfig", "BenchResult", "BenchRow", "BenchStopped", "ProgressCallback", "PromptRecord", "PromptSet",
    "Sweep", "builtin_sets", "findings", "get_profile", "load_prompt_set", "profiles", "run_bench", "run_profile",
    "write_outputs",
]
