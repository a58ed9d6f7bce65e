"""Training batches from `chats.py`'s conversations, their teacher signal computed when a batch is drawn.

The conversations hold token ids only (a few hundred MB for millions of tokens, where recorded features would take
tens of GB). A batch's blocks are read through the int4 target in C — what the default runs — one conversation per
forward from its first token, so every feature is the one the target computes in a live run: the aux states the
drafter reads, and the target's distribution over the draft vocabulary (its own 8-bit head), at every position. A
block packs whole conversations (one longer than a block is cut at its end), so no forward crosses from one
conversation into another; the rest of a block is padding, which the loss never counts."""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from playground.engine import Target
from playground.train.drafter import TeacherBatch


@dataclass
class _Conversation:
    ids: list[int]
    answer: list[bool]  # where the loss counts: the target's own answer tokens


def read_conversations(folder: Path, split: str) -> list[_Conversation]:
    shards = sorted(folder.glob("shard-*.jsonl"))
    if not shards:
        raise FileNotFoundError(f"no conversation shards in {folder}: run `python -m playground train chats` first")
    out = []
    for path in shards:
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            if record["split"] != split:
                continue
            answer = [False] * len(record["ids"])
            for begin, end in record["answers"]:
                answer[begin:end] = [True] * (end - begin)
            out.append(_Conversation(record["ids"], answer))
    return out


class ChatData:
    """Blocks of `seq_len` tokens of whole conversations; `batch` computes their teacher signal with `target`."""

    def __init__(self, folder: Path, split: str, seq_len: int, target: Target, aux_layers: list[int],
                 seed: int = 0) -> None:
        if target.weights != "int4":
            raise ValueError("conversations are read through the int4 target: load it with weights int4")
        self.target, self.aux_layers, self.seq_len = target, aux_layers, seq_len
        conversations = read_conversations(folder, split)
        random.Random(seed).shuffle(conversations)
        self.conversations = conversations
        self.blocks: list[list[int]] = [[]]  # indices of the conversations each block holds
        filled = 0
        for i, c in enumerate(conversations):
            length = min(len(c.ids), seq_len)
            if filled + length > seq_len and self.blocks[-1]:
                self.blocks.append([])
                filled = 0
            self.blocks[-1].append(i)
            filled += length
        self.sequences = len(conversations)
        self.answer_tokens = sum(sum(c.answer[:seq_len]) for c in conversations)
        self.lengths = torch.tensor([min(seq_len, sum(min(len(conversations[i].ids), seq_len) for i in block))
                                     for block in self.blocks])

    def __len__(self) -> int:
        return len(self.blocks)

    def answer_token_counts(self) -> Counter[int]:
        return Counter(token for c in self.conversations for token, counted in zip(c.ids, c.answer) if counted)

    @torch.no_grad()
    def batch(self, rows: torch.Tensor, head, t2d: torch.Tensor) -> TeacherBatch:
        """The blocks `rows` as a TeacherBatch (`head` is not read: the target computes its own distribution)."""
        width = int(self.lengths[rows].max())
        b, target = len(rows), self.target
        aux = torch.zeros(b, width, len(self.aux_layers) * target.hidden_size)
        tokens = torch.zeros(b, width, dtype=torch.long)
        signal = torch.zeros(b, width, dtype=torch.bool)
        probs: list[torch.Tensor] = []
        valid = torch.zeros(b, width - 1, dtype=torch.bool)
        for row, block in enumerate(rows.tolist()):
            at = 0
            for index in self.blocks[block]:
                c = self.conversations[index]
                ids = c.ids[: self.seq_len - at]
                out = target.forward(ids, target.new_cache(), self.aux_layers)
                n = len(ids)
                aux[row, at : at + n] = out.aux
                tokens[row, at : at + n] = torch.tensor(ids)
                signal[row, at : at + n] = torch.tensor(c.answer[:n])
                # the drafter at position t reads token t + 1 and predicts token t + 2, from the target's
                # distribution after t + 1 (its logits at row t + 1): scored where token t + 1 is an answer token (as
                # drafting happens after the answer's tokens) and token t + 2 is in the draft vocabulary
                here = torch.zeros(n, dtype=torch.bool)
                here[: n - 2] = signal[row, at + 1 : at + n - 1] & t2d[tokens[row, at + 2 : at + n]]
                valid[row, at : at + n - 1] = here[: n - 1]
                probs.append(torch.softmax(out.logits[1:n][here[: n - 1]][:, t2d], -1))
                at += n
        # positions are visited in row-major order here and by `ttt_loss`'s boolean indexing: rows, then positions
        return TeacherBatch(aux=aux[:, : width - 1], input_ids=tokens[:, 1:], valid=valid,
                            target_p=torch.cat(probs) if probs else torch.zeros(0, int(t2d.sum())))
