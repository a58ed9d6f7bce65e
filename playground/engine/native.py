"""The C half of the int4 decode step (`native_layer.c`: the small layer steps, attention, the int8 head's and a
drafter's int8 products), compiled for this machine on first use and loaded with ctypes: no PyTorch headers, so it
builds in a few seconds wherever a C compiler is installed (with OpenMP where the compiler has it: attention and
the int8 products then run on the threads PyTorch uses). Where no compiler is (or PLAYGROUND_NATIVE=0), `load()`
says why in one line and the engine keeps its PyTorch steps.

The library is cached by the source's hash, its flags and this CPU's model and flags (it is built with -march=native),
in the folder the entry points name (`configure`: `native/` of the playground's cache folder, PLAYGROUND_CACHE_DIR or
~/.cache/eagle-playground); without one, each process builds it in a scratch folder. PLAYGROUND_NATIVE=0 turns it
off."""

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

SOURCE = Path(__file__).with_name("native_layer.c")
FLAGS = ["-O3", "-fPIC", "-shared", "-std=c11"]
OPENMP = "-fopenmp"  # attention and the head on the threads PyTorch uses (its own OpenMP runtime, shared by name);
# where the compiler has no OpenMP the file builds without it and runs those steps on one thread
MARCH = "native"  # the instructions it may use: this CPU's (AVX-512, AVX2 or neither: the file has a path for each)
COMPILE_SECONDS = 120
MAX_HEAD_DIM = 256  # native_layer.c's MAX_DIM

_lock = threading.Lock()
_loaded: tuple[ctypes.CDLL | None, str | None] | None = None
_settings: dict = {"cache": None, "enabled": True}  # set by the entry points (`configure`)


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
                                       str(SOURCE), "-lm"], capture_output=True, text=True, timeout=COMPILE_SECONDS)
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
    p, i, f, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_float, ctypes.c_int64
    lib.add_norm.argtypes = [p, p, p, i, i, f, i, p, p]
    lib.attend.argtypes = [p, i, i, i, i, p, p, p, p, p, i64, i64, p, f, p, i]
    lib.silu_mul.argtypes = [p, i, i, p]
    lib.int8_product.argtypes = [p, i, i, i, p, p, p, i]
    lib.add_norm.restype = lib.silu_mul.restype = lib.int8_product.restype = None
    lib.attend.restype = ctypes.c_int  # 1: no scratch memory


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
    path of the file (the tests' use)."""
    if not (_settings["enabled"] if enabled is None else enabled):
        return None, "turned off (PLAYGROUND_NATIVE=0)"
    if platform.system() != "Linux":
        return None, f"built on Linux only, not {platform.system()}"
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None, "no C compiler here (cc or gcc)"
    flags = " ".join([*FLAGS, OPENMP, march])
    key = hashlib.sha256(SOURCE.read_bytes() + flags.encode() + _cpu_signature().encode()).hexdigest()[:16]
    folder = cache or _settings["cache"]
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="eagle-playground-native-") as scratch:
            return _build_and_open(compiler, Path(scratch) / f"native_layer-{key}.so", march)  # open files stay
    return _build_and_open(compiler, Path(folder) / f"native_layer-{key}.so", march)


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
