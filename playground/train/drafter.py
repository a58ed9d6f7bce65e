"""Training EAGLE-3 / EAGLE-3.1 drafters the EAGLE-3 way: self-distillation with training-time test (TTT).

The frozen target runs once per batch and gives aux features f_t and soft next-token distributions. The drafter
is unrolled `depth` steps: step j reads the ground-truth token t+1+j (teacher forcing) and the hidden state it
produced itself at step j-1 (pre-norm for EAGLE-3, post-norm with `norm_output` for EAGLE-3.1), and attends to
the step-0 keys causally plus its own earlier-step keys at the same position (the diagonal). Loss: soft cross
entropy against the target's distribution restricted to the draft vocabulary, weighted 0.8**j.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from playground.engine.drafter import DrafterCache, Eagle3Drafter
from playground.engine.target import Target

STEP_DECAY = 0.8


@dataclass
class DraftVocab:
    used: torch.Tensor  # sorted target ids kept in the draft vocabulary
    d2t: torch.Tensor  # offsets: target id = draft id + d2t[draft id]
    t2d: torch.Tensor  # bool[V]: target id is in the draft vocabulary


def build_draft_vocab(counts: Counter[int], draft_vocab_size: int, vocab_size: int) -> DraftVocab:
    """The `draft_vocab_size` most frequent tokens (ties broken by id), sorted ascending, as EAGLE builds it."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    chosen = [token for token, _ in ranked[:draft_vocab_size]]
    for token in range(vocab_size):  # pad with the lowest unused ids if the data has fewer distinct tokens
        if len(chosen) >= draft_vocab_size:
            break
        if token not in counts:
            chosen.append(token)
    used = torch.tensor(sorted(chosen), dtype=torch.long)
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[used] = True
    return DraftVocab(used=used, d2t=used - torch.arange(len(used)), t2d=t2d)


@dataclass
class TeacherBatch:
    aux: torch.Tensor  # [b, t, n_aux*Ht]: target features at positions 0..t-1
    input_ids: torch.Tensor  # [b, t]: token at position +1 (what the drafter embeds)
    target_logits: torch.Tensor  # [b, t, V]: target logits for the token at position +2
    loss_mask: torch.Tensor  # [b, t] float


@torch.no_grad()
def teacher_batch(target: Target, aux_layers: list[int], tokens: torch.Tensor, loss_mask: torch.Tensor) -> TeacherBatch:
    """Run the frozen target over [b, L] tokens and align its outputs for the drafter (length L-1)."""
    out = target.features(tokens, aux_layers)
    aux, logits = out.aux, out.logits
    return TeacherBatch(aux=aux[:, :-1], input_ids=tokens[:, 1:], target_logits=logits[:, 1:],
                        loss_mask=loss_mask[:, 1:].float())


def _shift(x: torch.Tensor, j: int, fill) -> torch.Tensor:
    """Shift left by j along dim 1, padding the end."""
    if j == 0:
        return x
    pad = torch.full_like(x[:, :j], fill)
    return torch.cat([x[:, j:], pad], dim=1)


def ttt_loss(drafter: Eagle3Drafter, batch: TeacherBatch, t2d: torch.Tensor, depth: int) -> tuple[torch.Tensor, list[float]]:
    """Unrolled TTT loss; also returns the top-1 agreement with the target at each step (on valid positions)."""
    b, t = batch.input_ids.shape
    device = batch.aux.device
    positions = torch.arange(t, device=device)
    causal = torch.ones(t, t, dtype=torch.bool, device=device).tril()
    diagonal = torch.eye(t, dtype=torch.bool, device=device)
    target_p = torch.softmax(batch.target_logits[..., t2d], dim=-1)  # renormalised over the draft vocabulary
    in_vocab = t2d[batch.target_logits.argmax(-1)]
    cache = DrafterCache()
    hidden = drafter.project(batch.aux)
    total, accuracies = torch.zeros((), device=device), []
    for j in range(depth):
        ids = _shift(batch.input_ids, j, 0)
        mask = torch.cat([causal] + [diagonal] * j, dim=1)
        out = drafter(ids, hidden, positions + j, cache, mask=mask)
        valid = _shift(batch.loss_mask * in_vocab, j, 0.0)
        valid[:, t - j :] = 0.0
        log_q = F.log_softmax(out.logits.float(), dim=-1)
        p = _shift(target_p, j, 0.0)
        per_position = -(p * log_q).sum(-1)
        denom = valid.sum().clamp_min(1.0)
        total = total + STEP_DECAY**j * (per_position * valid).sum() / denom
        agree = (out.logits.argmax(-1) == p.argmax(-1)).float()
        accuracies.append(float((agree * valid).sum() / denom))
        hidden = out.feedback
    return total, accuracies


# --- The training run: both drafter generations in lockstep, on one stream of teacher batches ------------------

GENERATIONS = {"eagle3": {"fc_norm": False, "norm_output": False}, "eagle3.1": {"fc_norm": True, "norm_output": True}}
CHECKPOINT_NAME = "checkpoint.pt"


@dataclass
class DrafterTrainConfig:
    """One budget for every drafter generation trained in the run; exactly one of minutes / steps."""

    minutes: float | None = None
    steps: int | None = None
    generations: tuple[str, ...] = ("eagle3", "eagle3.1")
    seed: int = 0
    seq_len: int = 512
    batch_size: int = 8
    lr: float = 2e-3
    warmup_steps: int = 50
    decay_fraction: float = 0.15
    ttt_depth: int = 3
    draft_vocab_size: int = 2048
    intermediate_size: int | None = None  # default: the target's
    eval_every: int = 100
    eval_blocks: int = 16
    checkpoint_minutes: float = 5.0
    threads: int = 2

    def __post_init__(self) -> None:
        if (self.minutes is None) == (self.steps is None):
            raise ValueError("set exactly one of minutes or steps")
        unknown = set(self.generations) - set(GENERATIONS)
        if unknown:
            raise ValueError(f"unknown drafter generation(s) {sorted(unknown)}; known: {sorted(GENERATIONS)}")


def assistant_mask(ids: list[int], assistant_id: int, end_id: int) -> list[int]:
    """1 on assistant answer tokens (after `<|assistant|>` and its newline, through `<|end|>`), else 0."""
    mask, inside, skip = [], False, 0
    for token in ids:
        if token == assistant_id:
            inside, skip = True, 2  # the role token and the newline after it are not the answer
        mask.append(1 if inside and skip == 0 else 0)
        skip = max(0, skip - 1)
        if token == end_id:
            inside = False
    return mask


def conversation_blocks(tokenizer, conversations, seq_len: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Chat-templated conversations, shuffled and packed into [n, seq_len] token and loss-mask blocks."""
    import random

    assistant_id = tokenizer.convert_tokens_to_ids("<|assistant|>")
    ids_all, mask_all = [], []
    order = list(range(len(conversations)))
    random.Random(seed).shuffle(order)
    texts = [tokenizer.apply_chat_template(conversations[i]["messages"], tokenize=False) for i in order]
    for ids in tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]:
        ids_all += ids
        mask_all += assistant_mask(ids, assistant_id, tokenizer.eos_token_id)
    n = len(ids_all) // seq_len
    return (torch.tensor(ids_all[: n * seq_len]).view(n, seq_len),
            torch.tensor(mask_all[: n * seq_len]).view(n, seq_len))


def new_drafter(target: Target, generation: str, cfg: DrafterTrainConfig, vocab: DraftVocab) -> Eagle3Drafter:
    """A drafter shaped like one target layer; same seed for every generation, so only the flags differ."""
    from playground.engine.drafter import DrafterConfig

    tc = target.config
    dc = DrafterConfig(
        hidden_size=target.hidden_size,
        intermediate_size=cfg.intermediate_size or int(tc.intermediate_size),
        num_attention_heads=int(tc.num_attention_heads),
        num_key_value_heads=int(getattr(tc, "num_key_value_heads", tc.num_attention_heads)),
        vocab_size=target.vocab_size,
        draft_vocab_size=cfg.draft_vocab_size,
        target_hidden_size=target.hidden_size,
        aux_layer_ids=target.default_aux_layer_ids(),
        rms_norm_eps=float(tc.rms_norm_eps),
        rope_theta=float((getattr(tc, "rope_parameters", None) or {}).get("rope_theta", 10000.0)),
        max_position_embeddings=target.max_positions,
        **GENERATIONS[generation],
    )
    torch.manual_seed(cfg.seed)
    drafter = Eagle3Drafter(dc, with_embeddings=False)
    drafter.d2t.copy_(vocab.d2t)
    return drafter


@torch.no_grad()
def evaluate_ttt(drafter: Eagle3Drafter, target: Target, aux: list[int], tokens: torch.Tensor, masks: torch.Tensor,
                 t2d: torch.Tensor, depth: int, batch_size: int) -> tuple[float, list[float]]:
    losses, accs = [], []
    for i in range(0, len(tokens), batch_size):
        batch = teacher_batch(target, aux, tokens[i : i + batch_size], masks[i : i + batch_size])
        loss, acc = ttt_loss(drafter, batch, t2d, depth)
        losses.append(float(loss))
        accs.append(acc)
    return sum(losses) / len(losses), [sum(a[j] for a in accs) / len(accs) for j in range(depth)]


def train_drafters(target_dir: Path, out_root: Path, run_dir: Path, cfg: DrafterTrainConfig,
                   resume: bool = False, data: tuple[list, list] | None = None) -> dict:
    """Train each generation in `cfg.generations` against the frozen target; save to out_root/<generation>/.

    Every generation sees the same batches in the same order from the same initial weights (one teacher
    forward per step feeds them all), so the run is a controlled comparison of the two EAGLE-3.1 flags."""
    import json
    import math
    import sys
    import time

    from tqdm import tqdm

    from playground.engine.checkpoint import save_drafter
    from playground.train import corpus
    from playground.train.target import lr_factor

    torch.set_num_threads(cfg.threads)
    run_dir.mkdir(parents=True, exist_ok=True)
    target = Target.load(str(target_dir))
    for p in target.model.parameters():
        p.requires_grad_(False)
    if data is None:
        data = (corpus.build_conversations("train"), corpus.build_conversations("validation"))
    train_tokens, train_masks = conversation_blocks(target.tokenizer, data[0], cfg.seq_len, cfg.seed)
    val_tokens, val_masks = conversation_blocks(target.tokenizer, data[1], cfg.seq_len, cfg.seed)
    val_tokens, val_masks = val_tokens[: cfg.eval_blocks], val_masks[: cfg.eval_blocks]
    if len(train_tokens) < cfg.batch_size or len(val_tokens) == 0:
        raise ValueError("not enough conversation data for one training batch and one validation block")
    counts = Counter(train_tokens[train_masks.bool()].tolist())
    vocab = build_draft_vocab(counts, cfg.draft_vocab_size, target.vocab_size)
    drafters = {g: new_drafter(target, g, cfg, vocab) for g in cfg.generations}
    aux = {g: target.attach(d) for g, d in drafters.items()}
    trainable = {g: [p for n, p in d.named_parameters() if not n.startswith("embed_tokens")] for g, d in drafters.items()}
    opts = {g: torch.optim.AdamW(trainable[g], lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0) for g in drafters}
    state = {"step": 0, "elapsed_s": 0.0, "history": []}
    ckpt_path = run_dir / CHECKPOINT_NAME
    if resume and ckpt_path.exists():
        ckpt = torch.load(ckpt_path, weights_only=True)
        for g in drafters:
            drafters[g].load_state_dict(ckpt["drafters"][g], strict=False)
            opts[g].load_state_dict(ckpt["optimizers"][g])
        state = ckpt["state"]
        print(f"resumed from {ckpt_path} at step {state['step']}", flush=True)
    print(f"drafters {list(drafters)}: {len(train_tokens)} train blocks of {cfg.seq_len}, "
          f"{int(train_masks.sum())} answer tokens, draft vocab {cfg.draft_vocab_size}", flush=True)

    def save_checkpoint() -> None:
        own = {g: {k: v for k, v in d.state_dict().items() if not k.startswith("embed_tokens")} for g, d in drafters.items()}
        torch.save({"drafters": own, "optimizers": {g: o.state_dict() for g, o in opts.items()}, "state": state},
                   ckpt_path.with_suffix(".tmp"))
        ckpt_path.with_suffix(".tmp").replace(ckpt_path)

    budget_s = cfg.minutes * 60 if cfg.minutes is not None else None
    progress = (lambda: state["elapsed_s"] / budget_s) if budget_s else (lambda: state["step"] / cfg.steps)
    generator = torch.Generator().manual_seed(cfg.seed)
    order = torch.randperm(len(train_tokens), generator=generator)
    bar = tqdm(total=cfg.steps or 1, initial=state["step"], unit="step", dynamic_ncols=True,
               mininterval=1.0 if sys.stderr.isatty() else 15.0)
    last_ckpt, recent = time.monotonic(), {g: [] for g in drafters}
    while progress() < 1.0:
        t0 = time.monotonic()
        step = state["step"]
        rows = order[(torch.arange(cfg.batch_size) + step * cfg.batch_size) % len(order)]
        shared_aux = len({tuple(a) for a in aux.values()}) == 1
        batch = teacher_batch(target, next(iter(aux.values())), train_tokens[rows], train_masks[rows]) if shared_aux else None
        lr = cfg.lr * lr_factor(step, progress(), cfg)  # warm-up, constant, linear decay: as for the target
        for g, drafter in drafters.items():
            b = batch or teacher_batch(target, aux[g], train_tokens[rows], train_masks[rows])
            loss, acc = ttt_loss(drafter, b, vocab.t2d, cfg.ttt_depth)
            for group in opts[g].param_groups:
                group["lr"] = lr
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable[g], 1.0)
            opts[g].step()
            opts[g].zero_grad(set_to_none=True)
            recent[g] = (recent[g] + [loss.item()])[-50:]
        state["step"] += 1
        state["elapsed_s"] += time.monotonic() - t0
        if budget_s:
            bar.total = state["step"] + max(0, math.ceil((budget_s - state["elapsed_s"]) / (state["elapsed_s"] / state["step"])))
        bar.set_postfix({g: f"{sum(r) / len(r):.3f}" for g, r in recent.items()}, refresh=False)
        bar.update(1)
        if state["step"] % cfg.eval_every == 0:
            t_eval = time.monotonic()
            row = {"step": state["step"], "elapsed_s": round(state["elapsed_s"], 1), "lr": lr}
            for g, drafter in drafters.items():
                val_loss, val_acc = evaluate_ttt(drafter, target, aux[g], val_tokens, val_masks, vocab.t2d,
                                                 cfg.ttt_depth, cfg.batch_size)
                row[g] = {"train_loss": sum(recent[g]) / len(recent[g]), "val_loss": val_loss, "val_top1_by_step": val_acc}
            state["elapsed_s"] += time.monotonic() - t_eval
            state["history"].append(row)
            tqdm.write(json.dumps(row))
        if time.monotonic() - last_ckpt > cfg.checkpoint_minutes * 60:
            save_checkpoint()
            last_ckpt = time.monotonic()
    bar.close()
    save_checkpoint()
    log = {"steps": state["step"], "wall_clock_seconds": round(state["elapsed_s"], 1),
           "tokens_seen": state["step"] * cfg.batch_size * cfg.seq_len, "train_blocks": len(train_tokens),
           "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.__dict__.items()},
           "history": state["history"], "final": {}}
    for g, drafter in drafters.items():
        val_loss, val_acc = evaluate_ttt(drafter, target, aux[g], val_tokens, val_masks, vocab.t2d, cfg.ttt_depth,
                                         cfg.batch_size)
        log["final"][g] = {"val_loss": val_loss, "val_top1_by_step": val_acc}
        save_drafter(drafter.eval(), out_root / g, dtype=torch.float16, t2d=vocab.t2d)
        (out_root / g / "training_log.json").write_text(json.dumps({**log, "generation": g}, indent=2))
    print(json.dumps(log["final"]), flush=True)
    return log
