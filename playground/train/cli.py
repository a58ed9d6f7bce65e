"""``python -m playground train ...`` subcommands (corpus, tokenizer, target, drafter, evaluate, card)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _corpus(args: argparse.Namespace) -> None:
    from playground.train import corpus

    print(json.dumps(corpus.corpus_info(), indent=2))


def _tokenizer(args: argparse.Namespace) -> None:
    from playground.train.tokenizer import build_tokenizer

    tok = build_tokenizer(args.out, args.vocab_size)
    print(f"saved tokenizer ({len(tok)} tokens) to {args.out}")


def _target(args: argparse.Namespace) -> None:
    from playground.train.target import TrainConfig, train_target

    cfg = TrainConfig(minutes=args.minutes, steps=args.steps, seed=args.seed, threads=args.threads)
    train_target(args.tokenizer, args.out, args.run_dir, cfg, resume=args.resume)


def _drafter(args: argparse.Namespace) -> None:
    from playground.train.drafter import DrafterTrainConfig, train_drafters

    cfg = DrafterTrainConfig(minutes=args.minutes, steps=args.steps, seed=args.seed, ttt_depth=args.ttt_depth,
                             generations=tuple(args.generations.split(",")), draft_vocab_size=args.draft_vocab_size,
                             batch_size=args.batch_size, threads=args.threads)
    train_drafters(args.target, args.out, args.run_dir, cfg, resume=args.resume)


def _evaluate(args: argparse.Namespace) -> None:
    from playground.train.evaluate import main

    main(args.out, preset_name=args.preset, n_prompts=args.prompts, ks=[int(k) for k in args.k.split(",")],
         max_new_tokens=args.max_new_tokens, speed_k=args.speed_k, repeats=args.repeats, threads=args.threads,
         chat_template=args.chat_template)


def _card(args: argparse.Namespace) -> None:
    from playground.train.card import main

    main(args.root, args.out)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``train`` command; each stage is one sub-subcommand with ``func`` set."""
    train = subparsers.add_parser("train", help="build the corpus, tokenizer and models offline")
    stages = train.add_subparsers(dest="stage", required=True)

    p = stages.add_parser("corpus", help="print corpus statistics")
    p.set_defaults(func=_corpus)

    p = stages.add_parser("tokenizer", help="train the byte-level BPE tokenizer")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--vocab-size", type=int, default=4096)
    p.set_defaults(func=_tokenizer)

    p = stages.add_parser("target", help="train the target model from scratch")
    p.add_argument("--tokenizer", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--run-dir", type=Path, default=Path("runs/target"))
    budget = p.add_mutually_exclusive_group(required=True)
    budget.add_argument("--minutes", type=float, help="wall-clock training budget")
    budget.add_argument("--steps", type=int, help="number of optimizer steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--resume", action="store_true", help="continue from RUN_DIR/checkpoint.pt")
    p.add_argument("--threads", type=int, default=2, help="torch threads (1 holds up better on a busy machine)")
    p.set_defaults(func=_target)

    p = stages.add_parser("drafter", help="train EAGLE-3 and EAGLE-3.1 drafters (TTT) against a frozen target")
    p.add_argument("--target", type=Path, required=True, help="the final target's HF folder")
    p.add_argument("--out", type=Path, required=True, help="writes OUT/eagle3 and OUT/eagle3.1")
    p.add_argument("--run-dir", type=Path, default=Path("runs/drafters"))
    budget = p.add_mutually_exclusive_group(required=True)
    budget.add_argument("--minutes", type=float, help="wall-clock training budget (shared by all generations)")
    budget.add_argument("--steps", type=int, help="number of optimizer steps")
    p.add_argument("--generations", default="eagle3,eagle3.1", help="comma list of eagle3, eagle3.1")
    p.add_argument("--ttt-depth", type=int, default=3, help="training-time-test unroll depth")
    p.add_argument("--draft-vocab-size", type=int, default=2048)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--resume", action="store_true", help="continue from RUN_DIR/checkpoint.pt")
    p.add_argument("--threads", type=int, default=2, help="torch threads (1 holds up better on a busy machine)")
    p.set_defaults(func=_drafter)

    p = stages.add_parser("evaluate", help="held-out acceptance, drift and speedup of a preset's drafters")
    p.add_argument("--preset", default="embedded")
    p.add_argument("--out", type=Path, default=Path("assets/models/embedded/evaluation.json"))
    p.add_argument("--prompts", type=int, default=20, help="number of held-out prompts")
    p.add_argument("--k", default="1,3,4,5,8", help="comma list of speculative depths for the acceptance table")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--speed-k", type=int, default=4, help="k used for the speed comparison")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--chat-template", help="evaluate under a named chat template (e.g. alt)")
    p.set_defaults(func=_evaluate)

    p = stages.add_parser("card", help="render the model card from the training and evaluation logs")
    p.add_argument("--root", type=Path, default=Path("assets/models/embedded"))
    p.add_argument("--out", type=Path, default=Path("assets/models/README.md"))
    p.set_defaults(func=_card)
