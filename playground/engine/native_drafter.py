"""An EAGLE-3 / EAGLE-3.1 drafter's inference calls in C (csrc/drafter.c), beside an int4 target: its projection of
the target's aux states and its decoder layer in one call each, every product in 8-bit codes, its cache in half
precision, its embedding read from the target's packed table. A call costs a few hundredths of a millisecond of
Python where the same layer through PyTorch's ops costs about a millisecond; the drafts depend on the inputs alone.

`Eagle3Drafter.prepare_for_decoding(int8=True)` makes one where the library builds and the drafter is a single
grouped-query layer (vLLM's `LlamaForCausalLMEagle3`); its float weights are then given back (meta tensors): training
never uses a prepared drafter."""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

import torch
from torch import nn

from . import native
from .int4 import Arena, TiledKVCache, _PackedEmbedding, pack, packed_bytes

if TYPE_CHECKING:
    from .drafter import DraftOutput, Eagle3Drafter


def native_drafter_problem(drafter: Eagle3Drafter) -> str | None:
    """Why this drafter cannot run in C, or None."""
    cfg = drafter.config
    if cfg.mla or cfg.num_hidden_layers != 1:
        return "only one grouped-query layer runs in C"
    if cfg.fc_bias or cfg.attention_bias:
        return "its products have biases"
    if cfg.head_dim > native.MAX_HEAD_DIM or cfg.num_attention_heads % cfg.num_key_value_heads:
        return "its heads do not fit the C attention"
    if not drafter.rope.static:
        return "its rotary frequencies depend on the length"
    if any(m.in_features % native.BLOCK for m in drafter.modules() if isinstance(m, nn.Linear)) or \
            cfg.hidden_size % native.BLOCK:
        return f"a product's input width is not a multiple of {native.BLOCK}"
    return None


class NativeDrafter:
    def __init__(self, drafter: Eagle3Drafter, lib) -> None:
        cfg = drafter.config
        self.lib, self.config, self.rope = lib, cfg, drafter.rope
        layer = drafter.layers[0]
        attn, mlp = layer.self_attn, layer.mlp
        floats = lambda t: t.detach().float().contiguous()  # noqa: E731
        weights = [drafter.fc.weight, torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]),
                   attn.o_proj.weight, torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]), mlp.down_proj.weight,
                   drafter.lm_head.weight]
        arena = Arena([packed_bytes(lib, *w.shape, 8) for w in weights])
        self.packed = [pack(lib, w, 8, arena.take()) for w in weights]
        norms = (torch.cat([floats(n.weight) for n in drafter.fc_norm]) if cfg.fc_norm else
                 floats(drafter.input_norm.weight) if cfg.norm_before_fc else None)
        self.norms = [norms, floats(layer.hidden_norm.weight), floats(layer.input_layernorm.weight),
                      floats(layer.post_attention_layernorm.weight), floats(drafter.norm.weight)]
        embedding = drafter.embed_tokens
        self.embedding = embedding.packed if isinstance(embedding, _PackedEmbedding) else pack(lib, embedding.weight, 8)
        pointer = lambda t: None if t is None else t.data_ptr()  # noqa: E731
        self.c_drafter = native.Drafter(
            cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.intermediate_size,
            cfg.draft_vocab_size, cfg.num_aux_hidden_states * cfg.target_hidden_size, cfg.num_aux_hidden_states,
            float(cfg.rms_norm_eps), float(cfg.attention_scale), int(cfg.fc_norm), int(cfg.norm_before_fc),
            int(cfg.norm_output), int(cfg.norm_before_residual), *(t.data_ptr() for t in self.packed),
            *(pointer(t) for t in self.norms), self.embedding.data_ptr())
        self.max_positions = int(cfg.max_position_embeddings)

    def resident_bytes(self) -> int:
        held = self.packed + [t for t in self.norms if t is not None]
        return sum(t.numel() * t.element_size() for t in held)

    def new_cache(self) -> TiledKVCache:
        cfg = self.config
        return TiledKVCache(1, cfg.num_key_value_heads, cfg.head_dim, max(self.max_positions, 1), torch.float16,
                            torch.device("cpu"))

    @torch.inference_mode()
    def project(self, aux: torch.Tensor) -> torch.Tensor:
        rows = aux.reshape(-1, aux.shape[-1]).float().contiguous()
        hidden = torch.empty(rows.shape[0], self.config.hidden_size)
        if self.lib.pg_draft_project(ctypes.byref(self.c_drafter), rows.data_ptr(), rows.shape[0], hidden.data_ptr(),
                                     torch.get_num_threads()):
            raise MemoryError("out of memory for the drafter's scratch")
        return hidden.view(*aux.shape[:-1], -1)

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor, cache: TiledKVCache,
                mask: torch.Tensor | None, attention_rows: int, logits_rows: int | None,
                context: int | None) -> DraftOutput:
        """`Eagle3Drafter.forward` for one sequence ([1, t] ids, [1, t, H] states), on this drafter's cache."""
        from .drafter import DraftOutput

        cfg, rows, start = self.config, input_ids.shape[-1], cache.length
        ids = input_ids.reshape(-1).to(torch.int64).contiguous()
        states = hidden.reshape(rows, -1).float().contiguous()
        positions = positions.to(torch.int64).contiguous()
        cache.reserve(start + rows)
        cos, signed_sin = self.rope.tables(int(positions.max()), torch.empty(0))
        prefix, sees = start, None
        if mask is not None:  # the slots every row sees (the context), then each row's flags after them
            everyone = mask.all(0)
            prefix = int(everyone.logical_not().nonzero()[0]) if not bool(everyone.all()) else mask.shape[1]
            sees = mask[:, prefix:].to(torch.uint8).contiguous()
        scored = rows if logits_rows is None else logits_rows
        logits = torch.empty(scored, cfg.draft_vocab_size) if scored else None
        feedback = torch.empty(rows, cfg.hidden_size)
        masses = torch.empty(attention_rows, 3) if attention_rows else None
        step = native.DraftStep(
            ids.data_ptr(), rows, states.data_ptr(), positions.data_ptr(), cos.data_ptr(), signed_sin.data_ptr(),
            cache.keys.data_ptr(), cache.values.data_ptr(), cache.capacity, start, prefix,
            None if sees is None else sees.data_ptr(), rows - scored, None if logits is None else logits.data_ptr(),
            feedback.data_ptr(), rows - attention_rows, start if context is None else context,
            None if masses is None else masses.data_ptr(), torch.get_num_threads())
        if self.lib.pg_draft(ctypes.byref(self.c_drafter), ctypes.byref(step)):
            raise MemoryError("out of memory for the drafter's scratch")
        cache.length = start + rows
        feedback = feedback[None]
        return DraftOutput(logits=None if logits is None else logits[None], hidden=feedback, normed=feedback,
                           feedback=feedback, attention=None, masses=masses)
