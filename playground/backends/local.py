"""The local engine backend: one target and its drafters per preset, shared by every session of the process."""

from __future__ import annotations

import atexit
import gc
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from playground.drafting import PLAIN, method_for
from playground.engine import (
    CheckpointError,
    Eagle3Drafter,
    GenerationConfig,
    PlainProbe,
    StepEvent,
    Target,
    TreeShape,
    load_drafter,
)
from playground.engine.proposers import decode
from playground.presets import Preset
from playground.request import RequestError
from playground.smollm2 import local_folder

from . import Capabilities


@dataclass
class LoadedDrafter:
    drafter: Eagle3Drafter
    aux_layers: list[int]
    layout: str
    source: str


def keep_loaded_out_of_collections() -> None:
    """Everything alive once models load (their Python objects, the libraries': ~370,000 objects with the default
    pair) kept out of the garbage collector's full collections (gc.freeze): walking them took ~190 ms, and a full
    collection lands wherever allocations trigger it, in the middle of a choice or an answer, and in its timing
    (measured on a Zen 4). They are unfrozen at exit, so the interpreter still frees them."""
    gc.collect()
    gc.freeze()
    if not _unfreeze_at_exit:
        atexit.register(gc.unfreeze)
        _unfreeze_at_exit.append(True)


_unfreeze_at_exit: list[bool] = []


class LocalBackend:
    """Loads lazily, caches models, and streams StepEvents. Thread-safe for concurrent requests."""

    name = "local"
    missing_fields: dict[str, str] = {}  # StepEvent fields this backend cannot fill, and why (none here)
    capabilities = Capabilities(times_plain_steps=True)

    def __init__(self, preset: Preset, device: str | None = None) -> None:
        self.preset = preset
        self.device = device or preset.device
        self.dtype = getattr(torch, preset.dtype)
        self._lock = threading.Lock()
        self._target: Target | None = None
        self._drafters: dict[str, LoadedDrafter] = {}
        self._warmed: set[tuple[str, TreeShape | None]] = set()  # decode paths (plain or a drafter source, with
        #                                                            a tree shape or not) run once before timing

    @property
    def target(self) -> Target:
        with self._lock:
            if self._target is None:
                self._target = Target.load(local_folder(self.preset.target), device=self.device, dtype=self.dtype,
                                           weights=self.preset.weights)
                keep_loaded_out_of_collections()
            return self._target

    def drafter(self, name: str) -> LoadedDrafter:
        """A preset drafter by name, or any drafter folder / Hub id; checked against the target once."""
        source = self.preset.drafters.get(name, name)
        target = self.target
        with self._lock:
            if source not in self._drafters:
                # On the CPU the drafter stays in float32 whatever the target's dtype: its small products in bfloat16
                # go through slower kernels than float32's, and its precision changes acceptance, never the output.
                # Beside an int4 target its calls go to C, in 8-bit codes (`use_native_calls`).
                dtype = torch.float32 if torch.device(self.device).type == "cpu" else self.dtype
                drafter, layout = load_drafter(source, dtype=dtype)
                drafter = drafter.to(self.device)
                aux = target.attach(drafter)
                drafter.prepare_for_decoding(int8=target.weights == "int4")
                self._drafters[source] = LoadedDrafter(drafter, aux, layout, source)
                keep_loaded_out_of_collections()
            return self._drafters[source]

    @property
    def exact_speculation(self) -> bool:
        """Whether greedy speculative output equals plain decoding's in this precision: in float32 (up to float32
        near-ties, which the lossless tests bound), and in bfloat16 where the fast forward verifies row-exactly."""
        target = self.target
        return (target.weights == "float32" and target.dtype == torch.float32) or (
            target.fast is not None and target.fast.row_exact)

    def plain_probe(self) -> PlainProbe:
        """Times plain decode steps at a run's position (the live speedup's baseline); one per run."""
        return PlainProbe(self.target)

    def held(self) -> str | None:
        return None  # its weights live in the app's process

    def starting(self, drafter: str, k: int) -> str | None:
        return None  # nothing starts before a run: the models load once, at preload or the first request

    def preparing(self, drafter: str, k: int) -> Iterator[str]:
        return iter(())

    def encode(self, messages: list[dict], chat_template: str | None = None, raw: bool = False) -> list[int]:
        return self.target.encode_chat(messages, chat_template=chat_template, raw=raw)

    def decode(self, ids: list[int]) -> str:
        return self.target.decode(ids)

    def preload(self) -> None:
        """Load the target and every preset drafter now (on ZeroGPU: at start-up, outside any @spaces.GPU call)."""
        _ = self.target
        for name in self.preset.drafters:
            self.drafter(name)

    def _generate(self, prompt_ids: list[int], drafter: str, cfg: GenerationConfig,
                  should_stop: Callable[[], bool] | None = None, session: str | None = None) -> Iterator[StepEvent]:
        if drafter != PLAIN and self.target.quantised and not self.exact_speculation:
            raise RequestError("int4 weights: this CPU's int4 products round a row differently among several, so "
                               "speculation on them would not be token-identical to plain decoding; run plain "
                               "decoding, or weights float32")
        loaded = self.drafter(drafter) if drafter != PLAIN and method_for(drafter).checkpoint else None
        return decode(self.target, drafter, prompt_ids, cfg, should_stop, loaded.drafter if loaded else None,
                      loaded.aux_layers if loaded else [], session)

    def warm_up(self, prompt_ids: list[int], drafter: str, tree: TreeShape | None = None) -> None:
        """Run this decode path once, briefly, before it is timed: the first CUDA (or CPU) call of a path pays for
        kernel selection, allocator growth and lazy initialisation. Once per path (a tree shape is a path of its
        own: it verifies another number of rows) and backend."""
        path = (PLAIN if drafter == PLAIN else self.preset.drafters.get(drafter, drafter), tree)
        if path not in self._warmed:
            with self.target.prefix_set_aside():
                for _ in self._generate(prompt_ids, drafter, GenerationConfig(max_new_tokens=4, k=2, tree=tree)):
                    pass
            self._warmed.add(path)

    def stream(self, prompt_ids: list[int], drafter: str, cfg: GenerationConfig,
               should_stop: Callable[[], bool] | None = None, session: str | None = None) -> Iterator[StepEvent]:
        """Step events of one request; the path (plain or this drafter) is warmed up first (with no session), so
        timings are honest. `session`: whose state a method that keeps one reads and grows."""
        self.warm_up(prompt_ids, drafter, cfg.tree if drafter != PLAIN else None)
        return self._generate(prompt_ids, drafter, cfg, should_stop, session)


__all__ = ["CheckpointError", "LocalBackend", "LoadedDrafter"]
