"""Tiny but real models for fast tests: a random Llama target saved in HF format, and EAGLE-3 / EAGLE-3.1 drafters
trained for a few seconds with the project's own TTT trainer on the target's greedy outputs, so they agree with
the target often (and not always): multi-token acceptances and mid-chain rejections both happen."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from playground.engine import DrafterConfig, Eagle3Drafter, Target, save_drafter
from playground.train.drafter import build_draft_vocab, teacher_batch, ttt_loss
from playground.train.tokenizer import train_tokenizer

SAMPLE_TEXT = [
    "def add(a, b):\n    return a + b\n",
    "The quick brown fox jumps over the lazy dog. " * 4,
    "import os\nprint(os.path.join('a', 'b'))\n",
    "class Stack:\n    def push(self, item):\n        self.items.append(item)\n",
] * 8

DRAFTER_FLAGS = {"eagle3": (False, False), "eagle3.1": (True, True)}


def tiny_target(tokenizer, seed: int = 0, layers: int = 4) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=len(tokenizer), max_position_embeddings=512, tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # sharpen the random model so its greedy choices are rarely near-ties
        model.lm_head.weight.mul_(40)
    return model.eval()


def greedy_rollouts(model: LlamaForCausalLM, n: int, prompt_len: int, new_tokens: int, seed: int) -> torch.Tensor:
    """Batched greedy continuations of random prompts (no cache: the model is tiny)."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(8, model.config.vocab_size, (n, prompt_len), generator=g)
    with torch.no_grad():
        for _ in range(new_tokens):
            tokens = torch.cat([tokens, model(tokens).logits[:, -1:].argmax(-1)], dim=1)
    return tokens


def train_tiny_drafter(target: Target, data: torch.Tensor, fc_norm: bool, norm_output: bool, steps: int = 120,
                       seed: int = 0, draft_vocab_size: int | None = None) -> Eagle3Drafter:
    vocab_size = target.vocab_size
    draft_vocab_size = draft_vocab_size or vocab_size
    vocab = build_draft_vocab(Counter(data.flatten().tolist()), draft_vocab_size, vocab_size)
    torch.manual_seed(seed)
    cfg = DrafterConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                        vocab_size=vocab_size, draft_vocab_size=draft_vocab_size, target_hidden_size=64,
                        max_position_embeddings=512, fc_norm=fc_norm, norm_output=norm_output)
    drafter = Eagle3Drafter(cfg, with_embeddings=False)
    drafter.d2t.copy_(vocab.d2t)
    aux = target.attach(drafter)
    params = [p for n, p in drafter.named_parameters() if not n.startswith("embed_tokens")]
    opt = torch.optim.AdamW(params, lr=3e-3)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        rows = data[torch.randint(0, len(data), (8,), generator=g)]
        loss, _ = ttt_loss(drafter, teacher_batch(target, aux, rows, torch.ones_like(rows), vocab.t2d), depth=3)
        opt.zero_grad()
        loss.backward()
        opt.step()
    drafter.t2d = vocab.t2d
    return drafter.eval()


def build_tiny_pair(root: Path, steps: int = 120) -> Path:
    """Write target/, eagle3/, eagle3.1/ under root in the shipped layouts; returns root."""
    tokenizer = train_tokenizer(SAMPLE_TEXT, vocab_size=400)
    model = tiny_target(tokenizer)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(root / "target")
    tokenizer.save_pretrained(root / "target")
    target = Target.load(str(root / "target"))
    for p in target.model.parameters():
        p.requires_grad_(False)
    data = greedy_rollouts(target.model, n=48, prompt_len=8, new_tokens=40, seed=1)
    for name, (fc_norm, norm_output) in DRAFTER_FLAGS.items():
        drafter = train_tiny_drafter(target, data, fc_norm, norm_output, steps=steps, draft_vocab_size=300)
        save_drafter(drafter, root / name, dtype=torch.float32, t2d=drafter.t2d)
    return root
