"""What the bench compares: our decode loops (plain, EAGLE drafters, the weightless methods: prompt lookup and suffix
decoding) and peers run through transformers' generate.

Every method turns one prompt (token ids) into one answer and is timed the same way: wall time around the
whole call, after all device work (`Target.clock`), prefill included.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM
from transformers import GenerationConfig as HFGenerationConfig

from playground.auto_k import auto_k
from playground.backends.local import LocalBackend
from playground.drafting import METHODS, PLAIN, method_for, offered_methods
from playground.engine import GenerationConfig, StepEvent, TreeShape, emitted_ids
from playground.engine.choice import AutoK
from playground.engine.cost_measure import context_bucket, pair_profile
from playground.engine.costs import CostProfile
from playground.health import Health, run_health
from playground.presets import DRAFTER_LABELS
from playground.request import ResolvedRequest, resolve_request
from playground.request.check import k_auto_problem
from playground.request.check import own_settings as settings_of
from playground.smollm2 import cache_root

PEERS = {
    "hf-greedy": "transformers generate(), plain decoding",
    "prompt-lookup": "transformers generate(prompt_lookup_num_tokens=k)",
    "hf-assisted": "transformers generate(assistant_model=…, num_assistant_tokens=k)",
}
NO_ASSISTANT = "no small draft model exists for this target; pass --assistant MODEL to compare one"
QUANTISED_PEER = ("transformers' generate() needs float weights, and this target reads its int4 blocks in C: run "
                  "the float32 preset (smollm2-135m-float32) to compare transformers' peers")
# One line per method a bench table can show, for readers who do not know the names (the Benchmark tab's findings
# list the ones a result has): the registry's own, then the peers'. A drafter given as a folder is described by
# `describe_method`.
METHOD_DESCRIPTIONS = {
    **{name: m.description for name, m in METHODS.items()},
    "hf-greedy": "Hugging Face transformers' own `generate()` with no drafter: plain decoding outside our loop, a "
                 "check on our baseline",
    "prompt-lookup": "transformers' prompt-lookup decoding (`prompt_lookup_num_tokens=k`): no draft model; it "
                     "guesses the k tokens that followed an earlier occurrence of the last one or two tokens in the "
                     "prompt or the answer so far, and the target checks them",
    "hf-assisted": "transformers' assisted generation: a separate small draft model (`--assistant`) proposes k "
                   "tokens, the target checks them",
}


def describe_method(name: str) -> str:
    """One line on what the bench method `name` (a row's `drafter`) is."""
    return METHOD_DESCRIPTIONS.get(name) or f"an EAGLE drafter loaded from `{Path(name).name}`"


@dataclass(frozen=True)
class Method:
    """One way of generating: `none` (our plain loop), an EAGLE drafter at k (a chain, or a draft tree of
    `tree_nodes` nodes k deep), a weightless method at k (a chain), or a peer (at k where it drafts)."""

    name: str  # PLAIN, a preset drafter name or folder, a registry method needing no checkpoint, a key of PEERS
    k: int | None = None
    tree_nodes: int | None = None
    auto: bool = False  # k auto: each answer's k chosen at its start (auto_k.py); k is then None

    @property
    def kind(self) -> str:
        """baseline, peer, weightless (prompt lookup, suffix decoding in our loop) or eagle."""
        if self.name == PLAIN:
            return "baseline"
        if self.name in PEERS:
            return "peer"
        return "eagle" if method_for(self.name).checkpoint else "weightless"

    @property
    def speculates(self) -> bool:
        """Drafts in our own loop (an EAGLE drafter or a weightless method): its steps have acceptance to count."""
        return self.kind in ("eagle", "weightless")

    @property
    def label(self) -> str:
        """The drafter's display name (with its tree, for a tree method), without k."""
        name = DRAFTER_LABELS.get(self.name, Path(self.name).name)
        return f"{name} tree {self.tree_nodes}" if self.tree_nodes else f"{name} k auto" if self.auto else name

    @property
    def tree(self) -> TreeShape | None:
        """A tree method's shape: k deep, TreeShape's children per node, `tree_nodes` nodes."""
        return TreeShape.k_deep(self.k, self.tree_nodes) if self.tree_nodes else None

    def __str__(self) -> str:
        return self.label if self.k is None else f"{self.label} k={self.k}"


def methods_for(drafters: tuple[str, ...], ks: tuple[int, ...], tree_nodes: tuple[int, ...] = (),
                k_auto: bool = False) -> list[Method]:
    """`none` first, then each drafter, weightless method and peer at each k (plain-decoding peers have no k), each
    EAGLE drafter's trees of `tree_nodes` nodes beside its chain at that k, and (`k_auto`) each EAGLE drafter at k
    auto after its ks (a weightless method drafts chains, at the ks given)."""
    out = [Method(PLAIN)]
    for name in drafters:
        if name == PLAIN:
            continue
        if name == "hf-greedy":
            out.append(Method(name))
            continue
        for k in ks:
            out.append(Method(name, k))
            if Method(name).kind == "eagle":
                out += [Method(name, k, nodes) for nodes in tree_nodes]
        if k_auto and Method(name).kind == "eagle":
            out.append(Method(name, auto=True))
    return out


@dataclass
class Answer:
    ids: list[int]
    seconds: float
    events: list[StepEvent] | None  # our loops only; peers report no steps
    auto: AutoK | None = None  # a k auto method's choice for this answer


def own_settings(cfg: GenerationConfig, name: str) -> GenerationConfig:
    """`cfg` with only the method settings of `name` (request.check.own_settings): the bench's settings name every
    method's, and a run takes its own alone; its adaptive draft length (the bench's, for every run that drafts with
    probabilities) only where `name` proposes with them (plain decoding and prompt lookup have none)."""
    adaptive = cfg.min_draft_prob if method_for(name).probabilities else 0.0
    return replace(cfg, method_settings=settings_of(name, cfg), min_draft_prob=adaptive)


class Runner:
    """Runs methods on one backend's target; loads the optional assistant model for `hf-assisted` once."""

    def __init__(self, backend: LocalBackend, assistant: str | None = None,
                 should_stop: Callable[[], bool] = lambda: False) -> None:
        self.backend = backend
        self.target = backend.target
        self.assistant_source = assistant
        self.should_stop = should_stop  # checked between steps of our engine's runs (a peer's run goes to its end)
        self._assistant = None
        self._profiles: dict[tuple, CostProfile] = {}  # the step costs measured in this run (Runner.predicted)

    def health(self, cfg: GenerationConfig, method: Method, template: str, prompt_tokens: int,
               answer: Answer, earlier: list[Health] = ()) -> Health | None:
        """The drafter's health on one answer (health.run_health), after the row's `earlier` answers; None for plain
        decoding and peers."""
        k = answer.auto.k if answer.auto else method.k
        if method.kind != "eagle" or not answer.events or k is None:
            return None
        run_cfg = replace(cfg, k=k, tree=method.tree)
        return run_health(self.backend.preset, self.backend, method.name, run_cfg, template, False, prompt_tokens,
                          answer.events, earlier)

    def predicted(self, method: Method, prompt_tokens: int, answers: list[Answer]) -> tuple[float, float, float] | None:
        """(speedup, low, high) predicted for these answers' own steps from this machine's step costs for the pair
        (Runner._profile: measured in this run, after the timed passes or before a k auto answer, never beside a
        timed answer); None for plain decoding and peers."""
        if not method.speculates or not any(a.events for a in answers):
            return None
        plain = [a.auto is not None and a.auto.k is None for a in answers]  # k auto's plain answers: priced as plain
        steps = [e for a, p in zip(answers, plain) if not p for e in a.events or []]
        plain_tokens = sum(max(len(a.ids) - 1, 0) for a, p in zip(answers, plain) if p)  # the first: the prefill's
        seed = next(a.ids for a in answers if a.ids)
        middle = prompt_tokens + sum(len(a.ids) for a in answers) // (2 * len(answers))
        if method.kind == "weightless":  # priced at the target's verification alone (bench/replay.py's weightless rows)
            first = next(iter(self.backend.preset.drafters), None)  # whose profile holds the target's costs
            return self._profile(first, seed, middle).predict(steps, drafts_cost=False) if first else None
        trees = (method.tree,) if method.tree else ()
        return self._profile(method.name, seed, middle, trees).predict(steps, method.tree, plain_tokens)

    def auto_choice(self, name: str, prompt_ids: list[int], cfg: GenerationConfig) -> AutoK:
        """k auto's choice for one prompt, at the context `generate --k auto` prices (the prompt and half the token
        budget), from the step costs measured in this run, a weightless method replayed with `cfg`'s settings."""
        tokens = len(prompt_ids) + cfg.max_new_tokens // 2
        return auto_k(self.backend, name, prompt_ids, tokens, profile=self._profile(name, prompt_ids, tokens),
                      settings=cfg.method_settings)

    def _profile(self, name: str, seed: list[int], tokens: int, trees: tuple[TreeShape, ...] = ()) -> CostProfile:
        """The pair's step costs at the context bucket of `tokens`, measured afresh once per run (a kept profile may
        have been measured under another load), as plain decoding is timed in the same run."""
        key = (name, context_bucket(tokens, self.target.max_positions), trees)
        if key not in self._profiles:
            loaded = self.backend.drafter(name)
            self._profiles[key] = pair_profile(self.target, loaded.drafter, loaded.aux_layers,
                                               (self.backend.preset.target, loaded.source), seed, tokens,
                                               cache_root(), trees, fresh=True)
        return self._profiles[key]

    def variant_name(self, method: Method) -> str | None:
        """EAGLE-3 / EAGLE-3.1 as the drafter's config says (loads the drafter: fails early on a bad one)."""
        if method.kind != "eagle":
            return None
        return self.backend.drafter(method.name).drafter.config.variant

    def unavailable(self, method: Method) -> str | None:
        """Why a method cannot run here (its row then carries the reason instead of numbers)."""
        if method.kind == "peer" and self.target.quantised:
            return QUANTISED_PEER
        if method.name == "hf-assisted" and self.assistant_source is None:
            return NO_ASSISTANT
        if method.auto and (problem := k_auto_problem(self.backend.preset, method.name)):
            return f"k {problem}"
        return None

    def generate(self, method: Method, prompt_ids: list[int], cfg: GenerationConfig,
                 session: str | None = None) -> Answer:
        """One answer; `session`: the conversation's, whose state a method that keeps one reads and grows (as the
        app's)."""
        if method.kind == "peer":
            return self._hf_generate(method, prompt_ids, cfg)
        request = self.resolved(method, prompt_ids, cfg)  # before the clock starts, as `generate` resolves first
        start = self.target.clock()
        events = list(self.backend.stream(prompt_ids, request.drafter, request.config, self.should_stop,
                                          session=session))
        seconds = self.target.clock() - start
        return Answer(emitted_ids(events), seconds, events, request.auto)

    def resolved(self, method: Method, prompt_ids: list[int], cfg: GenerationConfig) -> ResolvedRequest:
        """One of our engine's methods on one prompt as a request, checked and resolved as every entry point's is
        (request/check.py); k auto chooses each prompt's k (or plain decoding) here."""
        preset = self.backend.preset
        named = method.name in (PLAIN, *offered_methods(preset.backend, preset.drafters))
        drafter_path = None if named else method.name  # a folder or Hub id
        choose_k = (lambda: self.auto_choice(method.name, prompt_ids, cfg)) if method.auto else None
        return resolve_request(preset, method.name, replace(own_settings(cfg, method.name), k=method.k or 1,
                                                            tree=method.tree), drafter_path, choose_k)

    def _assistant_model(self):
        if self._assistant is None:
            self._assistant = AutoModelForCausalLM.from_pretrained(
                self.assistant_source, dtype=self.backend.dtype).to(self.target.device).eval()
        return self._assistant

    @torch.inference_mode()
    def _hf_generate(self, method: Method, prompt_ids: list[int], cfg: GenerationConfig) -> Answer:
        target, tokenizer = self.target, self.target.tokenizer
        eos = sorted(target.eos_ids)
        options = dict(
            max_new_tokens=min(cfg.max_new_tokens, target.max_positions - len(prompt_ids)),  # as our loop's limit
            eos_token_id=eos, pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0],
            do_sample=not cfg.greedy,
        )
        if not cfg.greedy:
            options.update(temperature=cfg.temperature, top_p=cfg.top_p, top_k=0)
            torch.manual_seed(cfg.seed or 0)
        extra = {}
        if method.name == "prompt-lookup":
            options["prompt_lookup_num_tokens"] = method.k
        elif method.name == "hf-assisted":
            options.update(num_assistant_tokens=method.k, num_assistant_tokens_schedule="constant")
            extra["assistant_model"] = self._assistant_model()
        ids = torch.tensor([prompt_ids], device=target.device)
        start = target.clock()
        out = target.model.generate(ids, attention_mask=torch.ones_like(ids),
                                    generation_config=HFGenerationConfig(**options), **extra)
        seconds = target.clock() - start
        return Answer(out[0, len(prompt_ids):].tolist(), seconds, None)
