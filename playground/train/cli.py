"""``python -m playground train ...`` subcommands (corpus, tokenizer, target)."""

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

    cfg = TrainConfig(minutes=args.minutes, steps=args.steps, seed=args.seed)
    train_target(args.tokenizer, args.out, args.run_dir, cfg, resume=args.resume)


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
    p.set_defaults(func=_target)
