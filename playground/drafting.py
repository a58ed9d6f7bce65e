"""What a run may ask of drafting, in one set of words for every entry point (the engine, presets, the UI and its API,
the CLI, the server and the bench): the drafting methods (the registry, `METHODS`), their parameters and ranges, the
name of plain decoding and the range of k.

A module of its own with no imports, so that presets and the UI check a request without loading torch."""

from __future__ import annotations

from dataclasses import dataclass

PLAIN = "none"  # the drafter name that means plain decoding, as the CLI, the API and the server take it
EAGLE3, EAGLE3_1 = "eagle3", "eagle3.1"  # vLLM runs both as its method "eagle3"; the drafter's config flags pick 3.1
DEFAULT_DRAFTER = EAGLE3_1  # the drafter a run takes where none is named and the preset has it
MAX_K = 16


def k_problem(k: object) -> str | None:
    """Why `k` cannot be a number of speculative tokens per step, in one line; None when it can."""
    if isinstance(k, bool) or not isinstance(k, int):
        return f"k (speculative tokens per step) must be a whole number, got {k!r}"
    if not 1 <= k <= MAX_K:
        return f"k (speculative tokens per step) must be between 1 and {MAX_K}, got {k}"
    return None


@dataclass(frozen=True)
class Parameter:
    """One setting of a drafting method, named as vLLM's `speculative_config` names it where vLLM has it."""

    name: str
    meaning: str
    default: int | float
    low: int | float
    high: int | float

    @property
    def whole(self) -> bool:
        return isinstance(self.default, int)

    def problem(self, value: object) -> str | None:
        """Why `value` cannot be this setting, in one line; None when it can."""
        kind = "a whole number" if self.whole else "a number"
        if isinstance(value, bool) or not isinstance(value, int if self.whole else (int, float)):
            return f"{self.name} ({self.meaning}) must be {kind} from {self.low} to {self.high}, got {value!r}"
        if not self.low <= value <= self.high:
            return f"{self.name} ({self.meaning}) must be from {self.low} to {self.high}, got {value}"
        return None


@dataclass(frozen=True)
class Method:
    """A way to draft, or plain decoding (the method that proposes nothing), as a set of capabilities: what it is
    called and how it is drawn, what it needs, what it can do and show, and which engine module builds its proposer.
    Callers ask these (`trees`, `probabilities`, `checkpoint`, `session_state`, `priced_by`...), never which kind of
    method it is, so a new method is its module and its entry here."""

    name: str  # as the CLI, the API and vLLM's `method` spell it (ours: eagle3.1)
    label: str
    colour: str | None  # the same method, the same colour, in every chart; None: the chart's own
    description: str  # one line for readers who do not know the name (the bench's findings, the About tab)
    checkpoint: bool  # needs trained weights to draft (a preset's drafter or a folder)
    engines: tuple[str, ...]  # the backends that run it
    features: bool  # drafts from the target's hidden states: attention, drift and hidden-state RMS views apply
    fingerprint: bool  # health checks a run against a fingerprint of it
    proposes_from: str = "the text alone"  # what it drafts from, where not from the target's states (`features`)
    probabilities: bool = False  # proposes with its own probabilities: the adaptive stop, drafts' confidence
    parameters: tuple[Parameter, ...] = ()
    flags: tuple[str, ...] = ()  # config.json flags its checkpoints set, which tell it from the other EAGLE variant
    proposer: str | None = None  # the engine module that builds its proposer (`build_speculator`)
    trees: bool = False  # drafts a tree per step where asked
    session_state: bool = False  # keeps state across a session's runs (its proposer owns it, by session)
    vllm_method: str | None = None  # vLLM's speculative_config `method` for it (None: vLLM has none)
    priced_by: str | None = None  # how k auto prices it: "acceptance" (its shipped acceptance by position, updated
    # with replays) or "replay" (its proposals replayed over the text, priced at verification alone); None: it cannot
    # (engine, why it cannot run this method) for an engine not in `engines` whose reason is known
    not_on: tuple[tuple[str, str], ...] = ()

    @property
    def proposes(self) -> bool:
        return self.name != PLAIN

    def engine_problem(self, engine: str) -> str | None:
        """Why `engine` cannot run this method, in one line; None when it can."""
        if engine in self.engines:
            return None
        why = dict(self.not_on).get(engine) or f"runs on our engine for now, not on the {engine} backend"
        return f"{self.label} ({self.name}) {why}: choose a local preset"

    def settings(self, given: dict[str, int | float]) -> dict[str, int | float]:
        """Each of this method's own settings: the value given, else the registry's default (named as vLLM's
        speculative_config names them)."""
        return {p.name: given.get(p.name, p.default) for p in self.parameters}


NGRAM_MIN = Parameter("prompt_lookup_min", "the shortest n-gram prompt lookup matches", 2, 1, 16)
NGRAM_MAX = Parameter("prompt_lookup_max", "the longest n-gram prompt lookup matches", 5, 1, 16)
SUFFIX_DEPTH = Parameter("suffix_decoding_max_tree_depth", "the longest matched suffix plus its speculation", 24, 2,
                         64)
SUFFIX_MIN_PROB = Parameter("suffix_decoding_min_token_prob", "the least frequency share a speculated token needs",
                            0.1, 0.0, 1.0)
SUFFIX_CACHE = Parameter("suffix_decoding_max_cached_tokens", "the tokens of a session's earlier sequences kept",
                         16384, 0, 1 << 20)
EARLY_EXIT_LAYERS = Parameter("early_exit_layers", "the target's first layers that draft (0: a third of them)", 0, 0,
                              255)

ALL_ENGINES = ("local", "vllm", "remote")
SUFFIX_ON_VLLM = ("runs on vLLM only with the arctic-inference package, which is not installed here "
                  "(docs/vllm.md#prompt-lookup-and-suffix-decoding)")
EARLY_EXIT_ON_VLLM = "runs on our engine only (vLLM has no early-exit drafting)"
EAGLE_DESCRIPTION = ("the preset's {label} drafter: guesses k tokens from three of the target's hidden layers, and the "
                     "target checks them all in one forward")
METHODS: dict[str, Method] = {m.name: m for m in (
    Method(PLAIN, "none (plain decoding)", None, "plain decoding in our own loop: one target forward per token, no "
           "drafter; every speedup is against it", checkpoint=False, engines=ALL_ENGINES, features=False,
           fingerprint=False),
    Method(EAGLE3, "EAGLE-3", "#d62728", EAGLE_DESCRIPTION.format(label="EAGLE-3"), checkpoint=True,
           engines=ALL_ENGINES, features=True, fingerprint=True, probabilities=True, proposer="eagle", trees=True,
           vllm_method="eagle3", priced_by="acceptance"),
    Method(EAGLE3_1, "EAGLE-3.1", "#1f77b4", EAGLE_DESCRIPTION.format(label="EAGLE-3.1") + " (EAGLE-3 plus `fc_norm` "
           "and `norm_output`: it normalises the states it fuses and feeds back)", checkpoint=True,
           engines=ALL_ENGINES, features=True, fingerprint=True, probabilities=True, flags=("fc_norm", "norm_output"),
           proposer="eagle", trees=True, vllm_method="eagle3", priced_by="acceptance"),
    Method("ngram", "prompt lookup (n-gram)", "#2ca02c", "prompt lookup in our own loop: no drafter; it proposes the k "
           "tokens that followed the latest earlier occurrence of the context's last n tokens (n from "
           "`prompt_lookup_max` down to `prompt_lookup_min`) in the prompt and the answer so far, and the target "
           "checks them in one forward", checkpoint=False, engines=("local", "vllm"), features=False, fingerprint=False,
           parameters=(NGRAM_MIN, NGRAM_MAX), proposer="lookup", vllm_method="ngram", priced_by="replay"),
    Method("suffix", "suffix decoding", "#9467bd", "suffix decoding in our own loop: no drafter; it proposes the most "
           "frequent continuation of the longest matching suffix in a trie of the prompt, the answer so far and the "
           "conversation's earlier answers, and the target checks it in one forward", checkpoint=False,
           engines=("local",), features=False, fingerprint=False,
           parameters=(SUFFIX_DEPTH, SUFFIX_MIN_PROB, SUFFIX_CACHE), not_on=(("vllm", SUFFIX_ON_VLLM),),
           proposer="suffix", trees=True, session_state=True, vllm_method="suffix", priced_by="replay"),
    Method("early-exit", "early exit (self-speculation)", "#8c564b", "self-speculation in our own loop: no drafter; "
           "the target's own first `early_exit_layers` layers, then its final norm and head, draft k tokens (its "
           "weights read in place, a cache of their own), and the whole target checks them in one forward",
           checkpoint=False, engines=("local",), features=False, fingerprint=False, probabilities=True,
           proposes_from="the target's own first layers", parameters=(EARLY_EXIT_LAYERS,),
           not_on=(("vllm", EARLY_EXIT_ON_VLLM),), proposer="early_exit"),
)}
PARAMETERS: dict[str, tuple[Method, Parameter]] = {p.name: (m, p) for m in METHODS.values() for p in m.parameters}
WEIGHTLESS = tuple(name for name, m in METHODS.items() if m.proposes and not m.checkpoint)  # no weights to load
CHECKPOINTED = tuple(name for name, m in METHODS.items() if m.checkpoint)  # the EAGLE variants, in order


def checkpoint_method(config: dict) -> Method:
    """The method a drafter's config.json makes it: the one whose flags it sets (EAGLE-3.1: fc_norm or norm_output),
    else the one that sets none (EAGLE-3)."""
    methods = [METHODS[name] for name in CHECKPOINTED]
    flagged = [m for m in methods if m.flags and any(config.get(flag) for flag in m.flags)]
    return (flagged or [m for m in methods if not m.flags])[0]


def method_of(drafter: str) -> Method | None:
    """The registry's method of a drafter name; None for a drafter folder or a name of a preset's own."""
    return METHODS.get(drafter)


def method_for(drafter: str) -> Method:
    """What `drafter` can do: its registry entry, or, for a drafter folder or a preset's own name (trained weights
    whose variant its config tells), the capabilities every checkpointed method shares (CHECKPOINTED's first)."""
    return METHODS.get(drafter) or METHODS[CHECKPOINTED[0]]


def offered_methods(backend: str, drafters: dict[str, str] | tuple[str, ...]) -> list[str]:
    """What a preset offers to draft with, in order: its own drafters (trained), then every registry method that
    needs no weights and that its backend runs. Plain decoding is not among them."""
    return [*drafters, *(name for name, m in METHODS.items() if m.proposes and not m.checkpoint
                         and backend in m.engines)]


def parameters_problem(values: dict[str, int | float]) -> str | None:
    """Why these method settings cannot be, in one line (an unknown name, a value out of range, a lookup whose
    shortest match is longer than its longest); None when they can."""
    for name, value in values.items():
        if name not in PARAMETERS:
            return f"unknown drafting setting {name!r}; known: {', '.join(PARAMETERS)}"
        problem = PARAMETERS[name][1].problem(value)
        if problem:
            return problem
    low, high = (values.get(p.name, p.default) for p in (NGRAM_MIN, NGRAM_MAX))
    if low > high:
        return f"{NGRAM_MIN.name} ({low}) must not exceed {NGRAM_MAX.name} ({high})"
    return None


def parameters_for_other_method(drafter: str, names: list[str]) -> str | None:
    """Why settings of another method cannot go with `drafter`, in one line; None when each belongs to it."""
    stray = [n for n in names if n in PARAMETERS and PARAMETERS[n][0].name != drafter]
    if not stray:
        return None
    owners = " and ".join(sorted({PARAMETERS[n][0].name for n in stray}))
    what = "is a setting" if len(stray) == 1 else "are settings"
    return f"{', '.join(stray)} {what} of {owners}, not of {drafter}: leave it out or choose {owners}"
