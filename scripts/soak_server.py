"""Soak `python -m playground serve`: concurrent clients for a while, a mix of good, bad and abandoned requests.

    python scripts/soak_server.py --clients 8 --minutes 5            # starts a server on the default pair
    python scripts/soak_server.py --url http://127.0.0.1:8000 --pid 1234 --clients 8 --minutes 5

Prints one JSON object: requests by kind and status, latency p50/p95 of the good ones (seconds, whole answer), the
server's peak memory (VmHWM, when its pid is known), and errors (a status other than expected, or no answer).
Not part of the test suite: it runs for minutes. The suite's own load and fault tests are tests/serve/test_serve.py.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

PROMPTS = ["Write a function that reverses a list.", "What is the capital of France?",
           "Explain what a hash map is.", "Give me three tips for writing clear emails.",
           "Write a haiku about the sea.", "How do I read a file line by line in Python?"]
BAD = [({"prompt": "hi", "max_tokens": 0}, 400), ({"prompt": [-1, 5]}, 400), ({"prompt": "hi", "n": 3}, 400),
       ({"prompt": "hi", "stream": "no"}, 400), ({"prompt": "hi", "model": "nope"}, 404)]


def peak_memory_mib(pid: int | None) -> float | None:
    if pid is None:
        return None
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return None


def client(url: str, deadline: float, max_tokens: int, seed: int, results: list, lock: threading.Lock) -> None:
    rng = random.Random(seed)
    with httpx.Client(base_url=url, timeout=300) as http:
        while time.monotonic() < deadline:
            roll = rng.random()
            started = time.monotonic()
            try:
                if roll < 0.2:
                    body, expected = rng.choice(BAD)
                    status, kind = http.post("/v1/completions", json=body).status_code, "bad"
                elif roll < 0.3:  # leaves after the first chunk
                    body = {"messages": [{"role": "user", "content": rng.choice(PROMPTS)}], "stream": True,
                            "max_tokens": max_tokens, "temperature": 0}
                    with http.stream("POST", "/v1/chat/completions", json=body) as response:
                        next(response.iter_lines(), None)
                        status, expected, kind = response.status_code, 200, "abandoned"
                else:
                    stream = roll < 0.65
                    body = {"messages": [{"role": "user", "content": rng.choice(PROMPTS)}], "stream": stream,
                            "max_tokens": max_tokens, "temperature": rng.choice([0.0, 0.7]), "seed": rng.randrange(99)}
                    if stream:
                        with http.stream("POST", "/v1/chat/completions", json=body) as response:
                            lines = [line for line in response.iter_lines() if line]
                            status = response.status_code
                        if status == 200 and lines[-1] != "data: [DONE]":
                            status = -1
                    else:
                        status = http.post("/v1/chat/completions", json=body).status_code
                    expected, kind = 200, "good"
            except httpx.HTTPError as err:
                status, expected, kind = -1, 200, f"failed: {type(err).__name__}"
            with lock:
                results.append((kind, status, expected, time.monotonic() - started))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an already running server (default: start one on the default pair)")
    parser.add_argument("--pid", type=int, help="that server's pid, for its peak memory")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--k", type=int, default=4)
    args = parser.parse_args()
    server = None
    url, pid = args.url, args.pid
    if url is None:
        command = [sys.executable, "-m", "playground", "serve", "--port", "0", "--k", str(args.k)]
        server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env={**os.environ})
        line = ""
        while not line.startswith("serving") and server.poll() is None:
            line = server.stdout.readline()
        url, pid = line.split(" on ")[-1].strip(), server.pid
    results: list = []
    lock = threading.Lock()
    deadline = time.monotonic() + args.minutes * 60
    threads = [threading.Thread(target=client, args=(url, deadline, args.max_tokens, i, results, lock))
               for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    good = sorted(seconds for kind, status, _, seconds in results if kind == "good" and status == 200)
    report = {
        "clients": args.clients, "minutes": args.minutes, "max_tokens": args.max_tokens,
        "requests": len(results),
        "by_kind_and_status": {f"{kind} {status}": n for (kind, status), n in
                               sorted(Counter((kind, status) for kind, status, _, _ in results).items())},
        "good_latency_s": {"p50": round(statistics.median(good), 2),
                           "p95": round(good[int(0.95 * (len(good) - 1))], 2)} if good else None,
        "errors": sum(status != expected for _, status, expected, _ in results),
        "server_peak_memory_mib": peak_memory_mib(pid),
        "server_metrics": [line for line in httpx.get(url + "/metrics").text.splitlines()
                           if line.startswith(("vllm:prompt_tokens_total", "vllm:generation_tokens_total"))],
    }
    if server is not None:
        server.terminate()
        server.wait(timeout=30)
    print(json.dumps(report, indent=2))
    return 0 if report["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
