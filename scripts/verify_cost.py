"""What a verification of k + 1 rows costs against a one-row step, on this machine, and where a speculative step's time
goes: the must-show of the EAGLE-that-pays issue, per CPU kind.

    python scripts/verify_cost.py                 # the default pair on its default (int4) weights
    python scripts/verify_cost.py --context 300 --out assets/bench/verify/<cpu kind>.json

Part 1: one target forward of R rows (R = 1 .. 17) after `--context` tokens, timed alternating R in rounds (the
median of `--rounds`), two threads unless --threads: the ratio to one row is what a verification of k = R - 1
drafts costs in one-row steps. Part 2: EAGLE-3.1 chains of k = 1..4 and plain decoding on three prompts (96 tokens,
greedy), each speculative step split into drafting (the drafter's calls), verification (the target's forward,
acceptance and rollback) and the loop around them (the step's wall time less both), medians over the steps, with
each run's tokens/s. Run it on an idle machine: it records what else ran (other_work)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playground.bench.neighbours import other_work  # noqa: E402
from playground.engine import GenerationConfig, Target, load_drafter, plain_generate, speculative_generate  # noqa: E402
from playground.machine import cpu_kind, machine_info  # noqa: E402
from playground.smollm2 import HUB_ID, local_folder  # noqa: E402

PROMPTS = ("Write a Python function that returns the n-th prime number, with a docstring and two tests.",
           "Explain to a curious twelve-year-old why the sky is blue and sunsets are red.",
           "Give me a packing list for a three-day hiking trip in autumn, with a sentence on each item.")


def forward_costs(target: Target, context: int, rounds: int) -> dict[int, float]:
    ids = [(7 * i + 11) % 4000 + 100 for i in range(context + 17)]
    cache = target.new_cache()
    target.forward(ids[:context], cache, last_only=True)
    aux = [2, target.num_layers // 2, target.num_layers - 3]
    samples: dict[int, list[float]] = {rows: [] for rows in range(1, 18)}
    for _ in range(rounds + 1):  # the first round warms up
        for rows in samples:
            cache.rollback(context)
            start = time.perf_counter()
            target.forward(ids[context : context + rows], cache, aux, last_only=rows == 1)
            samples[rows].append((time.perf_counter() - start) * 1000)
    return {rows: statistics.median(times[1:]) for rows, times in samples.items()}


def step_breakdown(target: Target, drafter, aux: list[int], k: int) -> dict:
    rates, draft, verify, loop, tokens = [], [], [], [], []
    for prompt in PROMPTS:
        ids = target.encode_chat([{"role": "user", "content": prompt}])
        cfg = GenerationConfig(max_new_tokens=96, k=max(k, 1), instrument=False)
        start = time.perf_counter()
        events = list(plain_generate(target, ids, cfg) if k == 0 else speculative_generate(target, drafter, aux, ids,
                                                                                             cfg))
        rates.append(sum(len(e.emitted) for e in events) / (time.perf_counter() - start))
        for before, event in zip(events, events[1:]):
            step = event.elapsed_ms - before.elapsed_ms
            draft.append(event.draft_ms or 0.0)
            verify.append(event.verify_ms)
            loop.append(step - (event.draft_ms or 0.0) - event.verify_ms)
            tokens.append(len(event.emitted))
    return {"tok_s": round(statistics.median(rates), 1), "draft_ms": round(statistics.median(draft), 2),
            "verify_ms": round(statistics.median(verify), 2), "loop_ms": round(statistics.median(loop), 2),
            "tokens_per_step": round(statistics.mean(tokens), 2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--weights", default="auto", choices=["auto", "int4", "float32"])
    p.add_argument("--context", type=int, default=100)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", help="write the numbers as JSON")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    with other_work() as work:
        result = measure(args)
    result["other_work"] = work.to_dict()
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


def measure(args: argparse.Namespace) -> dict:
    target = Target.load(local_folder(HUB_ID), weights=args.weights)
    if target.threads is not None:
        target.threads.fix(args.threads)
    drafter, _ = load_drafter("assets/models/smollm2-135m/eagle3.1")
    aux = target.attach(drafter)
    drafter.prepare_for_decoding(int8=target.weights == "int4")
    costs = forward_costs(target, args.context, args.rounds)
    one = costs[1]
    print(f"{machine_info('cpu').get('cpu')}; {target.fast.kernels if target.fast else target.weights}; "
          f"{args.threads} threads; context {args.context}")
    print("rows  ms      x one row")
    for rows, ms in costs.items():
        print(f"{rows:4d}  {ms:6.2f}  {ms / one:5.2f}")
    steps = {k: step_breakdown(target, drafter, aux, k) for k in (0, 1, 2, 3, 4)}
    print("k  tok/s   draft ms  verify ms  loop ms  tokens/step")
    for k, row in steps.items():
        print(f"{k}  {row['tok_s']:6.1f}  {row['draft_ms']:8.2f}  {row['verify_ms']:9.2f}  {row['loop_ms']:7.2f}  "
              f"{row['tokens_per_step']:5.2f}")
    return {"machine": machine_info("cpu"), "cpu_kind": cpu_kind(), "date": time.strftime("%Y-%m-%d"),
            "kernels": target.fast.kernels if target.fast else None, "drafter": drafter.weights,
            "threads": args.threads, "context": args.context,
            "forward_ms": {str(r): round(ms, 3) for r, ms in costs.items()},
            "verify_over_one_row": {str(k): round(costs[k + 1] / one, 3) for k in range(1, 17)},
            "steps": {str(k): row for k, row in steps.items()}}


if __name__ == "__main__":
    main()
