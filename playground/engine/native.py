"""The C half of the int4 path (`csrc/`): packed 4- and 8-bit products, a Llama layer's small steps and the whole
target forward, compiled for this machine on first use and loaded with ctypes. No PyTorch headers, so it builds in a
few seconds wherever a C compiler is installed (with OpenMP where the compiler has it: the forward then runs on the
threads it is given). Where no compiler is (or PLAYGROUND_NATIVE=0), `load()` says why in one line and int4 weights
are not offered.

This module is the C boundary: the structs the library reads (`Layer`, `Model`, `Step`, `Sequence`, `Drafter`,
`DraftStep`) and every function's
signature, declared once (`_declare`), so callers pass typed values, never raw offsets.

The arithmetic is the same on every instruction set the library has a path for (AVX-512 with or without VNNI, AVX2,
plain C): integer sums are exact and every float operation comes in a fixed order (csrc/numeric.h), so which path
this CPU builds changes the speed, never the numbers; tests/engine/test_int4.py builds each and compares them.

The library is cached by the sources' hash, its flags and this CPU's model and flags (it is built with
-march=native), in the folder the entry points name (`configure`: `native/` of the playground's cache folder,
PLAYGROUND_CACHE_DIR or ~/.cache/eagle-playground); without one, each process builds it in a scratch folder."""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

SOURCE_DIR = Path(__file__).with_name("csrc")
SOURCES = sorted(SOURCE_DIR.glob("*.c"))
HEADERS = sorted(SOURCE_DIR.glob("*.h"))
FLAGS = ["-O3", "-fPIC", "-shared", "-std=c11", "-ffp-contract=off"]  # no fused operation the source did not write
OPENMP = "-fopenmp"  # the forward's threads (PyTorch's own OpenMP runtime, shared by name); where the compiler has
# no OpenMP the library builds without it and runs on the calling thread
MARCH = "native"  # the instructions it may use: this CPU's (AVX-512, AVX2 or neither: the sources have a path each)
COMPILE_SECONDS = 180
MAX_HEAD_DIM = 256  # csrc/layer.c's attention keeps a head's sums on the stack
BLOCK = 32  # inputs a scale covers (GGUF's Q4_1 and Q8_0 blocks): every product's input width is a multiple

_lock = threading.Lock()
_loaded: tuple[ctypes.CDLL | None, str | None] | None = None
_settings: dict = {"cache": None, "enabled": True}  # set by the entry points (`configure`)

_p, _i, _f, _i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_float, ctypes.c_int64


class Layer(ctypes.Structure):
    """csrc/forward.h's PgLayer: one decoder layer's packed products and norm weights."""
    _fields_ = [("qkv", _p), ("o", _p), ("gate_up", _p), ("down", _p), ("input_norm", _p), ("post_norm", _p)]


class Model(ctypes.Structure):
    """csrc/forward.h's PgModel: the target's shape and where its packed weights are."""
    _fields_ = [("layers", _i), ("hidden", _i), ("heads", _i), ("kv_heads", _i), ("head_dim", _i),
                ("intermediate", _i), ("vocab", _i), ("eps", _f), ("scale", _f), ("layer", ctypes.POINTER(Layer)),
                ("final_norm", _p), ("head", _p), ("embedding", _p)]


class Sequence(ctypes.Structure):
    """csrc/forward.h's PgSequence: one sequence's cache, in a batch of sequences decoding together."""
    _fields_ = [("keys", _p), ("values", _p), ("capacity", _i64), ("start", _i64)]


class Step(ctypes.Structure):
    """csrc/forward.h's PgStep: one forward's tokens, cache and outputs."""
    _fields_ = [("ids", _p), ("rows", _i), ("positions", _p), ("sees", _p), ("cos", _p), ("ssin", _p),
                ("keys", _p), ("values", _p), ("capacity", _i64), ("start", _i64), ("aux_layers", _p),
                ("aux_count", _i), ("aux", _p), ("logits_from", _i), ("logits", _p), ("threads", _i),
                ("sequences", ctypes.POINTER(Sequence))]


class Drafter(ctypes.Structure):
    """csrc/drafter.h's PgDrafter: a drafter's shape, flags and packed weights."""
    _fields_ = [("hidden", _i), ("heads", _i), ("kv_heads", _i), ("head_dim", _i), ("intermediate", _i),
                ("draft_vocab", _i), ("aux_width", _i), ("aux_count", _i), ("eps", _f), ("scale", _f),
                ("fc_norm", _i), ("norm_before_fc", _i), ("norm_output", _i), ("norm_before_residual", _i),
                ("fc", _p), ("qkv", _p), ("o", _p), ("gate_up", _p), ("down", _p), ("head", _p), ("aux_norms", _p),
                ("hidden_norm", _p), ("input_norm", _p), ("post_norm", _p), ("final_norm", _p), ("embedding", _p)]


class DraftStep(ctypes.Structure):
    """csrc/drafter.h's PgDraftStep: one drafter call's inputs, cache and outputs."""
    _fields_ = [("ids", _p), ("rows", _i), ("hidden", _p), ("positions", _p), ("cos", _p), ("ssin", _p),
                ("keys", _p), ("values", _p), ("capacity", _i64), ("start", _i64), ("prefix", _i64), ("sees", _p),
                ("logits_from", _i), ("logits", _p), ("feedback", _p), ("mass_from", _i), ("context", _i64),
                ("mass", _p), ("threads", _i)]


def _cpu_signature() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    wanted = ("model name", "flags", "cpu family", "model\t")
    return "\n".join(sorted({line for line in lines if line.startswith(wanted)}))


def configure(cache: Path | None, enabled: bool = True) -> None:
    """Where the library is built and kept (the app and the CLI pass `native/` of PLAYGROUND_CACHE_DIR's folder; None:
    a scratch folder, built again by each process) and whether it is used at all (PLAYGROUND_NATIVE=0: not)."""
    global _loaded
    with _lock:
        _settings.update(cache=cache, enabled=enabled)
        _loaded = None


def _compile(compiler: str, target: Path, march: str) -> str | None:
    try:
        return _compile_into(compiler, target, march)
    except OSError as err:  # a folder that cannot be written, a full disk
        return f"cannot build it in {target.parent}: {err.strerror or type(err).__name__}"


def _compile_into(compiler: str, target: Path, march: str) -> str | None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built = Path(scratch) / target.name
        try:
            for openmp in ([OPENMP], []):
                done = subprocess.run([compiler, *FLAGS, *openmp, f"-march={march}", "-o", str(built),
                                       *map(str, SOURCES), "-lm"], capture_output=True, text=True,
                                      timeout=COMPILE_SECONDS)
                if done.returncode == 0:
                    break
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"the C compiler did not run: {type(err).__name__}"
        if done.returncode != 0:
            first = (done.stderr.strip().splitlines() or ["no message"])[0]
            return f"{compiler} failed: {first}"
        os.replace(built, target)  # atomic: another process may be loading the same file
    return None


def _declare(lib: ctypes.CDLL) -> None:
    p, i, i64 = _p, _i, _i64
    for name, args, result in [
        ("pg_q4_bytes", [i, i], i64), ("pg_q8_bytes", [i, i], i64),
        ("pg_pack_q4", [p, i, i, p], None), ("pg_pack_q8", [p, i, i, p], None),
        ("pg_q8_rows", [p, i, p, i, p], None),
        ("pg_product", [i, p, i, i, p, i, p, i], ctypes.c_int),
        ("pg_forward", [ctypes.POINTER(Model), ctypes.POINTER(Step)], ctypes.c_int),
        ("pg_draft_project", [ctypes.POINTER(Drafter), p, i, p, i], ctypes.c_int),
        ("pg_draft", [ctypes.POINTER(Drafter), ctypes.POINTER(DraftStep)], ctypes.c_int),
        ("pg_instruction_path", [], ctypes.c_char_p),
    ]:
        function = getattr(lib, name)
        function.argtypes, function.restype = args, result


def load() -> tuple[ctypes.CDLL | None, str | None]:
    """(the library, None), or (None, why not in one line). Compiled once per machine and source."""
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = _load()
        return _loaded


def _load(march: str = MARCH, cache: Path | None = None, enabled: bool | None = None) -> tuple[ctypes.CDLL | None,
                                                                                                str | None]:
    """`load`'s work, uncached, with `configure`'s settings unless given; `march` other than "native" builds another
    path of the sources (the tests' use)."""
    if not (_settings["enabled"] if enabled is None else enabled):
        return None, "turned off (PLAYGROUND_NATIVE=0)"
    if platform.system() != "Linux":
        return None, f"built on Linux only, not {platform.system()}"
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None, "no C compiler here (cc or gcc)"
    flags = " ".join([*FLAGS, OPENMP, march])
    source = b"".join(path.name.encode() + path.read_bytes() for path in [*SOURCES, *HEADERS])
    key = hashlib.sha256(source + flags.encode() + _cpu_signature().encode()).hexdigest()[:16]
    folder = cache or _settings["cache"]
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="eagle-playground-native-") as scratch:
            return _build_and_open(compiler, Path(scratch) / f"playground-{key}.so", march)  # open files stay
    return _build_and_open(compiler, Path(folder) / f"playground-{key}.so", march)


def _build_and_open(compiler: str, target: Path, march: str) -> tuple[ctypes.CDLL | None, str | None]:
    if not target.is_file():
        problem = _compile(compiler, target, march)
        if problem:
            return None, problem
    try:
        lib = ctypes.CDLL(str(target))
    except OSError as err:
        return None, f"cannot load {target.name}: {err}"
    _declare(lib)
    return lib, None


def instruction_path(lib: ctypes.CDLL) -> str:
    """Which of the sources' paths this build runs ("avx512-vnni", "avx512", "avx2" or "c"), with "+openmp" where
    it was built with OpenMP: for the run record (the numbers are the same on each)."""
    return lib.pg_instruction_path().decode()
