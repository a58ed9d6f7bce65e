"""`python -m playground fingerprint`: measure a drafter's fingerprint on its target (our engine) and write it
beside the drafter.

For each prompt (first turns of the project's prompt sets, none of them trained on): one plain greedy answer,
replayed exactly under every k (engine/replay.py: no speculative run needed), and, on the first `sampled` prompts, two
live, instrumented speculative runs at k = SAMPLED_K: greedy (for its drift by depth) and at T = 0.7 (each with its
own seed).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from playground.backends import shared_backend
from playground.backends.local import LocalBackend
from playground.drafting import MAX_K, PLAIN
from playground.engine import GenerationConfig, summarize
from playground.engine.replay import replay, teacher_force
from playground.flags import UsageError, add_pair_flags, make_backend, resolve_preset
from playground.machine import machine_info
from playground.presets import DRAFTER_LABELS, Preset, repo_relative
from playground.prompt_sets import load_prompt_set

from .check import depth_counts
from .facts import draft_coverage, draft_vocabulary, target_folder, template_sha256
from .fingerprint import Fingerprint, Section, fingerprint_path, save_fingerprint, trained_context, weights_digest

DEFAULT_SETS = "held-out:24,mt-bench:12,humaneval:12"  # the first prompts of each; the rest measure false alarms
SAMPLED_K = 4
SAMPLED_TEMPERATURE = 0.7


def parse_sets(text: str) -> list[tuple[str, int]]:
    try:
        return [(name, int(count)) for name, count in (item.split(":") for item in text.split(",") if item)]
    except ValueError:
        raise UsageError(f"--sets takes NAME:COUNT,… (e.g. {DEFAULT_SETS}), got {text!r}") from None


def build_fingerprint(backend: LocalBackend, drafter: str, sets: list[tuple[str, int]], max_new_tokens: int = 128,
                      sampled: int = 12, chat_template: str = "default",
                      progress: Callable[[int, int, str], None] | None = None) -> Fingerprint:
    """The drafter's fingerprint on the first prompts of each (set, count) of `sets`; `progress(done, total, line)`
    after each prompt."""
    loaded = backend.drafter(drafter)
    target = backend.target
    vocabulary = draft_vocabulary(loaded.source)
    records = [(name, record) for name, count in sets for record in load_prompt_set(name, count).records]
    greedy: dict[int, list[list[int]]] = {k: [] for k in range(1, MAX_K + 1)}
    live: list[list[int]] = []
    greedy_drift: list[dict[str, list[float]]] = []
    sampled_drift: list[dict[str, list[float]]] = []
    coverage, longest, skipped = [], 0, []
    for i, (set_name, record) in enumerate(records):
        prompt = backend.encode(record.messages([]), chat_template=chat_template)
        plain = GenerationConfig(max_new_tokens=max_new_tokens, instrument=False)
        answer = [t for event in backend.stream(prompt, PLAIN, plain) for t in event.emitted]
        try:
            forced = teacher_force(target, loaded.aux_layers, prompt, answer)
        except ValueError:  # a float near-tie: this answer is not the target's argmax throughout; leave it out
            skipped.append(record.question_id)
            continue
        for k in greedy:
            greedy[k].append(_padded(depth_counts(replay(forced, target, loaded.drafter, k)), k))
        if (share := draft_coverage(vocabulary, answer)) is not None:
            coverage.append(share)
        longest = max(longest, len(prompt) + len(answer))
        if len(live) < sampled:  # live runs, instrumented: greedy for its drift, sampled for acceptance and drift
            greedy_events = list(backend.stream(prompt, drafter, GenerationConfig(max_new_tokens=max_new_tokens,
                                                                                   k=SAMPLED_K)))
            cfg = GenerationConfig(max_new_tokens=max_new_tokens, k=SAMPLED_K, temperature=SAMPLED_TEMPERATURE,
                                   seed=len(live))
            events = list(backend.stream(prompt, drafter, cfg))
            live.append(_padded(depth_counts(events), SAMPLED_K))
            for runs, run_events in ((greedy_drift, greedy_events), (sampled_drift, events)):
                if (drift := _drift(run_events)) is not None:
                    runs.append(drift)
            longest = max(longest, len(prompt) + sum(len(e.emitted) for e in events))
        if progress:
            progress(i + 1, len(records), f"{set_name} {record.question_id}: {len(answer)} tokens")
    if len(greedy[1]) < 2:
        raise ValueError("too few answers to fingerprint: pass more prompts (--sets)")
    tokenizer = target.tokenizer
    folder = target_folder(backend.preset)
    source_folder = Path(loaded.source)
    return Fingerprint(
        drafter=repo_relative(loaded.source), target=repo_relative(backend.preset.target),
        target_digest=weights_digest(folder) if folder else None,
        chat_template=chat_template, chat_template_sha256=template_sha256(tokenizer, chat_template, raw=False),
        trained_context_tokens=trained_context(source_folder) if source_folder.is_dir() else None,
        measured_context_tokens=longest, draft_coverage=min(coverage) if coverage else None,
        greedy=Section(0.0, 1.0, greedy, {SAMPLED_K: greedy_drift} if greedy_drift else {}),
        sampled=(Section(SAMPLED_TEMPERATURE, 1.0, {SAMPLED_K: live}, {SAMPLED_K: sampled_drift} if sampled_drift
                         else {}) if len(live) >= 2 else None),
        prompts={"sets": dict(sets), "answers": len(greedy[1]), "sampled_answers": len(live),
                 "max_new_tokens": max_new_tokens, "left_out": skipped},
        machine=machine_info(backend.device), weights=target.weights)


APP_SETS = "held-out:8,mt-bench:4,humaneval:4"  # the app's fingerprint of an own pair: a few minutes, not 25
APP_SAMPLED = 4


def fingerprint_preset(preset: Preset, say: Callable[[str, float], None]) -> list[str]:
    """Fingerprint every drafter of a local preset (the app's own pairs) on APP_SETS, each written beside its
    drafter (fingerprint_path); one line per drafter."""
    backend = shared_backend(preset)
    if not isinstance(backend, LocalBackend):
        raise ValueError("fingerprints are measured on our engine: this pair runs elsewhere")
    lines = []
    for i, drafter in enumerate(preset.drafters):
        label = DRAFTER_LABELS.get(drafter, drafter)

        def progress(done: int, total: int, _: str, i: int = i, label: str = label) -> None:
            say(f"{label}: answer {done} of {total}", (i + done / total) / len(preset.drafters))

        fingerprint = build_fingerprint(backend, drafter, parse_sets(APP_SETS), sampled=APP_SAMPLED, progress=progress)
        path = save_fingerprint(fingerprint, fingerprint_path(preset.drafters[drafter]))
        lines.append(f"{label}: {fingerprint.prompts['answers']} answers, depth-1 acceptance at k = 4 "
                     f"{fingerprint.greedy.depth_one(4).mean:.2f} (greedy), written to {path}")
    return lines


def _drift(events) -> dict[str, list[float]] | None:
    """A live run's drift by depth (its instrumented steps pooled), or None where it drafted nothing."""
    metrics = summarize(events, SAMPLED_K)
    if not metrics.attention_by_depth or not metrics.hidden_rms_by_depth:
        return None
    return {"draft": [round(m.draft, 5) for m in metrics.attention_by_depth],
            "sink": [round(m.sink, 5) for m in metrics.attention_by_depth],
            "rms": [round(r, 4) for r in metrics.hidden_rms_by_depth]}


def _padded(counts: list[int], k: int) -> list[int]:
    """[steps, ≥1, …, ≥k]: depths no step reached count 0."""
    return (counts + [0] * (k + 1))[: k + 1]


def run(args: argparse.Namespace) -> dict:
    preset = resolve_preset(args)
    drafter = args.drafter_path or args.drafter or preset.default_drafter
    if drafter == PLAIN or (not args.drafter_path and drafter not in preset.drafters):
        raise UsageError(f"fingerprint measures a drafter: one of {', '.join(preset.drafters)}, or --drafter-path")
    backend = make_backend(args, preset)
    if not isinstance(backend, LocalBackend):
        raise UsageError("fingerprint runs the local engine: use a local preset")
    source = preset.drafters.get(drafter, drafter)
    out = Path(args.out) if args.out else fingerprint_path(source)
    fingerprint = build_fingerprint(backend, drafter, parse_sets(args.sets), args.max_new_tokens, args.sampled,
                                    args.chat_template,
                                    progress=lambda done, total, line: print(f"{done}/{total} {line}", file=sys.stderr))
    save_fingerprint(fingerprint, out)
    model = fingerprint.greedy.depth_one(4)
    summary = {"fingerprint": str(out), "answers": fingerprint.prompts["answers"],
               "greedy_depth_one_k4": round(model.mean, 3), "target_digest": fingerprint.target_digest}
    print(json.dumps(summary) if args.json else
          f"wrote {out}: {summary['answers']} answers, depth-1 acceptance at k=4 {model.mean:.2f} (greedy)")
    return summary


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("fingerprint", help="measure a drafter's fingerprint (for the health check) and write "
                              "it beside the drafter")
    p.add_argument("--preset", help="named target+drafter pair (default: PLAYGROUND_DEFAULT_PRESET or smollm2-135m)")
    add_pair_flags(p)
    p.add_argument("--drafter", help="a drafter name of the preset (default: eagle3.1 where it has one)")
    p.add_argument("--sets", default=DEFAULT_SETS, help=f"prompt sets and how many of each (default: {DEFAULT_SETS})")
    p.add_argument("--sampled", type=int, default=12, help="answers sampled live at T=0.7, k=4 (default 12)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--chat-template", default="default", help="the template the drafter is meant to be used with")
    p.add_argument("--out", help="where to write it (default: fingerprint.json in the drafter's folder)")
    p.add_argument("--json", action="store_true", help="print a one-line JSON summary")
    p.set_defaults(func=run, backend=None, device=None, dtype=None)
