"""llama.cpp's plain decoding of the default target's GGUF on 1 and on every thread, idle and beside busy loops:
what its thread count costs on a shared CPU (docs/engine.md).

    PYTHONPATH=. python scripts/llamacpp_threads.py --neighbours 0,1   # assets/bench/int4/threads/<CPU kind>.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from playground.bench.against_llamacpp import INT4_DIR
from playground.bench.llamacpp import LlamaCppPeer, encoded_prompts, user_turns
from playground.bench.neighbours import busy_neighbours
from playground.machine import cpu_kind, machine_info

PROMPTS = ["Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring.",
           "Write a JavaScript function that debounces another function.",
           "Explain what a hash map is to a beginner, in one paragraph."]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--neighbours", default="0,1")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--out", help="default: assets/bench/int4/threads/<this CPU's kind>.json")
    args = p.parse_args()
    prompts = encoded_prompts(user_turns(PROMPTS))
    peers = {n: LlamaCppPeer(threads=n) for n in sorted({1, os.cpu_count() or 1})}
    for peer in peers.values():
        peer.run(prompts[0], "none", 1, 8)  # load and warm up
    result = {}
    for count in (int(n) for n in args.neighbours.split(",")):
        with busy_neighbours(count):
            rates: dict[int, list[float]] = {n: [] for n in peers}
            for _ in range(args.passes):
                for ids in prompts:
                    for n, peer in peers.items():
                        out, seconds, _ = peer.run(ids, "none", 1, args.tokens)
                        rates[n].append(len(out) / seconds)
        result[f"beside {count} busy"] = {f"{n} threads": {"median_tok_s": round(statistics.median(r), 1),
                                                           "range": [round(min(r), 1), round(max(r), 1)]}
                                          for n, r in rates.items()}
    result = {"machine": machine_info("cpu"), "date": time.strftime("%Y-%m-%d"), "tokens": args.tokens,
              "passes": args.passes, "prompts": PROMPTS, "llama_cpp": peers[1].info(), "rates": result}
    print(json.dumps(result, indent=1))
    out = Path(args.out or INT4_DIR / "threads" / f"{cpu_kind()}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
