"""A decode forward for Llama-architecture targets, in the manner of gpt-fast: plain tensors, a preallocated KV cache.

It runs the weights of the loaded Hugging Face model (shared, not copied) and computes what transformers' forward
computes (float32: the same logits to rounding, tests/engine/test_fast_forward.py), without what a decode loop does not
need:
- per-op module calls: each layer is four matrix products (q, k and v fused into one weight, gate and up into
  another; the Hugging Face modules keep views into the fused weights, so memory does not grow) and a few fused ops;
- one cache buffer for all layers (`cache.KVCache`), written in place by position; a rollback only moves its
  length;
- hooks: the aux hidden states the drafter reads are taken from the residual stream as the loop passes them, and
  the vocabulary is scored only at the positions asked for.
Two things make a verification cheap next to a plain step (`Projection`): float32 weights packed for the
verification's k + 1 rows (MKL), and bfloat16 weights in oneDNN's packed layout on CPUs with bf16 instructions. A
plain step's vocabulary product (one row, the widest product of a step) goes through a transposed copy of the
weight where this machine runs it faster that way (`Projection.try_columns`), so that plain decoding, the baseline
of every speedup, is as fast as the engine can make it.
In bfloat16 a verification is also *row-exact* where this CPU's packed products are row-independent (measured at
load, `rows_independent`): each verified query then attends alone over exactly the keys a one-token step would see,
so every verified row is computed bit for bit as plain decoding computes it, and greedy speculative output equals
plain bfloat16 decoding's. Where they are not, the run says its tokens may differ from plain decoding's.

With `weights="int4"` (or `"auto"`, where measured faster and row-exact here) every layer's products read four-bit
weights in groups of 32 along the input, each group a scale and a minimum: the form of the default target's Q4_1 GGUF
file, so its codes come back exactly from the dequantised float32 weights (`int4_groups`). PyTorch's own
`_weight_int4pack_mm_for_cpu` multiplies them; it is fast only for bfloat16 inputs, so each product's input is
rounded to bfloat16 and its scales and minima are held in bfloat16 (the residual stream, norms and attention stay
float32). The tied embedding and vocabulary head (Q8_0 in the file) go to int8 rows (else bfloat16 where this CPU
multiplies bf16 in hardware): four bits there change one top token in ten. Between the products, a layer's small steps
run in C where it compiles and measures faster here (`_native_forward`, `native.py`), and so do the int8 head's
products, their input kept in float32 (`Projection.multiply_in_c`). That is a different target
from float32's: answers may differ, and greedy speculation is token-identical to plain decoding of *this* target where
its products are row-independent (probed at load, as for bfloat16), never otherwise.

Only plain Llama layers take this path (`fast_forward_problem` says why a model does not); everything else runs
through transformers.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from . import native
from .cache import FIRST_CAPACITY, KVCache

MAX_EXACT_ROWS = 17  # row independence is probed up to k + 1 = 17 rows (MAX_K = 16); a larger tree's verification
# multiplies its rows in groups of at most this many
PACK_SHARE = 0.25  # float32 packs may take at most this share of the memory available when they are made
COLUMNS_GAIN = 1.2  # a one-row product keeps the transposed weight only when it runs at least this much faster
ONEDNN_GAIN = 1.1  # float32 products of several rows keep oneDNN's pack only when it is at least this much faster
VERIFY_ROWS = 5  # the row count several-row layouts are timed at: a verification of k = 4 drafts
QUANT_GROUP = 32  # int4 weights: a scale and a minimum per 32 weights along the input (GGUF's Q4_1 blocks)
NATIVE_GAIN = 1.05  # the int4 path's C layer steps are used only where a one-row step is at least this much faster
INT4_GAIN = 1.1  # weights="auto" takes int4 only where a one-row pass over every layer is at least this much faster
WEIGHTS = ("auto", "float32", "int4")  # what a Llama target's fast path multiplies: chosen by measurement, or forced
MEMINFO = Path("/proc/meminfo")
# PyTorch's weight-only kernels through the torch namespace's bindings where it has them: about 9 us less a call than
# torch.ops.aten's (measured on Zen 4), 150 calls a step
_INT4_MM = getattr(torch, "_weight_int4pack_mm_for_cpu", None) or getattr(
    torch.ops.aten, "_weight_int4pack_mm_for_cpu", None)
_INT8_MM = getattr(torch, "_weight_int8pack_mm", None) or getattr(torch.ops.aten, "_weight_int8pack_mm", None)


def available_memory(meminfo: Path = MEMINFO) -> int | None:
    """MemAvailable in bytes, or None where the system does not say."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def native_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AVX-512 BF16 or AMX), so oneDNN's bf16 kernels are fast."""
    cpu = torch.cpu
    return bool(torch.backends.mkldnn.is_available() and (
        getattr(cpu, "_is_avx512_bf16_supported", lambda: False)()
        or getattr(cpu, "_is_amx_tile_supported", lambda: False)()))


def fast_forward_problem(model) -> str | None:
    """Why this model cannot take the fast path, or None when it can."""
    cfg = model.config
    if getattr(cfg, "model_type", None) != "llama":
        return f"model type {getattr(cfg, 'model_type', None)!r} is not llama"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"activation {cfg.hidden_act!r} is not silu"
    if getattr(cfg, "pretraining_tp", 1) != 1:
        return "pretraining_tp > 1"
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "rotary_emb") or not hasattr(inner, "layers"):
        return f"{type(model).__name__} is not laid out as model.layers / model.rotary_emb"
    return None


class Projection:
    """y = x W^T + b, with the weight prepacked where that makes the product faster.

    - float32: MKL's packed GEMM multiplies a few rows much faster than its plain one (on a 2-core Xeon the k + 1 = 5
      rows of a verification cost 1.4x one row instead of 1.8x), but a pack serves only the row count it was packed
      for (other counts fall back to the plain product) and takes 2-5x the weight's memory. One pack at a time.
    - bfloat16 on a CPU with bf16 instructions: oneDNN's packed weight, for any row count.
    - one row, where measured faster: x @ W^T through a contiguous copy of W^T (`try_columns`). On a 2-core AMD EPYC
      the one-row product of SmolLM2's vocabulary head (49152 x 576) took 11.4 ms as `F.linear` and 5.9 ms this way;
      narrow products gained nothing, so only the vocabulary heads try it."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None,
                 owners: list[tuple[nn.Linear, int]] = ()) -> None:
        self.weight, self.bias = weight, bias
        self.mkl: tuple[int, torch.Tensor] | None = None  # (rows, packed weight): read once per call, so swaps are safe
        self.onednn: torch.Tensor | None = None
        self.columns: torch.Tensor | None = None  # W^T, contiguous: one-row products, where faster here
        self.int4: tuple[torch.Tensor, torch.Tensor] | None = None  # (packed codes, bf16 scales and zeros)
        self.int8: tuple[torch.Tensor, torch.Tensor] | None = None  # (codes [out, in] int8, bf16 scale per output)
        self.int8_in_c: tuple[object, torch.Tensor] | None = None  # (native library, float32 scales): `multiply_in_c`
        self.owners = list(owners)  # (module, first row): modules whose weight is a view of rows of this one

    def __call__(self, x: torch.Tensor, rows_at_once: int | None = None) -> torch.Tensor:
        """x [rows, in] -> [rows, out]; with `rows_at_once`, never more rows in one product than that (row-exact
        verification of a tree larger than the row counts `rows_independent` probed)."""
        if rows_at_once is not None and x.shape[0] > rows_at_once:
            return torch.cat([self(part) for part in x.split(rows_at_once)])
        if self.int4 is not None:
            y = self.int4_product(x.to(torch.bfloat16)).to(x.dtype)
            return y if self.bias is None else y + self.bias
        if self.int8_in_c is not None and x.dtype == torch.float32:
            y = self.int8_product_in_c(x)
            return y if self.bias is None else y + self.bias
        if self.int8 is not None:
            y = _INT8_MM(x.to(torch.bfloat16), *self.int8).to(x.dtype)
            return y if self.bias is None else y + self.bias
        if self.columns is not None and x.shape[0] == 1:
            y = x @ self.columns
            return y if self.bias is None else y + self.bias
        if self.onednn is not None and self.onednn.dtype != x.dtype:  # a bf16 head in a float32 stream (int4)
            return torch.ops.mkldnn._linear_pointwise(x.to(self.onednn.dtype), self.onednn, None, "none", [],
                                                      "").to(x.dtype)
        if self.onednn is not None:
            return torch.ops.mkldnn._linear_pointwise(x, self.onednn, self.bias, "none", [], "")
        mkl = self.mkl
        if mkl is not None and x.shape[0] == mkl[0]:
            return torch.ops.mkl._mkl_linear(x, mkl[1], self.weight, self.bias, mkl[0])
        return F.linear(x, self.weight, self.bias)

    def int4_product(self, x: torch.Tensor) -> torch.Tensor:
        """x [rows, in] (bf16) through the int4 groups, in bf16, no bias: what `__call__` and the C steps'
        forward (which keeps its values in bf16 between products) both multiply with."""
        packed, scales_zeros = self.int4
        return _INT4_MM(x, packed, QUANT_GROUP, scales_zeros)

    def multiply_in_c(self, lib) -> None:
        """Take the int8 rows' products through `native_layer.c` (`lib`; None: back to PyTorch's kernel): the input
        kept in float32 rather than rounded to bf16, each row alone, on PyTorch's threads. Where it serves, one row
        through SmolLM2's int8 vocabulary head took 1.1 ms against PyTorch's 2.8 (Zen 4, 2 threads, in a step)."""
        self.int8_in_c = None if lib is None or self.int8 is None else (lib, self.int8[1].float())

    def int8_product_in_c(self, x: torch.Tensor) -> torch.Tensor:
        lib, scales = self.int8_in_c
        codes = self.int8[0]
        x = x.contiguous()
        y = torch.empty(x.shape[0], codes.shape[0], dtype=torch.float32)
        lib.int8_product(x.data_ptr(), x.shape[0], codes.shape[1], codes.shape[0], codes.data_ptr(), scales.data_ptr(),
                         y.data_ptr(), torch.get_num_threads())
        return y

    def try_columns(self, reps: int = 5) -> bool:
        """`prefer_columns` for this projection alone; returns whether it now takes one-row products through W^T."""
        return prefer_columns([self], reps)

    def use_columns(self, columns: torch.Tensor) -> None:
        """One-row products through `columns` (W^T, contiguous) from now on. Where modules own views of the weight
        (the target's layers), the weight itself becomes a view of `columns`, so the layout changes and memory does
        not grow; where none does (a tied vocabulary head, whose rows are also the embedding), `columns` is a copy."""
        self.columns = columns
        if self.owners:
            self.weight = columns.t()
            for module, first in self.owners:
                rows = module.weight.shape[0]
                module.weight = nn.Parameter(self.weight[first : first + rows], requires_grad=False)

    def pack_mkl(self, rows: int) -> int:
        """Pack for `rows`-row products; returns the pack's bytes."""
        packed = torch.ops.mkl._mkl_reorder_linear_weight(self.weight, rows)
        self.mkl = (rows, packed)
        return packed.numel() * packed.element_size()

    def pack_onednn(self) -> None:
        self.onednn = onednn_pack(self.weight)

    def quantise_int4(self, groups: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
        """Take products through int4 groups of the weight from now on (`int4_groups`, or `groups` made from it),
        giving the float32 weight and every other layout back: the weight (and the modules' views of it) becomes a
        meta tensor, its shape alone."""
        self.int4 = groups or int4_groups(self.weight)
        self.mkl = self.onednn = self.columns = None
        self.weight = self.weight.to("meta")
        for module, first in self.owners:
            module.weight = nn.Parameter(self.weight[first : first + module.weight.shape[0]], requires_grad=False)

    def tensors(self) -> list[torch.Tensor]:
        """What this projection holds: its weight (a meta tensor once given back), bias, packs, copies, int4 or int8
        codes, and the float32 scales the C kernel reads."""
        held = [self.weight, self.bias, self.columns, self.onednn, self.mkl[1] if self.mkl else None,
                *(self.int4 or ()), *(self.int8 or ()), self.int8_in_c[1] if self.int8_in_c else None]
        return [t for t in held if t is not None]


def _address(tensor: torch.Tensor) -> int:
    """Where a tensor's data lives (views of one weight share it); oneDNN's opaque packs have no pointer to read."""
    return tensor.data_ptr() if tensor.layout == torch.strided else id(tensor)


def int4_eligible(weight: torch.Tensor) -> bool:
    """Shapes PyTorch's int4 CPU kernel takes: outputs a multiple of 16, inputs a multiple of the group."""
    return weight.dim() == 2 and weight.shape[0] % 16 == 0 and weight.shape[1] % QUANT_GROUP == 0


def int4_groups(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed codes, scales and zeros [in / 32, out, 2] in bf16) of `weight` [out, in], quantised as GGUF's Q4_1
    quantises: per group of 32 inputs, minimum m and scale d = (max - m) / 15, code = round((w - m) / d). Weights
    dequantised from a Q4_1 file give back their own codes (d and m are the file's, to float32 rounding). The kernel
    computes (code - 8) * scale + zero, so zero = m + 8 * scale, with the scale rounded to bf16 first."""
    out, inputs = weight.shape
    groups = weight.detach().float().reshape(out, inputs // QUANT_GROUP, QUANT_GROUP)
    low, high = groups.amin(-1), groups.amax(-1)
    scale = (high - low) / 15
    codes = ((groups - low[..., None]) / torch.where(scale > 0, scale, 1.0)[..., None]).round().clamp(0, 15)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32).reshape(out, inputs), 1)
    scale = scale.to(torch.bfloat16).float()
    scales_zeros = torch.stack([scale, low + 8 * scale], dim=-1).transpose(0, 1).contiguous().to(torch.bfloat16)
    return packed, scales_zeros


def int8_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes [out, in] int8, scales [out] bf16): each output row in 8 bits, symmetric, one scale a row, as PyTorch's
    `_weight_int8pack_mm` multiplies them."""
    scales = (weight.abs().amax(dim=1) / 127).clamp(min=torch.finfo(torch.float32).tiny)
    codes = torch.round(weight / scales[:, None]).clamp(-127, 127).to(torch.int8)
    return codes, scales.to(torch.bfloat16)


class Int8Embedding(nn.Module):
    """An input embedding read from a vocabulary head's int8 rows (a tied table held once, in 8 bits): row i is
    codes[i] * scales[i], in `dtype`. Drafters that share the target's embedding read it through this module too."""

    def __init__(self, codes: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> None:
        super().__init__()
        self.codes, self.scales, self.dtype = codes, scales, dtype
        self.num_embeddings, self.embedding_dim = codes.shape

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.codes).to(self.dtype) * F.embedding(ids, self.scales[:, None]).to(self.dtype)


def _room_for_copies(weights: list[torch.Tensor]) -> bool:
    """CPU weights whose copies fit in `PACK_SHARE` of the memory available now."""
    available = available_memory()
    return (bool(weights) and all(w.device.type == "cpu" for w in weights) and bool(available)
            and sum(w.numel() * w.element_size() for w in weights) <= PACK_SHARE * available)


def measured_faster(plain: Callable[[], object], other: Callable[[], object], gain: float, reps: int,
                    fastest: bool = False) -> bool:
    """Whether `other` runs `gain` times faster than `plain` here: one untimed call of each (first touches), then the
    two timed alternating, `reps` times each, medians compared (with `fastest`, each one's fastest run: what it costs
    where no other process takes its cores, for a choice the process keeps whatever the load later)."""
    def seconds(run: Callable[[], object]) -> float:
        start = time.perf_counter()
        run()
        return time.perf_counter() - start

    with torch.inference_mode():
        plain(), other()
        pairs = [(seconds(plain), seconds(other)) for _ in range(reps)]
    pick = min if fastest else statistics.median
    return pick(a for a, _ in pairs) >= gain * pick(b for _, b in pairs)


def onednn_pack(weight: torch.Tensor) -> torch.Tensor:
    """oneDNN's packed layout of a weight, for products of any row count."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 8)


def prefer_columns(group: list[Projection], reps: int = 3) -> bool:
    """Whether one-row products of `group` (projections of one shape, e.g. every layer's q/k/v) run `COLUMNS_GAIN`
    times faster through contiguous copies of W^T on this machine; if so, each takes its copy (`use_columns`).

    Timed here, the two layouts alternating, the median of `reps` passes over the whole group: one pass streams every
    weight of the group from memory as a decode step does, where one weight timed alone would sit in the cache. On a
    2-core AMD EPYC (Zen 4) one row through SmolLM2's q/k/v took 204 us as `F.linear` and 143 us through W^T, its
    gate/up 598 and 332 us, its vocabulary head 9.6 and 4.6 ms; its o and down products gained nothing. CPU float32
    or float16 weights only (not oneDNN's bf16 pack), and only while the copies fit in `PACK_SHARE` of the available
    memory (they are needed at once for the timing; a group whose weights are owned by modules keeps no second copy)."""
    weights = [p.weight for p in group]
    if not _room_for_copies(weights) or any(p.onednn is not None for p in group):
        return False
    columns = [w.detach().t().contiguous() for w in weights]
    x = torch.randn(1, weights[0].shape[1], dtype=weights[0].dtype)
    if not measured_faster(lambda: [F.linear(x, w) for w in weights], lambda: [x @ c for c in columns],
                            COLUMNS_GAIN, reps):
        return False
    for projection, copy in zip(group, columns):
        projection.use_columns(copy)
    return True


def prefer_onednn(group: list[Projection], rows: int = VERIFY_ROWS, reps: int = 3) -> bool:
    """Whether float32 products of `rows` rows through `group` (one role of every layer, or the head) run
    `ONEDNN_GAIN` times faster through oneDNN's packed weights than through `F.linear`; if so each keeps its pack,
    which then serves every product of more than one row (a one-row product keeps its own layout).

    Timed here as `prefer_columns` times, over the whole group. On a 2-core AMD EPYC (Zen 4, one thread) 5 rows
    through SmolLM2's gate/up took 892 us as `F.linear` (MKL's packed GEMM: 908) and 359 us packed by oneDNN, its
    vocabulary head 18.8 ms and 5.7 ms: MKL multiplies a few rows at a fraction of the core's speed. A pack is one
    more copy of the weights (MKL's per-row-count packs took 3.7x), made only while it fits in `PACK_SHARE` of the
    available memory."""
    weights = [p.weight for p in group]
    if (not torch.backends.mkldnn.is_available() or any(w.dtype != torch.float32 for w in weights)
            or not _room_for_copies(weights)):
        return False
    packs = [onednn_pack(w) for w in weights]
    x = torch.randn(rows, weights[0].shape[1], dtype=weights[0].dtype)
    linear = torch.ops.mkldnn._linear_pointwise
    if not measured_faster(lambda: [F.linear(x, w) for w in weights],
                            lambda: [linear(x, pack, None, "none", [], "") for pack in packs], ONEDNN_GAIN, reps):
        return False
    for projection, pack in zip(group, packs):
        projection.onednn = pack
    return True


def rows_independent(projection: Projection, max_rows: int) -> bool:
    """Whether a product of 2..max_rows rows gives each row bit for bit what that row alone gives: what row-exact
    verification needs of every product. Kernels are chosen by shape, not by values, so one random probe per row
    count shows whether a kernel rounds a row differently in company."""
    weight = projection.weight
    x = torch.randn(max_rows, weight.shape[1], generator=torch.Generator().manual_seed(0)).to(weight.dtype)
    with torch.inference_mode():
        alone = torch.cat([projection(x[i : i + 1]) for i in range(max_rows)])
        return all(projection(x[:rows]).equal(alone[:rows]) for rows in range(2, max_rows + 1))


def _fused(linears: list[nn.Linear]) -> Projection:
    """One projection for several linears reading the same input; the linears then hold views into its weight."""
    weight = torch.cat([lin.weight.detach() for lin in linears])
    has_bias = [lin.bias is not None for lin in linears]
    if any(has_bias) and not all(has_bias):
        raise ValueError("fused projections disagree on bias")
    bias = torch.cat([lin.bias.detach() for lin in linears]) if all(has_bias) else None
    start, owners = 0, []
    for lin in linears:
        rows = lin.weight.shape[0]
        lin.weight = nn.Parameter(weight[start : start + rows], requires_grad=False)
        if bias is not None:
            lin.bias = nn.Parameter(bias[start : start + rows], requires_grad=False)
        owners.append((lin, start))
        start += rows
    return Projection(weight, bias, owners)


STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")  # frequencies that do not depend on the length


class RotaryTable:
    """A rotary embedding's cos and sin by position, with rotate_half's sign folded into sin (exact: negating is
    exact), so that `rotate` is one roll. On the CPU they come from a table computed once, for twice the positions
    reached so far (the module's own computation costs more than a lookup on a decode step); on a GPU, and for rope
    types whose frequencies depend on the sequence length (dynamic NTK, longrope), from the module at every call.
    Either way the values are the module's: the table is its output at those positions."""

    def __init__(self, rotary: nn.Module) -> None:
        self.rotary = rotary
        self.static = getattr(rotary, "rope_type", None) in STATIC_ROPE_TYPES
        self._tables: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}
        self._lock = threading.Lock()

    def __call__(self, positions: torch.Tensor, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, signed sin), each [1, t, head_dim], for increasing `positions` [t], in `like`'s dtype."""
        if not self.static or positions.device.type != "cpu":
            return self._signed(*self.rotary(like, positions[None]))
        cos, signed_sin = self._table(int(positions[-1]), like)
        return cos[:, positions], signed_sin[:, positions]

    def span(self, start: int, end: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The same for positions start .. end - 1."""
        if not self.static or like.device.type != "cpu":
            return self(torch.arange(start, end, device=like.device), like)
        cos, signed_sin = self._table(end - 1, like)
        return cos[:, start:end], signed_sin[:, start:end]

    def _table(self, last: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        table = self._tables.get(like.dtype)
        if table is None or last >= table[0].shape[1]:
            with self._lock:
                everywhere = torch.arange(max(2 * last + 2, FIRST_CAPACITY), device=like.device)[None]
                with torch.inference_mode(False), torch.no_grad():  # a table made under inference mode could not
                    table = self._signed(*self.rotary(like.detach(), everywhere))  # serve training's autograd
                self._tables[like.dtype] = table
        return table

    @staticmethod
    def _signed(cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        half = sin.shape[-1] // 2
        return cos, torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)


def rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """RoPE as transformers applies it, x * cos + rotate_half(x) * sin, with `RotaryTable`'s signed sin."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * signed_sin


class _Layer:
    def __init__(self, layer) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self.qkv = _fused([attn.q_proj, attn.k_proj, attn.v_proj])
        self.o = _fused([attn.o_proj])
        self.gate_up = _fused([mlp.gate_proj, mlp.up_proj])
        self.down = _fused([mlp.down_proj])
        self.input_norm, self.post_norm = layer.input_layernorm.weight, layer.post_attention_layernorm.weight

    ROLES = ("qkv", "o", "gate_up", "down")

    def projections(self) -> list[Projection]:
        return [getattr(self, role) for role in self.ROLES]


class FastLlama:
    """`forward(ids, cache, aux_layers, last_only)`: logits and aux states of new tokens, the cache extended."""

    def __init__(self, model, weights: str = "float32") -> None:
        """`weights`: "float32" (the model's own dtype), "int4" (layers in int4 groups; ValueError where this target
        or CPU cannot) or "auto" (int4 where measured `INT4_GAIN` times faster here and row-exact, else the model's
        own; `weights_why` says why not)."""
        problem = fast_forward_problem(model)
        if problem:
            raise ValueError(f"no fast forward: {problem}")
        if weights not in WEIGHTS:
            raise ValueError(f"weights {weights!r} is not one of {', '.join(WEIGHTS)}")
        cfg = model.config
        self.model = model
        self.embed = model.get_input_embeddings().weight
        self.embedding: Int8Embedding | None = None  # the tied table in 8 bits, once the head is int8
        self.layers = [_Layer(layer) for layer in model.model.layers]
        self.norm = model.model.norm.weight
        self.lm_head = Projection(model.get_output_embeddings().weight, None)
        self.rope = RotaryTable(model.model.rotary_emb)
        self.eps = float(cfg.rms_norm_eps)
        self.n_heads, self.n_kv = int(cfg.num_attention_heads), int(cfg.num_key_value_heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
        self.scale = self.head_dim**-0.5
        self.row_exact = False  # a verification's rows computed bit for bit as one-token steps compute them
        self._pack_lock = threading.Lock()
        self._packed_rows: int | None = None
        self._no_room_for = 0  # pack bytes that did not fit: not tried again for a size as large
        dtype = self.dtype = self.embed.dtype  # of the residual stream, the KV cache and the logits
        self.weights = str(dtype).removeprefix("torch.")  # what the layers' products read: "int4" once quantised
        self.weights_why: str | None = None  # why weights="auto" kept the model's own weights
        self.native = None  # the C library of the int4 path's small layer steps (`take_native_steps`), where used
        self.native_why: str | None = None  # why the int4 path runs them in PyTorch
        if dtype == torch.bfloat16 and self.embed.device.type == "cpu" and native_bfloat16():
            for projection in self.projections():
                projection.pack_onednn()
            # Measured, not assumed from the CPU's flags: on a 2-core AMD EPYC (Zen 4: AVX-512 BF16, no AMX) oneDNN
            # rounds SmolLM2's down and vocabulary products of one row differently from the same rows among several.
            shapes = {tuple(p.weight.shape): p for p in self.projections()}
            self.row_exact = all(rows_independent(p, MAX_EXACT_ROWS) for p in shapes.values())
        int4_problem = self._int4_problem()
        if weights == "int4" and int4_problem:
            raise ValueError(f"int4 weights: {int4_problem}")
        groups = {**self.layer_groups(), "lm_head": [self.lm_head]}
        if weights == "int4":
            groups = {"lm_head": [self.lm_head]}  # the layers' float32 layouts would be given back at once
        self.transposed = [role for role, group in groups.items() if prefer_columns(group)]
        self.onednn_roles = ([role for role, group in groups.items() if prefer_onednn(group)]
                             if dtype == torch.float32 and self.embed.device.type == "cpu" else [])
        if weights == "auto" and int4_problem:
            self.weights_why = f"int4 weights: {int4_problem}"
        elif weights != "float32":
            self._take_int4(forced=weights == "int4")

    def _int4_problem(self) -> str | None:
        """Why int4 layers cannot run here, or None."""
        if self.dtype != torch.float32 or self.embed.device.type != "cpu":
            return "they need a float32 target on the CPU"
        if not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"):
            return "this PyTorch has no int4 CPU kernel"
        odd = sorted({tuple(p.weight.shape) for layer in self.layers for p in layer.projections()
                      if not int4_eligible(p.weight)})
        if odd:
            return (f"products of shape {odd[0][0]} x {odd[0][1]} are not multiples of 16 outputs by "
                    f"{QUANT_GROUP} inputs")
        return None

    def _take_int4(self, forced: bool) -> None:
        """Quantise every layer's products to int4 groups: always when `forced`, else where a one-row pass over all
        layers runs `INT4_GAIN` times faster than the float32 layouts chosen above and the result is row-exact."""
        layer_projections = [p for layer in self.layers for p in layer.projections()]
        quantised = [int4_groups(p.weight) for p in layer_projections]
        if not forced:
            x = torch.randn(1, max(p.weight.shape[1] for p in layer_projections), dtype=self.dtype)
            mm = torch.ops.aten._weight_int4pack_mm_for_cpu

            def int4_pass() -> None:
                for p, (packed, scales_zeros) in zip(layer_projections, quantised):
                    mm(x[:, : p.weight.shape[1]].to(torch.bfloat16), packed, QUANT_GROUP, scales_zeros)
            float32_pass = lambda: [p(x[:, : p.weight.shape[1]]) for p in layer_projections]  # noqa: E731
            # On one thread, fastest of 5: a choice the process keeps, so measured as no busy core can skew it.
            # Beside one busy loop, on both threads and medians of 3, a thread waiting for the busy core made the two
            # passes alike (77 and 79 ms; one thread: 29 and 17.5) and kept float32 on a load in three (Zen 3).
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                faster = measured_faster(float32_pass, int4_pass, INT4_GAIN, reps=5, fastest=True)
            finally:
                torch.set_num_threads(threads)
            if not faster:
                self.weights_why = f"int4 weights: not {INT4_GAIN:g}x faster than float32 here (measured at load)"
                return
        head = self._int4_head()
        shapes = {tuple(p.weight.shape): p for p in layer_projections}
        probes = [Projection(torch.empty(shape, device="meta"), None) for shape in shapes]
        for probe, real in zip(probes, shapes.values()):
            probe.int4 = quantised[layer_projections.index(real)]
        row_exact = all(rows_independent(p, MAX_EXACT_ROWS) for p in [*probes, head])
        if not forced and not row_exact:
            self.weights_why = "int4 weights: their products round a row differently among several on this CPU"
            return
        for projection, groups in zip(layer_projections, quantised):
            projection.quantise_int4(groups)
        self._use_head(head)
        self.weights, self.row_exact, self.transposed, self.onednn_roles = "int4", row_exact, [], []
        self.weights_why = None
        self.take_native_steps()

    def _int4_head(self) -> Projection:
        """The vocabulary head beside int4 layers: int8 rows (`int8_rows`; the file's own table is 8-bit, Q8_0) where
        PyTorch has the kernel and its rows are independent, else bf16 weights in oneDNN's pack where this CPU
        multiplies bf16 in hardware and the pack keeps rows apart, else the float32 head as it is. Its input is
        rounded to bf16 either way, which is where these kernels are fast."""
        if hasattr(torch.ops.aten, "_weight_int8pack_mm"):
            head = Projection(torch.empty(self.lm_head.weight.shape, device="meta"), None)
            head.int8 = int8_rows(self.lm_head.weight.detach())
            if rows_independent(head, MAX_EXACT_ROWS):
                return head
        if not native_bfloat16():
            return self.lm_head
        head = Projection(self.lm_head.weight.detach().to(torch.bfloat16), None)
        head.pack_onednn()
        return head if rows_independent(head, MAX_EXACT_ROWS) else self.lm_head

    def _use_head(self, head: Projection) -> None:
        """Make `head` the vocabulary head; a tied embedding then reads the same table (its int8 rows, or its bf16
        weights), and the float32 one is given back. The Hugging Face modules hold that table too, so a drafter that
        shares the target's embedding reads it."""
        if head is self.lm_head:
            return
        tied = self.lm_head.weight.data_ptr() == self.embed.data_ptr()
        self.lm_head = head
        if head.int8 is not None:
            self.model.get_output_embeddings().weight = nn.Parameter(head.weight, requires_grad=False)
            if tied:
                self.embedding = Int8Embedding(*head.int8, self.dtype)
                self.model.set_input_embeddings(self.embedding)
                self.embed = head.int8[0]  # the codes: on the device, counted once
            return
        table = nn.Parameter(head.weight, requires_grad=False)
        if tied:
            self.model.get_input_embeddings().weight = table
            self.embed = table
        self.model.get_output_embeddings().weight = table

    def resident_bytes(self) -> int:
        """Bytes of weights the fast path holds, each tensor once: embedding, norms, products and their layouts."""
        norms = [t for layer in self.layers for t in (layer.input_norm, layer.post_norm)]
        held = [self.embed, self.norm, *norms, *(t for p in self.projections() for t in p.tensors())]
        unique = {(_address(t), t.numel() * t.element_size()) for t in held if t.device.type != "meta"}
        return sum(size for _, size in unique)

    @property
    def kernels(self) -> str:
        """Which products run (on int4 layers, "+ C layer steps and head" — the int8 head too, its input in float32 —
        or why not: "; C layer steps: no C compiler here (cc or gcc)"): "onednn-packed" (bfloat16: every product),
        "onednn-packed qkv, ..." (float32: the roles whose several-row products oneDNN packs), "mkl-packed" (float32
        otherwise, once packed) or "plain",
        then "+ transposed one-row qkv, gate_up, lm_head": the roles whose one-row products go through W^T."""
        if self.weights == "int4":
            head = ("int8 rows" if self.lm_head.int8 is not None else
                    "bf16 onednn-packed" if self.lm_head.onednn is not None else "float32")
            steps = (" + C layer steps" + (" and head" if self.lm_head.int8_in_c is not None else "")
                     if self.native is not None
                     else f"; {self.native_why}" if self.native_why else "")
            return f"int4 groups of {QUANT_GROUP} (bf16 inputs) + {head} head{steps}"
        if self.dtype != torch.float32 and self.lm_head.onednn is not None:
            products = "onednn-packed"
        elif self.onednn_roles:
            products = "onednn-packed " + ", ".join(self.onednn_roles)
        else:
            products = "mkl-packed" if self._packed_rows else "plain"
        return products + (f" + transposed one-row {', '.join(self.transposed)}" if self.transposed else "")

    def layer_groups(self) -> dict[str, list[Projection]]:
        """Every layer's projections by role (qkv, o, gate_up, down): one shape per role."""
        return {role: [getattr(layer, role) for layer in self.layers] for role in _Layer.ROLES}

    def expect_rows(self, rows: int) -> None:
        """Pack the float32 weights for `rows`-row products (a verification's k + 1), within `PACK_SHARE` of the
        available memory; a new row count replaces the pack before it."""
        if (self.dtype != torch.float32 or self.embed.device.type != "cpu"
                or not torch.backends.mkl.is_available() or rows < 2):
            return
        with self._pack_lock:  # oneDNN's packs serve any rows; int4 and int8 products have their own kernels
            projections = [p for p in self.projections() if p.onednn is None and p.int4 is None
                           and p.int8 is None and p.weight.dtype == torch.float32]
            used = 0
            if rows == self._packed_rows or not projections:
                return
            available = available_memory()
            budget = int(PACK_SHARE * available) if available else 0
            if self._no_room_for and budget <= self._no_room_for:
                return
            for projection in projections:
                projection.mkl = None  # the old pack goes before the new one is made
            for projection in projections:
                used += projection.pack_mkl(rows)
                if used > budget:
                    for undo in projections:
                        undo.mkl = None
                    self._no_room_for, self._packed_rows = used, None
                    return
            self._packed_rows = rows

    def projections(self) -> list[Projection]:
        return [p for layer in self.layers for p in layer.projections()] + [self.lm_head]

    def new_cache(self, max_positions: int) -> KVCache:
        return KVCache(len(self.layers), self.n_kv, self.head_dim, max_positions, self.dtype, self.embed.device)

    def take_native_steps(self, measure: bool = True) -> None:
        """Run the int4 path's small per-layer steps in C (`native.py`) where it compiles here, the layers fit it,
        and (with `measure`) one-row steps measure `NATIVE_GAIN` times faster so; `native_why` says why not."""
        lib, problem = native.load()
        if problem is None and any(p.bias is not None for p in self.projections()):
            problem = "its products have biases"
        if problem is None and not self.rope.static:
            problem = "its rotary frequencies depend on the length"
        if problem is None and not (self.head_dim <= native.MAX_HEAD_DIM and self.n_heads % self.n_kv == 0):
            problem = (f"it needs heads of at most {native.MAX_HEAD_DIM} dimensions and query heads in groups per key "
                       "head")
        if problem is None and measure:
            cache, ids = self.new_cache(64), torch.arange(9) % self.embed.shape[0]  # any vocabulary, however small
            self.forward(ids[:8], cache, [], True)

            def step_with(library):
                def step() -> None:
                    self.use_native(library)
                    cache.rollback(8)
                    self.forward(ids[8:], cache, [], True)
                return step
            if not measured_faster(step_with(None), step_with(lib), NATIVE_GAIN, reps=5):
                problem = f"not {NATIVE_GAIN:g}x faster than PyTorch's steps here (measured at load)"
        self.use_native(lib if problem is None else None)
        self.native_why = None if problem is None else f"C layer steps: {problem}"

    def use_native(self, lib) -> None:
        """Run the layer steps and the int8 head's products in `lib` (`native.load()`'s library), or with None in
        PyTorch: what `take_native_steps` chooses, and what a comparison of the two switches."""
        self.native = lib
        self.lm_head.multiply_in_c(lib)

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, cache: KVCache, aux_layers: list[int], last_only: bool,
                tree: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """ids [t] → (logits [1 or t, vocab], aux states [t, hidden] of `aux_layers`, in their order).

        `tree` = (positions [t], sees [t, t] bool): a draft tree's verification, where new token i sits at
        `positions[i]` and attends to the cache and to the new tokens j with sees[i, j] (its ancestors and itself)."""
        t, start = ids.shape[0], cache.length
        end = start + t
        cache.reserve(end)
        x = (F.embedding(ids, self.embed) if self.embedding is None else self.embedding(ids)).to(self.dtype)  # [t, H]
        if self.native is not None and (t == 1 or (self.row_exact and (t <= MAX_EXACT_ROWS or tree is not None))):
            return self._native_forward(x, cache, aux_layers, last_only, tree)
        cos, signed_sin = self.rope.span(start, end, x) if tree is None else self.rope(tree[0], x)  # [1, t, head_dim]
        # row-exact: every verification (a chain's k + 1 rows, a tree's nodes), not a prefill, which plain and
        # speculative decoding compute alike
        one_query_at_a_time = self.row_exact and 1 < t and (t <= MAX_EXACT_ROWS or tree is not None)
        rows_at_once = MAX_EXACT_ROWS if one_query_at_a_time else None
        # new queries see every cached key and the new keys up to their own position (a tree: their ancestors)
        sees = torch.ones(t, t, dtype=torch.bool, device=ids.device).tril() if tree is None else tree[1]
        mask = None if t == 1 or one_query_at_a_time else torch.cat(
            [torch.ones(t, start, dtype=torch.bool, device=ids.device), sees], dim=1)
        # row-exact: query j reads the keys plain decoding would have cached, in the same order
        key_rows = [torch.cat([torch.arange(start, device=ids.device), start + sees[j].nonzero()[:, 0]])
                    for j in range(t)] if one_query_at_a_time and tree is not None else None
        heads, kv_heads, head_dim = self.n_heads, self.n_kv, self.head_dim
        captured: dict[int, torch.Tensor] = {}
        wanted = set(aux_layers)
        for i, layer in enumerate(self.layers):
            if i in wanted:
                captured[i] = x
            qkv = layer.qkv(F.rms_norm(x, x.shape[-1:], layer.input_norm, self.eps), rows_at_once)
            qk, v = qkv.view(t, heads + 2 * kv_heads, head_dim).transpose(0, 1).split([heads + kv_heads, kv_heads])
            qk = rotate(qk, cos, signed_sin)  # queries and keys rotated together: [heads + kv_heads, t, head_dim]
            q = qk[:heads]
            cache.keys[i, :, start:end] = qk[heads:]
            cache.values[i, :, start:end] = v
            keys, values = cache.keys[i : i + 1], cache.values[i : i + 1]
            if key_rows is not None:
                attn = torch.cat([F.scaled_dot_product_attention(
                    q[None, :, j : j + 1], keys[:, :, rows], values[:, :, rows],
                    scale=self.scale, enable_gqa=kv_heads != heads) for j, rows in enumerate(key_rows)], dim=2)
            elif one_query_at_a_time:
                attn = torch.cat([F.scaled_dot_product_attention(
                    q[None, :, j : j + 1], keys[:, :, : start + j + 1], values[:, :, : start + j + 1],
                    scale=self.scale, enable_gqa=kv_heads != heads) for j in range(t)], dim=2)
            else:
                attn = F.scaled_dot_product_attention(q[None], keys[:, :, :end], values[:, :, :end], attn_mask=mask,
                                                      scale=self.scale, enable_gqa=kv_heads != heads)
            x = x + layer.o(attn[0].transpose(0, 1).reshape(t, heads * head_dim), rows_at_once)
            gate, up = layer.gate_up(F.rms_norm(x, x.shape[-1:], layer.post_norm, self.eps), rows_at_once).chunk(
                2, dim=-1)
            x = x + layer.down(F.silu(gate) * up, rows_at_once)
        if len(self.layers) in wanted:
            captured[len(self.layers)] = x
        cache.length = end
        logits = self.lm_head(F.rms_norm(x[-1:] if last_only else x, x.shape[-1:], self.norm, self.eps), rows_at_once)
        return logits, [captured[i] for i in aux_layers]

    def _native_forward(self, x: torch.Tensor, cache: KVCache, aux_layers: list[int], last_only: bool,
                        tree: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """`forward` for one-row steps and verifications on int4 layers: the products in PyTorch's int4 kernel, the
        rest of each layer in C (`native_layer.c`), each row computed alone: a verification's rows are bit for bit
        what one-row steps give them. Written for a step's few milliseconds: locals, no per-layer allocations."""
        lib, (t, width), start = self.native, x.shape, cache.length
        add_norm, attend, silu_mul = lib.add_norm, lib.attend, lib.silu_mul
        heads, kv_heads, head_dim, eps = self.n_heads, self.n_kv, self.head_dim, self.eps
        positions = None if tree is None else tree[0].to(torch.long).contiguous()
        sees = None if tree is None else tree[1].to(torch.bool).contiguous()
        last = start + t - 1 if positions is None else int(positions.max())
        cos, signed_sin = (table.contiguous() for table in self.rope._table(last, x))
        rope = (cos.data_ptr(), signed_sin.data_ptr(), None if positions is None else positions.data_ptr())
        layer_bytes = kv_heads * cache.capacity * head_dim * cache.keys.element_size()
        keys, values, capacity = cache.keys.data_ptr(), cache.values.data_ptr(), cache.capacity
        shape = (t, heads, kv_heads, head_dim)
        seen = (capacity, start, None if sees is None else sees.data_ptr(), self.scale)
        product = _int4_product if t > MAX_EXACT_ROWS else Projection.int4_product
        threads = torch.get_num_threads()
        normed = torch.empty(t, width, dtype=torch.bfloat16)
        attended = torch.empty(t, heads * head_dim, dtype=torch.bfloat16)
        gated = torch.empty(t, self.layers[0].down.weight.shape[1], dtype=torch.bfloat16)  # a meta weight: its shape
        xp, normed_p, attended_p, gated_p, inter = x.data_ptr(), normed.data_ptr(), attended.data_ptr(), \
            gated.data_ptr(), gated.shape[1]
        captured: dict[int, torch.Tensor] = {}
        wanted, pending = set(aux_layers), None
        for i, layer in enumerate(self.layers):
            add_norm(xp, None if pending is None else pending.data_ptr(), layer.input_norm.data_ptr(), t, width, eps,
                     0, normed_p, None)
            if i in wanted:
                captured[i] = x.clone()
            qkv = product(layer.qkv, normed)
            if attend(qkv.data_ptr(), *shape, *rope, keys + i * layer_bytes, values + i * layer_bytes, *seen,
                      attended_p, threads):
                raise MemoryError("out of memory for the attention step's scratch")
            projected = product(layer.o, attended)  # held: a temporary's memory would be freed before the call
            add_norm(xp, projected.data_ptr(), layer.post_norm.data_ptr(), t, width, eps, 0, normed_p, None)
            gate_up = product(layer.gate_up, normed)
            silu_mul(gate_up.data_ptr(), t, inter, gated_p)
            pending = product(layer.down, gated)
        first = t - 1 if last_only else 0
        out = torch.empty(t - first, width, dtype=self.dtype)
        add_norm(xp, pending.data_ptr(), self.norm.data_ptr(), t, width, eps, first, None, out.data_ptr())
        if len(self.layers) in wanted:
            captured[len(self.layers)] = x
        cache.length = start + t
        return self.lm_head(out, MAX_EXACT_ROWS), [captured[i] for i in aux_layers]


def _int4_product(projection: Projection, x: torch.Tensor) -> torch.Tensor:
    """`Projection.int4_product`, never more than `MAX_EXACT_ROWS` rows at once (a tree larger than that)."""
    return torch.cat([projection.int4_product(part) for part in x.split(MAX_EXACT_ROWS)])
