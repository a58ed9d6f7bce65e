"""A pair of one's own: a target and EAGLE-3 / EAGLE-3.1 drafters the user names (Hub ids, or folders where the host
allows them), checked from their configs before any weights are read, then loaded and offered like a preset.

The checks need only the config.json files: the target must be a causal LM transformers knows without running its
own code, every drafter must fit it (`fit.drafter_fit`: aux layers, width, vocabulary, MLA against GQA), the slot a
drafter is named in must match its flags (EAGLE-3.1: `fc_norm` / `norm_output`), and the weights plus a KV cache for
the context must fit in the memory this machine has. A public host (a Space: `SPACE_ID`, or
`PLAYGROUND_PUBLIC=1`) refuses local paths and downloads over `PLAYGROUND_MAX_DOWNLOAD_GB`. Loaded pairs live under a
memory budget (`PLAYGROUND_PAIRS_GB`), the least recently loaded going first; a failed load leaves every other pair
as it was.

Hub repositories are downloaded before the pair is registered (the target at the revision named, if any): only
configs, tokenizer files and safetensors weights — a repository with no safetensors is refused, as pickled `.bin`
checkpoints are never loaded from the Hub — with the bytes received reported as they arrive. The pair is then loaded
from those local snapshots.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path

from playground import environment
from playground.drafting import METHODS, PLAIN, checkpoint_method
from playground.engine.checkpoint import CheckpointError
from playground.engine.target import does_not_fit
from playground.environment import public_host
from playground.presets import OWN_PAIR_PREFIX, Preset, register_pair, unregister_pair
from playground.request.fit import drafter_fit, hub_problem, read_config

SLOTS = {name: method.label for name, method in METHODS.items() if method.checkpoint}  # eagle3, eagle3.1
HUB_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]  # no code, no pickles
PROGRESS_EVERY_S = 1.0
CPU_DTYPE_BYTES = 4  # the local engine runs the target in float32 on the CPU
CONTEXT_FOR_ESTIMATE = 4096  # tokens of KV cache counted in the memory estimate (the context a chat may reach)


class PairRefused(ValueError):
    """A pair that cannot be loaded here; the message says why in one line."""




def _looks_local(source: str) -> bool:
    return source.startswith(("/", ".", "~")) or Path(source).expanduser().exists()


@dataclass(frozen=True)
class PairCheck:
    preset: Preset
    memory_bytes: int  # weights in float32 + a KV cache of CONTEXT_FOR_ESTIMATE tokens, target and drafters
    warnings: tuple[str, ...]
    revision: str = ""  # of the target, where it is a Hub id
    hub_bytes: dict[str, int] = field(default_factory=dict)  # Hub id -> bytes of the files a load downloads


def _read(source: str, role: str, revision: str = "") -> dict:
    try:
        return read_config(source, revision)
    except CheckpointError as err:
        raise PairRefused(f"{role}: {err}") from None


def _target_problem(config: dict) -> str | None:
    from transformers import CONFIG_MAPPING

    model_type = config.get("model_type")
    if config.get("auto_map") and model_type not in CONFIG_MAPPING:
        return (f"it needs trust_remote_code (its own modelling code for model_type {model_type!r}), which the "
                "playground does not run for a named pair")
    if model_type not in CONFIG_MAPPING:
        return f"model_type {model_type!r} is not one transformers {_transformers_version()} knows"
    architectures = config.get("architectures") or []
    if not any(a.endswith("ForCausalLM") for a in architectures):
        return f"its architectures {architectures} name no causal LM (…ForCausalLM), which our engine decodes"
    return None


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


def _slot_problem(slot: str, config: dict) -> str | None:
    """EAGLE-3.1 is EAGLE-3 with fc_norm and norm_output: a drafter named in the wrong slot would be mislabelled."""
    method = checkpoint_method(config)
    if method.name == slot:
        return None
    said = f"sets {' / '.join(method.flags)}" if method.flags else f"sets neither {' nor '.join(METHODS[slot].flags)}"
    return f"{said}: it is an {method.label} drafter; name it as the {method.label} drafter"


def estimated_bytes(config: dict) -> int:
    """Parameters in float32 plus a KV cache of CONTEXT_FOR_ESTIMATE tokens, from a config alone."""
    c = config.get("text_config") or config
    hidden, layers = int(c.get("hidden_size", 0)), int(c.get("num_hidden_layers", 1))
    heads = int(c.get("num_attention_heads", 1))
    kv_heads = int(c.get("num_key_value_heads") or heads)
    head_dim = int(c.get("head_dim") or hidden // max(heads, 1))
    intermediate = int(c.get("intermediate_size", 4 * hidden))
    vocab = int(c.get("draft_vocab_size") or c.get("vocab_size", 0))
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    mlp = 3 * hidden * intermediate
    experts = int(c.get("n_routed_experts") or c.get("num_local_experts") or 1)
    embeddings = vocab * hidden * (1 if c.get("tie_word_embeddings") else 2)
    parameters = layers * (attention + mlp * experts) + embeddings
    cache = 2 * layers * kv_heads * head_dim * CONTEXT_FOR_ESTIMATE
    return (parameters + cache) * CPU_DTYPE_BYTES


def _available_bytes() -> int:
    import psutil

    return psutil.virtual_memory().available


def size_text(n: float) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**30 else f"{n / 2**20:,.0f} MB"


def _folder_bytes(source: str) -> int:
    total = 0
    for path in Path(source).expanduser().rglob("*"):
        try:
            total += path.stat().st_size if path.is_file() else 0
        except OSError:  # a download renamed or removed it meanwhile
            pass
    return total


def _hub_bytes(source: str, revision: str) -> int:
    """Bytes of the files a load would download from a Hub repository; refused where it ships no safetensors."""
    from huggingface_hub import HfApi

    try:
        info = HfApi().model_info(source, revision=revision or None, files_metadata=True)
    except Exception as err:  # hub errors come in many types; hub_problem names the ones users can act on
        raise PairRefused(hub_problem(source, err, "read the file list of")) from None
    files = [s for s in info.siblings or [] if any(fnmatch.fnmatch(s.rfilename, p) for p in HUB_FILES)]
    if not any(s.rfilename.endswith(".safetensors") for s in files):
        raise PairRefused(f"{source} ships no safetensors weights, and the playground does not unpickle .bin "
                          "checkpoints from the Hub")
    return sum(s.size or 0 for s in files)


def check_pair(target: str, drafters: dict[str, str], revision: str = "") -> PairCheck:
    """The pair as a preset, from configs alone (and, for Hub ids, their file lists); PairRefused (one line) when it
    cannot work here. `revision` is the target's branch, tag or commit on the Hub."""
    target, revision = target.strip(), revision.strip()
    drafters = {slot: source.strip() for slot, source in drafters.items() if source and source.strip()}
    if not target:
        raise PairRefused("name a target: a Hugging Face model id (or, on your own machine, a folder)")
    if not drafters:
        raise PairRefused("name an EAGLE-3 and/or an EAGLE-3.1 drafter for the target")
    if revision and _looks_local(target):
        raise PairRefused("a revision names a branch, tag or commit of a Hub repository; the target is a folder")
    unknown = set(drafters) - set(SLOTS)
    if unknown:
        raise PairRefused(f"unknown drafter slot(s) {sorted(unknown)}; the slots are {', '.join(SLOTS)}")
    sources = [target, *drafters.values()]
    public = public_host()
    if public and any(_looks_local(s) for s in sources):
        raise PairRefused("this is a public host: local folders cannot be loaded here; name Hugging Face model ids")
    target_config = _read(target, "target", revision)
    problem = _target_problem(target_config)
    if problem:
        raise PairRefused(f"target {target} cannot run on our engine: {problem}")
    memory, warnings = estimated_bytes(target_config), []
    for slot, source in drafters.items():
        config = _read(source, f"{SLOTS[slot]} drafter")
        report = drafter_fit(target_config, config)
        if report.problems:
            raise PairRefused(does_not_fit(report.problems, source, target))
        problem = _slot_problem(slot, config)
        if problem:
            raise PairRefused(f"the {SLOTS[slot]} drafter {source} {problem}")
        warnings += [f"{SLOTS[slot]}: {w}" for w in report.warnings]
        memory += estimated_bytes(config)
    available = _available_bytes()
    if memory > available:
        raise PairRefused(f"too big for this machine: the pair needs about {size_text(memory)} (float32 weights and a "
                          f"{CONTEXT_FOR_ESTIMATE}-token cache), and {size_text(available)} of memory is available")
    hub_bytes = {s: _hub_bytes(s, revision if s == target else "") for s in sources if not _looks_local(s)}
    cap = environment.number("PLAYGROUND_MAX_DOWNLOAD_GB", 4.0 if public else None)
    if cap is not None:
        size = sum(hub_bytes.values()) + sum(_folder_bytes(s) for s in sources if _looks_local(s))
        if size > cap * 2**30:
            raise PairRefused(f"too large to download here: {size_text(size)} of files, and this host allows "
                              f"{cap:g} GB (PLAYGROUND_MAX_DOWNLOAD_GB)")
    # the name says which pair, drafters included: another visitor's different pair never takes this one's place
    digest = hashlib.sha256(json.dumps([target, revision, drafters], sort_keys=True).encode()).hexdigest()[:6]
    name = f"{OWN_PAIR_PREFIX}{Path(target).name if _looks_local(target) else target}@{digest}"
    title = f"{target}" + (f" at {revision}" if revision else "") + " (your pair)"
    preset = Preset(name=name, title=title, target=target, drafters=drafters,
                    description=f"Your pair: {target} with " + ", ".join(f"{SLOTS[s]} {d}" for s, d in
                                                                          drafters.items()) + ".")
    return PairCheck(preset, memory, tuple(warnings), revision, hub_bytes)


class PairShelf:
    """The loaded pairs, under a memory budget: a new pair pushes out the least recently loaded ones until the total
    estimate fits. A pair that fails to load is taken off again, and nothing else is touched."""

    def __init__(self) -> None:
        self._pairs: OrderedDict[str, int] = OrderedDict()  # preset name -> estimated bytes, oldest first
        self._lock = threading.Lock()

    def budget_bytes(self) -> int:
        gb = environment.number("PLAYGROUND_PAIRS_GB")
        return int(gb * 2**30) if gb is not None else _available_bytes() // 2

    def load(self, check: PairCheck, load_weights) -> Preset:
        """Register the checked pair, load it with `load_weights(preset)`, and make room for it first."""
        from playground.backends import forget_backend

        preset = check.preset
        with self._lock:
            budget = self.budget_bytes()
            if check.memory_bytes > budget:
                raise PairRefused(f"too big for the pairs' memory budget: about {size_text(check.memory_bytes)}, and "
                                  f"loaded pairs may hold {size_text(budget)} (PLAYGROUND_PAIRS_GB)")
            self._pairs.pop(preset.name, None)
            while self._pairs and sum(self._pairs.values()) + check.memory_bytes > budget:
                old, _ = self._pairs.popitem(last=False)
                unregister_pair(old)
                forget_backend(old)
            register_pair(preset)
        try:
            load_weights(preset)
        except Exception:
            unregister_pair(preset.name)
            forget_backend(preset.name)
            raise
        with self._lock:
            self._pairs[preset.name] = check.memory_bytes
        return preset


SHELF = PairShelf()


def download(check: PairCheck, say=lambda message, fraction=None: None) -> Preset:
    """Fetch the pair's Hub repositories into the Hub cache (HUB_FILES only), saying the bytes received about once a
    second; the preset with those local snapshots in place of the Hub ids."""
    folders = {source: _snapshot(source, check.revision if source == check.preset.target else "", total, say)
               for source, total in check.hub_bytes.items()}
    preset = check.preset
    return replace(preset, target=folders.get(preset.target, preset.target),
                   drafters={slot: folders.get(source, source) for slot, source in preset.drafters.items()})


def _snapshot(repo: str, revision: str, total: int, say) -> str:
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.file_download import repo_folder_name

    blobs = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo, repo_type="model") / "blobs"
    before = _folder_bytes(str(blobs)) if blobs.is_dir() else 0
    done: dict = {}

    def fetch() -> None:
        try:
            done["folder"] = snapshot_download(repo, revision=revision or None, allow_patterns=HUB_FILES)
        except Exception as err:  # reported below, in one line
            done["error"] = err

    worker = threading.Thread(target=fetch, name=f"download {repo}", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(PROGRESS_EVERY_S)
        received = max(_folder_bytes(str(blobs)) - before, 0) if blobs.is_dir() else 0
        say(f"downloading {repo}: {received / 2**20:,.0f} MB received (its files: {total / 2**20:,.0f} MB; "
            "what the cache holds already is not fetched again)", min(received / total, 1.0) if total else None)
    if "error" in done:
        raise PairRefused(hub_problem(repo, done["error"], "download"))
    return done["folder"]


def load_own_pair(target: str, drafters: dict[str, str], say=lambda message, fraction=None: None,
                  revision: str = "") -> PairCheck:
    """Check the pair from its configs, download what is named by Hub id, then load its weights and warm each decode
    path up, saying each stage with `say(message, fraction done or None)`; the loaded pair is then a preset
    (`check.preset.name`)."""
    from playground.backends import shared_backend

    say("reading the configs (no weights yet)…", 0.0)
    check = check_pair(target, drafters, revision)
    local = download(check, say)

    def load_weights(preset: Preset) -> None:
        say(f"loading the target {check.preset.target} and {len(preset.drafters)} drafter(s)…", None)
        backend = shared_backend(preset)
        backend.preload()
        say("warming up each decode path…", None)
        prompt = backend.encode([{"role": "user", "content": "hello"}])
        for name in [PLAIN, *preset.drafters]:
            backend.warm_up(prompt, name)

    SHELF.load(replace(check, preset=local), load_weights)
    return check
