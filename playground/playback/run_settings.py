"""What the user picked for one run, checked before anything runs."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from playground.drafting import DEFAULT_DRAFTER, PLAIN, method_for, method_of
from playground.engine import GenerationConfig, TreeShape
from playground.engine.choice import AutoK
from playground.engine.config import max_new_tokens_problem
from playground.engine.templates import CHAT_TEMPLATES
from playground.engine.tree_shape import MAX_NODES
from playground.presets import DRAFTER_LABELS, ENGINE_LABELS, Preset, default_preset_name, get_preset
from playground.request import RequestError, ResolvedRequest, check_request, resolve_request

MAX_NEW_TOKENS = 1024


@dataclass(frozen=True)
class RunSettings:
    """What the user picked for one run."""

    drafter: str = DEFAULT_DRAFTER  # a drafter name of the preset, or PLAIN for plain decoding
    k: int = 4
    preset: str = field(default_factory=default_preset_name)
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    chat_template: str = "default"  # "default" (the tokenizer's) or a shipped one (engine.templates)
    system: str = ""
    seed: int | None = None  # sampling only: the same seed repeats the same answer
    min_draft_prob: float = 0.0  # adaptive draft length (engine.GenerationConfig); 0 drafts k every step
    tree_nodes: int = 0  # a draft tree of this many nodes per step, k deep (engine/tree.py); 0 drafts a chain of k
    k_auto: bool = False  # k chosen at the run's start (auto_k.py): the k predicted fastest, or plain decoding
    # a weightless method's settings (drafting.METHODS' Parameters, by name) as (name, value) pairs; one left out
    # takes the registry's default
    method_settings: tuple[tuple[str, int | float], ...] = ()

    @property
    def plain(self) -> bool:
        return self.drafter == PLAIN

    @functools.cached_property  # read by every render of a live run; the presets are looked up once
    def drafter_label(self) -> str:
        """The drafter's display name, with the adaptive threshold when set and the engine when it is vLLM (a
        comparison may differ only in one of them)."""
        if self.plain:
            name = "plain decoding"
        else:
            name = DRAFTER_LABELS.get(self.drafter, self.drafter)
            name = " ".join([name, *self._changed_settings()])
            name = f"{name} adaptive {self.min_draft_prob:g}" if self.min_draft_prob else name
            name = f"{name} tree {self.tree_nodes}" if self.tree_nodes else name
            name = f"{name} k auto" if self.k_auto else name
        try:
            backend = get_preset(self.preset).backend
        except KeyError:
            return name
        return f"{name} ({ENGINE_LABELS[backend]})" if backend == "vllm" else name

    def _changed_settings(self) -> list[str]:
        """The method's settings given other than the registry's defaults, each named without the words all its
        settings share ('max_tree_depth 12' for suffix decoding's suffix_decoding_max_tree_depth)."""
        method = method_of(self.drafter)
        if method is None or not self.method_settings:
            return []
        words = [p.name.split("_") for p in method.parameters]
        shared = len(os.path.commonprefix(words)) if len(words) > 1 else 0
        defaults = {p.name: p.default for p in method.parameters}
        return [f"{'_'.join(name.split('_')[shared:])} {value}" for name, value in self.method_settings
                if value != defaults.get(name)]

    def checked_preset(self) -> Preset:
        """The preset, after checking every field (k auto's too, without choosing); raises RequestError with a message
        for the user."""
        preset, cfg = self._checked()
        check_request(preset, self.drafter, cfg, k_auto=self.k_auto)
        return preset

    def resolved(self, choose_k: Callable[[Preset], AutoK]) -> ResolvedRequest:
        """The run as it will go: every field checked, and with k auto, the k `choose_k` chooses for the preset (or
        plain decoding); raises RequestError with a message for the user."""
        preset, cfg = self._checked()
        return resolve_request(preset, self.drafter, cfg, choose_k=(lambda: choose_k(preset)) if self.k_auto else None)

    def _checked(self) -> tuple[Preset, GenerationConfig]:
        """The preset and the decoding settings, once the fields that are the app's own are checked."""
        try:
            preset = get_preset(self.preset)
        except KeyError as err:
            raise RequestError(err.args[0]) from None
        if not 0 <= self.tree_nodes <= MAX_NODES:
            raise RequestError(f"the draft tree's nodes must be from 0 (a chain) to {MAX_NODES}, got {self.tree_nodes}")
        if problem := max_new_tokens_problem(self.max_new_tokens, MAX_NEW_TOKENS):
            raise RequestError(problem)
        if self.chat_template not in CHAT_TEMPLATES:
            raise RequestError(f"unknown chat template {self.chat_template!r}; "
                               f"choose one of {', '.join(CHAT_TEMPLATES)}")
        try:
            return preset, self.generation_config()
        except ValueError as err:  # the decoding settings' own check
            raise RequestError(str(err)) from None

    def generation_config(self) -> GenerationConfig:
        return GenerationConfig(max_new_tokens=self.max_new_tokens, k=self.k, temperature=self.temperature,
                                top_p=self.top_p, seed=self.seed, min_draft_prob=self.min_draft_prob, tree=self.tree,
                                method_settings=self.method_settings)

    @property
    def features(self) -> bool:
        """Whether the run drafts from the target's hidden states, so that its attention, drift and hidden-state RMS
        views apply (a preset's drafter or a folder: yes; a weightless method: no)."""
        method = method_of(self.drafter)
        return method is None or method.features

    @property
    def proposes_from(self) -> str:
        """What the run drafts from where not from the target's states (`drafting.Method.proposes_from`)."""
        return method_for(self.drafter).proposes_from

    @property
    def tree(self) -> TreeShape | None:
        """The draft tree of a tree run: k deep, TreeShape's children per node, `tree_nodes` nodes."""
        return TreeShape.k_deep(self.k, self.tree_nodes) if self.tree_nodes and not self.plain else None

    @property
    def template_name(self) -> str | None:
        return None if self.chat_template == "default" else self.chat_template
