"""Prompt sets in the SPEED-Bench schema: JSONL files (the shipped sets) and SPEED-Bench parquet files.

One record = one conversation of user turns, in NVIDIA SPEED-Bench's columns::

    question_id, category, sub_category, turns (list[str]), source, src_id, difficulty, multiturn

plus one optional extension, `system` (a system prompt), which SPEED-Bench does not have (its files read as
`system=None`). The chat template is not part of a prompt set: it is a bench dimension (`--templates`).

Built-in sets live in `assets/prompts/<name>.jsonl` and are named by file stem (`held-out`, `humaneval`, ...).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from playground.presets import REPO_ROOT

PROMPTS_DIR = REPO_ROOT / "assets" / "prompts"
SCHEMA = ("question_id", "category", "sub_category", "turns", "source", "src_id", "difficulty", "multiturn")


@dataclass(frozen=True)
class PromptRecord:
    question_id: str
    category: str
    sub_category: str | None
    turns: tuple[str, ...]
    source: str
    src_id: str | None
    difficulty: str | None
    multiturn: bool
    system: str | None = None  # extension: a system prompt for every turn

    def messages(self, answers: list[str], system: str | None = None) -> list[dict[str, str]]:
        """The chat up to the next user turn: system?, then user/assistant pairs, ending with a user turn."""
        system = system if system is not None else self.system
        out = [{"role": "system", "content": system}] if system else []
        for i, answer in enumerate(answers):
            out += [{"role": "user", "content": self.turns[i]}, {"role": "assistant", "content": answer}]
        return out + [{"role": "user", "content": self.turns[len(answers)]}]

    def to_dict(self) -> dict:
        out = asdict(self)
        out["turns"] = list(self.turns)
        if out["system"] is None:
            del out["system"]
        return out


@dataclass(frozen=True)
class PromptSet:
    name: str
    records: tuple[PromptRecord, ...]
    path: str


def _text(value) -> str | None:
    """Parquet/JSON scalars to str; missing values (None, NaN) to None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return str(value)


def record_from_dict(raw: dict) -> PromptRecord:
    missing = [c for c in ("question_id", "turns") if c not in raw]
    if missing:
        raise ValueError(f"prompt record lacks {', '.join(missing)} (SPEED-Bench schema: {', '.join(SCHEMA)})")
    turns = tuple(str(t) for t in raw["turns"])  # a list in JSON, a numpy array in parquet
    if not turns:
        raise ValueError(f"prompt record {raw['question_id']!r} has no turns")
    multiturn = raw.get("multiturn")
    return PromptRecord(
        question_id=str(raw["question_id"]),
        category=_text(raw.get("category")) or "uncategorized",
        sub_category=_text(raw.get("sub_category")),
        turns=turns,
        source=_text(raw.get("source")) or "unknown",
        src_id=_text(raw.get("src_id")),
        difficulty=_text(raw.get("difficulty")),
        multiturn=bool(multiturn) if multiturn is not None else len(turns) > 1,
        system=_text(raw.get("system")),
    )


def read_jsonl(path: Path) -> list[PromptRecord]:
    records = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                records.append(record_from_dict(json.loads(line)))
            except (json.JSONDecodeError, ValueError) as err:
                raise ValueError(f"{path}:{n}: {err}") from None
    return records


def read_parquet(path: Path) -> list[PromptRecord]:
    """A SPEED-Bench split (qualitative or throughput_*) or any parquet file with the same columns."""
    import pandas as pd

    try:
        frame = pd.read_parquet(path)
    except ImportError as err:
        raise ValueError(f"reading {path} needs pyarrow (pip install pyarrow): {err}") from None
    return [record_from_dict(row) for row in frame.to_dict(orient="records")]


def write_jsonl(records: list[PromptRecord], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r.to_dict(), ensure_ascii=False) + "\n" for r in records), encoding="utf-8")


def builtin_sets() -> list[str]:
    return sorted(p.stem for p in PROMPTS_DIR.glob("*.jsonl"))


def load_prompt_set(name_or_path: str, limit: int | None = None) -> PromptSet:
    """A built-in set by name, or a `.jsonl` / `.parquet` file; the first `limit` records."""
    path = Path(name_or_path)
    if not path.exists():
        path = PROMPTS_DIR / f"{name_or_path}.jsonl"
        if not path.exists():
            raise FileNotFoundError(f"no prompt set {name_or_path!r}: not a file, and not one of the built-in sets "
                                    f"({', '.join(builtin_sets())})")
    records = read_parquet(path) if path.suffix == ".parquet" else read_jsonl(path)
    if not records:
        raise ValueError(f"prompt set {path} is empty")
    name = path.stem if path.parent != PROMPTS_DIR else name_or_path
    return PromptSet(name=name, records=tuple(records[:limit] if limit else records), path=str(path))
