"""``python -m playground generate``: one request through a backend, streamed to stdout or as one JSON object."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from playground.auto_k import auto_k
from playground.drafting import PLAIN, WEIGHTLESS
from playground.engine import MAX_K, GenerationConfig, RunRecord
from playground.engine.costs import AutoK
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
from playground.run_record import exported_run, run_fields


def _messages(args: argparse.Namespace) -> list[dict]:
    prompt = nonempty_prompt(Path(args.prompt_file).read_text() if args.prompt_file else args.prompt)
    messages = [{"role": "system", "content": args.system}] if args.system else []
    return messages + [{"role": "user", "content": prompt}]


def generate(args: argparse.Namespace) -> dict:
    preset = resolve_preset(args)
    messages = _messages(args)  # an empty prompt is refused before any model work
    drafter = args.drafter_path or args.drafter or preset.default_drafter
    k_auto = args.k == "auto"
    k = 1 if k_auto else args.k  # k auto: a chain's k, chosen once the request is checked
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
        print(f"--k auto: {request.auto.why}", file=sys.stderr)
    drafter, cfg, tree, auto = request.drafter, request.config, request.config.tree, request.auto
    backend = make_backend(args, preset)
    prompt_ids = backend.encode(messages, chat_template=args.chat_template, raw=args.raw)
    events, ids = [], []
    stream = backend.stream(prompt_ids, drafter, cfg)
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
    if args.json:
        print(json.dumps(result))
    else:
        m = record.metrics
        al = f"{m.mean_acceptance_length:.2f}" if m.mean_acceptance_length else "n/a"
        busy = busy_text(m.cores_taken)
        print(f"\n\n[{m.generated_tokens} tokens, {m.tokens_per_second:.1f} tok/s, mean acceptance length {al}, "
              f"finish: {record.finish_reason}{'; ' + busy if busy else ''}]", file=sys.stderr)
        if drafter != PLAIN:
            print(f"[{health.text()}]", file=sys.stderr)
    return result


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
    p.add_argument("--drafter", help=f"none, a drafter name of the preset (default: eagle3.1 where it has one), or a "
                   f"weightless method on our engine: {', '.join(WEIGHTLESS)} (prompt lookup, suffix decoding); with "
                   "--k auto, auto (k auto chooses the method too) or a comma list of methods to choose among")
    p.add_argument("--k", type=k_or_auto, default="4", help=f"speculative tokens per step, 1..{MAX_K}, or auto: the k "
                   "predicted fastest on this machine (plain decoding where none pays)")
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
                   help="our engine on the CPU: int4 layers in GGUF Q4_1's groups, or auto (int4 where measured "
                   "faster and row-exact); default: the preset's")
    p.add_argument("--no-instrument", action="store_true", help="skip attention / hidden-RMS capture")
    p.add_argument("--json", action="store_true", help="print one JSON object (schema in docs/cli.md)")
    add_threads_flag(p)
    p.set_defaults(func=generate)
