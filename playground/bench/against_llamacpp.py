"""The README's "Faster than what?" table: our engine on the default target's int4 weights against llama.cpp's
plain decoding of the very GGUF file they come from, one row per measured machine and kind of prompt, every cell
read from a committed file of `scripts/int4_vs_llamacpp.py` (`assets/bench/int4/*.json`).

A file's `rows` are per kind of prompt ({"fresh": {run name: figures}, "editing": …}); the first file, from before
the kinds, holds one set of runs over fresh-writing prompts."""

from __future__ import annotations

import json
import re
from pathlib import Path

from playground.machine import cpu_name, kind_words, recorded_kind
from playground.presets import REPO_ROOT
from playground.viz.summary import times_text

INT4_DIR = REPO_ROOT / "assets" / "bench" / "int4"
BEGIN = "<!-- llama.cpp table: rendered by scripts/render_readme.py from assets/bench/int4 -->"
END = "<!-- end of the llama.cpp table -->"
KINDS = {"fresh": "fresh writing", "editing": "editing given text"}
COLUMNS = (("ours int4 plain", "our plain"), ("ours int4 EAGLE-3.1", "our EAGLE-3.1"),
           ("ours int4 prompt lookup", "our prompt lookup"), ("ours int4 suffix", "our suffix decoding"),
           ("llama.cpp prompt lookup", "llama.cpp prompt lookup"))


def records(folder: Path = INT4_DIR) -> list[dict]:
    """Every committed file, newest first, each with its `path`."""
    found = [{**json.loads(p.read_text()), "path": p} for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []
    found.sort(key=lambda r: r.get("neighbours", 0))  # idle first, within a date
    return sorted(found, key=lambda r: r.get("date") or "", reverse=True)


def by_kind(record: dict) -> dict[str, dict[str, dict]]:
    rows = record["rows"]
    return rows if set(rows) <= set(KINDS) else {"fresh": rows}


def _best(runs: dict[str, dict], prefix: str) -> str:
    """'0.97× (k = 2)': the fastest of the runs named `prefix` (one per k) against llama.cpp plain; '—' where none."""
    found = [(r["vs_llamacpp_plain"], name) for name, r in runs.items() if name.startswith(prefix)]
    if not found:
        return "—"
    ratio, name = max(found)
    k = re.search(r"k=(\d+)", name)
    return times_text(ratio) + (f" (k = {k.group(1)})" if k else "")


def _threads(record: dict) -> str:
    threads = (record.get("llama_cpp") or {}).get("threads")
    return f" ({threads} threads)" if threads else ""


def _machine(record: dict) -> str:
    machine = record["machine"]
    kind = recorded_kind(machine)
    what = kind_words(kind) if kind else "its CPU flags not recorded"
    n = record.get("neighbours", 0)
    beside = f", beside {n} busy loop{'s' if n > 1 else ''}" if n else ""
    return f"{machine['cores']}-core {cpu_name(machine)} ({what}), {record.get('date', 'date not recorded')}{beside}"


def llamacpp_table(folder: Path = INT4_DIR) -> str:
    head = ["machine", "prompts", "llama.cpp plain", *(label for _, label in COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for record in records(folder):
        relative = record["path"].relative_to(REPO_ROOT) if record["path"].is_relative_to(REPO_ROOT) \
            else record["path"].name
        for kind, runs in by_kind(record).items():
            base = runs["llama.cpp plain"]
            prompts = len(record["prompts"][kind]) if isinstance(record["prompts"], dict) else len(record["prompts"])
            lines.append("| " + " | ".join([
                f"{_machine(record)}; [`{Path(relative).name}`]({relative})",
                f"{prompts} {KINDS[kind]} × {record['tokens']} tokens",
                f"{base['median_tok_s']:.1f} tok/s{_threads(record)}", *(_best(runs, prefix) for prefix, _ in COLUMNS)])
                + " |")
    return "\n".join(lines)


def with_llamacpp_table(readme: str, folder: Path = INT4_DIR) -> str:
    start, end = readme.index(BEGIN) + len(BEGIN), readme.index(END)
    return readme[:start] + "\n" + llamacpp_table(folder) + "\n" + readme[end:]
