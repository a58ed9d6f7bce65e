"""Named target + drafter pairs, as data. One place; the UI, CLI and bench all read it.

The embedded folder can be moved with PLAYGROUND_EMBEDDED_DIR (tests point it at tiny models).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DRAFTER_LABELS = {"none": "none (plain decoding)", "eagle3": "EAGLE-3", "eagle3.1": "EAGLE-3.1"}


@dataclass(frozen=True)
class Preset:
    name: str
    title: str
    target: str  # local folder or Hub id
    drafters: dict[str, str] = field(default_factory=dict)  # drafter name -> folder or Hub id
    backend: str = "local"  # "local" | "vllm" | "remote"
    device: str = "cpu"  # "cpu" | "cuda"
    dtype: str = "float32"
    description: str = ""

    @property
    def drafter_names(self) -> list[str]:
        return ["none", *self.drafters]


def embedded_dir() -> Path:
    return Path(os.environ.get("PLAYGROUND_EMBEDDED_DIR", REPO_ROOT / "assets" / "models" / "embedded"))


def _embedded() -> Preset:
    root = embedded_dir()
    return Preset(
        name="embedded",
        title="Embedded: PyStdlib-Llama 12×256 (CPU)",
        target=str(root / "target"),
        drafters={"eagle3": str(root / "eagle3"), "eagle3.1": str(root / "eagle3.1")},
        description="Our own small chat target trained on Python's standard library, with EAGLE-3 and EAGLE-3.1 "
        "drafters trained identically except for fc_norm and norm_output. Runs on a laptop CPU, no download.",
    )


def presets() -> dict[str, Preset]:
    items = [_embedded()]
    return {p.name: p for p in items}


DEFAULT_PRESET = "embedded"


def get_preset(name: str) -> Preset:
    table = presets()
    if name not in table:
        raise KeyError(f"unknown preset {name!r}; known: {', '.join(table)}")
    return table[name]
