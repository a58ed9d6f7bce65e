"""Train the embedded target model (a small ``LlamaForCausalLM``) from scratch on CPU.

Data: every training conversation rendered with the tokenizer's *default* chat template, plus
plain code documents wrapped as ``<|bos|>text<|end|>``. Sequences are shuffled per epoch
(seeded), concatenated and cut into blocks of ``seq_len`` tokens; the loss covers all tokens.
512-token blocks hold most conversations whole (so the model sees complete
system/user/assistant turns and the ``<|end|>`` that closes them) while keeping attention
cost small on a 2-core CPU; longer blocks would mostly add padding-free concatenations of
unrelated documents.

Learning rate: linear warm-up, constant, then linear decay to zero over the last
``decay_fraction`` of the budget (measured to be worth ~0.35 nats of validation loss here).
With a time budget, "progress" is elapsed training seconds / budget, so the decay still
lands at the end of the run however fast the machine is.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import (
    AutoTokenizer,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerBase,
)

from playground.train import corpus

CHECKPOINT_NAME = "checkpoint.pt"

# (train conversations, train documents, validation conversations, validation documents)
TrainData = tuple[
    Sequence[corpus.Conversation], Sequence[corpus.Document],
    Sequence[corpus.Conversation], Sequence[corpus.Document],
]


@dataclass(frozen=True)
class ModelSize:
    hidden_size: int = 256
    num_hidden_layers: int = 12
    num_attention_heads: int = 4
    num_key_value_heads: int = 4
    intermediate_size: int = 768
    max_position_embeddings: int = 2048


@dataclass
class TrainConfig:
    """Training hyper-parameters; exactly one of ``minutes`` / ``steps`` sets the budget."""

    minutes: float | None = None
    steps: int | None = None
    seed: int = 0
    seq_len: int = 512
    batch_size: int = 8
    lr: float = 2e-3
    warmup_steps: int = 100
    decay_fraction: float = 0.15
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    eval_every: int = 100
    eval_blocks: int = 32
    checkpoint_minutes: float = 5.0
    threads: int = 2

    def __post_init__(self) -> None:
        if (self.minutes is None) == (self.steps is None):
            raise ValueError("set exactly one of minutes or steps")


@dataclass
class TrainState:
    step: int = 0
    tokens_seen: int = 0
    elapsed_s: float = 0.0
    history: list[dict[str, float]] = field(default_factory=list)


def model_config(tokenizer: PreTrainedTokenizerBase, size: ModelSize) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=size.hidden_size,
        num_hidden_layers=size.num_hidden_layers,
        num_attention_heads=size.num_attention_heads,
        num_key_value_heads=size.num_key_value_heads,
        intermediate_size=size.intermediate_size,
        max_position_embeddings=size.max_position_embeddings,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def encode_examples(
    tokenizer: PreTrainedTokenizerBase,
    conversations: Sequence[corpus.Conversation],
    documents: Sequence[corpus.Document],
) -> list[list[int]]:
    """Token ids of each conversation (default chat template) and each document."""
    texts = [
        tokenizer.apply_chat_template(c["messages"], tokenize=False) for c in conversations
    ]
    texts += [tokenizer.bos_token + d.text + tokenizer.eos_token for d in documents]
    # verbose=False: documents longer than model_max_length are fine, they get packed into blocks.
    return tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]


def pack(sequences: Sequence[list[int]], seq_len: int, order_seed: int | None) -> torch.Tensor:
    """Concatenate ``sequences`` (shuffled when ``order_seed`` is set) into [n, seq_len] blocks."""
    order = list(range(len(sequences)))
    if order_seed is not None:
        random.Random(order_seed).shuffle(order)
    flat = [tok for i in order for tok in sequences[i]]
    n = len(flat) // seq_len
    return torch.tensor(flat[: n * seq_len], dtype=torch.long).view(n, seq_len)


class BlockStream:
    """Deterministic batches: step ``s`` always gets the same blocks, which makes resuming exact."""

    def __init__(self, sequences: Sequence[list[int]], seq_len: int, batch_size: int, seed: int):
        self.sequences, self.seq_len, self.batch_size, self.seed = sequences, seq_len, batch_size, seed
        self.blocks_per_epoch = sum(map(len, sequences)) // seq_len
        if self.blocks_per_epoch < batch_size:
            raise ValueError("training data is smaller than one batch")
        self._epoch, self._blocks = -1, torch.empty(0)

    def _epoch_blocks(self, epoch: int) -> torch.Tensor:
        if epoch != self._epoch:
            self._epoch = epoch
            self._blocks = pack(self.sequences, self.seq_len, order_seed=self.seed * 100_003 + epoch)
        return self._blocks

    def batch(self, step: int) -> torch.Tensor:
        rows = []
        for g in range(step * self.batch_size, (step + 1) * self.batch_size):
            epoch, i = divmod(g, self.blocks_per_epoch)
            rows.append(self._epoch_blocks(epoch)[i])
        return torch.stack(rows)


def lr_factor(step: int, progress: float, cfg: TrainConfig) -> float:
    warm = min(1.0, (step + 1) / cfg.warmup_steps)
    decay = min(1.0, max(0.0, (1.0 - progress) / cfg.decay_fraction))
    return warm * decay


@torch.no_grad()
def evaluate(model: LlamaForCausalLM, blocks: torch.Tensor, batch_size: int) -> float:
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(blocks), batch_size):
        x = blocks[i : i + batch_size]
        total += model(input_ids=x, labels=x).loss.item() * len(x)
        count += len(x)
    model.train()
    return total / max(count, 1)


def _save_checkpoint(path: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, state: TrainState) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "state": asdict(state),
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
        },
        tmp,
    )
    os.replace(tmp, path)  # atomic: a crash mid-save never corrupts the last checkpoint


def _load_checkpoint(path: Path, model: torch.nn.Module, opt: torch.optim.Optimizer) -> TrainState:
    ckpt = torch.load(path, weights_only=True)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["rng"]["torch"])
    random.setstate(ckpt["rng"]["python"])
    return TrainState(**ckpt["state"])


def _save_final(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerBase, out_dir: Path, log: dict[str, object]
) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
    )
    # float16 halves the shipped file; the engine loads it back as float32.
    model.to(torch.float16).save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    (out_dir / "training_log.json").write_text(json.dumps(log, indent=2))


def train_target(
    tokenizer_dir: Path,
    out_dir: Path,
    run_dir: Path,
    cfg: TrainConfig,
    size: ModelSize = ModelSize(),
    resume: bool = False,
    data: TrainData | None = None,
) -> dict[str, object]:
    """Train, checkpoint into ``run_dir``, save the HF model to ``out_dir``; returns the log.

    ``data`` defaults to the full corpus (tests pass a small slice). With ``resume`` the run
    continues from ``run_dir/checkpoint.pt`` with the same budget (elapsed time/steps included).
    """
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    if data is None:
        data = (
            corpus.build_conversations("train"),
            corpus.build_documents("train"),
            corpus.build_conversations("validation"),
            corpus.build_documents("validation"),
        )
    train_convs, train_docs, val_convs, val_docs = data
    train_seqs = encode_examples(tokenizer, train_convs, train_docs)
    val_blocks = pack(encode_examples(tokenizer, val_convs, val_docs), cfg.seq_len, order_seed=cfg.seed)
    if len(val_blocks) == 0:
        raise ValueError("validation data is smaller than one block")
    stream = BlockStream(train_seqs, cfg.seq_len, cfg.batch_size, cfg.seed)
    train_tokens = sum(map(len, train_seqs))
    print(
        f"train: {len(train_convs)} conversations + {len(train_docs)} documents = {train_tokens} tokens "
        f"({stream.blocks_per_epoch} blocks); validation: {len(val_blocks)} blocks",
        flush=True,
    )

    model = LlamaForCausalLM(model_config(tokenizer, size))
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=cfg.betas,
    )
    ckpt_path = run_dir / CHECKPOINT_NAME
    state = TrainState()
    if resume and ckpt_path.exists():
        state = _load_checkpoint(ckpt_path, model, opt)
        print(f"resumed from {ckpt_path} at step {state.step}", flush=True)
    model.train()

    budget_s = cfg.minutes * 60 if cfg.minutes is not None else None

    def progress() -> float:
        if budget_s is not None:
            return state.elapsed_s / budget_s
        return state.step / cfg.steps  # type: ignore[operator]

    eval_blocks = val_blocks[: cfg.eval_blocks]
    bar = tqdm(total=cfg.steps or max(state.step + 1, 1), initial=state.step, unit="step",
               mininterval=1.0 if sys.stderr.isatty() else 15.0, dynamic_ncols=True)
    recent: list[float] = []
    recent_step_s: list[float] = []
    last_ckpt = time.monotonic()
    while progress() < 1.0:
        t0 = time.monotonic()
        lr = cfg.lr * lr_factor(state.step, progress(), cfg)
        for group in opt.param_groups:
            group["lr"] = lr
        x = stream.batch(state.step)
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        state.step += 1
        state.tokens_seen += x.numel()
        recent = (recent + [loss.item()])[-50:]
        step_s = time.monotonic() - t0
        state.elapsed_s += step_s
        recent_step_s = (recent_step_s + [step_s])[-20:]

        if budget_s is not None:  # re-estimate the total so tqdm's ETA tracks the time budget
            mean_step_s = sum(recent_step_s) / len(recent_step_s)
            bar.total = state.step + max(0, math.ceil((budget_s - state.elapsed_s) / mean_step_s))
        bar.set_postfix(loss=f"{recent[-1]:.3f}", lr=f"{lr:.2e}", tok_s=f"{x.numel() / step_s:.0f}", refresh=False)
        bar.update(1)

        if state.step % cfg.eval_every == 0:
            t_eval = time.monotonic()
            val = evaluate(model, eval_blocks, cfg.batch_size)
            state.elapsed_s += time.monotonic() - t_eval
            train_loss = sum(recent) / len(recent)
            state.history.append({"step": state.step, "elapsed_s": round(state.elapsed_s, 1),
                                  "train_loss": train_loss, "val_loss": val, "lr": lr})
            tqdm.write(f"step {state.step} elapsed {state.elapsed_s:.0f}s train {train_loss:.4f} "
                       f"val {val:.4f} lr {lr:.2e} tokens {state.tokens_seen}")
            sys.stdout.flush()
        if time.monotonic() - last_ckpt > cfg.checkpoint_minutes * 60:
            _save_checkpoint(ckpt_path, model, opt, state)
            last_ckpt = time.monotonic()
    bar.close()
    _save_checkpoint(ckpt_path, model, opt, state)

    final_val = evaluate(model, val_blocks, cfg.batch_size)
    info = corpus.corpus_info()
    log: dict[str, object] = {
        "steps": state.step,
        "tokens_seen": state.tokens_seen,
        "wall_clock_seconds": round(state.elapsed_s, 1),
        "final_train_loss": sum(recent) / len(recent) if recent else None,
        "final_validation_loss": final_val,
        "validation_tokens": val_blocks.numel(),
        "train_tokens_per_epoch": train_tokens,
        "epochs": state.tokens_seen / train_tokens,
        "parameters": n_params,
        "python_version": info["python_version"],
        "torch_version": torch.__version__,
        "corpus": {
            "train_conversations": len(train_convs),
            "train_documents": len(train_docs),
            "validation_conversations": len(val_convs),
            "validation_documents": len(val_docs),
            "stdlib_files": info["stdlib_files"],
            "excluded_dirs": info["excluded_dirs"],
        },
        "model": asdict(size),
        "train_config": asdict(cfg),
        "history": state.history,
    }
    print(f"final validation loss {final_val:.4f} after {state.step} steps", flush=True)
    _save_final(model, tokenizer, out_dir, log)
    return log
