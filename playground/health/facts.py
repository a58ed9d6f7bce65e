"""The facts of a run that a health check compares with the drafter's fingerprint, gathered from its backend: the
target's weights digest, the chat template's text, the context, the temperature, the draft vocabulary's coverage.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from playground.drafting import PLAIN, method_of
from playground.engine import GenerationConfig, StepEvent
from playground.engine.templates import CHAT_TEMPLATES, UnknownTemplate, resolve_template
from playground.presets import Preset
from playground.run_record import multiplied
from playground.smollm2 import local_folder

from .check import Health, RunFacts, check_health
from .fingerprint import Fingerprint, load_fingerprint, template_digest, weights_digest

_VOCABULARIES: dict[str, frozenset[int] | None] = {}


def draft_vocabulary(drafter_source: str) -> frozenset[int] | None:
    """The target ids a drafter can propose (from its checkpoint's d2t offsets); None for the whole vocabulary or a
    checkpoint that is not a local folder."""
    if drafter_source not in _VOCABULARIES:
        vocabulary = None
        for path in sorted(Path(drafter_source).glob("*.safetensors")) if Path(drafter_source).is_dir() else []:
            import torch
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as tensors:
                if "d2t" in tensors.keys():
                    offsets = tensors.get_tensor("d2t").long()
                    vocabulary = frozenset((offsets + torch.arange(len(offsets))).tolist())
        _VOCABULARIES[drafter_source] = vocabulary
    return _VOCABULARIES[drafter_source]


def draft_coverage(vocabulary: frozenset[int] | None, answer_ids: list[int]) -> float | None:
    if vocabulary is None or not answer_ids:
        return None
    return sum(t in vocabulary for t in answer_ids) / len(answer_ids)


def template_sha256(tokenizer, chat_template: str | None, raw: bool) -> str | None:
    """A digest of the chat template's text a prompt was encoded with: "raw" for none; None where not known (no
    tokenizer here, or a prompt given as text or ids to a server)."""
    if raw:
        return "raw"
    if tokenizer is None or chat_template is None:
        return None
    try:
        text = resolve_template(chat_template, tokenizer)
    except UnknownTemplate:
        text = chat_template  # a template's own text (a server request's chat_template)
    own = getattr(tokenizer, "chat_template", None)
    own = own.get("default") if isinstance(own, dict) else own  # a tokenizer's named templates: its default
    return template_digest(text or (own if isinstance(own, str) else None))


def template_label(chat_template: str | None, raw: bool) -> str:
    if raw:
        return "raw"
    if chat_template is None:
        return "unknown"
    return chat_template if chat_template in CHAT_TEMPLATES else "the request's own"


def drafter_source(preset: Preset, drafter: str) -> str:
    return preset.drafters.get(drafter, drafter)


def target_folder(preset: Preset) -> str | None:
    """The folder of the target's weights, where this process can read it (not a remote server's)."""
    return None if preset.backend == "remote" else local_folder(preset.target)


def backend_tokenizer(backend):
    target = getattr(backend, "target", None)
    return target.tokenizer if target is not None else getattr(backend, "tokenizer", None)


def run_facts(preset: Preset, backend, drafter: str, cfg: GenerationConfig, chat_template: str | None, raw: bool,
              prompt_tokens: int, answer_ids: list[int]) -> RunFacts:
    """The facts of a run of `drafter` on `preset`'s `backend` (any backend; unknown facts stay None)."""
    tokenizer = None if preset.backend == "remote" else backend_tokenizer(backend)
    folder = target_folder(preset)
    source = drafter_source(preset, drafter)
    return RunFacts(
        k=cfg.tree.depth if cfg.tree else cfg.k, temperature=cfg.temperature, top_p=cfg.top_p,
        tree=cfg.tree is not None,
        target_digest=weights_digest(folder) if folder else None, chat_template=template_label(chat_template, raw),
        chat_template_sha256=template_sha256(tokenizer, chat_template, raw),
        context_tokens=prompt_tokens + len(answer_ids),
        draft_coverage=draft_coverage(draft_vocabulary(source), answer_ids), weights=multiplied(backend))


def fingerprint_for(preset: Preset, drafter: str) -> Fingerprint | None:
    """The fingerprint of a run's drafter (None for plain decoding or a drafter without one)."""
    return None if drafter == PLAIN else load_fingerprint(drafter_source(preset, drafter))


def run_health(preset: Preset, backend, drafter: str, cfg: GenerationConfig, chat_template: str | None, raw: bool,
               prompt_tokens: int, events: list[StepEvent], earlier: Sequence[Health] = ()) -> Health:
    """The health of a run of `drafter` on `preset`'s `backend` whose steps so far are `events`, with the session's
    `earlier` answers of this drafter, k and way of decoding (check.check_health)."""
    method = method_of(drafter)
    if method is not None and method.proposes and not method.fingerprint:
        return Health("not checked", why_not=f"{method.label} has no trained drafter to fingerprint: it proposes "
                                             f"from {method.proposes_from}")
    try:
        fingerprint = fingerprint_for(preset, drafter)
    except ValueError as err:  # a damaged fingerprint: said, and the run goes on
        return Health("not checked", why_not=str(err))
    answer = [t for e in events for t in e.emitted]
    facts = run_facts(preset, backend, drafter, cfg, chat_template, raw, prompt_tokens, answer)
    return check_health(fingerprint, facts, events, drafting=drafter != PLAIN, earlier=earlier)
