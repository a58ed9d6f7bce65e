"""``python -m playground generate``: one request through a backend, streamed to stdout or as one JSON object."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from playground.auto_k import answer_stream, auto_k
from playground.drafting import PLAIN, offered_methods
from playground.engine import MAX_K, GenerationConfig, RunRecord
from playground.engine.choice import AutoK
from playground.engine.templates import CHAT_TEMPLATES
from playground.engine.text import IncrementalDecoder
from playground.engine.threads import busy_text
from playground.flags import (
    UsageError,
    add_method_flags,
    add_min_draft_prob_flag,
    add_pair_flags,
    add_threads_flag,
    add_tree_flags,
    k_or_auto,
    make_backend,
    method_settings,
    resolve_preset,
    tree_shape,
)
from playground.health import run_health
from playground.presets import Preset
from playground.request import nonempty_prompt, resolve_request
from playground.request.check import FIXED_K, default_choice
from playground.run_record import exported_run, run_fields


def _messages(args: argparse.Namespace) -> list[dict]:
    prompt = nonempty_prompt(Path(args.prompt_file).read_text() if args.prompt_file else args.prompt)
    messages = [{"role": "system", "content": args.system}] if args.system else []
    return messages + [{"role": "user", "content": prompt}]


def generate(args: argparse.Namespace) -> dict:
    preset = resolve_preset(args)
    messages = _messages(args)  # an empty prompt is refused before any model work
    if args.drafter_path:
        drafter, k_auto = args.drafter_path, args.k == "auto"
    else:  # what is left unsaid: k auto where it can choose, among every method where none is named
        chains = not (getattr(args, "tree_nodes", 0) or args.min_draft_prob)
        drafter, k_auto = default_choice(preset, args.drafter, args.k, chains)
    k = 1 if k_auto else (args.k if isinstance(args.k, int) else FIXED_K)  # k auto: chosen once the request is checked
    try:
        cfg = GenerationConfig(max_new_tokens=args.max_new_tokens, k=k, temperature=args.temperature,
                               top_p=args.top_p, seed=args.seed, stop_strings=tuple(args.stop or ()),
                               instrument=not args.no_instrument, min_draft_prob=args.min_draft_prob,
                               tree=tree_shape(args, k), method_settings=method_settings(args))
        request = resolve_request(preset, drafter, cfg, args.drafter_path,
                                  (lambda: choose_auto_k(args, preset, drafter, messages)) if k_auto else None)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if request.auto is not None:
        print(f"[{request.auto.short()}]", file=sys.stderr)
        print(f"--k auto: {request.auto.why}", file=sys.stderr)
    drafter, cfg, tree, auto = request.drafter, request.config, request.config.tree, request.auto
    backend = make_backend(args, preset)
    prompt_ids = backend.encode(messages, chat_template=args.chat_template, raw=args.raw)
    events, ids = [], []
    stream = answer_stream(backend, prompt_ids, drafter, cfg, auto=auto)
    decoder = IncrementalDecoder(backend.decode)
    for event in stream:
        events.append(event)
        ids += event.emitted
        if not args.json:
            sys.stdout.write(decoder.extend(event.emitted) + (decoder.flush() if event.finished else ""))
            sys.stdout.flush()
    record = RunRecord.of(events, backend.decode(ids), len(prompt_ids), drafter, cfg,
                          tree.depth if tree else getattr(stream, "k", cfg.k),  # vLLM / remote: the engine's k
                          prompt_ids=prompt_ids)
    health = run_health(preset, backend, drafter, cfg, args.chat_template, args.raw, len(prompt_ids), events)
    result = {"preset": preset.name, "target": preset.target, "tree": asdict(tree) if tree else None,
              **exported_run(record, run_fields(backend, drafter == PLAIN), auto, health)}
    speedup = timed_against_plain(backend, prompt_ids, cfg, events) if args.baseline and drafter != PLAIN else None
    if speedup is not None:
        result["baseline"], result["speedup"], result["speedup_range"] = speedup
    if args.json:
        print(json.dumps(result))
    else:
        m = record.metrics
        al = f"{m.mean_acceptance_length:.2f}" if m.mean_acceptance_length else "n/a"
        busy = busy_text(m.cores_taken)
        print(f"\n\n[{m.generated_tokens} tokens, {m.tokens_per_second:.1f} tok/s, mean acceptance length {al}, "
              f"finish: {record.finish_reason}{'; ' + busy if busy else ''}]", file=sys.stderr)
        if drafter != PLAIN:
            print(f"[{speedup_line(m.decode_tokens_per_second, speedup)}]", file=sys.stderr)
            print(f"[{health.text()}]", file=sys.stderr)
    return result


def timed_against_plain(backend, prompt_ids: list[int], cfg, events) -> tuple[dict, float, list[float]] | None:
    """Plain decoding of the same prompt, timed after the run (`--baseline`): (its baseline record, the run's speedup
    over it, its 95 % interval), each plain step a timed sample; None where the run has too few steps to measure."""
    from dataclasses import replace as replaced

    from playground.engine.trace import pool

    plain = list(backend.stream(prompt_ids, PLAIN, replaced(cfg, k=1, tree=None, min_draft_prob=0.0)))
    steps = [(b.elapsed_ms - a.elapsed_ms) / 1000 for a, b in zip(plain[1:], plain[2:])]
    baseline = pool(steps)
    if baseline is None or baseline.too_few_steps(events):
        return None
    rate = RunRecord.of(events, "", len(prompt_ids), "", cfg, cfg.k).metrics.decode_tokens_per_second
    interval = baseline.speedup_range(events)
    return baseline.to_dict(), baseline.speedup(rate), list(interval) if interval else None


def speedup_line(rate: float | None, speedup: tuple | None) -> str:
    if speedup is None:
        return ("speedup over plain decoding: not measured (--baseline times plain decoding of this prompt after the "
                "answer, as the app's Chat times it beside)")
    baseline, ratio, interval = speedup
    within = interval is not None and interval[0] <= 1.0 <= interval[1]
    span = f" ({interval[0]:.2f}–{interval[1]:.2f})" if interval else ""
    return (f"{'within noise: ' if within else ''}{ratio:.2f}×{span} plain decoding's decode rate "
            f"({rate or 0:.1f} against {baseline['tokens_per_second']:.1f} tok/s, {baseline['tokens']} plain steps "
            "timed after the answer)")


def choose_auto_k(args: argparse.Namespace, preset: Preset, drafter: str, messages: list[dict]) -> AutoK:
    """--k auto (auto_k.py) at the answer's likely context: the prompt and half the token budget."""
    backend = make_backend(args, preset)
    prompt = backend.encode(messages, chat_template=args.chat_template, raw=args.raw)
    return auto_k(backend, drafter, prompt, len(prompt) + args.max_new_tokens // 2,
                  announce=lambda message: print(f"--k auto: {message}", file=sys.stderr),
                  settings=method_settings(args))


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("generate", help="generate one answer with a drafter, print text or JSON")
    p.add_argument("--preset", help="named target+drafter pair (default: PLAYGROUND_DEFAULT_PRESET or smollm2-135m)")
    add_pair_flags(p)
    p.add_argument("--drafter", help=f"none, a drafter name of the preset, a weightless method on our engine: "
                   f"{', '.join(offered_methods('local', ()))}, auto (k auto chooses the method "
                   "too) or a comma list of methods to choose among; default: auto on our engine (the method and k "
                   "predicted fastest here, plain decoding where none pays), else the preset's drafter")
    p.add_argument("--k", type=k_or_auto, help=f"speculative tokens per step, 1..{MAX_K}, or auto: the k predicted "
                   f"fastest on this machine (plain decoding where none pays); default: auto where it can choose, "
                   f"else {FIXED_K}")
    add_min_draft_prob_flag(p)
    add_method_flags(p)
    add_tree_flags(p)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--prompt")
    p.add_argument("--prompt-file")
    p.add_argument("--system", help="system prompt")
    p.add_argument("--chat-template", choices=CHAT_TEMPLATES, default="default",
                   help="the tokenizer's own (default) or llama3 (Llama-3-style headers, unfamiliar to SmolLM2)")
    p.add_argument("--raw", action="store_true", help="no chat template: the prompt text as is")
    p.add_argument("--stop", action="append", help="stop string (repeatable)")
    p.add_argument("--backend", choices=["local", "vllm", "remote"], help="default: the preset's")
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: the preset's")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], help="default: the preset's")
    p.add_argument("--weights", choices=["float32", "int4", "auto"],
                   help="our engine on the CPU: the GGUF's own 4-bit blocks in C (int4), float32, or auto (int4 where "
                   "the C library builds and the model fits it); default: the preset's")
    p.add_argument("--no-instrument", action="store_true", help="skip attention / hidden-RMS capture")
    p.add_argument("--baseline", action="store_true", help="time plain decoding of the same prompt after the answer "
                   "and print the speedup over it, with its 95 %% interval (our engine)")
    p.add_argument("--json", action="store_true", help="print one JSON object (schema in docs/cli.md)")
    add_threads_flag(p)
    p.set_defaults(func=generate)
