"""The served engine: the local backend with one drafter and k, and what it has served, counted as vLLM counts it."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from playground.auto_k import auto_k
from playground.backends import open_local_backend
from playground.backends.local import LocalBackend
from playground.drafting import PLAIN
from playground.engine import GenerationConfig, SpecCounters, StepEvent, TreeShape
from playground.engine.choice import AutoK
from playground.presets import Preset
from playground.request import resolve_request
from playground.smollm2 import local_folder
from playground.specstats import ServedCounters, ServedSnapshot

from .defaults import OPENAI, SamplingDefaults, sampling_defaults


@dataclass(frozen=True)
class Limits:
    """What one server accepts (the `serve` flags); `app.py` enforces them."""

    max_body_bytes: int = 1 << 20
    body_timeout_s: float = 10.0
    max_running: int = 4
    max_waiting: int = 32
    default_max_tokens: int = 256


@dataclass
class ServedEngine:
    backend: LocalBackend
    drafter: str  # PLAIN serves plain decoding (no spec-decode metrics, as vLLM without --speculative-config)
    k: int
    model_name: str
    min_draft_prob: float = 0.0  # adaptive draft length for every request (engine.GenerationConfig); 0: k every step
    tree: TreeShape | None = None  # a draft tree per step for every request (engine/tree.py); None: chains of k
    sampling: SamplingDefaults = SamplingDefaults(**OPENAI, source="OpenAI's defaults")  # for fields a request omits
    auto: AutoK | None = None  # what `--k auto` chose and why
    counters: SpecCounters | None = None
    prompt_tokens: int = 0
    generation_tokens: int = 0
    abandoned: int = 0  # requests whose client left before the answer finished
    steps_after_leaving: int = 0  # engine steps of those that finished after the leaving was seen
    lock: threading.Lock = field(default_factory=threading.Lock)
    # the session every request runs in: a method that keeps state across runs (suffix decoding's cache of earlier
    # prompts and answers) keeps one for the server, as vLLM's does; a server is one user's or one team's (a public
    # Space runs the app, whose sessions are per conversation)
    session: str = field(default_factory=lambda: f"server:{uuid.uuid4().hex}")

    def __post_init__(self) -> None:
        if self.drafter != PLAIN:
            self.counters = SpecCounters(accepted_per_pos=[0] * self.draft_depth)

    @property
    def draft_depth(self) -> int:
        """Positions a step drafts at most: k, or a tree's depth (its accepted path is counted by depth)."""
        return self.tree.depth if self.tree else self.k

    @property
    def speculating(self) -> bool:
        return self.counters is not None

    def generate(self, prompt_ids: list[int], cfg: GenerationConfig) -> Iterator[StepEvent]:
        """Step events of one request. The prompt counts once the prefill has run (a refused prompt never counts);
        each step counts before it is sent, as vLLM records a step's stats with its output. Suffix decoding drafts
        from the server's earlier requests too (its `session`), as vLLM's does, within its cached-tokens bound."""
        for event in self.backend.stream(prompt_ids, self.drafter, cfg, session=self.session):
            with self.lock:
                if event.step == 0:
                    self.prompt_tokens += len(prompt_ids)
                if self.counters is not None:
                    self.counters.observe(event)
                self.generation_tokens += len(event.emitted)
            yield event

    def client_left(self, seen_at_step: int, last_step: int) -> None:
        """An abandoned request: its client's leaving was seen after `seen_at_step` steps, decoding stopped after
        `last_step`."""
        with self.lock:
            self.abandoned += 1
            self.steps_after_leaving += last_step - seen_at_step

    def departures_text(self) -> str:
        """The abandoned requests in Prometheus' text format, for /metrics beside vLLM's families (ours, so
        `playground:`)."""
        with self.lock:
            counts = (("abandoned_requests", "Requests whose client left before the answer finished.", self.abandoned),
                      ("steps_after_client_left", "Engine steps that finished after a client's leaving was seen "
                                                  "(the step in flight then).", self.steps_after_leaving))
        label = json.dumps(self.model_name)
        return "".join(f"# HELP playground:{name}_total {meaning}\n# TYPE playground:{name}_total counter\n"
                       f"playground:{name}_total{{model_name={label}}} {float(n)}\n" for name, meaning, n in counts)

    def collector(self, requests: Callable[[], tuple[int, int]]) -> ServedCounters:
        """The `/metrics` collector; `requests()` gives the (running, waiting) request counts at scrape time."""

        def snapshot() -> ServedSnapshot:
            with self.lock:
                spec = replace(self.counters, accepted_per_pos=list(self.counters.accepted_per_pos)) \
                    if self.counters else None
                return ServedSnapshot(spec, self.prompt_tokens, self.generation_tokens, *requests())

        return ServedCounters({"engine": "0", "model_name": self.model_name}, snapshot)


AUTO_CONTEXT = 512  # the context `--k auto` prices steps at: a chat turn and its answer, as a server sees them


def load_engine(preset: Preset, drafter: str, k: int, model_name: str | None, min_draft_prob: float = 0.0,
                drafter_path: str | None = None, tree: TreeShape | None = None, generation_config: str = "auto",
                override: dict[str, float] | None = None, k_auto: bool = False) -> ServedEngine:
    """Load (and warm up) the preset's target and drafter (the preset's by name, or a folder or Hub id by
    `drafter_path`, checked against the target as it loads); refuse what cannot be served, with the reason, before
    the target loads. `k_auto`: the k predicted fastest on this machine (auto_k.py) in place of `k`, or plain
    decoding where none pays."""
    backend = open_local_backend(preset, "serve", f"for vLLM run `python -m playground vllm-command --preset "
                                                 f"{preset.name}`")
    hello = [{"role": "user", "content": "hello"}]  # the warm-up's prompt, and k auto's context
    choose_k = (lambda: auto_k(backend, drafter, backend.encode(hello), AUTO_CONTEXT)) if k_auto else None
    request = resolve_request(preset, drafter, GenerationConfig(k=k, min_draft_prob=min_draft_prob, tree=tree),
                              drafter_path, choose_k)
    sampling = sampling_defaults(local_folder(preset.target), preset.sampling_defaults, generation_config, override,
                                 f"{preset.name}'s model card")
    drafter = request.drafter_path or request.drafter
    backend.warm_up(backend.encode(hello), drafter)
    return ServedEngine(backend, drafter, request.k, model_name or preset.name, min_draft_prob, request.config.tree,
                        sampling, request.auto)
