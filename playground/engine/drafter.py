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
from .int4 import TiledKVCache
from .llama import Projection, RotaryTable, rotate
from .native_drafter import NativeDrafter, native_drafter_problem

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
    hidden: torch.Tensor | None  # [b, t, H] pre-norm output (PyTorch's path: what training reads)
    normed: torch.Tensor | None  # [b, t, H] norm(hidden), what lm_head reads (PyTorch's path)
    feedback: torch.Tensor  # what the next draft step is fed: `normed` (EAGLE-3.1) or `hidden` (EAGLE-3)
    attention: torch.Tensor | None  # [b, heads, rows, keys] of the last `attention_rows` queries, averaged over layers
    masses: torch.Tensor | None = None  # [rows, 3] of those queries, already [sink, context, draft] (the C path)

    def mass(self, row: int, context: int) -> torch.Tensor:
        """[sink, context, draft]: query `row`'s (of the last `attention_rows`) attention, averaged over heads, on the
        first slot, on the slots before `context` and on the rest (the drafts of its own chain or branch)."""
        if self.masses is not None:
            return self.masses[row]
        row = self.attention.shape[2] + row if row < 0 else row
        probs = self.attention[0, :, row].mean(0)
        return torch.stack([probs[0], probs[:context].sum(), probs[context:].sum()])


class PackedLinear(nn.Module):
    """A Linear's inference products through 8-bit codes in C (`native.py`: Q8_0 blocks, the input quantised to 8
    bits a block of 32 at a time, as the int4 target's own head multiplies): a quarter of float32's bytes, for a
    drafter beside an int4 target. Its output is float32; `weight` is a meta tensor (shape and dtype, no bytes)."""

    def __init__(self, linear: nn.Linear, lib) -> None:
        super().__init__()
        self.lib, self.in_features, self.out_features = lib, linear.in_features, linear.out_features
        self.weight = torch.empty(linear.weight.shape, dtype=linear.weight.dtype, device="meta")
        self.bias = None if linear.bias is None else linear.bias.detach().float()
        weight = linear.weight.detach().float().contiguous()
        self.packed = torch.empty(lib.pg_q8_bytes(*weight.shape), dtype=torch.uint8)
        lib.pg_pack_q8(weight.data_ptr(), *weight.shape, self.packed.data_ptr())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).float().contiguous()
        out = torch.empty(rows.shape[0], self.out_features)
        if self.lib.pg_product(8, self.packed.data_ptr(), self.out_features, self.in_features, rows.data_ptr(),
                               rows.shape[0], out.data_ptr(), torch.get_num_threads()):
            raise MemoryError("out of memory for a product's scratch")
        out = out if self.bias is None else out + self.bias
        return out.view(*x.shape[:-1], self.out_features)


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
        self.native: NativeDrafter | None = None  # its inference calls in C, once prepared beside an int4 target

    def new_cache(self) -> DrafterCache | TiledKVCache:
        return self.native.new_cache() if self.native is not None else DrafterCache(len(self.layers))

    def prepare_for_decoding(self, int8: bool = False) -> None:
        """Once the weights are final and on their device, the layout of a draft step's one-row products, fixed by
        where it runs (never by a timing): beside a target on int4 weights (`int8`), every product in 8-bit codes in
        C where the library builds (`use_packed_products`); else, on a CPU, the vocabulary head's one-row product
        through its transposed weight (SmolLM2's drafters: 0.55 ms instead of 1.1 ms on a 2-core AMD EPYC). Never
        for training: neither follows weight updates."""
        if int8 and (self.use_native_calls() or self.use_packed_products()):
            return
        if self.lm_head.weight.device.type == "cpu" and self.lm_head.weight.dtype == torch.float32:
            head = Projection(self.lm_head.weight.detach(), None)
            head.use_columns()
            self.head = head

    def use_native_calls(self) -> bool:
        """Its projection and layer calls in C from now on (`NativeDrafter`: 8-bit products, a half-precision cache),
        where the library builds and the drafter is one grouped-query layer; its float weights are given back."""
        lib, _ = native.load()
        if lib is None or self.fc.weight.device.type != "cpu" or native_drafter_problem(self) is not None:
            return False
        self.native = NativeDrafter(self, lib)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                module.weight = nn.Parameter(module.weight.detach().to("meta"), requires_grad=False)
        self.head, self.weights = None, "int8"
        return True

    def use_packed_products(self) -> bool:
        """Every product of a draft step (fc, the layers', the vocabulary head) in 8-bit codes from now on
        (`PackedLinear`), where the C library builds here (`native.load`); False where it does not.

        A drafter's precision changes which drafts it proposes, never the answer: the target verifies every draft.
        Its products are bound by the bytes they read (about 36 MB for SmolLM2's drafters in float32), so a quarter of
        the bytes is what makes drafting pay beside an int4 target. Its acceptance is measured in docs/health.md."""
        lib, _ = native.load()
        if lib is None or self.fc.weight.device.type != "cpu" or any(
                m.in_features % native.BLOCK for m in self.modules() if isinstance(m, nn.Linear)):
            return False
        linears = [self.fc, self.lm_head, *(m for layer in self.layers for m in layer.modules()
                                              if isinstance(m, nn.Linear))]
        parents = {id(child): (parent, name) for parent in self.modules() for name, child in parent.named_children()}
        for linear in linears:
            parent, name = parents[id(linear)]
            setattr(parent, name, PackedLinear(linear, lib))
        self.head, self.weights = None, "int8"
        return True

    def use_target_embeddings(self, embedding: nn.Embedding) -> None:
        """Share the target's input embedding (drafters that ship without `embed_tokens`)."""
        self.embed_tokens = embedding

    def project(self, aux_hidden: torch.Tensor) -> torch.Tensor:
        """Fuse the concatenated aux hidden states of the target [.., n_aux*Ht] into the drafter width H."""
        if self.native is not None:  # prepared for decoding: its calls in C (never trained again)
            return self.native.project(aux_hidden)
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
        context: int | None = None,  # cache slots before this are the context: what attention masses split by
    ) -> DraftOutput:
        if self.native is not None:
            return self.native.forward(input_ids, hidden, positions, cache, mask, attention_rows, logits_rows, context)
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
