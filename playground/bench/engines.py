"""``python -m playground bench-engines``: our engine, vLLM and llama.cpp on the same pair, at several concurrency
levels.

For each engine (local, vllm), method (plain, EAGLE-3, EAGLE-3.1; prompt lookup and suffix decoding where the engine
runs them: `--methods`) and concurrency C, the same prompts run with C
requests in flight at a time (a new one starts when one ends). Metric definitions:

- per-user tokens/s = a request's generated tokens / its wall time from submission to its last token (prefill and
  waiting for a batch slot included); the row gives the median over requests, as SPEED-Bench's per-user throughput;
- throughput = all generated tokens / the wall time of the whole level;
- speedup = per-user tokens/s / the same engine's plain decoding at the same C, in the same run;
- acceptance length and per-position acceptance from the streamed steps (vLLM's definitions, `engine.trace`);
- `identical_to_plain`: greedy token ids equal to the same engine's plain decoding on every prompt;
  `identical_to_local`: equal to the local engine's, same method;
- instrumented rows (our engine, each EAGLE method, at the lowest C; a weightless method has nothing to
  instrument): the same requests with attention, hidden-state RMS and draft probabilities recorded, as the app
  records them; `instrumentation_cost` = 1 - their per-user tokens/s / the uninstrumented row's;
- `against_llamacpp` = per-user tokens/s / llama.cpp's plain decoding of the default target's own GGUF file at the
  same C and condition (`bench/llamacpp.py`: optional, skipped in one line where not installed; one request at a
  time, plain and prompt lookup): the strongest plain baseline on a CPU, where `--weights int4` gives our engine the
  same 4-bit weights;
- `--neighbours 0,1,2`: every level again beside that many busy-loop processes (`bench/neighbours.py`), a row per
  condition; speedups compare rows of the same condition, and `kept_of_idle` is a row's per-user tokens/s over the
  same engine, method and C with no neighbour: how much of its idle speed it keeps on a shared machine.

The local engine serves concurrent requests from threads, each a batch of one, sharing the CPU's cores; vLLM
batches them. Each engine runs alone: the local engine first, then each vLLM engine, shut down before the next
starts, so that no idle process shares the cores with a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from playground.bench.landing_run import write_vllm_landing
from playground.bench.neighbours import busy_neighbours, other_work, parse_neighbours
from playground.drafting import METHODS, PLAIN, method_of, offered_methods
from playground.engine import GenerationConfig, SpecCounters, emitted_ids
from playground.flags import UsageError
from playground.machine import machine_info
from playground.presets import DEFAULT, DRAFTER_LABELS, REPO_ROOT, get_preset
from playground.prompt_sets import load_prompt_set

ENGINES = ("local", "vllm", "llamacpp")
PRESETS = {"local": DEFAULT, "vllm": f"{DEFAULT}-vllm"}  # llama.cpp reads the default target's GGUF
DEFAULT_METHODS = (PLAIN, *(name for name, method in METHODS.items() if method.checkpoint))  # --methods' default
CONCURRENCY = (1, 4, 16)


@dataclass(frozen=True)
class EngineBenchConfig:
    prompt_set: str = "mt-bench"
    prompts: int = 16
    max_new_tokens: int = 128
    k: int = 4
    concurrency: tuple[int, ...] = CONCURRENCY
    engines: tuple[str, ...] = ENGINES
    methods: tuple[str, ...] = DEFAULT_METHODS  # and methods needing no checkpoint, on the engines running them
    dtype: str = "float32"  # both engines run in it
    weights: str = "float32"  # what our engine's CPU fast path multiplies (float32, int4, auto)
    neighbours: tuple[int, ...] = (0,)  # busy-loop processes beside each level, a condition each


@dataclass
class Request:
    token_ids: list[int]
    seconds: float
    counters: SpecCounters


@dataclass
class EngineRow:
    engine: str  # local | vllm | llamacpp
    drafter: str  # a method of the registry (drafting.METHODS): none, a preset drafter, a weightless method
    label: str
    k: int | None
    concurrency: int
    prompts: int
    generated_tokens: int
    per_user_tokens_per_second: float  # median over requests
    per_user_tokens_per_second_range: tuple[float, float]  # slowest and fastest request
    throughput_tokens_per_second: float
    seconds: float
    speedup: float | None = None  # per-user, over the same engine's plain decoding at the same concurrency
    mean_acceptance_length: float | None = None
    per_position_acceptance: list[float] | None = None
    identical_to_plain: bool | None = None
    identical_to_local: bool | None = None
    instrumented: bool = False  # drift, RMS and draft probabilities recorded (our engine only)
    instrumentation_cost: float | None = None  # 1 - tokens/s instrumented / uninstrumented, same C
    neighbours: int = 0  # busy-loop processes that ran beside the level
    kept_of_idle: float | None = None  # per-user tokens/s / the same row's with no neighbour
    against_llamacpp: float | None = None  # per-user tokens/s / llama.cpp's plain decoding at the same C
    token_ids: list[list[int]] = field(default_factory=list, repr=False)  # per prompt; not written out


def run_level(stream: Callable[[list[int]], Request], prompts: list[list[int]],
              concurrency: int) -> tuple[list[Request], float]:
    """Every prompt through `stream`, `concurrency` at a time; the requests in prompt order and the level's seconds."""
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        requests = list(pool.map(stream, prompts))
    return requests, time.perf_counter() - started


def request_runner(backend, drafter: str, cfg: GenerationConfig) -> Callable[[list[int]], Request]:
    def run(prompt_ids: list[int]) -> Request:
        started = time.perf_counter()
        events = list(backend.stream(prompt_ids, drafter, cfg))
        seconds = time.perf_counter() - started
        return Request(emitted_ids(events), seconds,
                       SpecCounters.from_events(events, 0 if drafter == PLAIN else cfg.k))
    return run


def make_row(engine: str, drafter: str, k: int, requests: list[Request], seconds: float, concurrency: int,
             instrumented: bool = False, neighbours: int = 0) -> EngineRow:
    rates = [len(r.token_ids) / r.seconds for r in requests]
    counters = sum((r.counters for r in requests), SpecCounters())
    tokens = sum(len(r.token_ids) for r in requests)
    label = DRAFTER_LABELS.get(drafter, drafter) if drafter != PLAIN else "plain decoding"
    return EngineRow(engine, drafter, label, None if drafter == PLAIN else k, concurrency, len(requests), tokens,
                     statistics.median(rates), (min(rates), max(rates)), tokens / seconds, seconds,
                     mean_acceptance_length=counters.mean_acceptance_length,
                     per_position_acceptance=counters.per_position_acceptance, instrumented=instrumented,
                     neighbours=neighbours, token_ids=[r.token_ids for r in requests])


def compare_rows(rows: list[EngineRow]) -> None:
    """Fill speedups, token identity and instrumentation costs from the other rows of the same run."""
    by = {(r.engine, r.drafter, r.concurrency, r.neighbours): r for r in rows if not r.instrumented}
    for row in rows:
        plain = by.get((row.engine, PLAIN, row.concurrency, row.neighbours))
        if plain is not None:
            row.speedup = row.per_user_tokens_per_second / plain.per_user_tokens_per_second
            row.identical_to_plain = row.token_ids == plain.token_ids
        idle = by.get((row.engine, row.drafter, row.concurrency, 0))
        if idle is not None and row.neighbours and not row.instrumented:
            row.kept_of_idle = row.per_user_tokens_per_second / idle.per_user_tokens_per_second
        local = by.get(("local", row.drafter, row.concurrency, row.neighbours))
        if local is not None and row.engine != "local":
            row.identical_to_local = row.token_ids == local.token_ids
        peer = by.get(("llamacpp", PLAIN, row.concurrency, row.neighbours))
        if peer is not None and not row.instrumented:
            row.against_llamacpp = row.per_user_tokens_per_second / peer.per_user_tokens_per_second
        if row.instrumented and local is not None:
            row.instrumentation_cost = 1 - row.per_user_tokens_per_second / local.per_user_tokens_per_second


def run_engine_bench(config: EngineBenchConfig, log: Callable[[str], None] = print) -> dict:
    from playground.backends import open_backend

    records = load_prompt_set(config.prompt_set, config.prompts).records
    cfg = GenerationConfig(max_new_tokens=config.max_new_tokens, k=config.k, instrument=False)
    rows: list[EngineRow] = []
    started, clock = time.strftime("%Y-%m-%d %H:%M:%S"), time.perf_counter()
    engines_info = {}
    for engine in [e for e in config.engines if e != "llamacpp"]:
        backend = open_backend(replace(get_preset(PRESETS[engine]), dtype=config.dtype,
                                       **({"weights": config.weights} if engine == "local" else {})))
        prompts = [backend.encode(r.messages([])) for r in records]
        for drafter in config.methods:
            method = method_of(drafter)
            if method is not None and (problem := method.engine_problem(engine)):
                log(f"{engine:5} {drafter:8} skipped: {problem}")  # suffix decoding on vLLM without arctic-inference
                continue
            run = request_runner(backend, drafter, cfg)
            run(prompts[0])  # start (vLLM: an engine of its own) and warm up this path, untimed
            levels = [(c, False, n) for n in config.neighbours for c in config.concurrency]
            if engine == "local" and (method is None or method.features):  # the app's drift views' cost, C = lowest
                levels.insert(1, (min(config.concurrency), True, config.neighbours[0]))
            for concurrency, instrumented, neighbours in levels:
                level_run = request_runner(backend, drafter, replace(cfg, instrument=True)) if instrumented else run
                with busy_neighbours(neighbours):
                    requests, seconds = run_level(level_run, prompts, concurrency)
                rows.append(make_row(engine, drafter, config.k, requests, seconds, concurrency, instrumented,
                                     neighbours))
                log(f"{engine:5} {drafter:8} C={concurrency:<2}{' instrumented' if instrumented else ''}"
                    f"{f' beside {neighbours} busy' if neighbours else ''} "
                    f"{rows[-1].per_user_tokens_per_second:6.1f} tok/s per user, "
                    f"{rows[-1].throughput_tokens_per_second:6.1f} in all ({seconds:.0f} s)")
            if hasattr(backend, "shutdown"):
                backend.shutdown()  # an idle engine-core process would share the cores with the next measurement
        engines_info[engine] = engine_info(engine, backend)
    if "llamacpp" in config.engines:
        rows += llamacpp_rows(config, records, log, engines_info)
    compare_rows(rows)
    machine = {**machine_info("cpu"), "engines": engines_info}
    return {"rows": [{k: v for k, v in asdict(r).items() if k != "token_ids"} for r in rows],
            "config": asdict(config), "machine": machine, "started": started,
            "seconds": time.perf_counter() - clock}


def llamacpp_rows(config: EngineBenchConfig, records: list, log: Callable[[str], None], info: dict) -> list[EngineRow]:
    """llama.cpp's rows: its methods at C = 1 (one `Llama` serves one sequence), on our tokenizer's ids."""
    from playground.bench.llamacpp import METHODS as PEER_METHODS
    from playground.bench.llamacpp import LlamaCppPeer, encoded_prompts, unavailable_reason

    reason = unavailable_reason()
    if reason:
        log(reason)
        return []
    prompts = encoded_prompts([r.messages([]) for r in records])
    peer, rows = LlamaCppPeer(), []
    skipped = [m for m in config.methods if m not in PEER_METHODS]
    if skipped or any(c != 1 for c in config.concurrency):
        log(f"llama.cpp runs {', '.join(m for m in config.methods if m in PEER_METHODS)} at C = 1 only"
            + (f" (not {', '.join(skipped)})" if skipped else ""))
    for method in [m for m in config.methods if m in PEER_METHODS]:
        def run(ids: list[int], method: str = method) -> Request:
            return Request(*peer.run(ids, method, config.k, config.max_new_tokens))

        run(prompts[0])  # load and warm up, untimed
        for neighbours in config.neighbours:
            with busy_neighbours(neighbours):
                requests, seconds = run_level(run, prompts, 1)
            rows.append(make_row("llamacpp", method, config.k, requests, seconds, 1, neighbours=neighbours))
            log(f"llama.cpp {method:8} C=1 {f'beside {neighbours} busy ' if neighbours else ''}"
                f"{rows[-1].per_user_tokens_per_second:6.1f} tok/s per user")
    info["llamacpp"] = peer.info()
    return rows


def engine_info(engine: str, backend) -> dict:
    import torch

    if engine == "local":
        target = backend.target
        return {"torch_threads": torch.get_num_threads(), "forward": target.forward_path,
                "kernels": target.fast.kernels if target.fast else "transformers",
                "threads": target.threads.describe() if target.threads else None}
    import vllm

    from playground.backends.vllm import memory_setting

    # what sized the engines' memory, as vLLM applies it: on the CPU the KV cache (kv_cache_memory_bytes from the
    # preset or CPU_ENGINE_ARGS, unless VLLM_CPU_KVCACHE_SPACE overrides it) and what set it; on a GPU each share
    return {"vllm": vllm.__version__, "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto"),
            **memory_setting(backend.preset, alone=backend.memory_plan().alone)}


def table(result: dict) -> str:
    """The result as a Markdown table (README, About tab)."""
    beside = any(r.get("neighbours") for r in result["rows"])
    peer = any(r.get("against_llamacpp") for r in result["rows"])
    head = ["engine", "method", "C", *(["busy neighbours"] if beside else []), "per-user tok/s (median)",
            *(["kept of idle"] if beside else []), "speedup", *(["against llama.cpp plain"] if peer else []),
            "throughput tok/s", "AL", "same tokens as plain / local"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["rows"]:
        same = "/".join({True: "yes", False: "no", None: "—"}[r[key]] for key in ("identical_to_plain",
                                                                                 "identical_to_local"))
        al = f"{r['mean_acceptance_length']:.2f}" if r["mean_acceptance_length"] else "—"
        label = r["label"] + (f" k={r['k']}" if r["k"] else "")
        if r.get("instrumented"):
            label += f", instrumented ({instrumentation_label(r['instrumentation_cost'])})"
        kept = f"{r['kept_of_idle']:.2f}× | " if r.get("kept_of_idle") else "— | "
        lines.append(f"| {r['engine']} | {label} | {r['concurrency']} | "
                     + (f"{r.get('neighbours', 0)} | " if beside else "") + f"{r['per_user_tokens_per_second']:.1f} | "
                     + (kept if beside else "") + f"{r['speedup']:.2f}× | "
                     + (f"{r['against_llamacpp']:.2f}× | " if r.get("against_llamacpp") else "— | " if peer else "")
                     + f"{r['throughput_tokens_per_second']:.1f} | "
                     f"{al} | {same} |")
    return "\n".join(lines)


def instrumentation_label(cost: float) -> str:
    """A measured instrumentation cost as the app shows it: "−6 %" ("+2 %" where noise made it faster, "±0 %")."""
    percent = round(100 * cost)
    return f"{'±' if percent == 0 else '−' if percent > 0 else '+'}{abs(percent)} %"


COMMITTED = REPO_ROOT / "assets" / "bench" / "engines-cpu" / "results.json"


def committed_result() -> dict | None:
    return json.loads(COMMITTED.read_text()) if COMMITTED.is_file() else None


def instrumentation_note() -> str:
    """What recording drift, RMS and draft probabilities costs our engine, from the committed result ("" without)."""
    result = committed_result()
    rows = [r for r in (result or {}).get("rows", []) if r.get("instrumented")]
    if not rows:
        return ""
    costs = ", ".join(f"{r['label']} {instrumentation_label(r['instrumentation_cost'])}" for r in rows)
    return (f"Recording drift, hidden-state RMS and draft probabilities costs our engine {costs} tokens/s "
            f"(k = {rows[0]['k']}, one request at a time; `bench-engines`, {result['machine']['cpu']}).")


def machine_line(result: dict) -> str:
    m = result["machine"]
    vllm = m.get("engines", {}).get("vllm", {})
    where = (f", vLLM {vllm['vllm']} (threads bound: {vllm['VLLM_CPU_OMP_THREADS_BIND']})" if vllm else "")
    return (f"{m['cpu']}, {m['cores']} cores, torch {m['torch']} ({m['torch_threads']} threads for our engine), "
            f"transformers {m['transformers']}{where}; {result['started']}")


def committed_section() -> str:
    """The committed two-engine result as Markdown (the About tab), or "" where it is absent."""
    result = committed_result()
    if result is None:
        return ""
    c = result["config"]
    return (f"{c['prompts']} {c['prompt_set']} prompts, {c['max_new_tokens']} new tokens, greedy, k = {c['k']}, "
            f"{c.get('dtype', 'float32')}, C requests in flight at a time; {machine_line(result)}.\n\n"
            f"{table(result)}\n")


def main(args: argparse.Namespace) -> None:
    config = EngineBenchConfig(prompt_set=args.prompts, prompts=args.limit, max_new_tokens=args.max_new_tokens,
                               k=args.k, concurrency=tuple(int(c) for c in args.concurrency.split(",")),
                               engines=tuple(args.engines.split(",")), methods=tuple(args.methods.split(",")),
                               dtype=args.dtype, weights=args.weights, neighbours=parse_neighbours(args.neighbours))
    if args.landing and (problem := landing_problem(config)):
        raise UsageError(f"bench-engines --landing: {problem}")
    out = Path(args.out or REPO_ROOT / "runs" / "bench" / f"engines-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    with other_work() as beside:
        result = run_engine_bench(config, lambda line: print(line, flush=True))
    result["other_work"] = beside.to_dict()
    (out / "results.json").write_text(json.dumps(result, indent=1))
    (out / "table.md").write_text(table(result) + "\n")
    print(table(result))
    print(f"→ {out / 'results.json'}")
    if args.landing:
        print(f"vLLM's landing figures for this CPU kind → {write_vllm_landing(result)} "
              "(render them: python scripts/render_readme.py)")


def landing_problem(config: EngineBenchConfig) -> str | None:
    """Why a run cannot stand as a CPU kind's vLLM landing file (the README's vLLM rows), or None."""
    if not {"local", "vllm"} <= set(config.engines) or 1 not in config.concurrency:
        return "it needs --engines with local and vllm, and --concurrency with 1 (one request at a time)"
    if not set(DEFAULT_METHODS) <= set(config.methods) or config.weights != "float32" or config.dtype != "float32":
        return (f"it needs --methods with {', '.join(DEFAULT_METHODS)} and float32 weights (the landing table's "
                "pair, as it ships)")
    return None


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("bench-engines", help="our engine vs vLLM and llama.cpp, C=1,4,16")
    p.add_argument("--prompts", default="mt-bench", help="a built-in prompt set (first turns)")
    p.add_argument("--limit", type=int, default=16, help="prompts per level")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--concurrency", default=",".join(map(str, CONCURRENCY)), help="comma list of request counts")
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                   help="comma list: none, the preset's drafters, and weightless methods on the engines that run "
                        f"them ({', '.join(offered_methods('local', ()))})")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="both engines' weights")
    p.add_argument("--weights", choices=["float32", "int4", "auto"], default="float32",
                   help="what our engine's CPU fast path multiplies (int4: the GGUF's 4-bit groups, as llama.cpp)")
    p.add_argument("--neighbours", default="0", help="comma list of busy-loop process counts to run every level "
                   "beside, a row per condition (e.g. 0,1,2: idle, then beside one and two busy neighbours)")
    p.add_argument("--out", help="output folder (default: runs/bench/engines-<time>)")
    p.add_argument("--landing", action="store_true",
                   help="also write the result as this CPU kind's vLLM landing file, assets/bench/landing/vllm/"
                        "<kind>.json, which the README's vLLM rows and the About tab read (needs local and vllm at "
                        "concurrency 1)")
    p.set_defaults(func=main)
