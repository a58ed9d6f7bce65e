"""Replay and its predicted speedups against live runs, on one machine, same prompts, same process.

    python scripts/replay_check.py --prompt-set held-out --limit 5 --out assets/bench/replay/check.json
    python scripts/replay_check.py --drafters eagle3.1 --k 1,2,4,6,8 --auto --out assets/bench/replay/auto.json

For each prompt: one live greedy EAGLE-3.1 k=4 answer is replayed (engine/replay.py) under every drafter at each
`--k`, with this machine's cost profile (engine/costs.py) predicting each one's speedup; then every configuration runs
live, and plain decoding too, `--repeats` times in alternating order, each timed by its decode rate (the prefill
left out, as the app's live speedup leaves it out). Reported, pooled over the prompts: acceptance length replayed
against live (total accepted tokens / drafting steps), and the predicted speedup against the measured one (the
median of the per-prompt ratios of medians), with the error of each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from playground.backends import shared_backend  # noqa: E402
from playground.bench.neighbours import busy_neighbours  # noqa: E402
from playground.bench.replay import replay_answer  # noqa: E402
from playground.drafting import PLAIN  # noqa: E402
from playground.engine import GenerationConfig, summarize  # noqa: E402
from playground.engine.choice import choose_k, shipped_acceptance  # noqa: E402
from playground.machine import machine_info  # noqa: E402
from playground.presets import get_preset  # noqa: E402
from playground.prompt_sets import load_prompt_set  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--prompt-set", default="held-out")
    parser.add_argument("--limit", type=int, default=5)
    parser.add_argument("--k", default="2,4,6")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--neighbours", type=int, default=0, help="busy loops beside the live runs and the profile")
    parser.add_argument("--drafters", help="comma list (default: the preset's)")
    parser.add_argument("--auto", action="store_true", help="also run --k auto's choice (generate's rule: the "
                        "drafter's evaluation.json and this profile) and set it against the best fixed k")
    parser.add_argument("--out")
    args = parser.parse_args()
    ks = tuple(int(k) for k in args.k.split(","))
    backend = shared_backend(get_preset(args.preset))
    backend.preload()
    drafters = args.drafters.split(",") if args.drafters else list(backend.preset.drafters)
    prompts = [r.turns[0] for r in load_prompt_set(args.prompt_set, args.limit).records]
    per_prompt = []
    with busy_neighbours(args.neighbours):
        for text in prompts:
            ids = backend.encode([{"role": "user", "content": text}])
            cfg = lambda k: GenerationConfig(max_new_tokens=args.max_new_tokens, k=k, instrument=False)  # noqa: E731
            answer = [t for e in backend.stream(ids, "eagle3.1", cfg(4)) for t in e.emitted]
            replayed, profiles = replay_answer(backend, ids, answer, drafters, ks, (), args.max_new_tokens)
            configs = [(PLAIN, 0)] + [(d, k) for d in drafters for k in ks]
            autos = {}
            if args.auto:
                for d in drafters:
                    folder = Path(backend.preset.drafters[d]).parent
                    choice = choose_k(profiles[d], shipped_acceptance(folder, d), "evaluation.json")
                    autos[d] = choice.k
                    if choice.k is not None and (d, choice.k) not in configs:
                        configs.append((d, choice.k))
            rates: dict[tuple, list[float]] = {c: [] for c in configs}
            live: dict[tuple, dict] = {}
            for repeat in range(args.repeats):
                for drafter, k in (configs if repeat % 2 == 0 else configs[::-1]):
                    events = list(backend.stream(ids, drafter, cfg(max(k, 1))))
                    metrics = summarize(events, max(k, 1))
                    rates[(drafter, k)].append(metrics.decode_tokens_per_second)
                    live[(drafter, k)] = {"accepted": metrics.accepted_tokens, "steps": metrics.drafting_steps,
                                          "tokens": [t for e in events for t in e.emitted]}
            plain = statistics.median(rates[(PLAIN, 0)])
            rows = []
            for r in replayed:
                got = live[(r.drafter, r.k)]
                rows.append({"drafter": r.drafter, "k": r.k, "replay_accepted": r.accepted_tokens,
                             "replay_steps": r.drafting_steps, "live_accepted": got["accepted"],
                             "live_steps": got["steps"], "same_text": got["tokens"] == answer,
                             "predicted_speedup": r.predicted_speedup, "predicted_range": r.predicted_range,
                             "measured_speedup": statistics.median(rates[(r.drafter, r.k)]) / plain,
                             "measured_rates": rates[(r.drafter, r.k)]})
            auto_rows = {}
            for d, k in autos.items():
                fixed = {kk: statistics.median(rates[(d, kk)]) / plain for kk in ks}
                best = max(fixed, key=fixed.__getitem__)
                chosen = statistics.median(rates[(d, k)]) / plain if k is not None else 1.0
                auto_rows[d] = {"auto_k": k, "auto_speedup": chosen, "best_fixed_k": best,
                                "best_fixed_speedup": fixed[best], "share_of_best": chosen / fixed[best]}
            per_prompt.append({"prompt": text[:80], "answer_tokens": len(answer), "plain_rates": rates[(PLAIN, 0)],
                               "rows": rows, "auto": auto_rows})
            print(f"{text[:50]!r}: {len(answer)} tokens", flush=True)
    pooled = []
    for drafter in drafters:
        for k in ks:
            rows = [r for p in per_prompt for r in p["rows"] if r["drafter"] == drafter and r["k"] == k]
            replay_al = 1 + sum(r["replay_accepted"] for r in rows) / sum(r["replay_steps"] for r in rows)
            live_al = 1 + sum(r["live_accepted"] for r in rows) / sum(r["live_steps"] for r in rows)
            ratios = [r["predicted_speedup"] / r["measured_speedup"] for r in rows]
            pooled.append({"drafter": drafter, "k": k, "replay_acceptance_length": replay_al,
                           "live_acceptance_length": live_al, "acceptance_error": replay_al / live_al - 1,
                           "predicted_speedup": statistics.median(r["predicted_speedup"] for r in rows),
                           "measured_speedup": statistics.median(r["measured_speedup"] for r in rows),
                           "prediction_error_median": statistics.median(ratios) - 1,
                           "prediction_error_range": [min(ratios) - 1, max(ratios) - 1]})
            p = pooled[-1]
            print(f"{drafter:<9} k={k}: acceptance length replay {replay_al:.3f} live {live_al:.3f} "
                  f"({p['acceptance_error']:+.1%}); speedup predicted {p['predicted_speedup']:.2f}x measured "
                  f"{p['measured_speedup']:.2f}x (error median {p['prediction_error_median']:+.0%}, "
                  f"{p['prediction_error_range'][0]:+.0%}..{p['prediction_error_range'][1]:+.0%})")
    auto_summary = {}
    for d in drafters if args.auto else []:
        shares = [p["auto"][d]["share_of_best"] for p in per_prompt]
        auto_summary[d] = {"chosen": [p["auto"][d]["auto_k"] for p in per_prompt],
                           "best_fixed": [p["auto"][d]["best_fixed_k"] for p in per_prompt],
                           "share_of_best_median": statistics.median(shares), "share_of_best_range": [min(shares),
                                                                                                      max(shares)]}
        a = auto_summary[d]
        print(f"{d} --k auto chose {a['chosen']}, best fixed {a['best_fixed']}: {a['share_of_best_median']:.0%} of the "
              f"best fixed k's speedup (median; {a['share_of_best_range'][0]:.0%}..{a['share_of_best_range'][1]:.0%})")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"machine": machine_info("cpu"), "args": vars(args),
                                              "pooled": pooled, "auto": auto_summary,
                                              "prompts": per_prompt}, indent=1))


if __name__ == "__main__":
    main()
