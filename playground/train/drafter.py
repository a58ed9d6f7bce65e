"""Training EAGLE-3 / EAGLE-3.1 drafters the EAGLE-3 way: self-distillation with training-time test (TTT).

The teacher signal is the target's own: aux features f_t and its next-token distribution, recorded while it
answered the prompt set (`distill.py`), so training never runs the target. The drafter is unrolled `depth` steps:
step j reads the ground-truth token t+1+j (teacher forcing) and the hidden state it produced itself at step j-1
(pre-norm for EAGLE-3, post-norm with `norm_output` for EAGLE-3.1), and attends to the step-0 keys causally plus
its own earlier-step keys at the same position (the diagonal). Loss: soft cross entropy against the target's
distribution restricted to the draft vocabulary, weighted 0.8**j, on the target's answer tokens only.

Both variants train in lockstep: same initial weights (the 3.1 norms add no random draws), same batches in the same
order, same steps — a controlled comparison of the two EAGLE-3.1 flags.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from playground.drafting import CHECKPOINTED, METHODS
from playground.engine.checkpoint import load_drafter, save_drafter
from playground.engine.drafter import MLA_FIELDS, DrafterConfig, Eagle3Drafter
from playground.engine.target import Target

STEP_DECAY = 0.8
# each EAGLE variant by name, with the config flags that set it apart (EAGLE-3: none; EAGLE-3.1: fc_norm, norm_output)
VARIANTS = {name: dict.fromkeys(METHODS[name].flags, True) for name in CHECKPOINTED}
CHECKPOINT_NAME = "checkpoint.pt"


@dataclass
class DraftVocab:
    used: torch.Tensor  # sorted target ids kept in the draft vocabulary
    d2t: torch.Tensor  # offsets: target id = draft id + d2t[draft id]
    t2d: torch.Tensor  # bool[V]: target id is in the draft vocabulary

    @classmethod
    def of(cls, used: torch.Tensor, vocab_size: int) -> DraftVocab:
        """The draft vocabulary made of the sorted target ids `used`."""
        t2d = torch.zeros(vocab_size, dtype=torch.bool)
        t2d[used] = True
        return cls(used=used, d2t=used - torch.arange(len(used)), t2d=t2d)


def build_draft_vocab(counts: Counter[int], draft_vocab_size: int, vocab_size: int) -> DraftVocab:
    """The `draft_vocab_size` most frequent tokens (ties broken by id), sorted ascending, as EAGLE builds it."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    chosen = [token for token, _ in ranked[:draft_vocab_size]]
    for token in range(vocab_size):  # pad with the lowest unused ids if the data has fewer distinct tokens
        if len(chosen) >= draft_vocab_size:
            break
        if token not in counts:
            chosen.append(token)
    return DraftVocab.of(torch.tensor(sorted(chosen), dtype=torch.long), vocab_size)


@dataclass
class TeacherBatch:
    aux: torch.Tensor  # [b, t, n_aux*Ht]: target features at positions 0..t-1
    input_ids: torch.Tensor  # [b, t]: token at position +1 (what the drafter embeds)
    valid: torch.Tensor  # [b, t] bool: the loss counts here (an answer token the draft vocabulary can express)
    target_p: torch.Tensor  # [valid.sum(), draft_vocab]: the target's distribution of the token at position +2,
    #                         at the valid positions only, in row-major order (the loss needs nothing else)


@torch.no_grad()
def teacher_batch(target: Target, aux_layers: list[int], tokens: torch.Tensor, loss_mask: torch.Tensor,
                  t2d: torch.Tensor) -> TeacherBatch:
    """Run the frozen target over [b, L] tokens and align its outputs for the drafter (length L-1)."""
    out = target.features(tokens, aux_layers)
    logits = out.logits[:, 1:]
    valid = loss_mask[:, 1:].bool() & t2d[logits.argmax(-1)]
    return TeacherBatch(aux=out.aux[:, :-1], input_ids=tokens[:, 1:], valid=valid,
                        target_p=torch.softmax(logits[valid][:, t2d], -1))


class TargetHead:
    """The target's final norm and output embedding rows of the draft vocabulary: recorded final states -> p."""

    def __init__(self, target: Target, used: torch.Tensor) -> None:
        self.norm = target.model.model.norm
        self.weight = target.model.get_output_embeddings().weight[used].detach()

    @torch.no_grad()
    def probabilities(self, final: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.norm(final.float()) @ self.weight.T, dim=-1)


class DistilledData:
    """Shards from `distill.py` (or `long_context.py`) cut into [n, seq_len] blocks, kept on `device` (features stay
    bf16 there: a GPU holds millions of recorded tokens).

    `pack`: sequences back to back, cut every seq_len tokens (short answers fill a block). Otherwise each sequence
    is a block of its own from position 0, cut at seq_len, so the drafter sees the positions the target saw; a
    batch is as wide as its longest block."""

    def __init__(self, folder: Path, seq_len: int, device: str = "cpu", pack: bool = True) -> None:
        shards = sorted(folder.glob("*.safetensors"))
        if not shards:
            raise FileNotFoundError(f"no distilled shards in {folder}: run `python -m playground train distill` first")
        parts = [load_file(path) for path in shards]
        tokens = torch.cat([p["tokens"].long() for p in parts])
        answer = torch.cat([p["loss_mask"].bool() for p in parts])
        aux, final = torch.cat([p["aux"] for p in parts]), torch.cat([p["final"] for p in parts])
        shard_start = torch.tensor([0] + [len(p["tokens"]) for p in parts]).cumsum(0)
        begins = torch.cat([p["offsets"][:-1] + shard_start[i] for i, p in enumerate(parts)])
        ends = torch.cat([p["offsets"][1:] + shard_start[i] for i, p in enumerate(parts)])
        signal = answer.clone()
        signal[ends - 1] = False  # the last token of a sequence was never fed: no recorded distribution after it
        self.sequences, self.shards = len(ends), len(shards)
        if pack:
            n = len(tokens) // seq_len * seq_len
            self.lengths = torch.full((n // seq_len,), seq_len)
            blocks = lambda x: x[:n].view(n // seq_len, seq_len, *x.shape[1:])  # noqa: E731
        else:
            self.lengths = (ends - begins).clamp_max(seq_len)
            inside = torch.arange(seq_len)[None] < self.lengths[:, None]
            index = torch.where(inside, begins[:, None] + torch.arange(seq_len), len(tokens))  # past the end: padding
            blocks = lambda x: torch.cat([x, torch.zeros_like(x[:1])])[index]  # noqa: E731
        self.tokens, self.signal = blocks(tokens).to(device), blocks(signal).to(device)
        self.answer_tokens = int(self.signal.sum())
        self.aux, self.final = blocks(aux).to(device), blocks(final).to(device)

    def __len__(self) -> int:
        return len(self.tokens)

    def answer_token_counts(self) -> Counter[int]:
        return Counter(self.tokens[self.signal].tolist())

    def batch(self, rows: torch.Tensor, head: TargetHead, t2d: torch.Tensor) -> TeacherBatch:
        rows = rows.to(self.tokens.device)
        width = int(self.lengths[rows.cpu()].max())
        tokens, signal = self.tokens[rows, :width], self.signal[rows, :width]
        valid = torch.zeros(signal.shape[0], signal.shape[1] - 1, dtype=torch.bool, device=signal.device)
        valid[:, :-1] = signal[:, 1:-1] & t2d[tokens[:, 2:]]  # answers: the target's argmax; documents: theirs
        return TeacherBatch(aux=self.aux[rows, : width - 1].float(), input_ids=tokens[:, 1:], valid=valid,
                            target_p=head.probabilities(self.final[rows, 1:width][valid]))


def _shift(x: torch.Tensor, j: int, fill) -> torch.Tensor:
    """Shift left by j along dim 1, padding the end."""
    if j == 0:
        return x
    pad = torch.full_like(x[:, :j], fill)
    return torch.cat([x[:, j:], pad], dim=1)


def ttt_loss(drafter: Eagle3Drafter, batch: TeacherBatch, depth: int) -> tuple[torch.Tensor, list[float]]:
    """Unrolled TTT loss; also returns the top-1 agreement with the target at each step (on valid positions).

    Step j at position t predicts the token the target wrote at t+2+j, so it is scored where `valid` holds at t+j;
    the draft vocabulary's logits are computed there only (the rest of the positions still feed attention)."""
    b, t = batch.input_ids.shape
    device = batch.aux.device
    positions = torch.arange(t, device=device)
    causal = torch.ones(t, t, dtype=torch.bool, device=device).tril()
    diagonal = torch.eye(t, dtype=torch.bool, device=device)
    valid_at = batch.valid.nonzero()[:, 1]  # the position of each row of target_p
    cache = drafter.new_cache()
    hidden = drafter.project(batch.aux)
    total, accuracies = torch.zeros((), device=device), []
    for j in range(depth):
        ids = _shift(batch.input_ids, j, 0)
        mask = torch.cat([causal] + [diagonal] * j, dim=1)
        out = drafter(ids, hidden, positions + j, cache, mask=mask, logits_rows=0)
        scored = _shift(batch.valid, j, False)
        p = batch.target_p[valid_at >= j]
        log_q = F.log_softmax(drafter.lm_head(out.normed[scored]).float(), dim=-1)
        denom = max(1, len(p))
        total = total + STEP_DECAY**j * -(p * log_q).sum() / denom
        accuracies.append(float((log_q.argmax(-1) == p.argmax(-1)).sum()) / denom)
        hidden = out.feedback
    return total, accuracies


# --- The training run: both drafter variants in lockstep, on one stream of recorded batches ---------------------


@dataclass
class DrafterTrainConfig:
    """One budget for every drafter variant trained in the run; exactly one of minutes / steps."""

    minutes: float | None = None
    steps: int | None = None
    variants: tuple[str, ...] = CHECKPOINTED
    seed: int = 0
    seq_len: int = 512
    batch_size: int = 8
    lr: float = 1e-3
    warmup_steps: int = 30
    decay_fraction: float = 0.2
    ttt_depth: int = 3
    draft_vocab_size: int = 8192
    eval_every: int = 50
    eval_blocks: int = 16
    checkpoint_minutes: float = 5.0
    threads: int = 1
    device: str = "cpu"  # "cuda": the recorded features, target head and drafters all live on the GPU
    init_from: str | None = None  # a folder with <variant>/ drafters to continue from (weights and draft vocabulary)
    pack: bool = True  # short sequences back to back in every block; False: one sequence per block (long context)

    def __post_init__(self) -> None:
        if (self.minutes is None) == (self.steps is None):
            raise ValueError("set exactly one of minutes or steps")
        unknown = set(self.variants) - set(VARIANTS)
        if unknown:
            raise ValueError(f"unknown drafter variant(s) {sorted(unknown)}; known: {sorted(VARIANTS)}")


def lr_factor(step: int, progress: float, cfg: DrafterTrainConfig) -> float:
    """Linear warm-up, constant, then linear decay over the last `decay_fraction` of the budget."""
    warm = min(1.0, (step + 1) / cfg.warmup_steps)
    return warm * min(1.0, max(0.0, (1.0 - progress) / cfg.decay_fraction))


def new_drafter(target: Target, variant: str, cfg: DrafterTrainConfig, vocab: DraftVocab) -> Eagle3Drafter:
    """A drafter shaped like one target layer (its attention: MLA for a DeepSeek-V3 / Kimi K2 target, with a dense
    MLP as wide as the target's dense layers); same seed for every variant, so only the flags differ."""
    tc = target.config
    mla = {key: getattr(tc, key) for key in MLA_FIELDS} if getattr(tc, "kv_lora_rank", None) else {}
    dc = DrafterConfig(
        hidden_size=target.hidden_size,
        intermediate_size=int(tc.intermediate_size),
        num_attention_heads=int(tc.num_attention_heads),
        num_key_value_heads=int(getattr(tc, "num_key_value_heads", tc.num_attention_heads)),
        head_dim=int(getattr(tc, "head_dim", None) or target.hidden_size // int(tc.num_attention_heads)),
        vocab_size=target.vocab_size,
        draft_vocab_size=len(vocab.used),
        target_hidden_size=target.hidden_size,
        aux_layer_ids=target.default_aux_layer_ids(),
        rms_norm_eps=float(tc.rms_norm_eps),
        rope_theta=float((getattr(tc, "rope_parameters", None) or {}).get("rope_theta", 10000.0)),
        max_position_embeddings=target.max_positions,
        **mla,
        **VARIANTS[variant],
    )
    torch.manual_seed(cfg.seed)
    drafter = Eagle3Drafter(dc, with_embeddings=False)
    drafter.d2t.copy_(vocab.d2t)
    return drafter


@torch.no_grad()
def evaluate_ttt(drafter: Eagle3Drafter, data: DistilledData, head: TargetHead, t2d: torch.Tensor, depth: int,
                 blocks: int, batch_size: int) -> tuple[float, list[float]]:
    losses, accs = [], []
    for i in range(0, min(blocks, len(data)), batch_size):
        rows = torch.arange(i, min(i + batch_size, blocks, len(data)))
        loss, acc = ttt_loss(drafter, data.batch(rows, head, t2d), depth)
        losses.append(float(loss))
        accs.append(acc)
    return sum(losses) / len(losses), [sum(a[j] for a in accs) / len(accs) for j in range(depth)]


def _previous_training(folder: Path) -> dict | None:
    """The training log of the drafter a run started from (itself chained to its own start, if any)."""
    path = folder / "training_log.json"
    return json.loads(path.read_text()) if path.exists() else None


def train_drafters(target_path: str, data_dir: Path, out_root: Path, run_dir: Path, cfg: DrafterTrainConfig,
                   resume: bool = False) -> dict:
    """Train each variant in `cfg.variants` on DATA_DIR/train (validated on DATA_DIR/validation); save to
    out_root/<variant>/ in the official layout, fp16, with the draft vocabulary (`d2t`, `t2d`)."""
    from tqdm import tqdm

    torch.set_num_threads(cfg.threads)
    if cfg.device == "cuda":  # TF32 matmuls: training tolerates them (the teacher features were recorded in fp32)
        torch.set_float32_matmul_precision("high")
    run_dir.mkdir(parents=True, exist_ok=True)
    chats = any(data_dir.glob("shard-*.jsonl"))  # chats.py's conversations, else distill.py's recorded features
    target = Target.load(target_path, device=cfg.device, weights="int4" if chats else "float32")
    for p in target.model.parameters():
        p.requires_grad_(False)
    if chats:
        from playground.train.chat_data import ChatData

        aux_layers = target.default_aux_layer_ids()
        train = ChatData(data_dir, "train", cfg.seq_len, target, aux_layers, cfg.seed)
        val = ChatData(data_dir, "validation", cfg.seq_len, target, aux_layers, cfg.seed)
    else:
        train = DistilledData(data_dir / "train", cfg.seq_len, cfg.device, cfg.pack)
        val = DistilledData(data_dir / "validation", cfg.seq_len, cfg.device, cfg.pack)
    if len(train) < cfg.batch_size or len(val) == 0:
        raise ValueError("not enough distilled data for one training batch and one validation block")
    counts = train.answer_token_counts()
    shipped = {v: load_drafter(Path(cfg.init_from) / v)[0] for v in cfg.variants} if cfg.init_from else {}
    if shipped:  # keep the draft vocabulary the weights were trained with
        first = next(iter(shipped.values()))
        vocab = DraftVocab.of(first.to_target_ids(torch.arange(first.config.draft_vocab_size)), target.vocab_size)
    else:
        vocab = build_draft_vocab(counts, cfg.draft_vocab_size, target.vocab_size)
    coverage = sum(counts[t] for t in vocab.used.tolist()) / max(1, sum(counts.values()))
    head = None if chats else TargetHead(target, vocab.used.to(cfg.device))
    t2d = vocab.t2d.to(cfg.device)
    drafters = {v: new_drafter(target, v, cfg, vocab).to(cfg.device) for v in cfg.variants}
    for v, weights in shipped.items():  # weights only: the optimizer starts afresh (its state is not shipped)
        drafters[v].load_state_dict({k: x.float() for k, x in weights.state_dict().items()}, strict=False)
    for drafter in drafters.values():
        target.attach(drafter)
    trainable = {v: [p for n, p in d.named_parameters() if not n.startswith("embed_tokens")]
                 for v, d in drafters.items()}
    opts = {v: torch.optim.AdamW(trainable[v], lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0) for v in drafters}
    state = {"step": 0, "elapsed_s": 0.0, "tokens_seen": 0, "history": []}
    ckpt_path = run_dir / CHECKPOINT_NAME
    if resume and ckpt_path.exists():
        ckpt = torch.load(ckpt_path, weights_only=True, map_location=cfg.device)
        for v in drafters:
            drafters[v].load_state_dict(ckpt["drafters"][v], strict=False)
            opts[v].load_state_dict(ckpt["optimizers"][v])
        state = ckpt["state"]
        state.setdefault("tokens_seen", state["step"] * cfg.batch_size * cfg.seq_len)  # older checkpoints: packed
        print(f"resumed from {ckpt_path} at step {state['step']}", flush=True)
    print(f"drafters {list(drafters)}: {len(train)} train blocks of {cfg.seq_len} from {train.sequences} answers, "
          f"{train.answer_tokens} loss tokens; draft vocab {len(vocab.used)} covers {coverage:.1%}", flush=True)

    def save_checkpoint() -> None:
        own = {v: {k: x for k, x in d.state_dict().items() if not k.startswith("embed_tokens")}
               for v, d in drafters.items()}
        torch.save({"drafters": own, "optimizers": {v: o.state_dict() for v, o in opts.items()}, "state": state},
                   ckpt_path.with_suffix(".tmp"))
        ckpt_path.with_suffix(".tmp").replace(ckpt_path)

    budget_s = cfg.minutes * 60 if cfg.minutes is not None else None
    progress = (lambda: state["elapsed_s"] / budget_s) if budget_s else (lambda: state["step"] / cfg.steps)
    bar = tqdm(total=cfg.steps or 1, initial=state["step"], unit="step", dynamic_ncols=True,
               mininterval=1.0 if sys.stderr.isatty() else 30.0)
    last_ckpt, recent = time.monotonic(), {v: [] for v in drafters}
    while progress() < 1.0:
        t0 = time.monotonic()
        step = state["step"]
        epoch, offset = divmod(step * cfg.batch_size, len(train))
        order = torch.randperm(len(train), generator=torch.Generator().manual_seed(cfg.seed * 1000 + epoch))
        rows = order[(torch.arange(cfg.batch_size) + offset) % len(train)]
        batch = train.batch(rows, head, t2d)
        state["tokens_seen"] += int(train.lengths[rows].sum())
        lr = cfg.lr * lr_factor(step, progress(), cfg)
        for v, drafter in drafters.items():
            loss, _ = ttt_loss(drafter, batch, cfg.ttt_depth)
            for group in opts[v].param_groups:
                group["lr"] = lr
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable[v], 1.0)
            opts[v].step()
            opts[v].zero_grad(set_to_none=True)
            recent[v] = (recent[v] + [loss.item()])[-50:]
        state["step"] += 1
        state["elapsed_s"] += time.monotonic() - t0
        if budget_s:
            per_step = state["elapsed_s"] / state["step"]
            bar.total = state["step"] + max(0, math.ceil((budget_s - state["elapsed_s"]) / per_step))
        bar.set_postfix({v: f"{sum(r) / len(r):.3f}" for v, r in recent.items()}, refresh=False)
        bar.update(1)
        if state["step"] % cfg.eval_every == 0:
            t_eval = time.monotonic()
            row = {"step": state["step"], "elapsed_s": round(state["elapsed_s"], 1), "lr": lr}
            for v, drafter in drafters.items():
                val_loss, val_acc = evaluate_ttt(drafter, val, head, t2d, cfg.ttt_depth, cfg.eval_blocks,
                                                 cfg.batch_size)
                row[v] = {"train_loss": sum(recent[v]) / len(recent[v]), "val_loss": val_loss,
                          "val_top1_by_step": val_acc}
            state["elapsed_s"] += time.monotonic() - t_eval
            state["history"].append(row)
            tqdm.write(json.dumps(row), file=sys.stderr)  # beside the bar, unbuffered
        if time.monotonic() - last_ckpt > cfg.checkpoint_minutes * 60:
            save_checkpoint()
            last_ckpt = time.monotonic()
    bar.close()
    save_checkpoint()
    log = {"steps": state["step"], "wall_clock_seconds": round(state["elapsed_s"], 1),
           "tokens_seen": state["tokens_seen"], "train_blocks": len(train),
           "train_answers": train.sequences, "train_answer_tokens": train.answer_tokens,
           "draft_vocab_coverage": coverage,
           "config": {k: (list(x) if isinstance(x, tuple) else x) for k, x in asdict(cfg).items()},
           "data": str(data_dir), "history": state["history"], "final": {}}
    for v, drafter in drafters.items():
        val_loss, val_acc = evaluate_ttt(drafter, val, head, t2d, cfg.ttt_depth, cfg.eval_blocks, cfg.batch_size)
        log["final"][v] = {"val_loss": val_loss, "val_top1_by_step": val_acc}
        previous = _previous_training(Path(cfg.init_from) / v) if cfg.init_from else None
        save_drafter(drafter.eval(), out_root / v, dtype=torch.float16, t2d=vocab.t2d)
        (out_root / v / "training_log.json").write_text(json.dumps({**log, "variant": v, "continued_from": previous},
                                                                   indent=2))
    print(json.dumps(log["final"]), flush=True)
    return log
