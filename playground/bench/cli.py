"""``python -m playground bench``: sweep drafters x k x prompt sets x chat templates, write CSV/JSON/HTML."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from tqdm import tqdm

from playground.backends import open_local_backend
from playground.bench import BENCH_NEEDS_WEIGHTS
from playground.bench.config import TEMPLATES_HELP, BenchConfig, with_overrides
from playground.bench.landing_run import PROFILE as LANDING
from playground.bench.landing_run import chat_example_lengths, landing_record, write_landing
from playground.bench.methods import PEERS, Runner, own_settings
from playground.bench.neighbours import other_work
from playground.bench.profiles import get_profile, measured_durations, profile_label, profiles
from playground.bench.report import write_outputs
from playground.bench.runner import Bench, run_bench
from playground.drafting import offered_methods
from playground.engine import MAX_K
from playground.flags import (
    UsageError,
    add_method_flags,
    add_min_draft_prob_flag,
    add_threads_flag,
    method_settings,
    parse_int_list,
    parse_ks,
    resolve_preset,
)
from playground.presets import DEVICES, DTYPES, REPO_ROOT, Preset
from playground.prompt_sets import builtin_sets
from playground.request import check_run


def _names(text: str | None) -> tuple[str, ...] | None:
    return tuple(part.strip() for part in text.split(",") if part.strip()) if text else None


def _check_drafters(config: BenchConfig, preset: Preset) -> None:
    """Each drafter the sweeps name, peers aside, checked as every entry point checks it (request/check.py), before
    any model loads: a path, or a name with "/", is a drafter folder or Hub id. Each takes its own method settings."""
    cfg = config.generation(0, 0)
    for name in sorted({d for s in config.sweeps for d in s.drafters} - set(PEERS)):
        folder = Path(name).exists() or "/" in name
        try:
            check_run(preset, name, own_settings(cfg, name), name if folder else None)
        except ValueError as err:
            raise UsageError(str(err)) from None


def _ks(text: str | None) -> tuple[tuple[int, ...] | None, bool | None]:
    """`--k`'s fixed ks and whether it names auto ("2,4,auto"); (None, None) where it is not given."""
    if text is None:
        return None, None
    parts = _names(text) or ()
    fixed = ",".join(p for p in parts if p != "auto")
    return (parse_ks(fixed) or ()) if fixed else (), "auto" in parts


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    ks, k_auto = _ks(args.k)
    config = with_overrides(
        get_profile(args.profile), prompt_sets=_names(args.prompts), drafters=_names(args.drafters),
        ks=ks, k_auto=k_auto, tree_nodes=parse_int_list(args.tree_nodes, "--tree-nodes"),
        templates=_names(args.templates), max_new_tokens=args.max_new_tokens, temperature=args.temperature,
        top_p=args.top_p, min_draft_prob=args.min_draft_prob, repeats=args.repeats, limit=args.limit, turns=args.turns,
        seed=args.seed, assistant=args.assistant, method_settings=method_settings(args) or None)
    try:
        config.validate()
    except ValueError as err:
        raise UsageError(str(err)) from None
    return config


def bench(args: argparse.Namespace) -> None:
    config = config_from_args(args)
    preset = resolve_preset(args)
    backend = open_local_backend(preset, "the bench", BENCH_NEEDS_WEIGHTS)
    _check_drafters(config, preset)
    runner = Runner(backend, config.assistant)
    # our own time left in the message (tqdm's would assume every run takes as long)
    with tqdm(total=1, dynamic_ncols=True, bar_format="{bar:20}| {n_fmt}/{total_fmt} runs, {elapsed} · {desc}") as bar:
        def progress(done: int, total: int, message: str) -> None:
            bar.total, bar.n = total, done
            bar.set_description_str(message)  # redraws the bar

        if args.estimate:
            bar.write(Bench(config, runner, progress).estimate())
            return
        with other_work() as beside:
            result = run_bench(config, runner, progress, log=bar.write)
            examples = chat_example_lengths(runner) if config.profile == LANDING else []
    out = Path(args.out or REPO_ROOT / "runs" / "bench" / f"{args.profile}-{time.strftime('%Y%m%d-%H%M%S')}")
    paths = write_outputs(result, out, plotlyjs=args.plotlyjs)
    if config.profile == LANDING:
        findings_text = json.loads(paths["json"].read_text())["findings"]
        command = " ".join(["python -m playground bench", shlex.join(sys.argv[2:])])  # as typed after `bench`
        landing = write_landing(landing_record(result, findings_text, beside, examples, command),
                                Path(args.landing_file) if args.landing_file else None)
        print(f"the landing figures for this CPU kind → {landing} (render them: python scripts/render_readme.py)")
    print(f"{len(result.rows)} rows in {result.seconds / 60:.1f} min → {paths['csv'].parent}")
    for path in paths.values():
        print(f"  {path}")
    print("Findings:")  # as results.json and report.html carry them
    for finding in json.loads(paths["json"].read_text())["findings"]:
        print(f"- {finding}")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("bench", help="benchmark drafters and peers; write results.csv/json and report.html",
                              description="Flags override the profile's fields (for every sweep of the profile).")
    add_threads_flag(p)
    durations = measured_durations()
    p.add_argument("--profile", default="default", choices=sorted(profiles()),
                   help="; ".join(profile_label(name, durations) for name in profiles()))
    p.add_argument("--preset", help="named target+drafter pair (default: PLAYGROUND_DEFAULT_PRESET or smollm2-135m)")
    p.add_argument("--target", help="a Hugging Face model folder or Hub id instead of the preset's target")
    untrained = ", ".join(offered_methods("local", ()))
    p.add_argument("--drafters", help="comma list: none, preset drafter names, drafter folders, the methods that "
                                      f"need no checkpoint ({untrained}: our engine, chains at each k), "
                                      f"{', '.join(PEERS)}")
    p.add_argument("--k", help=f"comma list of speculative tokens per step (1..{MAX_K}); auto in it adds each preset "
                               "EAGLE drafter at k auto (each prompt's k chosen as generate --k auto chooses it, from "
                               "step costs measured in the run), set beside the fastest fixed k")
    p.add_argument("--tree-nodes", help="comma list: beside each EAGLE drafter's chain at each k, a draft tree of N "
                                        "nodes, k deep (docs/trees.md)")
    p.add_argument("--prompts", help="comma list of prompt sets: built-in names "
                   f"({', '.join(builtin_sets())}) or .jsonl / SPEED-Bench .parquet files")
    p.add_argument("--templates", help=f"comma list of chat templates: {TEMPLATES_HELP}")
    p.add_argument("--max-new-tokens", type=int)
    p.add_argument("--temperature", type=float, help="0 = greedy (default); > 0 samples, lossless is then None")
    p.add_argument("--top-p", type=float)
    add_min_draft_prob_flag(p)
    add_method_flags(p)  # the weightless methods' settings (default: the registry's)
    p.add_argument("--repeats", type=int, help="timed passes; tokens/s is the median over them")
    p.add_argument("--limit", type=int, help="first N prompts of each set")
    p.add_argument("--turns", choices=["all", "first"], help="multi-turn records: all turns (default) or the first")
    p.add_argument("--seed", type=int)
    p.add_argument("--assistant", help="a small draft model (HF folder / Hub id) for the hf-assisted peer")
    p.add_argument("--device", choices=DEVICES, help="default: the preset's")
    p.add_argument("--dtype", choices=DTYPES, help="default: the preset's")
    p.add_argument("--out", help="output folder (default: runs/bench/<profile>-<time>)")
    p.add_argument("--landing-file", help="with --profile landing: the file to write (default: "
                                          "assets/bench/landing/<this CPU's kind>.json)")
    p.add_argument("--plotlyjs", default="inline", choices=["inline", "cdn"],
                   help="inline plotly.js in report.html (self-contained, ~4.7 MB) or load it from the CDN")
    p.add_argument("--estimate", action="store_true", help="warm up, print the estimated run time, and stop")
    p.set_defaults(func=bench, backend=None)  # always the local engine
