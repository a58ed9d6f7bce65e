"""Where a decode step's time goes, on the transformers forward and on the fast path, in one process.

    python scripts/step_costs.py                    # 6 MT-Bench first turns x 2 repeats, 128 tokens, EAGLE-3.1 k=4
    python scripts/step_costs.py --limit 4 --repeats 3 --drafter eagle3

Three targets are loaded from the same converted SmolLM2 folder: float32 through transformers (the engine before the
fast path: `Target(fast=False)`), float32 on the fast path, and, where the CPU has bf16 instructions, bfloat16 on the
fast path. Where this machine keeps the transposed vocabulary head for one-row products (`Projection.try_columns`),
a fourth, float32 on the fast path with that copy dropped from target and drafter, shows what it buys. Every prompt
runs plain and speculative on each, back to back, so a noisy neighbour slows them alike.
Instrumentation is off. Prints, per target: the seconds to load it (from the converted folder, files in the page
cache), the first token's latency (the prefill step of plain decoding, median over runs), medians over every step of
every run of a plain step (ms) and of a speculative step's drafting and verification (ms; verification includes
acceptance and the rollback), tokens/s (median over runs), the speedup (median of per-prompt ratios to the same
target's plain run) and whether every speculative answer equalled its plain one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playground.engine import GenerationConfig, Target, emitted_ids, load_drafter, plain_generate, speculative_generate  # noqa: E402
from playground.engine.llama import native_bfloat16  # noqa: E402
from playground.engine.trace import SpecCounters  # noqa: E402
from playground.machine import machine_info  # noqa: E402
from playground.presets import get_preset  # noqa: E402
from playground.prompt_sets import load_prompt_set  # noqa: E402
from playground.smollm2 import local_folder  # noqa: E402


def load(folder: str, dtype: torch.dtype, fast: bool, drafter_path: str):
    """(target, drafter, aux layers, seconds to load the target)."""
    start = time.perf_counter()
    target = Target.load(folder, dtype=dtype, fast=fast)
    seconds = time.perf_counter() - start
    drafter, _ = load_drafter(drafter_path)  # float32, as the local backend keeps drafters on the CPU
    aux = target.attach(drafter)
    drafter.prepare_for_decoding()  # as the local backend does
    return target, drafter, aux, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drafter", default="eagle3.1")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--limit", type=int, default=6, help="MT-Bench first turns")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--out", help="write the numbers as JSON")
    args = parser.parse_args()
    preset = get_preset("smollm2-135m")
    folder = str(local_folder(preset.target))
    drafter_path = preset.drafters[args.drafter]
    Target.load(folder)  # once untimed, so that every timed load finds the files in the page cache
    targets = {"transformers float32": load(folder, torch.float32, False, drafter_path),
               "fast float32": load(folder, torch.float32, True, drafter_path)}
    if native_bfloat16():
        targets["fast bfloat16"] = load(folder, torch.bfloat16, True, drafter_path)
    if targets["fast float32"][0].fast.lm_head.columns is not None:
        untransposed = load(folder, torch.float32, True, drafter_path)
        untransposed[0].fast.lm_head.columns, untransposed[1].head = None, None
        targets["fast float32, untransposed head"] = untransposed
    prompts = [targets["fast float32"][0].encode_chat(r.messages([]))
               for r in load_prompt_set("mt-bench", args.limit).records]
    plain_cfg = GenerationConfig(max_new_tokens=args.max_new_tokens, instrument=False)
    spec_cfg = GenerationConfig(max_new_tokens=args.max_new_tokens, k=args.k, instrument=False)
    stats = {name: {"plain_ms": [], "draft_ms": [], "verify_ms": [], "plain_tps": [], "spec_tps": [], "ratios": [],
                    "first_token_ms": [], "identical": True, "counters": SpecCounters()} for name in targets}
    load_seconds = {name: loaded[3] for name, loaded in targets.items()}
    for target, drafter, aux, _ in targets.values():  # warm-up of both paths
        list(plain_generate(target, prompts[0], GenerationConfig(max_new_tokens=8)))
        list(speculative_generate(target, drafter, aux, prompts[0], GenerationConfig(max_new_tokens=8, k=args.k)))
    for _ in range(args.repeats):
        for prompt in prompts:
            for name, (target, drafter, aux, _) in targets.items():
                s = stats[name]
                plain = list(plain_generate(target, prompt, plain_cfg))
                spec = list(speculative_generate(target, drafter, aux, prompt, spec_cfg))
                s["plain_ms"] += [e.verify_ms for e in plain[1:]]
                s["first_token_ms"].append(plain[0].verify_ms)
                s["draft_ms"] += [e.draft_ms for e in spec[1:] if e.draft_ms is not None]
                s["verify_ms"] += [e.verify_ms for e in spec[1:]]
                rates = [run[-1].total_tokens / run[-1].elapsed_ms * 1000 for run in (plain, spec)]
                s["plain_tps"].append(rates[0])
                s["spec_tps"].append(rates[1])
                s["ratios"].append(rates[1] / rates[0])
                s["identical"] &= emitted_ids(plain) == emitted_ids(spec)
                for event in spec:
                    s["counters"].observe(event)
    rows = {}
    print(f"| target | load s | first token ms | plain step ms | draft ms | verify ms | plain tok/s | "
          f"{args.drafter} k={args.k} tok/s | speedup | AL | same tokens as plain |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|")
    for name, s in stats.items():
        med = {key: statistics.median(s[key]) for key in ("first_token_ms", "plain_ms", "draft_ms", "verify_ms",
                                                           "plain_tps", "spec_tps", "ratios")}
        target = targets[name][0]
        rows[name] = {**med, "load_seconds": load_seconds[name], "identical": s["identical"],
                      "kernels": target.fast.kernels if target.fast else "transformers",
                      "mean_acceptance_length": s["counters"].mean_acceptance_length}
        print(f"| {name} | {load_seconds[name]:.2f} | {med['first_token_ms']:.0f} | {med['plain_ms']:.1f} | "
              f"{med['draft_ms']:.1f} | {med['verify_ms']:.1f} | "
              f"{med['plain_tps']:.1f} | {med['spec_tps']:.1f} | {med['ratios']:.2f}× | "
              f"{rows[name]['mean_acceptance_length']:.2f} | {'yes' if s['identical'] else 'no'} |")
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows, "args": vars(args), "machine": machine_info("cpu")},
                                             indent=1))


if __name__ == "__main__":
    main()
