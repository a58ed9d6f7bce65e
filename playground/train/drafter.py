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
