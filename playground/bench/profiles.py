"""Named bench configurations, and how long each took where it was last measured (`assets/bench/durations.json`).
Command-line flags override their fields (see `config.with_overrides`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

from playground.bench.config import BenchConfig, Sweep
from playground.bench.progress import format_duration
from playground.drafting import METHODS, offered_methods
from playground.presets import DEFAULT, REPO_ROOT

EAGLES = tuple(name for name, method in METHODS.items() if method.checkpoint)  # the registry's trained drafters
PEERS_AND_EAGLES = (*EAGLES, "hf-greedy", "prompt-lookup", "hf-assisted")
# the speed comparison's: every method of our engine, then the peers
EVERY_METHOD = (*offered_methods("local", EAGLES), "hf-greedy", "prompt-lookup", "hf-assisted")
DRIFT_K = 8  # k for the context and template studies: deep enough for drift to show, cheap enough for CPUs
DURATIONS = REPO_ROOT / "assets" / "bench" / "durations.json"
CLI_ONLY = ("landing",)  # writes a committed file per CPU kind: a command's job, not the Benchmark tab's
SUMMARIES = {
    "smoke": "3 prompts, k 1 and 3, 16 tokens, 2 passes",
    "default": "speed of every method beside the peers, k 4, 128 tokens",
    "drift": "EAGLE-3 vs EAGLE-3.1 by k, context, template",
    "landing": "the README table's runs, k 4 and auto, one file per CPU kind",
}


def profiles() -> dict[str, BenchConfig]:
    return {
        # A few prompts, k 1 and 3, tiny answers, two passes (so speedups have a spread): tests and the Benchmark tab.
        "smoke": BenchConfig(
            sweeps=[Sweep(("held-out",), PEERS_AND_EAGLES, (1, 3), study="speed")],
            max_new_tokens=16, repeats=2, limit=3, profile="smoke",
        ),
        # The speed comparison: our EAGLE drafters and weightless methods beside transformers' generate peers, on
        # held-out, MT-Bench and HumanEval prompts.
        "default": BenchConfig(
            sweeps=[Sweep(("held-out", "mt-bench", "humaneval"), EVERY_METHOD, (4,), study="speed")],
            max_new_tokens=128, repeats=3, limit=6, profile="default",
        ),
        # EAGLE-3 vs EAGLE-3.1: acceptance by k, by context length, by depth, under template changes.
        "drift": BenchConfig(
            sweeps=[
                Sweep(("held-out",), EAGLES, (1, 2, 3, 4, 6, 8), study="k"),
                Sweep(("held-out", "long-1k", "long-4k"), EAGLES, (DRIFT_K,), study="context"),
                Sweep(("held-out", "unfamiliar-system"), EAGLES, (DRIFT_K,), templates=("default", "llama3"),
                      study="template"),
            ],
            max_new_tokens=40, repeats=1, limit=4, profile="drift",
        ),
        # The README table's runs on this machine, written to assets/bench/landing/<CPU kind>.json (landing_run.py):
        # each EAGLE drafter at k 4 and at k auto, with the Chat tab's examples measured after it.
        "landing": BenchConfig(
            sweeps=[Sweep(("held-out", "mt-bench", "humaneval"), EAGLES, (4,), study="speed", k_auto=True)],
            max_new_tokens=96, repeats=2, limit=2, profile="landing",
        ),
    }


def app_profiles() -> list[str]:
    """The profiles the Benchmark tab offers: all but the command-only ones (`CLI_ONLY`)."""
    return [name for name in profiles() if name not in CLI_ONLY]


def get_profile(name: str) -> BenchConfig:
    table = profiles()
    if name not in table:
        raise KeyError(f"unknown bench profile {name!r}; known: {', '.join(table)}")
    return table[name]


@dataclass(frozen=True)
class MeasuredDuration:
    """How long one profile's run took (warm-up to rows, the model already loaded), on what, when, run how."""

    seconds: float
    cpu: str  # lscpu's model name
    cores: int
    simd: str  # AVX-512 or AVX2: what the CPU's matrix kernels can use
    date: str
    command: str
    preset: str = DEFAULT  # what it ran on: a run's `preset`, or the command's default

    def __str__(self) -> str:
        return f"{format_duration(self.seconds)} measured on a {self.cores}-core {self.cpu} ({self.simd})"


def measured_durations(path: Path = DURATIONS) -> dict[str, MeasuredDuration]:
    """The recorded duration of each measured profile; none when the file is absent."""
    if not path.exists():
        return {}
    return {name: _measured(entry) for name, entry in json.loads(path.read_text())["profiles"].items()}


def _measured(entry: dict) -> MeasuredDuration:
    """An entry of durations.json; one naming a committed `result` takes its seconds, CPU, cores and date from that
    results.json, so the figure has one home. Other keys (the machine's load, say) are notes for readers."""
    if "result" in entry:
        result = json.loads((REPO_ROOT / entry["result"]).read_text())
        machine = result["machine"]
        entry = {"seconds": result["seconds"], "cpu": machine["cpu"], "cores": machine["cores"],
                 "date": result["started"], "preset": result.get("preset", DEFAULT), **entry}
    return MeasuredDuration(**{f.name: entry[f.name] for f in fields(MeasuredDuration) if f.name in entry})


def profile_label(name: str, durations: dict[str, MeasuredDuration]) -> str:
    """'smoke: 3 prompts, … — <duration> measured on a <n>-core <CPU> (<AVX2 or AVX-512>)'."""
    measured = durations.get(name)
    return f"{name}: {SUMMARIES[name]} — {measured if measured else 'duration not measured yet'}"
