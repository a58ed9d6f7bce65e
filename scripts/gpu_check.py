"""GPU checks, one part per call (scripts/gpu_check.sh runs them all, each under a time limit).

    python scripts/gpu_check.py env             what this machine has, and which presets can run here
    python scripts/gpu_check.py local-default  the local engine on CUDA, default pair (SmolLM2 + our drafters):
                                                float32 lossless, bf16 speed
    python scripts/gpu_check.py local-llama     Llama-3.1-8B-Instruct + EAGLE-3 on the local engine (needs HF_TOKEN)
    python scripts/gpu_check.py vllm            the vLLM backend, default pair (SmolLM2 from the Hub, no token)
    python scripts/gpu_check.py vllm-llama      the vLLM backend, Llama-3.1-8B + EAGLE-3 (HF_TOKEN; not in the script:
                                                two engine starts and a 16 GB download do not fit its time budget)

Every speed is a median over prompts × repeats, measured after a warm-up of the same path (plain or
speculative), on the same machine in the same process; acceptance uses vLLM's definitions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PROMPTS = [
    "Write a Python function that reverses a list, with a docstring.",
    "Explain what os.path.join does, with an example.",
    "def fibonacci(n):",
]


@dataclass
class Row:
    label: str
    tokens_per_second: float
    mean_acceptance_length: float | None = None
    per_position: list[float] | None = None
    identical: str = ""

    def show(self, baseline: float | None) -> str:
        al = f"{self.mean_acceptance_length:.2f}" if self.mean_acceptance_length else "—"
        pos = " ".join(f"{p:.2f}" for p in self.per_position) if self.per_position else "—"
        speedup = f"{self.tokens_per_second / baseline:.2f}×" if baseline else "—"
        return f"{self.label:<28} {self.tokens_per_second:>9.1f} {speedup:>8} {al:>6}  {pos:<26} {self.identical}"


def print_table(title: str, rows: list[Row]) -> None:
    print(f"\n{title}")
    print(f"{'path':<28} {'tok/s':>9} {'speedup':>8} {'AL':>6}  {'per-position acceptance':<26} greedy = plain")
    baseline = rows[0].tokens_per_second if rows and rows[0].label.startswith("plain") else None
    for row in rows:
        print(row.show(baseline))


def default_preset():
    """The default pair (SmolLM2 + shipped drafters); if SmolLM2 cannot be had here, tiny models built here (CPU)."""
    from playground.presets import get_preset
    from playground.smollm2 import unavailable_reason

    reason = unavailable_reason()
    if reason is None:
        return get_preset("smollm2-135m")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from tiny import build_tiny_pair

    root = Path(tempfile.mkdtemp(prefix="tiny-pair-"))
    print(f"({reason}: using tiny models built in {root})")
    build_tiny_pair(root)
    os.environ["PLAYGROUND_MODELS_DIR"] = str(root)
    return get_preset("smollm2-135m")


def measure_local(preset, drafters: list[str], k: int, max_new_tokens: int, repeats: int) -> list[Row]:
    from playground.backends.local import LocalBackend
    from playground.engine import GenerationConfig
    from playground.request import backend_unavailable_reason

    reason = backend_unavailable_reason(preset)
    if reason:
        print(f"skipped: {reason}")
        return []
    backend = LocalBackend(preset)
    started = time.perf_counter()
    backend.preload()
    print(f"loaded {preset.target} ({preset.dtype} on {preset.device}) in {time.perf_counter() - started:.1f} s")
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, k=k, instrument=False)
    prompts = [backend.encode([{"role": "user", "content": p}]) for p in PROMPTS]
    plain_ids: dict[int, list[int]] = {}
    return [measure_path("plain" if drafter == "none" else f"{drafter} k={k}", prompts, repeats, k, plain_ids,
                         lambda ids, drafter=drafter: list(backend.stream(ids, drafter, cfg)))  # warms up first
            for drafter in ["none", *drafters]]


def measure_path(label: str, prompts: list[list[int]], repeats: int, k: int, plain_ids: dict[int, list[int]],
                 run_once) -> Row:
    """Median speed over prompts × repeats of one path (`run_once(ids)` → events), and whether its greedy answers
    equal plain decoding's (the first path measured, whose answers fill `plain_ids`)."""
    from playground.engine import emitted_ids, summarize

    speeds, events_all, same = [], [], 0
    for i, ids in enumerate(prompts):
        for _ in range(repeats):
            events = run_once(ids)
            speeds.append(summarize(events, k).tokens_per_second or 0.0)
        out = emitted_ids(events)
        plain_ids.setdefault(i, out)
        same += out == plain_ids[i]
        events_all += events
    run = summarize(events_all, k)
    return Row(label, statistics.median(speeds), run.mean_acceptance_length, run.per_position_acceptance,
               f"{same}/{len(prompts)}")


def part_env(_: argparse.Namespace) -> None:
    import torch
    import transformers

    from playground.presets import all_presets
    from playground.request import backend_unavailable_reason
    from playground.request.availability import vllm_installed

    print(f"python {sys.version.split()[0]}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
          f"transformers {transformers.__version__}")
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            print(f"GPU {i}: {p.name}, {p.total_memory / 2**30:.0f} GiB, compute capability {p.major}.{p.minor}")
    else:
        print("no CUDA GPU visible: the GPU parts will be skipped")
    if vllm_installed():
        import vllm

        print(f"vllm {vllm.__version__}")
    else:
        print("vllm: not installed")
    token = "set" if os.environ.get("HF_TOKEN") else "not set"
    print(f"HF_TOKEN {token}")
    for name, preset in all_presets().items():
        print(f"  {name:<20} {backend_unavailable_reason(preset) or 'can run here'}")


def part_local_default(args: argparse.Namespace) -> None:
    preset = default_preset()
    exact = replace(preset, device="cuda", dtype="float32")
    rows = measure_local(exact, list(preset.drafters), args.k, args.max_new_tokens, 1)
    print_table("default pair, float32 on CUDA (greedy should equal plain; kernel differences may flip near-ties)",
                rows)
    fast = replace(exact, dtype="bfloat16")
    print_table("default pair, bf16 on CUDA", measure_local(fast, list(preset.drafters), args.k, args.max_new_tokens,
                                                         args.repeats))


def part_local_llama(args: argparse.Namespace) -> None:
    from playground.presets import get_preset

    preset = get_preset("llama-3.1-8b")
    print_table(f"{preset.target} + {preset.drafters['eagle3']}, bf16, local engine",
                measure_local(preset, ["eagle3"], args.k, args.max_new_tokens, args.repeats))


def measure_vllm(preset, drafter: str, k: int, max_new_tokens: int, repeats: int) -> list[Row]:
    from playground.backends.vllm import VllmBackend
    from playground.engine import GenerationConfig
    from playground.request import backend_unavailable_reason

    reason = backend_unavailable_reason(preset)
    if reason:
        print(f"skipped: {reason}")
        return []
    backend = VllmBackend(preset)
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, k=k)
    prompts = [backend.encode([{"role": "user", "content": p}]) for p in PROMPTS]
    rows, plain_ids = [], {}
    for name in ("none", drafter):
        started = time.perf_counter()
        backend.engine(name, k)
        print(f"vLLM engine for drafter {name!r} started in {time.perf_counter() - started:.0f} s")
        for ids in prompts[:1]:  # warm-up of this engine (CUDA graphs, caches)
            list(backend.stream(ids, name, cfg))
        counters, unresolved = None, 0

        def run_once(ids: list[int], name: str = name) -> list:
            nonlocal counters, unresolved
            stream = backend.stream(ids, name, cfg)
            events = list(stream)
            unresolved += stream.stepper.unresolved
            if stream.server_counters is not None:
                counters = stream.server_counters if counters is None else counters + stream.server_counters
            return events

        label = "plain (vLLM)" if name == "none" else f"{name} k={k} (vLLM)"
        rows.append(measure_path(label, prompts, repeats, k, plain_ids, run_once))
        if counters is not None:
            print(f"  vLLM's own counters for {name}: AL {counters.mean_acceptance_length}, per position "
                  f"{[round(p, 3) for p in counters.per_position_acceptance or []]}; merged deltas: {unresolved}")
    return rows


def part_vllm(args: argparse.Namespace) -> None:
    from playground.presets import get_preset

    default_preset()  # SmolLM2 + our drafters, or tiny stand-ins (PLAYGROUND_MODELS_DIR)
    print_table("default pair through vLLM (deltas -> steps)",
                measure_vllm(get_preset("smollm2-135m-vllm"), "eagle3.1", args.k, args.max_new_tokens, args.repeats))


def part_vllm_llama(args: argparse.Namespace) -> None:
    from playground.presets import get_preset

    llama = get_preset("llama-3.1-8b-vllm")
    print_table(f"{llama.target} + EAGLE-3 through vLLM",
                measure_vllm(llama, "eagle3", args.k, args.max_new_tokens, args.repeats))


PARTS = {"env": part_env, "local-default": part_local_default, "local-llama": part_local_llama, "vllm": part_vllm,
         "vllm-llama": part_vllm_llama}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=list(PARTS))
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3, help="runs per prompt for the speed medians")
    args = parser.parse_args()
    PARTS[args.part](args)


if __name__ == "__main__":
    main()
