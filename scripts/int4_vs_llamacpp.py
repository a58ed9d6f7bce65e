"""The default target's Q4_1 file decoded by llama.cpp (llama-cpp-python, optional) and by our engine on its int4
path, plain and speculative, alternating on the same prompts in one process, per kind of prompt: fresh writing
(where only a trained drafter has anything to propose) and editing given text (where the answer copies the prompt,
and prompt lookup and suffix decoding propose long runs of it).

    PYTHONPATH=. python scripts/int4_vs_llamacpp.py                 # writes assets/bench/int4/<CPU kind>.json
    PYTHONPATH=. python scripts/int4_vs_llamacpp.py --neighbours 1  # beside a busy loop: <CPU kind>-beside-1.json

The README's "Faster than what?" table is rendered from those files (`python scripts/render_readme.py`).

Greedy, the GGUF's chat template applied by our tokenizer and the same token ids given to both engines, prefill
included and load excluded, llama.cpp on every core with its prefix reuse off (`playground/bench/llamacpp.py`); our
engine chooses its own threads and, beside int4 layers, its drafter's precision. llama.cpp's answers need not equal
ours token for token (another engine's arithmetic); every one of ours must equal our int4 plain decoding's."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace

from playground.bench.against_llamacpp import INT4_DIR
from playground.bench.llamacpp import LlamaCppPeer, encoded_prompts, unavailable_reason, user_turns
from playground.bench.neighbours import busy_neighbours
from playground.engine import (
    GenerationConfig,
    Target,
    load_drafter,
    plain_generate,
    speculative_generate,
    weightless_generate,
)
from playground.machine import cpu_kind, machine_info
from playground.smollm2 import HUB_ID, local_folder

CODE = '''def summarise(values):
    total = 0
    count = 0
    smallest = None
    largest = None
    for value in values:
        total += value
        count += 1
        if smallest is None or value < smallest:
            smallest = value
        if largest is None or value > largest:
            largest = value
    mean = total / count if count else 0.0
    return {"total": total, "count": count, "mean": mean, "smallest": smallest, "largest": largest}'''
PROMPTS = {
    "fresh": ["Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring.",
              "Write a JavaScript function that debounces another function.",
              "Explain what a hash map is to a beginner, in one paragraph."],
    "editing": [f"Rename the variable `count` to `n` in this function and return the whole function:\n\n{CODE}",
                f"Add type hints to this function and return the whole function, otherwise unchanged:\n\n{CODE}",
                "Fix the spelling in this text and return it otherwise unchanged:\n\nThe quick brown fox jumpd over "
                "the lazy dog. The dog did not notise, becuase it was asleep in the sun. Later the fox came back and "
                "jumpd over the dog again, and this time the dog woke up and chased the fox across the feild."],
}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", help="the result file (default: assets/bench/int4/<this CPU's kind>.json)")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--beside", default="nothing else known", help="what else ran on the machine, for the record")
    p.add_argument("--neighbours", type=int, default=0, help="busy-loop processes to run beside the timed passes")
    args = p.parse_args()
    if unavailable_reason():
        raise SystemExit(unavailable_reason())
    peer = LlamaCppPeer()
    target = Target.load(local_folder(HUB_ID), weights="int4")
    drafter, _ = load_drafter("assets/models/smollm2-135m/eagle3.1")
    aux = target.attach(drafter)
    drafter.prepare_for_decoding(int8=True)  # as the local backend prepares it beside int4 layers
    cfg = GenerationConfig(max_new_tokens=args.tokens, instrument=False)

    def ours(method: str, k: int, ids: list[int]):
        c = replace(cfg, k=k)
        if method == "none":
            return plain_generate(target, ids, c)
        if method == "eagle3.1":
            return speculative_generate(target, drafter, aux, ids, c)
        return weightless_generate(target, method, ids, c)

    runs = {"llama.cpp plain": ("llama.cpp", "none", 1), "llama.cpp prompt lookup k=4": ("llama.cpp", "ngram", 4),
            "ours int4 plain": ("ours", "none", 1),
            **{f"ours int4 EAGLE-3.1 k={k}": ("ours", "eagle3.1", k) for k in (1, 2, 3, 4)},
            "ours int4 prompt lookup k=4": ("ours", "ngram", 4),
            "ours int4 suffix k=4": ("ours", "suffix", 4)}
    rates: dict[tuple[str, str], list[float]] = {}
    per_forward: dict[tuple[str, str], list[float]] = {}
    same, loadavg = [], [open("/proc/loadavg").read().split()[:4]]

    def timed(name: str, kind: str, ids: list[int]) -> list[int]:
        engine, method, k = runs[name]
        start = time.perf_counter()
        if engine == "llama.cpp":
            out, _, _ = peer.run(ids, method, k, args.tokens)
            forwards = None
        else:
            out, forwards = [], 0
            for event in ours(method, k, ids):
                out += event.emitted
                forwards += 1
        rates.setdefault((name, kind), []).append(len(out) / (time.perf_counter() - start))
        if forwards:
            per_forward.setdefault((name, kind), []).append(len(out) / forwards)
        return out

    encoded = {kind: encoded_prompts(user_turns(qs)) for kind, qs in PROMPTS.items()}
    for name in runs:  # untimed warm-up of every path
        timed(name, "warm", encoded["fresh"][0])
    with busy_neighbours(args.neighbours):
        passes(args.passes, encoded, runs, timed, same)
    loadavg.append(open("/proc/loadavg").read().split()[:4])
    write(args, table_of(rates, per_forward), target, drafter, peer, same, loadavg)


def passes(count: int, encoded: dict, runs: dict, timed, same: list) -> None:
    """Every run on every prompt, `count` times, alternating; each answer of ours checked against our plain one."""
    for _ in range(count):
        for kind, prompts in encoded.items():
            for ids in prompts:
                plain = None
                for name in runs:
                    out = timed(name, kind, ids)
                    if name == "ours int4 plain":
                        plain = out
                    elif name.startswith("ours"):
                        same.append(out == plain)


def table_of(rates: dict, per_forward: dict) -> dict:
    table = {}
    for kind in PROMPTS:
        base = statistics.median(rates[("llama.cpp plain", kind)])
        table[kind] = {name: {"median_tok_s": round(statistics.median(r), 1),
                              "range": [round(min(r), 1), round(max(r), 1)],
                              "vs_llamacpp_plain": round(statistics.median(r) / base, 2),
                              **({"tokens_per_forward": round(statistics.median(per_forward[(name, kind)]), 2)}
                                 if (name, kind) in per_forward else {})}
                       for (name, k), r in rates.items() if k == kind}
    return table


def write(args, table: dict, target, drafter, peer, same: list, loadavg: list) -> None:
    result = {"machine": machine_info("cpu"), "date": time.strftime("%Y-%m-%d"), "tokens": args.tokens,
              "passes": args.passes, "prompts": PROMPTS, "neighbours": args.neighbours,
              "ours_speculative_equals_ours_plain": all(same),
              "int4_weights_mb": round(target.fast.resident_bytes() / 1e6, 1), "kernels": target.fast.kernels,
              "drafter_weights": drafter.weights, "llama_cpp": peer.info(),
              "threads": target.threads.describe() if target.threads is not None else None,
              "beside": args.beside, "loadavg_before_after": loadavg, "rows": table}
    print(json.dumps(result, indent=1))
    beside = f"-beside-{args.neighbours}" if args.neighbours else ""
    with open(args.out or INT4_DIR / f"{cpu_kind()}{beside}.json", "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
