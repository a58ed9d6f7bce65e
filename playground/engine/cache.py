"""Caches of keys and values, for the target and the drafter, behind one small interface (`Cache`).

As in gpt-fast, entries are written by position into a buffer, and `length` positions are valid: appending writes in
place, and a rejection only moves the length back (`rollback`). A draft tree's verification writes every node, and
`keep` moves the accepted path's entries into place after the context (target caches only: the drafter re-reads the
accepted tokens' target features instead).

- `KVCache`: the target's fast path (`llama.FastLlama`), all layers in one buffer;
- `TransformersCache`: the target on transformers' forward, its `DynamicCache` adapted to the interface;
- `DrafterCache`: the drafter's layers, which also serve training (under autograd, appends concatenate).
"""

from __future__ import annotations

from typing import Protocol

import torch
from transformers import DynamicCache

FIRST_CAPACITY = 256  # positions a new KVCache holds before it first grows (it doubles, up to the model's context)


class Cache(Protocol):
    @property
    def length(self) -> int:
        """Positions whose entries are valid."""
        ...

    def rollback(self, length: int) -> None:
        """Drop every entry from `length` on (a no-op when the cache is no longer than that)."""
        ...


class TargetCache(Cache, Protocol):
    def keep(self, start: int, rows: torch.Tensor) -> None:
        """Keep the entries at `start + rows` (increasing: an accepted tree path), moved to `start`, `start + 1`, ...;
        drop every entry after them."""
        ...


class KVCache:
    """Keys and values of every layer, [layers, kv_heads, capacity, head_dim] each; `length` positions are valid."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, max_positions: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        self.shape, self.max_positions = (layers, kv_heads, head_dim), max_positions
        self.dtype, self.device = dtype, device
        self.keys = self.values = torch.empty(0)
        self.capacity = self.length = 0

    def reserve(self, length: int) -> None:
        if length <= self.capacity:
            return
        capacity = min(max(length, 2 * self.capacity, FIRST_CAPACITY), max(self.max_positions, length))
        layers, kv_heads, head_dim = self.shape
        keys = torch.empty(layers, kv_heads, capacity, head_dim, dtype=self.dtype, device=self.device)
        values = torch.empty_like(keys)
        if self.length:
            keys[:, :, : self.length] = self.keys[:, :, : self.length]
            values[:, :, : self.length] = self.values[:, :, : self.length]
        self.keys, self.values, self.capacity = keys, values, capacity

    def rollback(self, length: int) -> None:
        self.length = min(self.length, length)

    @torch.inference_mode()  # the entries were written under inference mode
    def keep(self, start: int, rows: torch.Tensor) -> None:
        end = start + rows.shape[0]
        for buffer in (self.keys, self.values):
            buffer[:, :, start:end] = buffer[:, :, start + rows]  # the gather copies before the write
        self.length = end


class TransformersCache:
    """transformers' `DynamicCache` (`inner`, what the model's forward is given) behind the `Cache` interface."""

    def __init__(self, config) -> None:
        self.inner = DynamicCache(config=config)

    @property
    def length(self) -> int:
        return self.inner.get_seq_length()

    def rollback(self, length: int) -> None:
        extra = self.length - length
        if extra > 0:
            self.inner.crop(-extra)  # the number of entries to remove

    @torch.inference_mode()  # the entries were written under inference mode
    def keep(self, start: int, rows: torch.Tensor) -> None:
        end = start + rows.shape[0]
        for layer in self.inner.layers:
            layer.keys[:, :, start:end] = layer.keys[:, :, start + rows]
            layer.values[:, :, start:end] = layer.values[:, :, start + rows]
        self.rollback(end)


class LayerCache:
    """One layer's keys and values [b, kv_heads, length, head_dim] (MLA: keys and values differ in width).

    At inference they live in a buffer that grows by doubling: appending writes in place and cropping only moves
    the end, so a draft step copies nothing. Under autograd (training), earlier keys must stay unmodified for the
    backward pass, so appending concatenates instead."""

    def __init__(self) -> None:
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.length = 0

    def extend(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        end = self.length + k.shape[2]
        if torch.is_grad_enabled() or self.keys is None or self.keys.shape[:2] != k.shape[:2]:
            if self.keys is not None and self.length:
                k = torch.cat([self.keys[:, :, : self.length], k], 2)
                v = torch.cat([self.values[:, :, : self.length], v], 2)
            self.keys, self.values, self.length = k, v, end
            return k, v
        if end > self.keys.shape[2]:
            grown = max(end, 2 * self.keys.shape[2], 64)
            more = grown - self.length
            self.keys = torch.cat([self.keys[:, :, : self.length],
                                   self.keys.new_empty(*k.shape[:2], more, k.shape[3])], 2)
            self.values = torch.cat([self.values[:, :, : self.length],
                                     self.values.new_empty(*v.shape[:2], more, v.shape[3])], 2)
        self.keys[:, :, self.length : end] = k
        self.values[:, :, self.length : end] = v
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]


class DrafterCache:
    """The drafter's keys and values, one `LayerCache` per layer."""

    def __init__(self, num_layers: int) -> None:
        self.layers = [LayerCache() for _ in range(num_layers)]

    @property
    def length(self) -> int:
        return self.layers[0].length

    def rollback(self, length: int) -> None:
        for layer in self.layers:
            layer.length = min(layer.length, length)
