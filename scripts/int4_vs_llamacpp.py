"""Plain decoding of the default target's Q4_1 file: llama.cpp (llama-cpp-python, optional) against our engine with
int4 weights and with float32, and our EAGLE-3.1 on int4, alternating on the same prompts in one process.

    PYTHONPATH=. python scripts/int4_vs_llamacpp.py --out assets/bench/int4/vs-llamacpp.json

Greedy, the GGUF's chat template, prefill included and load excluded, 2 threads for llama.cpp (our engine chooses
its own). llama.cpp's answers need not equal ours token for token (another engine's arithmetic)."""

from __future__ import annotations

import argparse
import json
import statistics
import time

from playground.engine import GenerationConfig, Target, load_drafter, plain_generate, speculative_generate
from playground.machine import machine_info
from playground.smollm2 import HUB_ID, available_gguf, local_folder

PROMPTS = ["Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring.",
           "Write a JavaScript function that debounces another function.",
           "Explain what a hash map is to a beginner, in one paragraph."]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out")
    p.add_argument("--tokens", type=int, default=96)
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--beside", default="nothing else known", help="what else ran on the machine, for the record")
    args = p.parse_args()
    from llama_cpp import Llama

    llm = Llama(model_path=str(available_gguf()), n_ctx=2048, n_threads=2, verbose=False)
    folder = local_folder(HUB_ID)
    targets = {w: Target.load(folder, weights=w) for w in ("int4", "float32")}
    drafters = {}
    for w, target in targets.items():
        drafter, _ = load_drafter("assets/models/smollm2-135m/eagle3.1")
        drafters[w] = (drafter, target.attach(drafter))
        drafter.prepare_for_decoding()
    rates: dict[str, list[float]] = {}
    accepted: dict[str, list[float]] = {}
    loadavg = [open("/proc/loadavg").read().split()[:4]]
    same = []

    def ours(name, target, prompt, k=None):
        ids = target.encode_chat([{"role": "user", "content": prompt}])
        cfg = GenerationConfig(max_new_tokens=args.tokens, k=k or 1)
        run = (plain_generate(target, ids, cfg) if k is None else
               speculative_generate(target, *drafters[target.weights], ids, cfg))
        start, out, steps = time.perf_counter(), [], 0
        for event in run:
            out += event.emitted
            steps += event.step > 0
        rates.setdefault(name, []).append(len(out) / (time.perf_counter() - start))
        if k is not None:  # tokens per verification after the prefill's first
            accepted.setdefault(name, []).append((len(out) - 1) / max(steps, 1))
        return out

    for prompt in PROMPTS:  # untimed warm-up of every path
        llm.create_chat_completion([{"role": "user", "content": prompt}], max_tokens=4, temperature=0)
    for w in targets:
        ours("warm", targets[w], PROMPTS[0]), ours("warm", targets[w], PROMPTS[0], k=3)
    for _ in range(args.passes):
        for prompt in PROMPTS:
            start = time.perf_counter()
            out = llm.create_chat_completion([{"role": "user", "content": prompt}], max_tokens=args.tokens,
                                             temperature=0)
            rates.setdefault("llama.cpp plain", []).append(out["usage"]["completion_tokens"]
                                                           / (time.perf_counter() - start))
            plain = ours("ours int4 plain", targets["int4"], prompt)
            for k in (2, 3, 4):
                same.append(ours(f"ours int4 EAGLE-3.1 k={k}", targets["int4"], prompt, k=k) == plain)
            ours("ours float32 plain", targets["float32"], prompt)
            ours("ours float32 EAGLE-3.1 k=4", targets["float32"], prompt, k=4)
    rates.pop("warm")
    loadavg.append(open("/proc/loadavg").read().split()[:4])
    base = statistics.median(rates["llama.cpp plain"])
    rows = {name: {"median_tok_s": round(statistics.median(r), 1), "range": [round(min(r), 1), round(max(r), 1)],
                   "vs_llamacpp_plain": round(statistics.median(r) / base, 2),
                   **({"tokens_per_step": [round(a, 2) for a in accepted[name][-len(PROMPTS):]]}
                      if name in accepted else {})} for name, r in rates.items()}
    result = {"machine": machine_info("cpu"), "tokens": args.tokens,
              "passes": args.passes, "prompts": PROMPTS, "int4_speculative_equals_int4_plain": all(same),
              "int4_weights_mb": round(targets["int4"].fast.resident_bytes() / 1e6, 1),
              "float32_weights_mb": round(targets["float32"].fast.resident_bytes() / 1e6, 1),
              "kernels": {w: t.fast.kernels for w, t in targets.items()},
              "threads": {w: t.threads.describe() for w, t in targets.items() if t.threads is not None},
              "beside": args.beside, "loadavg_before_after": loadavg, "rows": rows}
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
