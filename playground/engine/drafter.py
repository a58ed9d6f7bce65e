"""The EAGLE-3 / EAGLE-3.1 drafter: one config-driven module, read the way vLLM reads it.

EAGLE-3   : u = fc(cat(f_low, f_mid, f_high));            feedback = pre-norm output
EAGLE-3.1 : u = fc(cat(rms_1(f_low), rms_2(f_mid), ...));  feedback = norm(output)   (`fc_norm`, `norm_output`)

One draft step (first layer):  x = cat(input_layernorm(embed(token)), hidden_norm(h))   (2H wide)
                               h = h + attn(x);  h = h + mlp(post_attention_layernorm(h))
                               logits = lm_head(norm(h))  over the draft vocabulary; target id = d + d2t[d]

`attn` is Llama's grouped-query attention, or DeepSeek's multi-head latent attention (MLA) for drafters of
DeepSeek-V3 / Kimi K2 targets (vLLM's `deepseek_eagle3`: the same layer with MLA whose down-projections read the
2H-wide input; a dense MLP, never MoE).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from . import native
from .cache import DrafterCache, LayerCache
from .llama import Projection, RotaryTable, int8_rows, measured_faster, prefer_columns, rotate

MLA_FIELDS = ("kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")  # DeepSeek's names


@dataclass
class DrafterConfig:
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int  # the target's vocabulary
    draft_vocab_size: int
    target_hidden_size: int
    num_aux_hidden_states: int = 3
    aux_layer_ids: list[int] | None = None  # vLLM "input of layer" ids, read in layer order; None = [2, N//2, N-3]
    num_hidden_layers: int = 1
    head_dim: int | None = None
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None
    max_position_embeddings: int = 2048
    fc_norm: bool = False  # EAGLE-3.1: one RMSNorm per aux hidden state before fc
    norm_output: bool = False  # EAGLE-3.1: feed back norm(h_out) instead of h_out
    norm_before_fc: bool = False  # one RMSNorm over the whole concat (older gpt-oss drafters)
    norm_before_residual: bool = False
    fc_bias: bool = False
    attention_bias: bool = False
    # MLA (DeepSeek-V3 / Kimi K2 drafters): set kv_lora_rank; q_lora_rank None = a full-rank query projection
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    extra: dict = field(default_factory=dict)  # the rest of config.json, kept for saving

    def __post_init__(self) -> None:
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.fc_norm and self.norm_before_fc:
            raise ValueError("drafter config sets both fc_norm and norm_before_fc; they are mutually exclusive")

    @property
    def variant(self) -> str:
        return "EAGLE-3.1" if (self.fc_norm or self.norm_output) else "EAGLE-3"

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def attention_scale(self) -> float:
        """Softmax scale: 1/sqrt(query width); MLA with YaRN also multiplies by mscale^2 (DeepSeek's rule)."""
        if not self.mla:
            return self.head_dim**-0.5
        scale = (self.qk_nope_head_dim + self.qk_rope_head_dim) ** -0.5
        scaling = self.rope_scaling or {}
        factor, mscale_all_dim = float(scaling.get("factor", 1.0)), float(scaling.get("mscale_all_dim", 0) or 0)
        if scaling.get("rope_type", scaling.get("type")) == "yarn" and mscale_all_dim and factor > 1:
            scale *= (0.1 * mscale_all_dim * math.log(factor) + 1.0) ** 2
        return scale

    def rope_config(self) -> LlamaConfig:
        """A LlamaConfig carrying just the RoPE settings, so HF's rotary embedding handles every rope type."""
        return LlamaConfig(
            hidden_size=self.hidden_size,
            num_attention_heads=self.num_attention_heads,
            head_dim=self.qk_rope_head_dim if self.mla else self.head_dim,
            max_position_embeddings=self.max_position_embeddings,
            rope_theta=self.rope_theta,
            rope_scaling=self.rope_scaling,
        )


class Attention(nn.Module):
    def __init__(self, cfg: DrafterConfig, in_features: int) -> None:
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.scale = cfg.attention_scale
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(in_features, self.n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(in_features, self.n_kv * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(in_features, self.n_kv * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, cfg.hidden_size, bias=bias)

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        cache: LayerCache | None,
        mask: torch.Tensor | None,
        probs_rows: int,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        cos, signed_sin = rope[0][:, None], rope[1][:, None]  # broadcast over heads
        q, k = rotate(q, cos, signed_sin), rotate(k, cos, signed_sin)
        if cache is not None:
            k, v = cache.extend(k, v)
        if mask is None and t > 1:
            mask = _causal_mask(t, k.shape[2], x.device)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=self.n_kv != self.n_heads)
        probs = query_probs(q, k.repeat_interleave(self.n_heads // self.n_kv, dim=1), mask, self.scale, probs_rows) \
            if probs_rows else None
        out = out.transpose(1, 2).reshape(b, t, -1)
        return self.o_proj(out), probs


def _causal_mask(t: int, keys: int, device: torch.device) -> torch.Tensor:
    """Causal over the new queries, a full view of the cache before them."""
    return torch.ones(t, keys, dtype=torch.bool, device=device).tril(keys - t)


def query_probs(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, scale: float, rows: int) -> torch.Tensor:
    """Attention of the last `rows` queries only, [b, heads, rows, keys]: what drift is measured on (a chain's last
    query; every frontier node of a tree's depth). Recomputed explicitly (one small product) so that the attention
    itself keeps the fused kernel."""
    scores = (q[:, :, -rows:] @ k.transpose(-1, -2)) * scale
    if mask is not None:
        last = mask[..., -rows:, :]
        scores = scores.masked_fill(~last, float("-inf")) if mask.dtype == torch.bool else scores + last
    return scores.softmax(-1)


def deinterleave(x: torch.Tensor) -> torch.Tensor:
    """DeepSeek's RoPE rotates interleaved pairs (x0, x1), (x2, x3), ...; gathering the evens then the odds turns
    that into the half-split layout `rotate` applies, as transformers' DeepSeek-V3 does. Queries and keys are
    gathered alike, so their products are unchanged."""
    return torch.cat([x[..., 0::2], x[..., 1::2]], dim=-1)


class MLAttention(nn.Module):
    """DeepSeek's multi-head latent attention, as transformers' DeepseekV3Attention and vLLM's MLA compute it:

    q            = q_b_proj(q_a_layernorm(q_a_proj(x)))      (or q_proj(x) without q_lora_rank) -> [nope | rope]
    [c | k_rope] = kv_a_proj_with_mqa(x);   [k_nope | v] = kv_b_proj(kv_a_layernorm(c))  per head
    k_rope is one rotary key shared by every head; interleaved RoPE on q_rope and k_rope.

    The cache holds the expanded per-head keys and values rather than the latent c: at drafter sizes re-expanding
    the whole context through kv_b_proj on every draft step would cost more than the memory it saves."""

    def __init__(self, cfg: DrafterConfig, in_features: int) -> None:
        super().__init__()
        self.n_heads, self.scale = cfg.num_attention_heads, cfg.attention_scale
        self.nope, self.rope_dim, self.v_dim, self.rank = (cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim,
                                                           cfg.kv_lora_rank)
        query = self.n_heads * (self.nope + self.rope_dim)
        if cfg.q_lora_rank is None:
            self.q_proj = nn.Linear(in_features, query, bias=False)
        else:
            self.q_a_proj = nn.Linear(in_features, cfg.q_lora_rank, bias=cfg.attention_bias)
            self.q_a_layernorm = nn.RMSNorm(cfg.q_lora_rank, eps=cfg.rms_norm_eps)
            self.q_b_proj = nn.Linear(cfg.q_lora_rank, query, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(in_features, self.rank + self.rope_dim, bias=cfg.attention_bias)
        self.kv_a_layernorm = nn.RMSNorm(self.rank, eps=cfg.rms_norm_eps)
        self.kv_b_proj = nn.Linear(self.rank, self.n_heads * (self.nope + self.v_dim), bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.v_dim, cfg.hidden_size, bias=cfg.attention_bias)

    def forward(self, x, rope, cache, mask, probs_rows):
        b, t, _ = x.shape
        q = self.q_proj(x) if hasattr(self, "q_proj") else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(b, t, self.n_heads, self.nope + self.rope_dim).transpose(1, 2)
        latent, k_rope = self.kv_a_proj_with_mqa(x).split([self.rank, self.rope_dim], dim=-1)
        kv = self.kv_b_proj(self.kv_a_layernorm(latent))
        kv = kv.view(b, t, self.n_heads, self.nope + self.v_dim).transpose(1, 2)
        k_nope, v = kv.split([self.nope, self.v_dim], dim=-1)
        cos, signed_sin = rope[0][:, None], rope[1][:, None]
        q_rope = rotate(deinterleave(q[..., self.nope :]), cos, signed_sin)
        k_rope = rotate(deinterleave(k_rope[:, None]), cos, signed_sin).expand(b, self.n_heads, t, self.rope_dim)
        q, k = torch.cat([q[..., : self.nope], q_rope], dim=-1), torch.cat([k_nope, k_rope], dim=-1)
        if cache is not None:
            k, v = cache.extend(k, v)
        if mask is None and t > 1:
            mask = _causal_mask(t, k.shape[2], x.device)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)
        probs = query_probs(q, k, mask, self.scale, probs_rows) if probs_rows else None
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1)), probs


class MLP(nn.Module):
    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """The first layer reads cat(embedding, hidden) (2H wide); later layers are plain Llama layers."""

    def __init__(self, cfg: DrafterConfig, first: bool) -> None:
        super().__init__()
        self.first, self.norm_before_residual = first, cfg.norm_before_residual
        h, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.self_attn = (MLAttention if cfg.mla else Attention)(cfg, 2 * h if first else h)
        self.mlp = MLP(cfg)
        self.input_layernorm = nn.RMSNorm(h, eps=eps)
        self.post_attention_layernorm = nn.RMSNorm(h, eps=eps)
        if first:
            self.hidden_norm = nn.RMSNorm(h, eps=eps)

    def forward(self, embeds, hidden, rope, cache, mask, probs_rows):
        if self.first:
            normed_hidden = self.hidden_norm(hidden)
            residual = normed_hidden if self.norm_before_residual else hidden
            x = torch.cat([self.input_layernorm(embeds), normed_hidden], dim=-1)
        else:
            residual, x = hidden, self.input_layernorm(hidden)
        attn, probs = self.self_attn(x, rope, cache, mask, probs_rows)
        h = residual + attn
        return h + self.mlp(self.post_attention_layernorm(h)), probs


@dataclass
class DraftOutput:
    logits: torch.Tensor | None  # [b, rows, draft_vocab] of the last `logits_rows` queries (all by default); or None
    hidden: torch.Tensor  # [b, t, H] pre-norm output
    normed: torch.Tensor  # [b, t, H] norm(hidden), what lm_head reads
    feedback: torch.Tensor  # what the next draft step is fed: `normed` (EAGLE-3.1) or `hidden` (EAGLE-3)
    attention: torch.Tensor | None  # [b, heads, rows, keys] of the last `attention_rows` queries, averaged over layers


INT8_GAIN = 1.2  # a drafter's products go int8 (beside an int4 target) only where measured this much faster


class Int8Linear(nn.Module):
    """A Linear's inference products through int8 rows, one bf16 scale a row (`int8_rows`); its input rounded to
    bf16 and its output returned in the input's dtype. `weight` is a meta tensor: shape and dtype, no bytes."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = torch.empty(linear.weight.shape, dtype=linear.weight.dtype, device="meta")
        self.projection = Projection(self.weight, None if linear.bias is None else linear.bias.detach())
        self.projection.int8 = int8_rows(linear.weight.detach().float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.projection(x.reshape(-1, self.in_features)).view(*x.shape[:-1], self.out_features)


class Eagle3Drafter(nn.Module):
    def __init__(self, cfg: DrafterConfig, with_embeddings: bool = True) -> None:
        super().__init__()
        self.config = cfg
        h, ht, n_aux = cfg.hidden_size, cfg.target_hidden_size, cfg.num_aux_hidden_states
        self.embed_tokens = nn.Embedding(cfg.vocab_size, h) if with_embeddings else None
        if cfg.fc_norm:
            self.fc_norm = nn.ModuleList(nn.RMSNorm(ht, eps=cfg.rms_norm_eps) for _ in range(n_aux))
        if cfg.norm_before_fc:
            self.input_norm = nn.RMSNorm(n_aux * ht, eps=cfg.rms_norm_eps)
        self.fc = nn.Linear(n_aux * ht, h, bias=cfg.fc_bias)
        self.layers = nn.ModuleList(DecoderLayer(cfg, first=i == 0) for i in range(cfg.num_hidden_layers))
        self.norm = nn.RMSNorm(h, eps=cfg.rms_norm_eps)
        self.lm_head = nn.Linear(h, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        self.rotary = LlamaRotaryEmbedding(cfg.rope_config())
        self.rope = RotaryTable(self.rotary)
        self.head: Projection | None = None  # lm_head's one-row products for inference (`prepare_for_decoding`)
        self.weights = "float32"  # what its products multiply once prepared: its own weights, or "int8" rows

    def new_cache(self) -> DrafterCache:
        return DrafterCache(len(self.layers))

    def prepare_for_decoding(self, int8: bool = False) -> None:
        """Once the weights are final and on their device, the fastest layout for a draft step's one-row products:
        beside a target on int4 weights (`int8`), int8 rows where they measure faster (`use_int8_products`); else,
        or where they do not, W^T where that measures faster (`use_columns_where_faster`). Never for training:
        neither follows weight updates."""
        if int8 and self.use_int8_products():
            return
        self.use_columns_where_faster()

    def use_columns_where_faster(self) -> None:
        """The draft step's one-row vocabulary product, the widest of its products, through lm_head's transposed
        weight where that is measured faster on this machine (`Projection.try_columns`; on a 2-core AMD EPYC,
        0.55 ms instead of 1.1 ms for SmolLM2's drafters); the other products (fc, and the layer's attention and MLP
        projections) change their layout in place where one row runs faster through W^T (`prefer_columns`, timed
        per product; no copy: the modules' weights become views of W^T, and `F.linear` multiplies through it)."""
        head = Projection(self.lm_head.weight.detach(), None)
        self.head = head if head.try_columns() else None
        if self.fc.weight.device.type != "cpu":
            return
        products = [self.fc, *(m for layer in self.layers for m in layer.modules() if isinstance(m, nn.Linear))]
        for module in products:
            prefer_columns([Projection(module.weight.detach(), None, owners=[(module, 0)])], reps=7)

    def use_int8_products(self, gain: float = INT8_GAIN, reps: int = 7) -> bool:
        """Whether one row through every product of a draft step (fc, the layers', the vocabulary head) runs `gain`
        times faster in int8 rows (`int8_rows`: a quarter of float32's bytes, PyTorch's
        `_weight_int8pack_mm`, or `native_layer.c`'s where it builds here: `Projection.multiply_in_c`) than in float32
        on this machine; if so each product takes them from now on.

        A drafter's precision changes which drafts it proposes, never the answer: the target verifies every draft.
        Beside int4 target layers a float32 draft step costs a fifth to a quarter of a one-row target step, and its
        products are bound by the bytes they read (about 36 MB for SmolLM2's drafters), so a quarter of the bytes is
        what makes drafting pay there. Its acceptance on the int4 target is measured in docs/engine.md."""
        if self.fc.weight.device.type != "cpu" or not hasattr(torch.ops.aten, "_weight_int8pack_mm"):
            return False
        linears = [self.fc, self.lm_head, *(m for layer in self.layers for m in layer.modules()
                                              if isinstance(m, nn.Linear))]
        int8 = [Int8Linear(m) for m in linears]
        lib, _ = native.load()  # where the target's C steps build, these products go through its int8 kernel too
        for m in int8:
            m.projection.multiply_in_c(lib)
        rows = [torch.randn(1, m.in_features) for m in linears]
        if not measured_faster(lambda: [m(x) for m, x in zip(linears, rows)],
                               lambda: [m(x) for m, x in zip(int8, rows)], gain, reps):
            return False
        parents = {id(child): (parent, name) for parent in self.modules() for name, child in parent.named_children()}
        for linear, replacement in zip(linears, int8):
            parent, name = parents[id(linear)]
            setattr(parent, name, replacement)
        self.head, self.weights = None, "int8"
        return True

    def use_target_embeddings(self, embedding: nn.Embedding) -> None:
        """Share the target's input embedding (drafters that ship without `embed_tokens`)."""
        self.embed_tokens = embedding

    def project(self, aux_hidden: torch.Tensor) -> torch.Tensor:
        """Fuse the concatenated aux hidden states of the target [.., n_aux*Ht] into the drafter width H."""
        if self.config.fc_norm:
            chunks = aux_hidden.chunk(self.config.num_aux_hidden_states, dim=-1)
            aux_hidden = torch.cat([norm(c) for norm, c in zip(self.fc_norm, chunks)], dim=-1)
        elif self.config.norm_before_fc:
            aux_hidden = self.input_norm(aux_hidden)
        return self.fc(aux_hidden)

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.d2t[draft_ids]

    def forward(
        self,
        input_ids: torch.Tensor,  # [b, t] target ids of the tokens at positions+1
        hidden: torch.Tensor,  # [b, t, H]: project(aux) at step 0, the fed-back state after that
        positions: torch.Tensor,  # [t]
        cache: DrafterCache | None = None,
        mask: torch.Tensor | None = None,
        attention_rows: int = 0,  # return the attention of this many last queries (drift); 0: none
        logits_rows: int | None = None,  # score only the last this many queries; None: all; 0: none (training
        # scores a subset of positions and calls lm_head itself)
    ) -> DraftOutput:
        embeds = self.embed_tokens(input_ids).to(hidden.dtype)  # shared target embeddings may be in another dtype
        rope = self.rope(positions, hidden)
        caches = cache.layers if cache is not None else [None] * len(self.layers)
        probs = []
        h = hidden
        for layer, layer_cache in zip(self.layers, caches):
            h, p = layer(embeds, h, rope, layer_cache, mask, attention_rows)
            probs.append(p)
        normed = self.norm(h)
        return DraftOutput(
            logits=self._logits(normed[:, normed.shape[1] - logits_rows :] if logits_rows else normed)
            if logits_rows != 0 else None,
            hidden=h,
            normed=normed,
            feedback=normed if self.config.norm_output else h,
            attention=torch.stack(probs).mean(0) if attention_rows else None,
        )

    def _logits(self, normed: torch.Tensor) -> torch.Tensor:
        if self.head is None:
            return self.lm_head(normed)
        return self.head(normed.reshape(-1, normed.shape[-1])).view(*normed.shape[:-1], -1)
