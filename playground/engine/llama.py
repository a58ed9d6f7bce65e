"""A decode forward for Llama-architecture targets in float32 or bfloat16, in the manner of gpt-fast: plain tensors, a
preallocated KV cache. (On int4 weights the forward is in C: `int4.py`.)

It runs the weights of the loaded Hugging Face model (shared, not copied) and computes what transformers' forward
computes (float32: the same logits to rounding, tests/engine/test_fast_forward.py), without what a decode loop does not
need:
- per-op module calls: each layer is four matrix products (q, k and v fused into one weight, gate and up into
  another; the Hugging Face modules keep views into the fused weights, so memory does not grow) and a few fused ops;
- one cache buffer for all layers (`cache.KVCache`), written in place by position; a rollback only moves its
  length;
- hooks: the aux hidden states the drafter reads are taken from the residual stream as the loop passes them, and
  the vocabulary is scored only at the positions asked for.
Each product's layout is fixed by the CPU's features, never by a timing (so what a loaded target computes does not
depend on how busy the machine was): on a CPU, one-row float32 products of the widest roles through a contiguous W^T
(`COLUMN_ROLES`), products of several rows through oneDNN's packed weights where PyTorch has oneDNN (MKL's packs,
`expect_rows`, elsewhere); bfloat16 weights in oneDNN's packed layout on CPUs with bf16 instructions.
In bfloat16 a verification is also *row-exact* where this CPU's packed products are row-independent (probed at load,
by values, not time: `rows_independent`): each verified query then attends alone over exactly the keys a one-token
step would see, so every verified row is computed bit for bit as plain decoding computes it, and greedy speculative
output equals plain bfloat16 decoding's. Where they are not, the run says its tokens may differ from plain decoding's.

Only plain Llama layers take this path (`fast_forward_problem` says why a model does not); everything else runs
through transformers.
"""

from __future__ import annotations

import copy
import threading
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from playground.drafting import MAX_K

from .cache import FIRST_CAPACITY, KVCache

MAX_EXACT_ROWS = MAX_K + 1  # row independence is probed up to a chain's k + 1 rows; a larger tree's verification
# multiplies its rows in groups of at most this many
PACK_SHARE = 0.25  # float32 packs may take at most this share of the memory available when they are made
COLUMN_ROLES = ("qkv", "gate_up", "lm_head")  # one-row float32 products through W^T on a CPU: the roles that gained
# (docs/engine.md); o and down gained nothing
MEMINFO = Path("/proc/meminfo")


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
    """y = x W^T + b, with the weight laid out where that makes the product faster.

    - float32 several rows: oneDNN's packed weight where PyTorch has oneDNN (on a 2-core AMD EPYC Zen 4, 5 rows through
      SmolLM2's gate/up took 359 us packed against 892 as `F.linear`), else MKL's packed GEMM for the verification's
      row count (`pack_mkl`: one pack at a time, 2-5x the weight's memory);
    - bfloat16 on a CPU with bf16 instructions: oneDNN's packed weight, for any row count;
    - one row of the widest float32 products: x @ W^T through a contiguous copy of W^T (`use_columns`; SmolLM2's
      vocabulary head 11.4 ms as `F.linear`, 5.9 ms this way, on a 2-core AMD EPYC)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None,
                 owners: list[tuple[nn.Linear, int]] = ()) -> None:
        self.weight, self.bias = weight, bias
        self.mkl: tuple[int, torch.Tensor] | None = None  # (rows, packed weight): read once per call, so swaps are safe
        self.onednn: torch.Tensor | None = None
        self.columns: torch.Tensor | None = None  # W^T, contiguous: one-row products
        self.owners = list(owners)  # (module, first row): modules whose weight is a view of rows of this one

    def __call__(self, x: torch.Tensor, rows_at_once: int | None = None) -> torch.Tensor:
        """x [rows, in] -> [rows, out]; with `rows_at_once`, never more rows in one product than that (row-exact
        verification of a tree larger than the row counts `rows_independent` probed)."""
        if rows_at_once is not None and x.shape[0] > rows_at_once:
            return torch.cat([self(part) for part in x.split(rows_at_once)])
        if self.columns is not None and x.shape[0] == 1:
            y = x @ self.columns
            return y if self.bias is None else y + self.bias
        if self.onednn is not None:
            return torch.ops.mkldnn._linear_pointwise(x, self.onednn, self.bias, "none", [], "")
        mkl = self.mkl
        if mkl is not None and x.shape[0] == mkl[0]:
            return torch.ops.mkl._mkl_linear(x, mkl[1], self.weight, self.bias, mkl[0])
        return F.linear(x, self.weight, self.bias)

    def use_columns(self) -> None:
        """One-row products through W^T, contiguous, from now on. Where modules own views of the weight (the target's
        layers), the weight itself becomes a view of W^T, so the layout changes and memory does not grow; where none
        does (a tied vocabulary head, whose rows are also the embedding), W^T is a copy."""
        self.columns = self.weight.detach().t().contiguous()
        if self.owners:
            self.weight = self.columns.t()
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

    def tensors(self) -> list[torch.Tensor]:
        """What this projection holds: its weight, bias, packs and copies."""
        held = [self.weight, self.bias, self.columns, self.onednn, self.mkl[1] if self.mkl else None]
        return [t for t in held if t is not None]


def _address(tensor: torch.Tensor) -> int:
    """Where a tensor's data lives (views of one weight share it); oneDNN's opaque packs have no pointer to read."""
    return tensor.data_ptr() if tensor.layout == torch.strided else id(tensor)


def _room_for_copies(weights: list[torch.Tensor]) -> bool:
    """CPU weights whose copies fit in `PACK_SHARE` of the memory available now."""
    available = available_memory()
    return (bool(weights) and all(w.device.type == "cpu" for w in weights) and bool(available)
            and sum(w.numel() * w.element_size() for w in weights) <= PACK_SHARE * available)


def onednn_pack(weight: torch.Tensor) -> torch.Tensor:
    """oneDNN's packed layout of a weight, for products of any row count."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 8)


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


class RotaryTable:
    """A rotary embedding's cos and sin by position, with rotate_half's sign folded into sin (exact: negating is
    exact), so that `rotate` is one roll. On the CPU they come from a table computed once, for twice the positions
    reached so far (the module's own computation costs more than a lookup on a decode step); on a GPU, and for rope
    types whose frequencies depend on the sequence length (dynamic NTK, longrope), from the module at every call.
    Either way the values are the module's: the table is its output at those positions."""

    STATIC_TYPES = ("default", "linear", "llama3", "yarn")  # frequencies that do not depend on the length

    def __init__(self, rotary: nn.Module) -> None:
        self.rotary = rotary
        self.static = getattr(rotary, "rope_type", None) in self.STATIC_TYPES
        self._tables: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}
        self._lock = threading.Lock()

    def __call__(self, positions: torch.Tensor, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, signed sin), each [1, t, head_dim], for increasing `positions` [t], in `like`'s dtype."""
        if not self.static or positions.device.type != "cpu":
            return self._signed(*self.rotary(like, positions[None]))
        cos, signed_sin = self.table(int(positions[-1]), like)
        return cos[:, positions], signed_sin[:, positions]

    def span(self, start: int, end: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The same for positions start .. end - 1."""
        if not self.static or like.device.type != "cpu":
            return self(torch.arange(start, end, device=like.device), like)
        cos, signed_sin = self.table(end - 1, like)
        return cos[:, start:end], signed_sin[:, start:end]

    def tables(self, last: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, signed sin), each [positions, head_dim] and contiguous, for positions 0 .. at least `last` (static
        rope types on the CPU): what the C forward reads."""
        cos, signed_sin = self.table(last, like)
        return cos[0].contiguous(), signed_sin[0].contiguous()

    def table(self, last: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
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

    def __init__(self, model) -> None:
        problem = fast_forward_problem(model)
        if problem:
            raise ValueError(f"no fast forward: {problem}")
        cfg = model.config
        self.model = model
        self.embed = model.get_input_embeddings().weight
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
        self.weights = str(dtype).removeprefix("torch.")  # what the layers' products read
        on_cpu = self.embed.device.type == "cpu"
        if dtype == torch.bfloat16 and on_cpu and native_bfloat16():
            for projection in self.projections():
                projection.pack_onednn()
            # Probed, not assumed from the CPU's flags: on a 2-core AMD EPYC (Zen 4: AVX-512 BF16, no AMX) oneDNN
            # rounds SmolLM2's down and vocabulary products of one row differently from the same rows among several.
            shapes = {tuple(p.weight.shape): p for p in self.projections()}
            self.row_exact = all(rows_independent(p, MAX_EXACT_ROWS) for p in shapes.values())
        roles = {**self.layer_groups(), "lm_head": [self.lm_head]}
        self.transposed = [role for role in COLUMN_ROLES if dtype == torch.float32 and on_cpu
                           and _room_for_copies([p.weight for p in roles[role]])]
        for role in self.transposed:
            for projection in roles[role]:
                projection.use_columns()
        self.onednn_roles = []
        if dtype == torch.float32 and on_cpu and torch.backends.mkldnn.is_available():
            for role, group in roles.items():
                if _room_for_copies([p.weight for p in group]):
                    for projection in group:
                        projection.pack_onednn()
                    self.onednn_roles.append(role)

    def resident_bytes(self) -> int:
        """Bytes of weights the fast path holds, each tensor once: embedding, norms, products and their layouts."""
        norms = [t for layer in self.layers for t in (layer.input_norm, layer.post_norm)]
        held = [self.embed, self.norm, *norms, *(t for p in self.projections() for t in p.tensors())]
        unique = {(_address(t), t.numel() * t.element_size()) for t in held if t.device.type != "meta"}
        return sum(size for _, size in unique)

    @property
    def kernels(self) -> str:
        """Which products run: "onednn-packed" (bfloat16: every product), "onednn-packed qkv, ..." (float32: the roles
        whose several-row products oneDNN packs), "mkl-packed" (float32 otherwise, once packed) or "plain", then
        "+ transposed one-row qkv, gate_up, lm_head": the roles whose one-row products go through W^T."""
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
        with self._pack_lock:  # oneDNN's packs serve any rows
            projections = [p for p in self.projections() if p.onednn is None and p.weight.dtype == torch.float32]
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

    def first_layers(self, n: int) -> FastLlama:
        """This model cut after its first `n` layers, then its final norm and head (an early-exit draft): the same
        weights, read in place; its caches hold those layers alone."""
        view = copy.copy(self)
        view.layers = self.layers[:n]
        return view

    def new_cache(self, max_positions: int) -> KVCache:
        return KVCache(len(self.layers), self.n_kv, self.head_dim, max_positions, self.dtype, self.embed.device)

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, cache: KVCache, aux_layers: list[int], last_only: bool,
                tree: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """ids [t] → (logits [1 or t, vocab], aux states [t, hidden] of `aux_layers`, in their order).

        `tree` = (positions [t], sees [t, t] bool): a draft tree's verification, where new token i sits at
        `positions[i]` and attends to the cache and to the new tokens j with sees[i, j] (its ancestors and itself)."""
        t, start = ids.shape[0], cache.length
        end = start + t
        cache.reserve(end)
        x = F.embedding(ids, self.embed).to(self.dtype)  # [t, H]
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
