"""A Llama target on the CPU in its GGUF file's own blocks: every layer's products in 4-bit groups (Q4_1: per 32 inputs
a half scale and minimum), the tied embedding and vocabulary head in 8 bits (Q8_0), each product's input quantised
to 8 bits a block of 32 at a time (Q8_1), as llama.cpp multiplies them. The whole forward is one call into C
(`csrc/forward.c`, built and loaded by `native.py`): no PyTorch op between the embedding and the logits.

What it computes is a function of the weights and the tokens alone (`native.py`): the same on every instruction set,
thread count and row count. So a verification's rows are bit for bit the one-row steps plain decoding takes, every
greedy speculative answer equals plain decoding's, and a prompt answered on a busy machine or an idle one, on AVX2 or
AVX-512, gets the same tokens. It is not float32's target: its answers can differ from float32's (an 8-bit input and
4-bit weights), and float32 is what vLLM reads, so the engines are compared on float32 (presets.engine_presets).

The packing happens once at load, in C (`pg_pack_q4`, `pg_pack_q8`): weights dequantised from a Q4_1 / Q8_0 file give
back the file's own codes, scales and minima; the float32 weights are then given back (meta tensors)."""

from __future__ import annotations

import contextlib
import copy
import ctypes
import mmap

import torch
from torch import nn

from . import native
from .cache import FIRST_CAPACITY, KVCache
from .llama import RotaryTable, fast_forward_problem


def int4_problem(model, device: torch.device) -> str | None:
    """Why this model cannot run on int4 layers here, or None: the library, the architecture, the shapes."""
    if device.type != "cpu":
        return "they run on the CPU only"
    if model.get_input_embeddings().weight.dtype != torch.float32:
        return "they are made from a float32 target"
    problem = fast_forward_problem(model)
    if problem:
        return problem
    lib, why = native.load()
    if lib is None:
        return f"no C library: {why}"
    cfg = model.config
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
    if head_dim > native.MAX_HEAD_DIM or cfg.num_attention_heads % cfg.num_key_value_heads:
        return f"it needs heads of at most {native.MAX_HEAD_DIM} dimensions and query heads in groups per key head"
    if getattr(model.model.rotary_emb, "rope_type", None) not in RotaryTable.STATIC_TYPES:
        return "its rotary frequencies depend on the length"
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if any(m.bias is not None for m in linears):
        return "its products have biases"
    odd = sorted({m.in_features for m in linears if m.in_features % native.BLOCK})
    if odd:
        return f"a product's input width {odd[0]} is not a multiple of {native.BLOCK}"
    return None


class _PackedEmbedding(nn.Module):
    """The input embedding read back from the packed 8-bit table (`pg_q8_rows`): what a drafter that shares the
    target's embedding reads. float32 rows, code times scale."""

    def __init__(self, lib, packed: torch.Tensor, vocab: int, width: int) -> None:
        super().__init__()
        self.lib, self.packed, self.num_embeddings, self.embedding_dim = lib, packed, vocab, width
        self.weight = torch.empty(vocab, width, device="meta")  # its shape, for code that reads it

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1).to(torch.int64).contiguous()
        out = torch.empty(flat.shape[0], self.embedding_dim)
        self.lib.pg_q8_rows(self.packed.data_ptr(), self.embedding_dim, flat.data_ptr(), flat.shape[0],
                            out.data_ptr())
        return out.view(*ids.shape, self.embedding_dim)


class TiledKVCache(KVCache):
    """`KVCache` in half precision with each key head's slots in tiles of 16, [layers, kv_heads, capacity / 16,
    head_dim, 16]: the layout the C attention scores 16 keys at a time in (csrc/layer.c), at half float32's bytes
    (at a few hundred tokens of context, reading the cache costs a step as much as reading the weights). Values keep
    [layers, kv_heads, capacity, head_dim]."""

    TILE = 16

    def reserve(self, length: int) -> None:
        if length <= self.capacity:
            return
        capacity = min(max(length, 2 * self.capacity, FIRST_CAPACITY), max(self.max_positions, length))
        capacity = -(-capacity // self.TILE) * self.TILE
        layers, kv_heads, head_dim = self.shape
        keys = torch.empty(layers, kv_heads, capacity // self.TILE, head_dim, self.TILE, dtype=self.dtype)
        values = torch.empty(layers, kv_heads, capacity, head_dim, dtype=self.dtype)
        if self.capacity:
            keys[:, :, : self.capacity // self.TILE] = self.keys
            values[:, :, : self.capacity] = self.values
        self.keys, self.values, self.capacity = keys, values, capacity

    @torch.inference_mode()
    def keep(self, start: int, rows: torch.Tensor) -> None:
        source = start + rows.to(torch.int64)
        target = torch.arange(start, start + rows.shape[0])
        self.values[:, :, target] = self.values[:, :, source]  # the gathers copy before the writes
        tile = self.TILE
        self.keys[:, :, target // tile, :, target % tile] = self.keys[:, :, source // tile, :, source % tile]
        self.length = start + rows.shape[0]


HUGE_PAGE = 2 << 20


def huge_page_bytes(size: int) -> torch.Tensor:
    """`size` bytes in an anonymous mapping the kernel is asked to back with 2 MB pages where it can (MADV_HUGEPAGE):
    a step streams ~100 MB of weights, and on 4 KB pages a one-row step spent up to a third more (TLB misses; one
    process read 3.4 ms, the next 4.8, on the same machine). Where huge pages cannot be had, ordinary ones."""
    mapped = mmap.mmap(-1, size + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # shared: no THP
    with contextlib.suppress(AttributeError, OSError):  # no MADV_HUGEPAGE here: ordinary pages
        mapped.madvise(mmap.MADV_HUGEPAGE)
    whole = torch.frombuffer(mapped, dtype=torch.uint8)  # keeps `mapped` alive as long as a view of it lives
    start = -whole.data_ptr() % HUGE_PAGE
    return whole[start : start + size]


def pack(lib, weight: torch.Tensor, bits: int, into: torch.Tensor | None = None) -> torch.Tensor:
    """`weight` [out, in] in packed 4- or 8-bit tiles (`pg_pack_q4`, `pg_pack_q8`), as a byte tensor (`into`, where
    given: a slice of an arena the caller made)."""
    n, k = weight.shape
    weight = weight.detach().float().contiguous()
    size = packed_bytes(lib, n, k, bits)
    packed = torch.empty(size, dtype=torch.uint8) if into is None else into[:size]
    (lib.pg_pack_q4 if bits == 4 else lib.pg_pack_q8)(weight.data_ptr(), n, k, packed.data_ptr())
    return packed


def packed_bytes(lib, n: int, k: int, bits: int) -> int:
    return (lib.pg_q4_bytes if bits == 4 else lib.pg_q8_bytes)(n, k)


class Arena:
    """One huge-page mapping that packed matrices are carved from, in order, each on a 64-byte boundary."""

    def __init__(self, sizes: list[int]) -> None:
        self.offsets, total = [], 0
        for size in sizes:
            self.offsets.append(total)
            total += -(-size // 64) * 64
        self.bytes = huge_page_bytes(total)
        self.next = 0

    def take(self) -> torch.Tensor:
        start = self.offsets[self.next]
        self.next += 1
        return self.bytes[start:]


class Int4Llama:
    """`forward(ids, cache, aux_layers, last_only, tree)`, as `FastLlama`'s, on packed int4 layers in C."""

    weights = "int4"
    dtype = torch.float32  # of the residual stream, the cache, the aux states and the logits
    row_exact = True  # a verification's rows are computed as one-row steps compute them, always

    def __init__(self, model) -> None:
        problem = int4_problem(model, model.get_input_embeddings().weight.device)
        if problem:
            raise ValueError(f"int4 weights: {problem}")
        lib, _ = native.load()
        cfg = model.config
        self.lib, self.model = lib, model
        self.n_heads, self.n_kv = int(cfg.num_attention_heads), int(cfg.num_key_value_heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
        self.hidden, self.vocab = int(cfg.hidden_size), int(cfg.vocab_size)
        self.rope = RotaryTable(model.model.rotary_emb)
        embedding, head = model.get_input_embeddings(), model.get_output_embeddings()
        tied = head.weight.data_ptr() == embedding.weight.data_ptr()
        self.packed: list[torch.Tensor] = []  # every buffer the C side reads, held here
        products = [(lambda a=layer.self_attn: torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]),
                     lambda a=layer.self_attn: a.o_proj.weight,
                     lambda m=layer.mlp: torch.cat([m.gate_proj.weight, m.up_proj.weight]),
                     lambda m=layer.mlp: m.down_proj.weight) for layer in model.model.layers]
        shapes = [(int(sum(lin.weight.shape[0] for lin in group)), int(group[0].weight.shape[1]))
                  for layer in model.model.layers for group in (
                      (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj),
                      (layer.self_attn.o_proj,), (layer.mlp.gate_proj, layer.mlp.up_proj), (layer.mlp.down_proj,))]
        tables = [head.weight] + ([] if tied else [embedding.weight])
        arena = Arena([packed_bytes(lib, n, k, 4) for n, k in shapes]
                      + [packed_bytes(lib, *t.shape, 8) for t in tables])
        layers = []
        for layer, weights in zip(model.model.layers, products):
            packed = [pack(lib, weight(), 4, arena.take()) for weight in weights]
            norms = [layer.input_layernorm.weight.detach().float().contiguous(),
                     layer.post_attention_layernorm.weight.detach().float().contiguous()]
            self.packed += packed + norms
            layers.append(native.Layer(*(t.data_ptr() for t in packed + norms)))
            self.intermediate = int(layer.mlp.gate_proj.weight.shape[0])
        self.head = pack(lib, head.weight, 8, arena.take())
        self.embedding = self.head if tied else pack(lib, embedding.weight, 8, arena.take())
        self.final_norm = model.model.norm.weight.detach().float().contiguous()
        self.packed += [self.head, self.final_norm] + ([] if tied else [self.embedding])
        self._layers = (native.Layer * len(layers))(*layers)
        self.layer_count = len(layers)
        self.c_model = native.Model(len(layers), self.hidden, self.n_heads, self.n_kv, self.head_dim,
                                    self.intermediate, self.vocab, float(cfg.rms_norm_eps), self.head_dim**-0.5,
                                    self._layers, self.final_norm.data_ptr(), self.head.data_ptr(),
                                    self.embedding.data_ptr())
        self._give_back_float_weights(tied)
        self.kernels = (f"int4 groups of {native.BLOCK} (Q4_1) + int8 head (Q8_0), 8-bit inputs, in C "
                        f"({native.instruction_path(lib)})")

    def _give_back_float_weights(self, tied: bool) -> None:
        """The float32 products and table are no longer read: each becomes a meta tensor (its shape alone), and the
        input embedding reads the packed table."""
        model = self.model
        for module in model.modules():
            if isinstance(module, nn.Linear):
                module.weight = nn.Parameter(module.weight.detach().to("meta"), requires_grad=False)
        embedding = _PackedEmbedding(self.lib, self.embedding, self.vocab, self.hidden)
        model.set_input_embeddings(embedding)
        if tied:
            model.get_output_embeddings().weight = nn.Parameter(embedding.weight, requires_grad=False)

    def resident_bytes(self) -> int:
        """Bytes of weights the forward reads: the packed products, tables and norms."""
        return sum(t.numel() * t.element_size() for t in self.packed)

    def first_layers(self, n: int) -> Int4Llama:
        """This model cut after its first `n` layers, then its final norm and head (an early-exit draft): the same
        packed weights, read in place; its caches hold those layers alone."""
        view = copy.copy(self)
        view.c_model = native.Model(n, *(getattr(self.c_model, name) for name, _ in native.Model._fields_[1:]))
        view.layer_count = n
        return view

    def new_cache(self, max_positions: int) -> TiledKVCache:
        return TiledKVCache(self.layer_count, self.n_kv, self.head_dim, max_positions, torch.float16,
                            torch.device("cpu"))

    def expect_rows(self, rows: int) -> None:
        """Nothing to prepare: the products take any row count."""

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, cache: KVCache, aux_layers: list[int], last_only: bool,
                tree: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """ids [t] -> (logits [1 or t, vocab], aux states [t, hidden] of `aux_layers`, in their order).

        `tree` = (positions [t], sees [t, t] bool): a draft tree's verification, where new token i sits at
        `positions[i]` and attends to the cache and to the new tokens j with sees[i, j]."""
        rows, start = ids.shape[0], cache.length
        ids = self._checked(ids)
        positions = None if tree is None else tree[0].to(torch.int64).contiguous()
        sees = None if tree is None else tree[1].to(torch.uint8).contiguous()
        last = start + rows - 1 if positions is None else int(positions.max())
        cos, signed_sin = self.rope.tables(last, torch.empty(0))
        cache.reserve(start + rows)
        wanted = torch.tensor(aux_layers, dtype=torch.int32)
        aux = torch.empty(rows, len(aux_layers), self.hidden)
        first = rows - 1 if last_only else 0
        logits = torch.empty(rows - first, self.vocab)
        step = native.Step(ids.data_ptr(), rows, None if positions is None else positions.data_ptr(),
                           None if sees is None else sees.data_ptr(), cos.data_ptr(), signed_sin.data_ptr(),
                           cache.keys.data_ptr(), cache.values.data_ptr(), cache.capacity, start, wanted.data_ptr(),
                           len(aux_layers), aux.data_ptr(), first, logits.data_ptr(), torch.get_num_threads())
        self._run(step)
        cache.length = start + rows
        return logits, list(aux.unbind(1))

    @torch.inference_mode()
    def forward_batch(self, ids: list[int], caches: list[TiledKVCache]) -> torch.Tensor:
        """The next token of each of several sequences in one forward (each with its own cache, extended by one):
        logits [len(ids), vocab]. Each row is computed as that sequence's one-row step computes it."""
        rows = len(ids)
        tokens = self._checked(torch.tensor(ids))
        for cache in caches:
            cache.reserve(cache.length + 1)
        cos, signed_sin = self.rope.tables(max(cache.length for cache in caches), torch.empty(0))
        sequences = (native.Sequence * rows)(*(native.Sequence(c.keys.data_ptr(), c.values.data_ptr(), c.capacity,
                                                               c.length) for c in caches))
        logits = torch.empty(rows, self.vocab)
        step = native.Step(tokens.data_ptr(), rows, None, None, cos.data_ptr(), signed_sin.data_ptr(), None, None, 0,
                           0, None, 0, None, 0, logits.data_ptr(), torch.get_num_threads(), sequences)
        self._run(step)
        for cache in caches:
            cache.length += 1
        return logits

    def _checked(self, ids: torch.Tensor) -> torch.Tensor:
        """Token ids as the C forward reads them, each inside the vocabulary (it reads the table at each id)."""
        ids = ids.to(torch.int64).contiguous()
        if ids.numel() and not 0 <= int(ids.min()) <= int(ids.max()) < self.vocab:
            raise ValueError(f"token ids must lie in 0..{self.vocab - 1}")
        return ids

    def _run(self, step: native.Step) -> None:
        if self.lib.pg_forward(ctypes.byref(self.c_model), ctypes.byref(step)):
            raise MemoryError("out of memory for the forward's scratch")
