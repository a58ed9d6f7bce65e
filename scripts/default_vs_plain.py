"""What runs with no flags against plain decoding, on prompts you bring: `generate`'s default (k auto choosing the
method and k, its plain probe continued, the drafting guard) against `--drafter none`, in one process, alternating
which goes first, end to end (the choice included) and by decode rate; every answer checked token-identical.

    python scripts/default_vs_plain.py --prompts chat.jsonl code.jsonl --max-new-tokens 256 --rounds 2

Each prompt file is SPEED-Bench's JSONL (one object a line; its first `turns` entry is the prompt), named by its
stem in the summary. Prompts from the repository's own sets measure what the drafters were tuned on: bring others.
Nothing else should run on the machine (or say what did); `--neighbours N` runs N busy loops beside it."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from playground.auto_k import answer_stream, auto_k
from playground.backends import shared_backend
from playground.bench.neighbours import busy_neighbours
from playground.drafting import PLAIN
from playground.engine import GenerationConfig
from playground.engine.trace import decode_rate
from playground.machine import cpu_kind
from playground.presets import get_preset
from playground.request import resolve_request
from playground.request.check import default_choice


def run(backend, ids: list[int], tokens: int, default: bool) -> tuple[float, float, str, list[int]]:
    """(tokens a second end to end, decode rate, what ran, the tokens) of one answer."""
    cfg = GenerationConfig(max_new_tokens=tokens, k=1)
    start = time.perf_counter()
    if default:
        drafter, _ = default_choice(backend.preset)
        request = resolve_request(backend.preset, drafter, cfg, None,
                                  lambda: auto_k(backend, drafter, ids, len(ids) + tokens // 2))
        events = list(answer_stream(backend, ids, request.drafter, request.config, auto=request.auto))
        chose = request.auto.short() if request.auto else request.drafter
    else:
        events, chose = list(backend.stream(ids, PLAIN, cfg)), "plain decoding"
    wall = time.perf_counter() - start
    emitted = [t for e in events for t in e.emitted]
    return len(emitted) / wall, decode_rate(events) or 0.0, chose, emitted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", nargs="+", type=Path, required=True)
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--neighbours", type=int, default=0, help="busy loops beside the measurement")
    args = parser.parse_args()
    backend = shared_backend(get_preset(args.preset))
    prompts = [(path.stem, json.loads(line)["turns"][0]) for path in args.prompts
               for line in path.read_text().splitlines() if line.strip()]
    hello = backend.encode([{"role": "user", "content": "hello"}])
    run(backend, hello, args.max_new_tokens, True)  # step costs measured (or read) and both paths warmed
    run(backend, hello, args.max_new_tokens, False)
    ratios: dict[str, list[tuple[float, float]]] = {}
    with busy_neighbours(args.neighbours):
        for round_ in range(args.rounds):
            for i, (kind, text) in enumerate(prompts):
                ids = backend.encode([{"role": "user", "content": text}])
                order = (True, False) if (i + round_) % 2 == 0 else (False, True)
                got = {default: run(backend, ids, args.max_new_tokens, default) for default in order}
                if got[True][3] != got[False][3]:
                    raise SystemExit(f"not token-identical on {kind} prompt {i}")
                ratios.setdefault(kind, []).append((got[True][0] / got[False][0], got[True][1] / got[False][1]))
                print(f"{kind} {i}: end to end {ratios[kind][-1][0]:.2f}x, decode rate {ratios[kind][-1][1]:.2f}x "
                      f"({got[True][2]})", flush=True)
    print(f"{cpu_kind()}; {args.max_new_tokens} tokens; {args.neighbours} busy neighbour(s)")
    pooled = [pair for pairs in ratios.values() for pair in pairs]
    for kind, pairs in [*ratios.items(), ("all", pooled)]:
        e2e, rate = [a for a, _ in pairs], [b for _, b in pairs]
        print(f"{kind}: end to end median {statistics.median(e2e):.2f}x ({min(e2e):.2f}-{max(e2e):.2f}), decode rate "
              f"median {statistics.median(rate):.2f}x ({min(rate):.2f}-{max(rate):.2f}) over {len(pairs)} answers")


if __name__ == "__main__":
    main()
