"""Named bench configurations. Command-line flags override their fields (see `config.with_overrides`)."""

from __future__ import annotations

from playground.bench.config import BenchConfig, Sweep

EAGLES = ("eagle3", "eagle3.1")
PEERS_AND_EAGLES = (*EAGLES, "hf-greedy", "prompt-lookup", "hf-assisted")
DRIFT_K = 8  # k for the context and template studies: deep enough for drift to show, cheap enough for CPUs


def profiles() -> dict[str, BenchConfig]:
    return {
        # A few prompts, k 1 and 3, tiny answers, two passes (so speedups have a spread): tests and the Benchmark tab.
        "smoke": BenchConfig(
            sweeps=[Sweep(("held-out",), PEERS_AND_EAGLES, (1, 3), study="speed")],
            max_new_tokens=16, repeats=2, limit=3, profile="smoke",
        ),
        # The speed comparison: our EAGLE drafters beside transformers' generate peers, on held-out, MT-Bench and
        # HumanEval prompts.
        "default": BenchConfig(
            sweeps=[Sweep(("held-out", "mt-bench", "humaneval"), PEERS_AND_EAGLES, (4,), study="speed")],
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
    }


def get_profile(name: str) -> BenchConfig:
    table = profiles()
    if name not in table:
        raise KeyError(f"unknown bench profile {name!r}; known: {', '.join(table)}")
    return table[name]
