"""Draft trees against chains on the default pair, paired with plain decoding of the same prompt in the same round.

    python scripts/tree_vs_chain.py                          # 8 held-out prompts x 2 rounds, 96 tokens
    python scripts/tree_vs_chain.py --set mt-bench --limit 8 --rounds 3 --out result.json
    python scripts/tree_vs_chain.py --temperature 0.7 --rounds 1  # sampled: each run seeded by round and prompt

Every prompt runs plain decoding and each configuration back to back, in an order that rotates with the prompt, so a
noisy neighbour slows them alike; each speculative answer must equal the plain one (greedy), or the script stops. With
`--temperature` the answers are samples and differ from plain decoding's by design (the distribution is what
tests/engine/test_sampling.py checks); every method of a prompt gets the same seed.
Per configuration it prints the mean acceptance length (tokens per step, over all prompts), the speedup as the
median and quartiles of the per-prompt ratios of decode rates to plain decoding's in the same round, and the median
draft and verify milliseconds per step. Then what verifying N rows at once costs the target against one row (the
forward alone, after a 200-token context, median of 15): what a tree of N nodes pays per step before any drafting.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playground.backends import shared_backend  # noqa: E402
from playground.engine import GenerationConfig, TreeShape, emitted_ids, summarize  # noqa: E402
from playground.machine import machine_info  # noqa: E402
from playground.presets import get_preset  # noqa: E402
from playground.prompt_sets import load_prompt_set  # noqa: E402


@dataclass(frozen=True)
class Method:
    label: str
    drafter: str  # "none" for plain decoding
    k: int = 4  # chains; for trees the depth (per-depth acceptance is by depth)
    tree: TreeShape | None = None


METHODS = [
    Method("plain", "none"),
    Method("chain k=4, EAGLE-3", "eagle3"),
    Method("tree n16 d5 k4, EAGLE-3", "eagle3", 5, TreeShape(depth=5, topk=4, nodes=16)),
    Method("chain k=4, EAGLE-3.1", "eagle3.1"),
    Method("tree n16 d5 k4, EAGLE-3.1", "eagle3.1", 5, TreeShape(depth=5, topk=4, nodes=16)),
    Method("tree n32 d6 k4, EAGLE-3.1", "eagle3.1", 6, TreeShape(depth=6, topk=4, nodes=32)),
]
VERIFY_ROWS = [1, 5, 9, 17, 33]


def run(backend, method: Method, prompt_ids: list[int], max_new_tokens: int, temperature: float = 0.0,
        seed: int | None = None) -> list:
    """The method's step events, through the local backend (plain, chain or tree by the configuration)."""
    return list(backend.stream(prompt_ids, method.drafter, GenerationConfig(
        max_new_tokens, k=method.k, tree=method.tree, temperature=temperature, seed=seed)))


def verify_costs(target, repeats: int = 15) -> dict[int, float]:
    """Median ms of one target forward of N new rows after a 200-token context, by N."""
    context, costs = list(range(1000, 1200)), {}
    for rows in VERIFY_ROWS:
        target.expect_rows(rows)
        cache = target.new_cache()
        target.forward(context, cache, last_only=True)
        times = []
        for _ in range(repeats + 2):  # two warm-ups
            start = target.clock()
            target.forward(list(range(2000, 2000 + rows)), cache)
            times.append((target.clock() - start) * 1000)
            cache.rollback(len(context))
        costs[rows] = statistics.median(times[2:])
    return costs


def cpu_flags() -> list[str]:
    """The vector extensions that decide CPU kernel speed (lscpu's flags)."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return sorted(f for f in flags if f in {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", default="held-out", help="a built-in prompt set or a .jsonl/.parquet file")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy, every answer checked against "
                        "plain decoding's; above 0: sampled")
    parser.add_argument("--out", help="write the results here as JSON")
    args = parser.parse_args()

    backend = shared_backend(get_preset("smollm2-135m"))
    prompts = [backend.encode([{"role": "user", "content": r.turns[0]}])
               for r in load_prompt_set(args.set, limit=args.limit).records]
    for method in METHODS:  # load the drafters and warm every path up before anything is timed
        run(backend, method, prompts[0], 8)

    ratios = {m.label: [] for m in METHODS[1:]}
    events = {m.label: [] for m in METHODS}
    for round_ in range(args.rounds):
        for p, prompt_ids in enumerate(prompts):
            order = METHODS[p % len(METHODS):] + METHODS[:p % len(METHODS)]
            seed = round_ * 1000 + p
            results = {m.label: run(backend, m, prompt_ids, args.max_new_tokens, args.temperature, seed)
                       for m in order}
            plain_ids = emitted_ids(results["plain"])
            plain_rate = summarize(results["plain"], 1).decode_tokens_per_second
            for m in METHODS:
                if args.temperature == 0 and emitted_ids(results[m.label]) != plain_ids:
                    raise SystemExit(f"{m.label} differs from plain decoding on prompt {p}: not lossless")
                events[m.label] += results[m.label]
                if m.drafter != "none":
                    ratios[m.label].append(summarize(results[m.label], m.k).decode_tokens_per_second / plain_rate)
            print(f"round {round_ + 1}, prompt {p + 1}/{len(prompts)} done", file=sys.stderr, flush=True)

    rows = []
    for m in METHODS:
        steps = [e for e in events[m.label] if e.drafted]
        row = {"method": m.label,
               "mean_acceptance_length": summarize(events[m.label], m.k).mean_acceptance_length,
               "verified_rows": (m.tree.max_nodes + 1) if m.tree else (1 if m.drafter == "none" else m.k + 1),
               "draft_ms": statistics.median(e.draft_ms for e in steps) if steps else None,
               "verify_ms": statistics.median(e.verify_ms for e in steps) if steps else None}
        if m.drafter != "none":
            q1, q2, q3 = quartiles(ratios[m.label])
            row.update(speedup_median=q2, speedup_q1=q1, speedup_q3=q3, pairs=len(ratios[m.label]))
        rows.append(row)
    costs = verify_costs(backend.target)
    result = {"machine": machine_info(backend.target.device.type), "cpu_flags": cpu_flags(), "prompt_set": args.set,
              "prompts": len(prompts), "rounds": args.rounds, "max_new_tokens": args.max_new_tokens,
              "temperature": args.temperature,
              "date": time.strftime("%Y-%m-%d"), "methods": rows,
              "verify_ms_by_rows": {str(n): ms for n, ms in costs.items()}}

    print("| configuration | mean acceptance length | rows verified | speedup vs plain: median (quartiles) | "
          "draft ms | verify ms |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        speed = ("1.00" if "speedup_median" not in row else
                 f"{row['speedup_median']:.2f} ({row['speedup_q1']:.2f}-{row['speedup_q3']:.2f})")
        draft = "-" if row["draft_ms"] is None else f"{row['draft_ms']:.0f}"
        verify = "-" if row["verify_ms"] is None else f"{row['verify_ms']:.0f}"
        print(f"| {row['method']} | {row['mean_acceptance_length'] or 1:.2f} | {row['verified_rows']} | {speed} | "
              f"{draft} | {verify} |")
    print("\n| rows verified | " + " | ".join(str(n) for n in costs) + " |")
    print("|---|" + "---|" * len(costs))
    print("| forward ms | " + " | ".join(f"{ms:.1f}" for ms in costs.values()) + " |")
    print("| vs one row | " + " | ".join(f"{ms / costs[1]:.2f}" for ms in costs.values()) + " |")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
