"""The target model: any Hugging Face causal LM, with aux hidden states captured in the same forward.

Aux layer ids use vLLM's convention: id i captures the residual stream at the *input* of decoder layer i
(= HF `hidden_states[i]`); id == num_layers captures the final pre-norm state.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
from transformers.utils import logging as hf_logging

from .cache import TargetCache, TransformersCache
from .checkpoint import CheckpointError
from .drafter import Eagle3Drafter
from .int4 import Int4Llama, int4_problem
from .llama import FastLlama, fast_forward_problem
from .templates import encode_chat
from .threads import ThreadPolicy, thread_policy


def cache_keyword(model) -> str:
    """The forward keyword that takes a KV cache: `cache` from transformers 5.24, `past_key_values` before (vLLM's
    CPU build pins transformers < 5.20). Passing the wrong one would be ignored silently and decode with no cache."""
    return "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"


def width_problem(expects: int, has: int) -> str | None:
    """The fit checks' sentences, worded once: Target.attach checks a loaded drafter with them, request/fit.py a
    drafter's config.json before anything loads."""
    return None if int(expects) == int(has) else f"drafter expects target hidden size {expects}, target has {has}"


def vocab_problem(drafter_vocab: int, target_vocab: int) -> str | None:
    return None if int(drafter_vocab) == int(target_vocab) else \
        f"drafter vocab_size {drafter_vocab} != target vocab_size {target_vocab}"


def aux_count_problem(states: int, ids: int) -> str | None:
    return None if states == ids else f"num_aux_hidden_states is {states} but {ids} aux layer ids are set"


def aux_ids_problem(ids: list[int], num_layers: int) -> str | None:
    bad = [i for i in ids if not 0 <= i <= num_layers]
    return f"aux layer ids {bad} are outside the target's 0..{num_layers}" if bad else None


def does_not_fit(problems: list[str], drafter: str = "", target: str = "") -> str:
    """The refusal of a drafter that does not fit, naming both where they are known."""
    who = f"drafter {drafter} does not fit target {target}" if drafter else "the drafter does not fit the target"
    return f"{who}: {'; '.join(problems)}"


WEIGHTS = ("auto", "float32", "int4")  # what a Llama target multiplies on the CPU: int4 where it can run, or forced


class TargetError(ValueError):
    """A target that cannot be loaded or a drafter that does not fit it."""


@dataclass
class TargetOutput:
    logits: torch.Tensor  # [t, vocab], float32
    aux: torch.Tensor | None  # [t, n_aux * hidden] when captured
    threads: int | None = None  # CPU threads the forward ran on (None on a GPU)
    others_running: int | None = None  # other runnable tasks on the machine just before it (None where unknown)
    cores_taken: float | None = None  # other processes' CPU time in cores over the load sample before it


@dataclass(frozen=True)
class KeptPrefix:
    """A run's target cache over `ids`, with the features of `aux_layers` at each of them where it computed them."""

    ids: tuple[int, ...]
    cache: TargetCache
    aux_layers: tuple[int, ...] = ()
    aux: torch.Tensor | None = None  # [len(ids), features]


class Target:
    """A loaded target. On the CPU a Llama-architecture model decodes through `FastLlama` (same weights, same numbers,
    a preallocated cache); other models, and every model on a GPU, through transformers' own forward. `forward_path`
    says which (`"fast"` or `"transformers"`), and `fast_problem` why not fast."""

    def __init__(self, model, tokenizer, device: torch.device | str = "cpu", name: str = "target",
                 fast: bool = True, weights: str = "float32") -> None:
        self.name = name
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.config = model.config
        self._layers, self._final_norm = self._find_layers(model)
        self.num_layers = len(self._layers)
        self.hidden_size = int(self.config.hidden_size)
        self.vocab_size = int(self.config.vocab_size)
        self.cache_keyword = cache_keyword(model)
        self.max_positions = int(getattr(self.config, "max_position_embeddings", 1 << 30))
        self.eos_ids = self._eos_ids(model, tokenizer)
        self._capture = threading.local()  # per thread: several sessions may share one target
        self._kept: KeptPrefix | None = None  # a run's cache, offered to the next run that goes on from its text
        self._kept_lock = threading.Lock()
        self._install_hooks()
        self.fast_problem = ("turned off" if not fast else
                             "GPU targets run through transformers (the fast path is verified on the CPU only)"
                             if self.device.type != "cpu" else fast_forward_problem(model))
        if weights not in WEIGHTS:
            raise TargetError(f"weights {weights!r} is not one of {', '.join(WEIGHTS)}")
        quantised = ("float32 asked for" if weights == "float32" else "the fast path is turned off" if not fast
                     else int4_problem(model, self.device))
        if weights == "int4" and quantised:
            raise TargetError(f"int4 weights: {quantised}")
        self.weights_why = f"int4 weights: {quantised}" if weights == "auto" and quantised else None
        if not quantised:
            self.fast = Int4Llama(model)
        else:
            self.fast = FastLlama(model) if self.fast_problem is None else None
        self.threads: ThreadPolicy | None = thread_policy() if self.device.type == "cpu" else None
        if self.threads is not None and not self.threads.measured:
            self.threads.calibrate(self._one_row_forward())

    @property
    def forward_path(self) -> str:
        return "fast" if self.fast is not None else "transformers"

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the residual stream and the logits (int4 weights keep float32's)."""
        return self.fast.dtype if self.fast is not None else self.model.get_input_embeddings().weight.dtype

    @property
    def weights(self) -> str:
        """What the layers' products read: "float32", "bfloat16", "float16" or "int4" (`FastLlama.weights`)."""
        return self.fast.weights if self.fast is not None else str(self.dtype).removeprefix("torch.")

    @property
    def quantised(self) -> bool:
        """The layers' float32 weights were given back for int4 codes: transformers' own forward cannot run."""
        return self.weights == "int4"

    @classmethod
    def load(cls, path_or_id: str, device: str = "cpu", dtype: torch.dtype = torch.float32,
             trust_remote_code: bool = False, fast: bool = True, weights: str = "float32") -> Target:
        hf_logging.disable_progress_bar()
        try:
            tokenizer = AutoTokenizer.from_pretrained(path_or_id, trust_remote_code=trust_remote_code)
            model = AutoModelForCausalLM.from_pretrained(
                path_or_id, dtype=dtype, trust_remote_code=trust_remote_code, attn_implementation="sdpa"
            ).to(device)
        except (OSError, ValueError) as err:
            first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise TargetError(f"cannot load target {path_or_id!r}: {first_line}") from None
        return cls(model, tokenizer, device, name=str(path_or_id), fast=fast, weights=weights)

    @staticmethod
    def _find_layers(model):
        inner = getattr(model, "model", None)
        layers = getattr(inner, "layers", None)
        if layers is None:
            raise TargetError(f"{type(model).__name__} has no .model.layers; cannot capture aux hidden states")
        return layers, getattr(inner, "norm", None)

    @staticmethod
    def _eos_ids(model, tokenizer) -> set[int]:
        ids: set[int] = set()
        gen = getattr(model, "generation_config", None) or GenerationConfig()
        for source in (gen.eos_token_id, tokenizer.eos_token_id):
            if source is None:
                continue
            ids.update(source if isinstance(source, (list, tuple)) else [source])
        return ids

    def _install_hooks(self) -> None:
        def capture(index: int):
            def hook(module, args, kwargs):
                wanted = getattr(self._capture, "wanted", None)
                if wanted and index in wanted:
                    self._capture.found[index] = args[0] if args else kwargs["hidden_states"]
            return hook

        for i, layer in enumerate(self._layers):
            layer.register_forward_pre_hook(capture(i), with_kwargs=True)
        if self._final_norm is not None:
            self._final_norm.register_forward_pre_hook(capture(self.num_layers), with_kwargs=True)

    def default_aux_layer_ids(self) -> list[int]:
        n = self.num_layers
        return sorted([2, n // 2, n - 3])

    def attach(self, drafter: Eagle3Drafter) -> list[int]:
        """Check that a drafter fits this target, share embeddings if it has none, return its aux layer ids."""
        cfg = drafter.config
        # in layer order, whatever order the config lists them in: vLLM and SafeAILab concatenate them so
        ids = sorted(cfg.aux_layer_ids or self.default_aux_layer_ids())
        problems = [p for p in (width_problem(cfg.target_hidden_size, self.hidden_size),
                                vocab_problem(cfg.vocab_size, self.vocab_size),
                                aux_count_problem(cfg.num_aux_hidden_states, len(ids)),
                                aux_ids_problem(ids, self.num_layers)) if p]
        if drafter.embed_tokens is None and cfg.hidden_size != self.hidden_size:
            problems.append(
                f"drafter ships no embed_tokens and its hidden size {cfg.hidden_size} differs from the target's "
                f"{self.hidden_size}"
            )
        if problems:
            raise CheckpointError(does_not_fit(problems))
        if drafter.embed_tokens is None:
            drafter.use_target_embeddings(self.model.get_input_embeddings())
        return ids

    def keep_prefix(self, kept: KeptPrefix) -> None:
        """Offer a finished run's cache to the next run whose prompt goes on from its tokens (k auto's plain probe,
        which the chosen method continues): taken once, by `take_prefix`. Only where a row is computed alike in a
        forward of any number of rows (`row_exact`), so the next run's numbers are those its own prefill would give."""
        if self.fast is not None and self.fast.row_exact:
            with self._kept_lock:
                self._kept = kept

    def take_prefix(self, prompt_ids: list[int], aux_layers: list[int]) -> KeptPrefix | None:
        """The kept cache where `prompt_ids` go on from its tokens (and it holds the features of `aux_layers` where
        the run reads any), now this run's; None otherwise."""
        with self._kept_lock:
            kept = self._kept
            if (kept is None or len(kept.ids) >= len(prompt_ids) or tuple(prompt_ids[: len(kept.ids)]) != kept.ids
                    or (aux_layers and (tuple(aux_layers) != kept.aux_layers or kept.aux is None))):
                return None
            self._kept = None
        kept.cache.rollback(len(kept.ids))
        return kept

    def start_from(self, prompt_ids: list[int], aux_layers: list[int]
                   ) -> tuple[TargetCache, list[int], torch.Tensor | None]:
        """Where a run starts: (its cache, the prompt's ids still to forward, the kept features of those before
        them): a kept cache that holds the prompt's start (`take_prefix`), else a new one and the whole prompt."""
        kept = self.take_prefix(prompt_ids, aux_layers)
        if kept is None:
            return self.new_cache(), list(prompt_ids), None
        return kept.cache, list(prompt_ids[len(kept.ids):]), kept.aux

    @contextmanager
    def prefix_set_aside(self) -> Iterator[None]:
        """The kept cache out of reach for the block (a warm-up run must not take the run's own)."""
        with self._kept_lock:
            kept, self._kept = self._kept, None
        try:
            yield
        finally:
            with self._kept_lock:
                self._kept = self._kept or kept

    def new_cache(self) -> TargetCache:
        return self.fast.new_cache(self.max_positions) if self.fast is not None else TransformersCache(self.config)

    def expect_rows(self, rows: int) -> None:
        """Say how many tokens the coming forwards feed at once (a verification's k + 1), so the fast path can
        prepare its matrix products for that many rows."""
        if self.fast is not None:
            self.fast.expect_rows(rows)

    def use_threads(self, rows: int) -> int | None:
        """Set the CPU threads for a product of `rows` rows (the policy of engine/threads.py); None on a GPU."""
        return self.threads.use(rows) if self.threads is not None else None

    def _one_row_forward(self):
        """A one-token step after a short context, on a cache of its own: what the thread policy times at load."""
        cache, ids = self.new_cache(), [i % self.vocab_size for i in range(9)]  # any vocabulary, however small
        self.forward(ids[:8], cache, last_only=True)

        def step() -> None:
            cache.rollback(8)
            self.forward(ids[8:], cache, last_only=True)
        return step

    def capture_layers(self, layer_ids, run):
        """Call `run()` (a forward of this target's model) and return (its output, {layer id: captured state})."""
        self._capture.wanted, self._capture.found = set(layer_ids), {}
        try:
            return run(), dict(self._capture.found)
        finally:
            self._capture.wanted, self._capture.found = None, {}

    @torch.inference_mode()
    def forward(self, input_ids: list[int] | torch.Tensor, cache: TargetCache,
                aux_layers: list[int] | None = None, last_only: bool = False,
                tree: tuple[torch.Tensor, torch.Tensor] | None = None) -> TargetOutput:
        """Run new tokens through the model, appending to `cache`; capture the aux hidden states of `aux_layers`.

        `tree` = (positions [t], sees [t, t] bool) verifies a draft tree: new token i sits at positions[i] and attends
        to the cache and to the new tokens j where sees[i, j]."""
        others = self.threads.sample() if self.threads is not None else None
        machine = {"others_running": others, "cores_taken": getattr(self.threads, "cores_taken", None)}
        threads = self.use_threads(len(input_ids))
        if self.fast is not None:
            ids = torch.as_tensor(input_ids, dtype=torch.long, device=self.device).view(-1)
            logits, aux = self.fast.forward(ids, cache, aux_layers or [], last_only, tree)
            return TargetOutput(logits=logits.float(), aux=torch.cat(aux, dim=-1) if aux_layers else None,
                                threads=threads, **machine)
        ids = torch.as_tensor(input_ids, dtype=torch.long, device=self.device).view(1, -1)
        extra = {} if tree is None else self._tree_arguments(cache, *tree)
        out, found = self.capture_layers(aux_layers or (), lambda: self.model(
            input_ids=ids, use_cache=True, logits_to_keep=1 if last_only else 0, **{self.cache_keyword: cache.inner},
            **extra))
        aux = torch.cat([found[i][0] for i in aux_layers], dim=-1) if aux_layers else None
        return TargetOutput(logits=out.logits[0].float(), aux=aux, threads=threads, **machine)

    @torch.no_grad()
    def features(self, tokens: torch.Tensor, aux_layers: list[int]) -> TargetOutput:
        """Batched forward without a cache, for training drafters: logits [b, t, V] and aux [b, t, n*H]."""
        if self.quantised:
            raise TargetError("a target loaded with int4 weights has no float32 weights to train drafters on: load it "
                              "with weights float32")
        out, found = self.capture_layers(aux_layers,
                                         lambda: self.model(input_ids=tokens.to(self.device), use_cache=False))
        return TargetOutput(logits=out.logits.float(), aux=torch.cat([found[i] for i in aux_layers], dim=-1))

    def _tree_arguments(self, cache: TransformersCache, positions: torch.Tensor, sees: torch.Tensor) -> dict:
        """transformers' position ids and a 4D additive mask (used as given: transformers builds no mask of its own
        for a 4D one), the cached positions visible to every new token."""
        t, start = sees.shape[0], cache.length
        visible = torch.cat([torch.ones(t, start, dtype=torch.bool, device=sees.device), sees], dim=1)
        mask = torch.zeros(visible.shape, dtype=self.dtype, device=self.device).masked_fill_(
            ~visible, torch.finfo(self.dtype).min)
        return {"position_ids": positions.view(1, -1), "attention_mask": mask[None, None]}

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def clock(self) -> float:
        """Wall-clock seconds after all queued device work is done (honest timing on CUDA)."""
        self.synchronize()
        return time.perf_counter()

    def encode_chat(self, messages: list[dict], chat_template: str | None = None, raw: bool = False) -> list[int]:
        return encode_chat(self.tokenizer, messages, chat_template, raw)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)
