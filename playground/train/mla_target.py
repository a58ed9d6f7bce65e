"""A tiny target of Kimi K2's architecture (DeepSeek-V3: MLA attention, MoE with a shared expert), trained briefly.

Kimi K2.6 is a 1T-parameter DeepseekV3ForCausalLM. This builds the same architecture at toy size, so that the MLA
drafter path (our engine's and vLLM's `deepseek_eagle3`) runs end to end on a laptop CPU:

- MLA with Kimi K2's head geometry where it matters to the kernels: kv_lora_rank 512 + qk_rope_head_dim 64 (vLLM's
  MLA takes 320, 512 or 576 for their sum), a low-rank query (q_lora_rank), interleaved RoPE;
- MoE layers after `first_k_dense_replace` dense ones: routed experts chosen by sigmoid scores with a correction
  bias (`topk_method: noaux_tc`, `scoring_func: sigmoid`, as DeepSeek-V3's and Kimi K2's configs say: vLLM reads
  both, and without them builds no correction bias and scores with softmax), one shared expert;
- SmolLM2's tokenizer and chat template (49,152 tokens), so prompts and drafters' vocabularies match the default pair.

The weights start random except the embeddings: SmolLM2's input embeddings projected onto their top principal
directions (`pca_embeddings`), which gives the tiny model a sense of which tokens are alike before it sees any text.
It is then trained for a few minutes on the project's own stdlib corpus (`corpus.py`, train split) in SmolLM2's chat
template, so that its answers are text rather than noise: code-flavoured, short, often wrong, but stable enough for
a drafter to learn.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")


@dataclass
class MlaTargetConfig:
    """The tiny target's shape (DeepSeek-V3 / Kimi K2 fields) and its training budget."""

    hidden_size: int = 256
    num_hidden_layers: int = 8
    num_attention_heads: int = 4
    q_lora_rank: int = 128
    kv_lora_rank: int = 512  # + qk_rope_head_dim = 576, Kimi K2's and DeepSeek-V3's latent width
    qk_rope_head_dim: int = 64
    qk_nope_head_dim: int = 64
    v_head_dim: int = 64
    intermediate_size: int = 768  # the dense layers' MLP
    first_k_dense_replace: int = 1
    n_routed_experts: int = 8
    num_experts_per_tok: int = 2
    n_shared_experts: int = 1
    moe_intermediate_size: int = 128
    max_position_embeddings: int = 8192  # SmolLM2's context; default RoPE does not depend on it
    rope_theta: float = 50000.0  # Kimi K2's
    # training
    minutes: float = 18.0
    seq_len: int = 512
    batch_size: int = 8
    lr: float = 2e-3
    warmup_steps: int = 50
    seed: int = 0
    threads: int = 2


def deepseek_config(cfg: MlaTargetConfig, tokenizer):
    """The transformers DeepseekV3Config of the tiny target."""
    from transformers import DeepseekV3Config

    config = DeepseekV3Config(
        vocab_size=len(tokenizer), hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        moe_intermediate_size=cfg.moe_intermediate_size, num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads, num_key_value_heads=cfg.num_attention_heads,
        n_shared_experts=cfg.n_shared_experts, n_routed_experts=cfg.n_routed_experts,
        num_experts_per_tok=cfg.num_experts_per_tok, n_group=1, topk_group=1,
        first_k_dense_replace=cfg.first_k_dense_replace, routed_scaling_factor=1.0, norm_topk_prob=True,
        kv_lora_rank=cfg.kv_lora_rank, q_lora_rank=cfg.q_lora_rank, qk_rope_head_dim=cfg.qk_rope_head_dim,
        qk_nope_head_dim=cfg.qk_nope_head_dim, v_head_dim=cfg.v_head_dim,
        max_position_embeddings=cfg.max_position_embeddings, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta}, rope_interleave=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False, num_nextn_predict_layers=0,
    )
    # How DeepSeek-V3's and Kimi K2's configs name their router (transformers' model implies both): vLLM creates the
    # correction bias only for noaux_tc, and scores experts with softmax unless told sigmoid
    config.topk_method, config.scoring_func = "noaux_tc", "sigmoid"
    config.architectures = ["DeepseekV3ForCausalLM"]
    return config


def pca_embeddings(embeddings: torch.Tensor, width: int, std: float = 0.02) -> torch.Tensor:
    """[V, H] embeddings projected onto their `width` top principal directions, scaled to `std` per entry."""
    centred = embeddings.float() - embeddings.float().mean(0)
    _, _, v = torch.linalg.svd(centred[torch.randperm(len(centred))[:8192]], full_matrices=False)
    projected = centred @ v[:width].T
    return projected * (std / projected.std())


def chat_token_stream(tokenizer, split: str, seed: int) -> list[int]:
    """The corpus's conversations of `split` in the tokenizer's chat template, shuffled, one token stream."""
    from playground.train.corpus import build_conversations

    conversations = build_conversations(split)
    random.Random(seed).shuffle(conversations)
    stream: list[int] = []
    for conversation in conversations:
        stream += tokenizer.apply_chat_template(conversation["messages"], tokenize=True, return_dict=False)
    return stream


def _blocks(stream: list[int], seq_len: int) -> torch.Tensor:
    n = len(stream) // seq_len
    return torch.tensor(stream[: n * seq_len]).view(n, seq_len)


@torch.no_grad()
def _validation_loss(model, blocks: torch.Tensor, batch_size: int) -> float:
    model.eval()
    losses = [float(model(input_ids=blocks[i : i + batch_size], labels=blocks[i : i + batch_size]).loss)
              for i in range(0, len(blocks), batch_size)]
    model.train()
    return sum(losses) / len(losses)


def build(out: Path, smollm2_folder: str, cfg: MlaTargetConfig, init_from: Path | None = None) -> dict:
    """Build, train and save the tiny target to OUT (config, safetensors in bfloat16, SmolLM2's tokenizer files,
    training_log.json). `init_from`: continue training a target this wrote (its weights and shape; the corpus is
    visited in another order), its log kept as `continued_from`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, DeepseekV3ForCausalLM

    from playground.machine import machine_info
    from playground.train.card import training_stages

    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    tokenizer = AutoTokenizer.from_pretrained(smollm2_folder)
    previous = None
    if init_from is not None:
        model = DeepseekV3ForCausalLM.from_pretrained(init_from, dtype=torch.float32)
        previous = json.loads((init_from / "training_log.json").read_text())
    else:
        model = DeepseekV3ForCausalLM(deepseek_config(cfg, tokenizer))
        smollm2 = AutoModelForCausalLM.from_pretrained(smollm2_folder, dtype=torch.float32)
        with torch.no_grad():
            start = pca_embeddings(smollm2.get_input_embeddings().weight, cfg.hidden_size)
            model.get_input_embeddings().weight.copy_(start)
            model.get_output_embeddings().weight.copy_(start)
        del smollm2
    train = _blocks(chat_token_stream(tokenizer, "train", cfg.seed), cfg.seq_len)
    validation = _blocks(chat_token_stream(tokenizer, "validation", cfg.seed), cfg.seq_len)[:32]
    params = sum(p.numel() for p in model.parameters())
    print(f"tiny MLA target: {params / 1e6:.1f} M parameters; {len(train)} train blocks of {cfg.seq_len} tokens",
          flush=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.1)
    stage = 0 if previous is None else len(training_stages(previous))
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(cfg.seed * 100 + stage))
    history, step, elapsed, budget = [], 0, 0.0, cfg.minutes * 60
    model.train()
    while elapsed < budget:
        t0 = time.monotonic()
        rows = order[(torch.arange(cfg.batch_size) + step * cfg.batch_size) % len(train)]
        lr = (cfg.lr * min(1.0, (step + 1) / cfg.warmup_steps) * 0.5
              * (1 + math.cos(math.pi * min(1.0, elapsed / budget))))
        for group in optimizer.param_groups:
            group["lr"] = lr
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=train[rows], labels=train[rows]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        elapsed += time.monotonic() - t0
        if step % 50 == 0:
            row = {"step": step, "elapsed_s": round(elapsed, 1), "lr": lr, "train_loss": float(loss)}
            if step % 200 == 0:
                row["val_loss"] = _validation_loss(model, validation, cfg.batch_size)
            history.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    model.eval()
    log = {"parameters": params, "steps": step, "wall_clock_seconds": round(elapsed, 1),
           "tokens_seen": step * cfg.batch_size * cfg.seq_len, "train_tokens": train.numel(),
           "final_val_loss": _validation_loss(model, validation, cfg.batch_size), "config": asdict(cfg),
           "history": history, "machine": machine_info("cpu"), "continued_from": previous}
    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(out)
    for name in TOKENIZER_FILES:
        if (Path(smollm2_folder) / name).exists():
            shutil.copy(Path(smollm2_folder) / name, out / name)
    (out / "training_log.json").write_text(json.dumps(log, indent=2) + "\n")
    print(json.dumps({k: log[k] for k in ("steps", "tokens_seen", "final_val_loss")}), flush=True)
    return log
