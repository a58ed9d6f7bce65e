"""The landing measurement: `python -m playground bench --profile landing` runs the README table's configurations on
this machine and writes one file per CPU kind, `assets/bench/landing/<kind>.json`, which the README table, the About
tab and the Chat's example line are rendered from (landing.py).

The file is the bench's results.json (rows, machine, config, date) plus the CPU kind (machine.cpu_kind), what ran
beside the measurement (neighbours.other_work: other processes' share of the machine) and EAGLE-3.1's acceptance
length on each of the Chat tab's example prompts at the tab's defaults.

vLLM's column comes from a second command, `python -m playground bench-engines --landing` (engines.py), whose result
goes to `assets/bench/landing/vllm/<kind>.json`: the same shipped pair on vLLM's CPU build and on our engine, one
request at a time, in one run.
"""

from __future__ import annotations

import json
from pathlib import Path

from playground.bench.methods import Method, Runner
from playground.bench.neighbours import OtherWork
from playground.bench.plan import PromptEncoder
from playground.bench.rows import BenchResult
from playground.engine import GenerationConfig, summarize
from playground.examples import CHAT_EXAMPLES, EXAMPLES_DRAFTER, EXAMPLES_K, EXAMPLES_TOKENS
from playground.machine import cpu_kind
from playground.presets import REPO_ROOT

LANDING_DIR = REPO_ROOT / "assets" / "bench" / "landing"
VLLM_LANDING_DIR = LANDING_DIR / "vllm"  # `bench-engines --landing`: the same pair on vLLM and ours, per CPU kind
PROFILE = "landing"


def landing_path(kind: str | None = None, folder: Path = LANDING_DIR) -> Path:
    return folder / f"{kind or cpu_kind()}.json"


def chat_example_lengths(runner: Runner) -> list[dict]:
    """EAGLE-3.1's mean acceptance length on each Chat example, as the Chat tab runs it (k = 4, greedy, 256 tokens,
    the default template, no system prompt), one answer each."""
    encode, method = PromptEncoder(runner.backend.encode), Method(EXAMPLES_DRAFTER, k=EXAMPLES_K)
    lengths = []
    for example in CHAT_EXAMPLES:
        ids = encode([{"role": "user", "content": example.prompt}], "default")
        answer = runner.generate(method, ids, GenerationConfig(max_new_tokens=EXAMPLES_TOKENS, k=EXAMPLES_K))
        metrics = summarize(answer.events, EXAMPLES_K)
        lengths.append({"prompt": example.prompt, "mean_acceptance_length": round(metrics.mean_acceptance_length, 3),
                        "tokens": len(answer.ids)})
    return lengths


def landing_record(result: BenchResult, findings: list[str], other: OtherWork, examples: list[dict],
                   command: str) -> dict:
    data = result.to_dict()
    return {"cpu_kind": data["machine"].get("cpu_kind") or cpu_kind(), "date": result.started[:10],
            "command": command, "other_work": other.to_dict(),
            "chat_examples": {"drafter": EXAMPLES_DRAFTER, "k": EXAMPLES_K, "max_new_tokens": EXAMPLES_TOKENS,
                              "prompts": examples},
            **data, "findings": findings}


def write_vllm_landing(result: dict, folder: Path = VLLM_LANDING_DIR) -> Path:
    """A `bench-engines` result as this CPU kind's vLLM landing file, which the README's vLLM rows and the About
    tab read (landing.py)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{result['machine'].get('cpu_kind') or cpu_kind()}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    return path


def write_landing(record: dict, path: Path | None = None) -> Path:
    path = path or landing_path(record["cpu_kind"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path
