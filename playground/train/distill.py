"""Self-distillation data: the target answers the prompt set, and its features are kept for drafter training.

The target generates greedily, a batch of conversations at a time (left-padded, one KV cache). The same forwards
that choose the tokens also capture, through the Target's hooks, the aux hidden states the drafter reads and the
final pre-norm state from which the target's next-token distribution is recomputed at training time. So the
target's forward, the dominant cost, runs once per token for generation and teacher signal together; training
never runs the target again.

Output: one safetensors shard per batch (`shard-00000.safetensors`, …), written atomically; a shard that exists is
skipped, so an interrupted run resumes. Shard tensors: `tokens` int32 [N], `offsets` int64 [n+1] (sequence i is
tokens[offsets[i]:offsets[i+1]]), `loss_mask` uint8 [N] (1 where the token is the target's own answer), `aux`
bf16 [N, n_aux*H] and `final` bf16 [N, H] (zero for the last token of each sequence, which is never fed).
Multi-turn items get their follow-up answered in a second pass over the first-turn shards (`turn2-*`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import DynamicCache

from playground.engine import Target
from playground.train.draws import prompts_for
from playground.train.prompts import PromptItem

FEATURE_DTYPE = torch.bfloat16
FOLLOW_UP_GROUP = 5  # first-turn batches whose follow-ups make one second-turn batch


@dataclass
class DistillConfig:
    max_new_tokens: int = 256
    batch_size: int = 32
    threads: int = 1
    device: str = "cpu"
    shard: int = 0  # this process takes batches shard, shard + shards, …
    shards: int = 1


@dataclass
class Sequence:
    tokens: list[int]
    prompt_len: int
    aux: torch.Tensor  # [len, n_aux*H]
    final: torch.Tensor  # [len, H]


@torch.inference_mode()
def generate_batch(target: Target, prompts: list[list[int]], aux_layers: list[int],
                   max_new_tokens: int) -> list[Sequence]:
    """Greedy answers for a batch of prompts, with the features of every fed position."""
    model, device = target.model, target.device
    capture = [*aux_layers, target.num_layers]
    width = max(map(len, prompts))
    pad = target.tokenizer.pad_token_id if target.tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    cache = DynamicCache(config=target.config)  # a padded batch: transformers' forward, not the one-sequence fast path
    feats: list[tuple[torch.Tensor, torch.Tensor]] = []
    answers: list[list[int]] = [[] for _ in prompts]
    done = torch.zeros(len(prompts), dtype=torch.bool, device=device)
    eos = torch.tensor(sorted(target.eos_ids), device=device)
    for _ in range(max_new_tokens):
        out, states = target.capture_layers(capture, lambda: model(  # called at once, in this iteration
            input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1,  # noqa: B023
            **{target.cache_keyword: cache}))
        feats.append((torch.cat([states[i] for i in aux_layers], -1).to(FEATURE_DTYPE),
                      states[target.num_layers].to(FEATURE_DTYPE)))
        choice = out.logits[:, -1].argmax(-1)
        for row in (~done).nonzero().flatten().tolist():
            answers[row].append(int(choice[row]))
        done |= torch.isin(choice, eos)
        if bool(done.all()):
            break
        ids = choice[:, None]
        mask = torch.cat([mask, torch.ones_like(ids)], dim=1)
        positions = positions[:, -1:] + 1
    aux_all = torch.cat([a for a, _ in feats], dim=1).cpu()  # [b, width + steps, n_aux*H]
    final_all = torch.cat([f for _, f in feats], dim=1).cpu()
    sequences = []
    for row, (prompt, answer) in enumerate(zip(prompts, answers)):
        fed = len(prompt) + len(answer) - 1  # the last answer token is never fed back
        start = width - len(prompt)
        aux = torch.zeros(fed + 1, aux_all.shape[-1], dtype=FEATURE_DTYPE)
        final = torch.zeros(fed + 1, final_all.shape[-1], dtype=FEATURE_DTYPE)
        aux[:fed], final[:fed] = aux_all[row, start : start + fed], final_all[row, start : start + fed]
        sequences.append(Sequence(prompt + answer, len(prompt), aux, final))
    return sequences


def save_shard(path: Path, sequences: list[Sequence], meta: dict) -> None:
    lengths = torch.tensor([len(s.tokens) for s in sequences])
    loss_mask = torch.cat([torch.arange(len(s.tokens)) >= s.prompt_len for s in sequences]).to(torch.uint8)
    tensors = {
        "tokens": torch.tensor([t for s in sequences for t in s.tokens], dtype=torch.int32),
        "offsets": torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]),
        "loss_mask": loss_mask,
        "aux": torch.cat([s.aux for s in sequences]),
        "final": torch.cat([s.final for s in sequences]),
    }
    tmp = path.with_suffix(".tmp")
    save_file(tensors, tmp, metadata={"meta": json.dumps(meta)})
    tmp.replace(path)


def distill(target: Target | str, out: Path, split: str, cfg: DistillConfig, chat_template: str | None = None,
            items: list[PromptItem] | None = None, collection: str = "base", draw: int = 0) -> None:
    """Answer every prompt of `split` of a collection's `draw` (or `items`), first turns then follow-ups, into shards
    under `out`. Shards are named after the collection and draw, except draw 0 of `base`:
    `turn1-00000.safetensors`, `tasks-turn1-00000.safetensors`, `tasks-d3-turn1-00000.safetensors`."""
    torch.set_num_threads(cfg.threads)
    out.mkdir(parents=True, exist_ok=True)
    if isinstance(target, str):
        target = Target.load(target, device=cfg.device)
    aux_layers = target.default_aux_layer_ids()
    items = prompts_for(split, seed=draw, collection=collection) if items is None else items
    prefix = "" if (collection, draw) == ("base", 0) else f"{collection}-" + (f"d{draw}-" if draw else "")
    batches = [items[i : i + cfg.batch_size] for i in range(0, len(items), cfg.batch_size)]
    for index in range(cfg.shard, len(batches), cfg.shards):  # first turns
        _answer(target, out / f"{prefix}turn1-{index:05d}.safetensors", batches[index], aux_layers, cfg, chat_template)
    # Follow-ups, asked after the target's own first answers; about one item in five has one, so turn-2 shard c
    # gathers the follow-ups of first-turn batches c*FOLLOW_UP_GROUP ... into one full batch.
    groups = range(0, len(batches), FOLLOW_UP_GROUP)
    for c, first in enumerate(groups):
        if c % cfg.shards != cfg.shard:
            continue
        path = out / f"{prefix}turn2-{c:05d}.safetensors"
        sources = [out / f"{prefix}turn1-{i:05d}.safetensors"
                   for i in range(first, min(first + FOLLOW_UP_GROUP, len(batches)))]
        if path.exists() or not all(p.exists() for p in sources):
            continue  # done, or another process has not written its first turns yet (run again to finish)
        second = []
        for source, batch in zip(sources, batches[first : first + FOLLOW_UP_GROUP]):
            for item, answer in zip(batch, read_answers(source, target)):
                if item.follow_up:
                    second.append(PromptItem(item.kind, item.messages + [
                        {"role": "assistant", "content": answer}, {"role": "user", "content": item.follow_up}]))
        _answer(target, path, second, aux_layers, cfg, chat_template)


def _answer(target: Target, path: Path, items: list[PromptItem], aux_layers: list[int], cfg: DistillConfig,
            chat_template: str | None) -> None:
    if path.exists() or not items:
        return
    start = time.perf_counter()
    prompts = [target.encode_chat(item.messages, chat_template=chat_template) for item in items]
    sequences = generate_batch(target, prompts, aux_layers, cfg.max_new_tokens)
    save_shard(path, sequences, {"aux_layers": aux_layers, "kinds": [item.kind for item in items]})
    tokens = sum(len(s.tokens) - s.prompt_len for s in sequences)
    seconds = time.perf_counter() - start
    print(f"{path.name}: {len(sequences)} answers, {tokens} tokens, {seconds:.0f} s ({tokens / seconds:.0f} tok/s)",
          flush=True)


def read_answers(path: Path, target: Target) -> list[str]:
    shard = load_file(path)
    offsets, tokens, mask = shard["offsets"].tolist(), shard["tokens"], shard["loss_mask"].bool()
    return [target.decode(tokens[a:b][mask[a:b]].tolist()) for a, b in zip(offsets, offsets[1:])]
