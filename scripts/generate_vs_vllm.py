"""Our engine's `generate --json` against vLLM's own offline `LLM`, one request at a time, on the same prompts.

    python scripts/generate_vs_vllm.py                       # 16 MT-Bench first turns, plain and EAGLE-3.1 k=4
    python scripts/generate_vs_vllm.py --limit 8 --dtype bfloat16 --methods none,eagle3,eagle3.1

Each method runs on each engine in a process of its own, one engine at a time (so no idle engine shares the cores):
- ours: `python -m playground generate --json` once per prompt, in-process (its `metrics.tokens_per_second`:
  generated tokens / the request's wall time, prefill included), after one untimed warm-up request;
- vLLM: `vllm.LLM` built from the same engine arguments as the app's vLLM backend, `LLM.generate` timed around each
  single request, after one untimed warm-up request.
Prints per-request tokens/s (median and range) for each engine and method, the ratio ours / vLLM, and whether the
greedy token ids agree; `--out FILE` writes the rows as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def prompts(limit: int) -> list[str]:
    from playground.bench.prompts import load_prompt_set

    return [r.turns[0] for r in load_prompt_set("mt-bench", limit).records]


def run_ours(method: str, dtype: str, k: int, limit: int, max_new_tokens: int) -> list[dict]:
    from playground.__main__ import main

    def generate(prompt: str) -> dict:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["generate", "--json", "--drafter", method, "--k", str(k), "--dtype", dtype,
                         "--max-new-tokens", str(max_new_tokens), "--no-instrument", "--prompt", prompt])
        if code:
            raise SystemExit(f"generate failed with exit status {code}")
        return json.loads(out.getvalue())

    texts = prompts(limit)
    generate(texts[0])  # warm-up, untimed
    rows = []
    for text in texts:
        record = generate(text)
        rows.append({"tokens_per_second": record["metrics"]["tokens_per_second"], "token_ids": record["token_ids"],
                     "forward": record["forward"]})
    return rows


def run_vllm(method: str, dtype: str, k: int, limit: int, max_new_tokens: int) -> list[dict]:
    import dataclasses

    from transformers import AutoTokenizer

    from playground.backends.vllm_backend import CPU_ENVIRONMENT, engine_kwargs
    from playground.engine.templates import encode_chat
    from playground.presets import DEFAULT, get_preset
    from playground.smollm2 import local_folder

    for key, value in CPU_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    from vllm import LLM, SamplingParams
    from vllm.engine.arg_utils import EngineArgs

    preset = dataclasses.replace(get_preset(f"{DEFAULT}-vllm"), dtype=dtype)
    supported = {f.name for f in dataclasses.fields(EngineArgs)}
    drafter = None if method == "none" else preset.drafters[method]
    folder = str(local_folder(preset.target))
    llm = LLM(**engine_kwargs(preset, drafter, k, supported, model=folder))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens)
    encoded = [encode_chat(tokenizer, [{"role": "user", "content": t}]) for t in prompts(limit)]  # as `generate`
    llm.generate([{"prompt_token_ids": encoded[0]}], params, use_tqdm=False)  # warm-up, untimed
    rows = []
    for ids in encoded:
        start = time.perf_counter()
        output = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)[0].outputs[0]
        seconds = time.perf_counter() - start
        rows.append({"tokens_per_second": len(output.token_ids) / seconds, "token_ids": list(output.token_ids)})
    return rows


def child(args: argparse.Namespace) -> None:
    run = run_ours if args.engine == "ours" else run_vllm
    rows = run(args.method, args.dtype, args.k, args.limit, args.max_new_tokens)
    print("ROWS " + json.dumps(rows), flush=True)


def summary(rows: list[dict]) -> dict:
    speeds = [r["tokens_per_second"] for r in rows]
    return {"median": statistics.median(speeds), "min": min(speeds), "max": max(speeds)}


def parent(args: argparse.Namespace) -> None:
    results: dict[tuple[str, str], list[dict]] = {}
    for method in args.methods.split(","):
        for engine in ("ours", "vllm"):
            command = [sys.executable, __file__, "--child", "--engine", engine, "--method", method, "--dtype",
                       args.dtype, "--k", str(args.k), "--limit", str(args.limit), "--max-new-tokens",
                       str(args.max_new_tokens)]
            done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
            line = next(line for line in done.stdout.splitlines() if line.startswith("ROWS "))
            results[engine, method] = json.loads(line[5:])
            print(f"{engine:4} {method:8} {summary(results[engine, method])['median']:6.1f} tok/s (median)",
                  file=sys.stderr, flush=True)
    table = []
    print(f"| method | ours tok/s | vLLM tok/s | ours / vLLM | same ids | ({args.dtype}, {args.limit} prompts, "
          f"{args.max_new_tokens} tokens, k={args.k}) |\n|---|---|---|---|---|---|")
    for method in args.methods.split(","):
        ours, theirs = summary(results["ours", method]), summary(results["vllm", method])
        same = sum(a["token_ids"] == b["token_ids"] for a, b in zip(results["ours", method], results["vllm", method]))
        table.append({"method": method, "ours": ours, "vllm": theirs, "ratio": ours["median"] / theirs["median"],
                      "same_ids": same, "prompts": args.limit, "forward": results["ours", method][0]["forward"]})
        print(f"| {method} | {ours['median']:.1f} ({ours['min']:.1f}–{ours['max']:.1f}) | {theirs['median']:.1f} "
              f"({theirs['min']:.1f}–{theirs['max']:.1f}) | {table[-1]['ratio']:.2f}× | {same}/{args.limit} | |")
    if args.out:
        from playground.bench.rows import machine_info

        Path(args.out).write_text(json.dumps({"rows": table, "dtype": args.dtype, "k": args.k,
                                              "max_new_tokens": args.max_new_tokens, "machine": machine_info("cpu")},
                                             indent=1))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="none,eagle3.1")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--limit", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--out")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--engine", choices=["ours", "vllm"], help=argparse.SUPPRESS)
    parser.add_argument("--method", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    child(arguments) if arguments.child else parent(arguments)
