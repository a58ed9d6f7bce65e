"""Every environment variable the playground reads, in one table, and the three ways it reads them.

Values are read when asked for, not once at import: a test, or a Space owner changing a variable and restarting,
sees the current value, and nothing caches a stale one. No other module reads a `PLAYGROUND_*` variable
(tests/project/test_environment.py checks), and docs/settings.md is rendered from this table (`python -m
playground.environment`).
"""

from __future__ import annotations

import os

SETTINGS: dict[str, str] = {
    "PLAYGROUND_MODELS_DIR": "a folder with target/, eagle3/ and eagle3.1/ that replaces the default pair",
    "PLAYGROUND_CACHE_DIR": "where SmolLM2's GGUF is converted once and the int4 path's C steps are built "
                            "(default: $XDG_CACHE_HOME or ~/.cache, /eagle-playground)",
    "PLAYGROUND_NATIVE": "0: no C library: weights=auto keeps float32 and int4 is refused in one line (default: the "
                         "library, built where a compiler is)",
    "PLAYGROUND_THREADS": "torch CPU threads for every phase of a step, in the app and the CLI (default: the "
                          "adaptive policy of docs/engine.md, which holds up when other processes share the cores)",
    "PLAYGROUND_CONCURRENCY": "model runs at once in the app (default 1, so measured speeds are not shared)",
    "PLAYGROUND_VLLM_IDLE_S": "seconds a vLLM engine may sit unused before it is stopped, freeing its memory; the next "
                              "run that needs it starts it again (default 300 on every host; 0 = never)",
    "PLAYGROUND_SESSIONS": "visitors' sessions the app keeps in memory (each its chat, comparison and the last value "
                           "Gradio sent each component), the least recently used forgotten beyond it (default 32)",
    "PLAYGROUND_PRESETS": "comma list: the presets this process offers, in order (default: all that run here)",
    "PLAYGROUND_DEFAULT_PRESET": "the preset the app starts on (default: smollm2-135m where offered)",
    "PLAYGROUND_KIMI_TINY_DIR": "the kimi-tiny pair's folder (default: assets/models/kimi-tiny)",
    "PLAYGROUND_REMOTE_URL": "the `remote` preset's server, e.g. http://host:8000",
    "PLAYGROUND_REMOTE_MODEL": "the `remote` preset's model name (default: what the server serves)",
    "PLAYGROUND_REMOTE_DRAFTER": "the `remote` preset's drafter label (default: the server's)",
    "PLAYGROUND_REMOTE_K": "the `remote` preset's k, where the server does not say",
    "PLAYGROUND_REMOTE_API_KEY": "the bearer token for the `remote` server",
    "PLAYGROUND_PUBLIC": "1: a public host even without SPACE_ID (own pairs by Hub id only, downloads capped, "
                         "benchmarks bounded)",
    "PLAYGROUND_MAX_DOWNLOAD_GB": "the largest own pair a visitor may download (default: 4 on a public host, "
                                  "no cap elsewhere)",
    "PLAYGROUND_PAIRS_GB": "memory the loaded own pairs may hold together (default: half the memory available)",
    "PLAYGROUND_MCP": "0: the app serves no MCP tools (default: it serves them at /gradio_api/mcp/, docs/mcp.md)",
    "PLAYGROUND_PUBLIC_BENCH_S": "on a public host, the longest benchmark profile offered, in seconds of its "
                                 "measured duration (default 240)",
}


def text(name: str) -> str | None:
    """The variable's value, stripped; None where it is unset or empty."""
    if name not in SETTINGS:
        raise KeyError(f"{name} is not a playground setting (playground/environment.py lists them)")
    value = os.environ.get(name, "").strip()
    return value or None


def number(name: str, default: float | None = None) -> float | None:
    """The variable as a number; ValueError naming it where it is not one."""
    value = text(name)
    if value is None:
        return default
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not a number") from None


def flag(name: str) -> bool:
    return (text(name) or "").lower() in {"1", "true", "yes"}


def public_host() -> bool:
    """A Space (Spaces set SPACE_ID), or an owner who says the app is public (PLAYGROUND_PUBLIC=1)."""
    return bool(os.environ.get("SPACE_ID")) or flag("PLAYGROUND_PUBLIC")


def table_markdown() -> str:
    rows = "\n".join(f"| `{name}` | {meaning} |" for name, meaning in SETTINGS.items())
    return ("# Settings\n\nThe environment variables the playground reads (`playground/environment.py`; rendered by "
            "`python -m playground.environment > docs/settings.md`). Hugging Face Spaces also set `SPACE_ID`, which "
            "makes the app a public host.\n\n| variable | meaning |\n|---|---|\n" + rows + "\n")


if __name__ == "__main__":
    print(table_markdown(), end="")
