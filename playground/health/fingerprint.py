"""A drafter's fingerprint: how it accepts on ordinary answers of its target, and what it was measured with.

Written beside the drafter's weights (`fingerprint.json` in its folder; for a Hub drafter, under the cache) by
`python -m playground fingerprint` (health/measure.py). It holds, per answer of its prompts, the drafting steps and
the drafts accepted at each depth — greedy at every k (replayed exactly from one plain answer, engine/replay.py) and
sampled at T = 0.7 (live runs) — so a run can be held against the spread of answers, not against one mean; and the
facts a departure may be blamed on: a digest of the target's weights, the chat template's text, the longest context
the drafter was trained on and measured at, and how much of its answers the draft vocabulary covered.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from playground.smollm2 import cache_root

from .stats import BetaBinomial

FORMAT = 1
FILE_NAME = "fingerprint.json"
DIGEST_VALUES = 1024  # leading values of each tensor that the target digest reads


@dataclass(frozen=True)
class Section:
    """One way of decoding (greedy, or sampled at a temperature): per k, each answer's [drafting steps, accepted at
    depth ≥ 1, ≥ 2, …, ≥ k]; and, from the live runs, each answer's drift by depth: the drafter's attention to its
    own drafts (`draft`) and to the first position (`sink`), and the RMS of the hidden state it carries (`rms`)."""

    temperature: float
    top_p: float
    answers: dict[int, list[list[int]]]
    drift: dict[int, list[dict[str, list[float]]]] = field(default_factory=dict)

    def nearest_k(self, k: int) -> int:
        return min(self.answers, key=lambda measured: (abs(measured - k), measured))

    def depth_one(self, k: int) -> BetaBinomial:
        """The spread of answers' depth-1 acceptance at k (the nearest k measured)."""
        return BetaBinomial.fit([(row[0], row[1]) for row in self.answers[self.nearest_k(k)]])

    def by_position(self, k: int) -> list[tuple[float, float, float]]:
        """Per depth 1..k (of the nearest k measured): the pooled acceptance and the 10th-90th percentile of
        answers' rates."""
        rows = [row for row in self.answers[self.nearest_k(k)] if row[0] > 0]
        out = []
        for depth in range(1, len(rows[0])):
            rates = sorted(row[depth] / row[0] for row in rows)
            pooled = sum(row[depth] for row in rows) / sum(row[0] for row in rows)
            out.append((pooled, rates[int(0.1 * (len(rates) - 1))], rates[round(0.9 * (len(rates) - 1))]))
        return out

    def drift_by_depth(self, measure: str) -> list[tuple[float, float, float]] | None:
        """Per depth: the mean of answers' `measure` ("draft", "sink" or "rms") and its 10th-90th percentile."""
        if not self.drift:
            return None
        answers = self.drift[max(self.drift)]
        out = []
        for depth in range(min(len(a[measure]) for a in answers)):
            values = sorted(a[measure][depth] for a in answers)
            out.append((sum(values) / len(values), values[int(0.1 * (len(values) - 1))],
                        values[round(0.9 * (len(values) - 1))]))
        return out

    def to_dict(self) -> dict:
        return {"temperature": self.temperature, "top_p": self.top_p,
                "answers": {str(k): rows for k, rows in sorted(self.answers.items())},
                "drift": {str(k): rows for k, rows in sorted(self.drift.items())}}

    @classmethod
    def from_dict(cls, data: dict) -> Section:
        return cls(float(data["temperature"]), float(data["top_p"]),
                   {int(k): [list(map(int, row)) for row in rows] for k, rows in data["answers"].items()},
                   {int(k): rows for k, rows in data.get("drift", {}).items()})


@dataclass(frozen=True)
class Fingerprint:
    drafter: str  # the drafter's source (folder or Hub id)
    target: str  # the target it was measured with
    target_digest: str | None  # weights_digest of that target
    chat_template: str  # "default" or a shipped template's name
    chat_template_sha256: str | None  # of the template text applied ("raw": none)
    trained_context_tokens: int | None  # the longest sequence the drafter was trained on, where its log says
    measured_context_tokens: int  # the longest prompt + answer measured here
    draft_coverage: float | None  # the lowest share of a greedy answer's tokens inside the draft vocabulary
    greedy: Section
    sampled: Section | None
    prompts: dict = field(default_factory=dict)  # where the prompts came from, how many, how long the answers
    machine: dict = field(default_factory=dict)
    weights: str = "float32"  # what the target's products multiplied (a fingerprint from before int4: float32)

    def section(self, temperature: float) -> Section:
        """The section a run at `temperature` is held against: the one measured at the nearest temperature (greedy
        for 0 and for low temperatures, which answer much as greedy does)."""
        if self.sampled is None or temperature == 0:
            return self.greedy
        return min((self.greedy, self.sampled), key=lambda s: abs(s.temperature - temperature))

    def to_dict(self) -> dict:
        data = asdict(self)
        data.update(format=FORMAT, greedy=self.greedy.to_dict(),
                    sampled=self.sampled.to_dict() if self.sampled else None)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Fingerprint:
        if data.get("format") != FORMAT:
            raise ValueError(f"fingerprint format {data.get('format')!r}; this version reads {FORMAT}")
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields.update(greedy=Section.from_dict(data["greedy"]),
                      sampled=Section.from_dict(data["sampled"]) if data.get("sampled") else None)
        return cls(**fields)


def fingerprint_path(drafter_source: str) -> Path:
    """Beside a local drafter's weights; for a Hub drafter, under the cache (named by its id)."""
    folder = Path(drafter_source).expanduser()
    if folder.is_dir():
        return folder / FILE_NAME
    return cache_root() / "fingerprints" / drafter_source.replace("/", "--") / FILE_NAME


_FINGERPRINTS: dict[tuple[Path, float], Fingerprint] = {}


def load_fingerprint(drafter_source: str) -> Fingerprint | None:
    """The drafter's fingerprint, or None where it has none; a damaged one is a ValueError. Read once per file and
    mtime: a run asks at each look, a bench row for each answer."""
    path = fingerprint_path(drafter_source)
    if not path.is_file():
        return None
    key = (path, path.stat().st_mtime)
    if key not in _FINGERPRINTS:
        try:
            _FINGERPRINTS[key] = Fingerprint.from_dict(json.loads(path.read_text()))
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path} is not a fingerprint this version reads: {err}") from None
    return _FINGERPRINTS[key]


def save_fingerprint(fingerprint: Fingerprint, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fingerprint.to_dict(), indent=1) + "\n")
    return path


_DIGESTS: dict[tuple[str, float], str | None] = {}


def weights_digest(folder: str | Path) -> str | None:
    """A digest of a checkpoint's weights that reads little: the leading DIGEST_VALUES of every tensor of its
    *.safetensors, rounded to bfloat16 (so a float32 copy and its bfloat16 cast agree; noise, fine-tuning or another
    quantisation do not), in name order. None where the folder holds no safetensors. Kept per folder and mtime."""
    import torch
    from safetensors import safe_open

    folder = Path(folder)
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files:
        return None
    key = (str(folder.resolve()), max(f.stat().st_mtime for f in files))
    if key not in _DIGESTS:
        digest = hashlib.sha256()
        pieces = {}
        for path in files:
            with safe_open(str(path), framework="pt") as tensors:
                for name in tensors.keys():
                    piece = tensors.get_slice(name)
                    shape = piece.get_shape()
                    rows = -(-DIGEST_VALUES // max(1, _row_size(shape))) if len(shape) > 1 else DIGEST_VALUES
                    values = (piece[:rows] if shape else tensors.get_tensor(name)).flatten()[:DIGEST_VALUES]
                    pieces[name] = values.to(torch.float32).to(torch.bfloat16).view(torch.int16).numpy().tobytes()
        for name in sorted(pieces):
            digest.update(name.encode() + b"\0" + pieces[name])
        _DIGESTS[key] = digest.hexdigest()[:16]
    return _DIGESTS[key]


def _row_size(shape: list[int]) -> int:
    size = 1
    for d in shape[1:]:
        size *= d
    return size


def template_digest(template_text: str | None) -> str | None:
    return hashlib.sha256(template_text.encode()).hexdigest()[:16] if template_text is not None else None


def trained_context(drafter_folder: Path) -> int | None:
    """The longest sequence in the drafter's training_log.json (the deepest seq_len along its stages), if any."""
    path = drafter_folder / "training_log.json"
    if not path.is_file():
        return None
    found: list[int] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "seq_len" and isinstance(value, int):
                    found.append(value)
                else:
                    walk(value)

    walk(json.loads(path.read_text()))
    return max(found) if found else None
