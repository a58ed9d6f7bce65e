"""`python -m playground replay RECORD.json`: what each drafter, k and tree would have bought on a finished greedy
answer — its acceptance replayed exactly (engine/replay.py) and its speedup predicted from this machine's measured
step costs (engine/costs.py) — without running any of them live. A weightless method (`ngram`, `suffix`) replays its
chains exactly too, and its speedup is predicted from the target's costs alone (a plain step, verifying the rows
each step verified; the lookup itself is not timed, so the prediction leans high by its share).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from playground.backends.local import LocalBackend
from playground.drafting import PARAMETERS, PLAIN, method_for, offered_methods
from playground.engine import RunRecord, TreeShape, summarize
from playground.engine.choice import expected_tokens
from playground.engine.cost_measure import pair_profile
from playground.engine.costs import CostProfile
from playground.engine.replay import expected_first_acceptance, replay, replay_weightless, teacher_force
from playground.flags import UsageError, make_backend, parse_int_list, resolve_preset
from playground.presets import DRAFTER_LABELS
from playground.smollm2 import cache_root

DEFAULT_KS = (1, 2, 3, 4, 5, 6, 8)


@dataclass(frozen=True)
class Replayed:
    """One configuration replayed over the answer."""

    drafter: str
    k: int
    tree_nodes: int  # 0: chains
    acceptance_length: float | None  # tokens per drafting step
    drafting_steps: int | None  # None where `expected`
    accepted_tokens: int | None
    verified_per_step: float | None  # rows each verification forward held (a tree's nodes + 1)
    predicted_speedup: float | None
    predicted_range: tuple[float, float] | None
    expected: bool = False  # a sampled answer's expectation at k = 1, not a replay (expected_replay)


def profile_for(backend: LocalBackend, drafter: str, prompt_ids: list[int], answer_ids: list[int],
                trees: tuple[TreeShape, ...] = (), fresh: bool = False) -> CostProfile:
    """This machine's step costs for the target and `drafter` at the answer's middle (`pair_profile`)."""
    loaded = backend.drafter(drafter)
    return pair_profile(backend.target, loaded.drafter, loaded.aux_layers, (backend.preset.target, loaded.source),
                        prompt_ids + answer_ids, len(prompt_ids) + len(answer_ids) // 2, cache_root(), trees, fresh)


def replay_answer(backend: LocalBackend, prompt_ids: list[int], answer_ids: list[int], drafters: list[str],
                  ks: tuple[int, ...], tree_nodes: tuple[int, ...] = (), max_new_tokens: int | None = None,
                  predict: bool = True, fresh: bool = False, tree_ks: tuple[int, ...] | None = None,
                  method_settings: tuple[tuple[str, int | float], ...] = ()
                  ) -> tuple[list[Replayed], dict[str, CostProfile]]:
    """Every drafter × (k chains, then trees of each size in `tree_nodes`, k deep for each k of `tree_ks`, default
    `ks`) replayed over the answer, with its predicted speedup where `predict`; and the cost profiles used. A method
    that needs no checkpoint replays chains of each k through its own proposer (with those of `method_settings` that
    are its own), predicted from the target's costs alone (`target_profile`) where its proposals cost no model call
    (`priced_by` "replay"); an early exit's drafts are forwards the profile does not time, so its rows carry none."""
    target = backend.target
    eagle = [name for name in drafters if method_for(name).features]  # they read the target's states
    forced = teacher_force(target, backend.drafter(eagle[0]).aux_layers if eagle else [], prompt_ids, answer_ids)
    rows, profiles = [], {}
    for name in drafters:
        if not method_for(name).checkpoint:  # replayed through its own proposer; priced where its costs are known
            own = tuple((key, value) for key, value in method_settings if PARAMETERS[key][0].name == name)
            priced = predict and method_for(name).priced_by == "replay"
            costs = target_profile(backend, prompt_ids, answer_ids, fresh) if priced else None
            rows += [weightless_row(forced, target, name, k, own, max_new_tokens, costs) for k in ks]
            continue
        loaded = backend.drafter(name)
        configs = [(k, None) for k in ks] + [(k, TreeShape.k_deep(k, n)) for n in tree_nodes
                                              for k in (tree_ks or ks)]
        trees = tuple(dict.fromkeys(tree for _, tree in configs if tree is not None))
        profile = profile_for(backend, name, prompt_ids, answer_ids, trees, fresh) if predict else None
        if profile is not None:
            profiles[name] = profile
        for k, tree in configs:
            events = replay(forced, target, loaded.drafter, k, tree, max_new_tokens)
            metrics = summarize(events, tree.depth if tree else k)
            speedup = profile.predict(events, tree) if profile else None
            rows.append(Replayed(name, k, tree.nodes if tree else 0, metrics.mean_acceptance_length,
                                 metrics.drafting_steps, metrics.accepted_tokens, metrics.verified_per_step,
                                 speedup[0] if speedup else None, speedup[1:] if speedup else None))
    return rows, profiles


def target_profile(backend: LocalBackend, prompt_ids: list[int], answer_ids: list[int],
                   fresh: bool = False) -> CostProfile | None:
    """The target's step costs a weightless method's prediction reads (a plain step, verifying N rows), from the
    profile of the preset's first drafter; None where the preset has none."""
    first = next(iter(backend.preset.drafters), None)
    return profile_for(backend, first, prompt_ids, answer_ids, (), fresh) if first else None


def weightless_row(forced, target, method: str, k: int, settings: tuple[tuple[str, int | float], ...],
                   max_new_tokens: int | None, costs: CostProfile | None = None) -> Replayed:
    events = replay_weightless(forced, target, method, k, settings, max_new_tokens)
    metrics = summarize(events, k)
    speedup = costs.predict(events, drafts_cost=False) if costs is not None else None
    return Replayed(method, k, 0, metrics.mean_acceptance_length, metrics.drafting_steps, metrics.accepted_tokens,
                    metrics.verified_per_step, speedup[0] if speedup else None, speedup[1:] if speedup else None)


def replay_json(rows: list[Replayed], profiles: dict[str, CostProfile]) -> dict:
    """A replay as `replay --json` prints it and an export carries it: each configuration's row, and the step costs
    the predictions read, by drafter."""
    return {"configs": [asdict(r) for r in rows], "profiles": {name: p.to_dict() for name, p in profiles.items()}}


RECORD_HINT = "replay reads the run record `generate --json` prints"


def read_record(path: str) -> RunRecord:
    """The run record in `path`, or a UsageError saying in one line why the file is not one."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"{path}: {'a folder, not a file' if file.is_dir() else 'no such file'}; {RECORD_HINT}")
    try:
        data = json.loads(file.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise UsageError(f"{path} is not a run record (not JSON); {RECORD_HINT}") from None
    try:
        return RunRecord.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        missing = f"no {err.args[0]!r} field" if isinstance(err, KeyError) and err.args else "fields of another shape"
        raise UsageError(f"{path} is not a run record (JSON, but {missing}); {RECORD_HINT}") from None


def run(args: argparse.Namespace) -> dict:
    record = read_record(args.record)
    if record.prompt_ids is None:
        raise UsageError(f"{args.record} has no prompt_ids: replay needs a record written by this version's "
                         "`generate --json` (or the app's export)")
    preset = resolve_preset(args)
    backend = make_backend(args, preset)
    if not isinstance(backend, LocalBackend):
        raise UsageError("replay runs the local engine: use a local preset")
    drafters = [d for d in (args.drafters or ",".join(preset.drafters)).split(",") if d and d != PLAIN]
    unknown = [d for d in drafters if d not in offered_methods("local", preset.drafters)]
    if unknown or not drafters:
        raise UsageError(f"replay's drafters come from the preset: {', '.join(preset.drafters)}, or a weightless "
                         f"method ({', '.join(offered_methods('local', ()))}); got {unknown or 'none'}")
    if not record.config.greedy and any(not method_for(d).checkpoint for d in drafters):
        raise UsageError("a sampled answer is not replayed, and a weightless method's expected acceptance over it "
                         "is not computed yet: replay a greedy record, or list EAGLE drafters only")
    if not record.config.greedy:
        return expected_for_sampled(args, record, backend, drafters)
    ks = parse_int_list(args.k, "--k") or DEFAULT_KS
    trees = parse_int_list(args.tree_nodes, "--tree-nodes") or ()
    started = time.time()
    try:
        rows, profiles = replay_answer(backend, record.prompt_ids, record.token_ids, drafters, ks, trees,
                                       record.config.max_new_tokens, predict=not args.no_predict,
                                       fresh=args.fresh_profile, method_settings=record.config.method_settings)
    except ValueError as err:
        raise UsageError(str(err)) from None
    result = {"record": args.record, "preset": preset.name, "answer_tokens": len(record.token_ids),
              "ran": {"drafter": record.drafter, "k": record.config.k, "metrics": record.metrics.to_dict()},
              **replay_json(rows, profiles)}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{len(record.token_ids)} answer tokens, replayed (acceptance exact; speedup predicted from this "
              f"machine's step costs). {costs_sentence(profiles, started)}")
        for r in rows:
            shape = f"tree {r.tree_nodes:>3} nodes" if r.tree_nodes else "chain"
            accept = f"{r.acceptance_length:.2f}" if r.acceptance_length else "—"
            speed = (f"{r.predicted_speedup:.2f}× ({r.predicted_range[0]:.2f}–{r.predicted_range[1]:.2f})"
                     if r.predicted_speedup else "—")
            print(f"  {DRAFTER_LABELS.get(r.drafter, r.drafter):<10} k={r.k:<2} {shape:<16} acceptance length "
                  f"{accept:>5}  predicted speedup {speed}", file=sys.stdout)
    return result


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("replay", help="replay a greedy answer under every drafter, k and tree; predict each "
                              "one's speedup on this machine")
    p.add_argument("record", help="a `generate --json` record (greedy; with prompt_ids)")
    p.add_argument("--preset", help="the pair the record was written with (default: PLAYGROUND_DEFAULT_PRESET or "
                   "smollm2-135m)")
    p.add_argument("--target", help="the target the record was written with, where not the preset's (a Hugging Face "
                   "model folder or Hub id)")
    p.add_argument("--drafters", help="comma list of the preset's drafters (default: all of them) and weightless "
                   "methods (ngram, suffix: chains only, predicted from the target's costs alone)")
    p.add_argument("--k", help=f"comma list of k to replay (default: {','.join(map(str, DEFAULT_KS))})")
    p.add_argument("--tree-nodes", help="comma list of tree sizes to replay as k-deep trees (default: none)")
    p.add_argument("--no-predict", action="store_true", help="acceptance only: no cost profile, no speedup")
    p.add_argument("--fresh-profile", action="store_true", help="measure this machine's step costs again")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.set_defaults(func=run, backend=None, device=None, dtype=None)


def expected_for_sampled(args: argparse.Namespace, record: RunRecord, backend: LocalBackend,
                         drafters: list[str]) -> dict:
    """A sampled answer does not replay exactly: each drafter's expected first-draft acceptance over it instead
    (engine.replay.expected_first_acceptance, Σ min(p, q) at each position), said to be an expectation."""
    config = record.config
    expected = {}
    for name in drafters:
        loaded = backend.drafter(name)
        try:
            per_position = expected_first_acceptance(backend.target, loaded.aux_layers, loaded.drafter,
                                                     record.prompt_ids, record.token_ids, config.temperature,
                                                     config.top_p)
        except ValueError as err:
            raise UsageError(str(err)) from None
        expected[name] = {"first_draft_acceptance": sum(per_position) / len(per_position),
                          "positions": len(per_position)}
    result = {"record": args.record, "preset": backend.preset.name, "answer_tokens": len(record.token_ids),
              "sampled": {"temperature": config.temperature, "top_p": config.top_p}, "expected": expected}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{len(record.token_ids)} answer tokens, sampled at temperature {config.temperature:g}: not replayed "
              "(its steps depend on the draws); expected acceptance of each drafter's first draft, Σ min(p, q):")
        for name, numbers in expected.items():
            print(f"  {DRAFTER_LABELS.get(name, name):<10} {numbers['first_draft_acceptance']:.2f} "
                  f"over {numbers['positions']} positions")
    return result


APP_KS = (1, 2, 3, 4, 5, 6, 8)
APP_TREE_NODES = (8, 16)
APP_TREE_KS = (4,)


def replay_problem(run) -> str | None:
    """Why the app cannot replay this run (a playback Run), or None."""
    if not run.finished or not run.token_ids:
        return "the answer is not finished"
    if run.engine != "local" or not run.prompt_ids:
        return "replay runs our engine: this answer came from another engine"
    return None


def expected_replay(backend: LocalBackend, run) -> tuple[list[Replayed], dict[str, CostProfile]]:
    """A sampled run does not replay (its steps depend on the draws): each drafter's expected acceptance length at
    k = 1 over its answer instead — 1 + the mean of Σ min(p, q) per position (engine.replay.expected_first_acceptance)
    — and the speedup that expectation predicts on this machine's step costs."""
    s, rows, profiles = run.settings, [], {}
    for name in backend.preset.drafters:
        loaded = backend.drafter(name)
        per_position = expected_first_acceptance(backend.target, loaded.aux_layers, loaded.drafter, run.prompt_ids,
                                                 run.token_ids, s.temperature, s.top_p)
        first = sum(per_position) / len(per_position)
        profile = profiles[name] = profile_for(backend, name, run.prompt_ids, run.token_ids)
        tokens = expected_tokens([first], 1)
        speedup, low, high = profile.expected_speedup(tokens, 1)
        rows.append(Replayed(name, 1, 0, tokens, None, None, 2.0, speedup, (low, high), expected=True))
    return rows, profiles


def _ran_line(side: str, run, rows: list[Replayed]) -> str:
    """What one run measured beside what the replay predicts for its configuration."""
    s = run.settings
    if run.engine != "local":
        return f"{side} ran on {run.engine}: the predictions price our engine's steps, not its."
    if s.plain:
        return f"{side} ran plain decoding: the baseline every prediction divides by."
    measured = run.view().speedup
    measured_text = f"measured {measured:.2f}×." if measured else "measured: not yet (no plain baseline)."
    ran = next((r for r in rows if (r.drafter, r.k, r.tree_nodes) == (s.drafter, s.k, s.tree_nodes)), None)
    if ran is None:
        return f"{side} ran with {s.drafter_label}: not among the replayed configurations; {measured_text}"
    if ran.predicted_speedup is None:
        return (f"{side} ran with {s.drafter_label}, k = {s.k}: replayed acceptance length "
                f"{ran.acceptance_length or 0:.2f}, no speedup predicted (its drafting is not in the step costs), "
                f"{measured_text}")
    return (f"{side} ran with {s.drafter_label}, k = {s.k}: predicted {ran.predicted_speedup:.2f}× "
            f"({ran.predicted_range[0]:.2f}–{ran.predicted_range[1]:.2f}), {measured_text}")


def replay_run(backend: LocalBackend, run, sides: dict | None = None
               ) -> tuple[list[Replayed], str, dict[str, CostProfile]]:
    """The app's table for a finished run's answer: a greedy one replayed under every method the preset offers (its
    drafters, with trees of APP_TREE_NODES at k = 4, and the methods that need no checkpoint, each with the run's own
    settings for it) at APP_KS, a sampled one's expectation at k = 1 under its drafters (expected_replay), predicted
    on this machine; a
    line setting each run of `sides` (name -> Run; default: this one, "The answer") against its prediction; and the
    cost profiles the predictions read, by drafter."""
    s, since = run.settings, time.time()
    if s.temperature != 0:
        rows, profiles = expected_replay(backend, run)
        head = (f"Sampled at temperature {s.temperature:g}: not replayed (its steps depend on the draws); each "
                "drafter's expected acceptance length at k = 1 over this answer (1 + Σ min(p, q) per position) and "
                "the speedup it predicts. ")
    else:
        methods = offered_methods(backend.preset.backend, backend.preset.drafters)
        rows, profiles = replay_answer(backend, run.prompt_ids, run.token_ids, methods, APP_KS, APP_TREE_NODES,
                                       s.max_new_tokens, tree_ks=APP_TREE_KS, method_settings=s.method_settings)
        head = ""
    lines = [_ran_line(side, r, rows) for side, r in (sides or {"The answer": run}).items()]
    return rows, head + " ".join(lines + [costs_sentence(profiles, since)]), profiles


def costs_sentence(profiles: dict[str, CostProfile], since: float | None = None) -> str:
    """Which step costs the predictions read: the load they were measured under and when (by drafter where those
    differ), as a sentence."""
    if not profiles:
        return ""

    def said(words: dict[str, str]) -> str:
        if len(set(words.values())) == 1:
            return next(iter(words.values()))
        return ", ".join(f"{w} for {DRAFTER_LABELS.get(name, name)}" for name, w in words.items() if w)

    load = said({name: p.load_words() for name, p in profiles.items()})
    when = said({name: p.when_text(since) for name, p in profiles.items()})
    return (f"Predicted from step costs measured on {load}{', ' + when if when else ''} (each range: how far the "
            "prediction moves over the rounds those costs were timed in).")
