"""Command-line flags and their reading, shared by `generate`, `serve`, `bench` and `train`: a preset (or a target and
drafter of one's own), the backend it runs on, k lists, threads and the adaptive stop. Each refusal is a UsageError,
which `python -m playground` prints as one line."""

from __future__ import annotations

import argparse
import errno
import socket
from dataclasses import asdict, replace
from typing import NoReturn

from playground import environment
from playground.drafting import MAX_K, PARAMETERS, k_problem
from playground.engine.tree_shape import TreeShape
from playground.presets import Preset, default_preset_name, engine_presets, get_preset


class UsageError(Exception):
    """A problem with the user's request, reported as one line on stderr."""


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser with its refusals in one line (`error: <command>: <what>`, exit 2) instead of the usage
    block above the error; `--help` still prints the usage. Sub-commands' parsers are made of the same class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} (--help for usage)\n")


def tcp_port(text: str) -> int:
    """A TCP port for --port: a whole number from 0 (any free port) to 65535."""
    try:
        number = int(text)
    except ValueError:
        number = -1
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"a port from 0 to 65535 (0: any free port), got {text!r}")
    return number


def k_or_auto(text: str) -> int | str:
    """`--k` of `generate` and `serve`: a whole number (its range is GenerationConfig's to check) or "auto"."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number from 1 to {MAX_K} or auto, got {text!r}") from None


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port), not yet listening, or a UsageError saying in one line why it cannot be
    (the port taken, the host not this machine's): bound before a model loads, so a busy port is refused at once."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError) as err:
        raise UsageError(f"cannot listen on {host}:{port}: the host is unknown ({err})") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free, as uvicorn has it
        sock.bind(address)
    except OSError as err:
        sock.close()
        why = "the port is in use (another server holds it)" if err.errno == errno.EADDRINUSE else err.strerror or err
        raise UsageError(f"cannot listen on {host}:{port}: {why}") from None
    return sock


def target_preset(name: str | None, target: str | None) -> Preset:
    """The named preset (default: the default one), or with --target an arbitrary target, whose drafters come only
    from a drafter path."""
    if target:
        return Preset(name=f"custom:{target}", title=target, target=target)
    return get_preset(name or default_preset_name())


def add_pair_flags(parser: argparse.ArgumentParser) -> None:
    """--target and --drafter-path: a target and drafter of one's own, for generate and serve alike."""
    parser.add_argument("--target", help="a Hugging Face model folder or Hub id instead of the preset's target")
    parser.add_argument("--drafter-path", help="a drafter folder (official, vLLM-export or speculators layout) or Hub "
                        "id, instead of the preset's")


def resolve_preset(args: argparse.Namespace) -> Preset:
    """The preset, with --target / --backend / --device / --dtype applied (unset flags keep the preset's values);
    UsageError where --device cuda finds no GPU (said of the flag, before the preset's own reason)."""
    from playground.request.availability import visible_gpus

    preset = _resolved(args)
    if getattr(args, "device", None) == "cuda" and preset.backend == "local" and visible_gpus() == 0:
        raise UsageError("--device cuda asks for a CUDA GPU and none is visible on this machine; leave --device out "
                         "(or pass --device cpu) to run on the CPU")
    return preset


def _resolved(args: argparse.Namespace) -> Preset:
    preset = target_preset(args.preset, args.target)
    changes = {key: value for key in ("backend", "device", "dtype", "weights")
               if (value := getattr(args, key, None)) is not None and value != getattr(preset, key)}
    if not changes:
        return preset
    twin = engine_presets(preset).get(changes.get("backend", ""))
    if twin and set(changes) == {"backend"}:
        return get_preset(twin)  # the same pair on that engine has a preset of its own (e.g. smollm2-135m-vllm)
    merged = {**asdict(preset), **changes}
    if merged["backend"] == "remote":
        merged["url"] = merged["url"] or environment.text("PLAYGROUND_REMOTE_URL")
    return Preset(**merged)


def make_backend(args: argparse.Namespace, preset: Preset):
    """The preset's backend, or a UsageError saying in one line why it cannot run here."""
    from playground.backends import shared_backend
    from playground.request import BackendUnavailable

    try:
        return shared_backend(preset)  # one per process: a second call in the same process reuses its engines
    except BackendUnavailable as err:
        raise UsageError(str(err)) from None


def parse_int_list(text: str | None, flag: str) -> tuple[int, ...] | None:
    """A comma list of integers given to `flag` (e.g. "1,3,4"); None for an empty one."""
    if not text:
        return None
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"{flag} takes a comma list of integers, got {text!r}") from None


def parse_ks(text: str | None) -> tuple[int, ...] | None:
    """A `--k` comma list (e.g. "1,3,4"), each k in 1..MAX_K; None for an empty one."""
    ks = parse_int_list(text, "--k")
    if ks is None:
        return None
    problem = next((k_problem(k) for k in ks if k_problem(k)), None)
    if problem:
        raise UsageError(f"--k {text}: {problem}")
    return ks


def add_threads_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, help="torch CPU threads for every phase of a step (default: "
                        "PLAYGROUND_THREADS, else the adaptive policy: one-row work on the thread count measured "
                        "fastest at load, verification on every core no other task takes; docs/engine.md)")


def add_min_draft_prob_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--min-draft-prob", type=float, default=0.0,
                        help="adaptive draft length: end a step's chain after a draft the drafter gave less than this "
                             "probability (still verified); 0 (default) drafts k every step. Local engine only")


def add_tree_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tree-nodes", type=int, help="draft an EAGLE-2-style tree of this many nodes per step "
                        "instead of a chain (local engine; sampled trees have a fixed shape: docs/trees.md)")
    parser.add_argument("--tree-depth", type=int, help="the tree's depth (default: --k, k deep as in the app and the "
                        "bench)")
    parser.add_argument("--tree-topk", type=int, help=f"children per expanded node (default {TreeShape.topk})")


def tree_shape(args: argparse.Namespace, k: int) -> TreeShape | None:
    """The draft tree the tree flags ask for at `k` (its depth unless --tree-depth says), or None (chains); its limits
    are TreeShape.problem's."""
    if args.tree_nodes is None:
        if args.tree_depth is not None or args.tree_topk is not None:
            raise UsageError("--tree-depth and --tree-topk shape a draft tree: pass --tree-nodes too")
        return None
    shape = TreeShape.k_deep(k, args.tree_nodes)  # one depth rule for the CLI, the server, the app, the bench
    return replace(shape, depth=args.tree_depth or shape.depth, topk=args.tree_topk or shape.topk)


def add_method_flags(parser: argparse.ArgumentParser) -> None:
    """A flag for each drafting method's setting in the registry (playground/drafting.py), named after it."""
    for name, (method, parameter) in PARAMETERS.items():
        parser.add_argument("--" + name.replace("_", "-"), type=int if parameter.whole else float,
                            help=f"{method.name}: {parameter.meaning}, {parameter.low}..{parameter.high} "
                                 f"(default {parameter.default})")


def method_settings(args: argparse.Namespace) -> tuple[tuple[str, int | float], ...]:
    """The method settings the flags of `add_method_flags` were given, as GenerationConfig takes them."""
    return tuple((name, value) for name in PARAMETERS if (value := getattr(args, name, None)) is not None)


def apply_engine_settings(threads: float | None = None) -> None:
    """What the entry points (the CLI, app.py) hand the engine, which reads no settings itself: the threads
    (`--threads`, else PLAYGROUND_THREADS) and where the int4 path's C steps are built, or whether at all
    (PLAYGROUND_CACHE_DIR, PLAYGROUND_NATIVE)."""
    from playground.engine import native
    from playground.engine.threads import thread_policy
    from playground.smollm2 import cache_root

    if threads := threads or environment.number("PLAYGROUND_THREADS"):
        thread_policy().fix(int(threads))
    native.configure(cache_root() / "native", enabled=environment.text("PLAYGROUND_NATIVE") != "0")
