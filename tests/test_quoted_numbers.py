"""The headline numbers the README and the About tab quote are the ones in the committed measurement files.

The prose is written by hand, the numbers are measured by `train evaluate`, `train speed` and `bench --profile
drift`; after a re-measurement this test names every quote that was not updated. The model card is checked whole:
it must be what `train card` renders from the same files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from playground.train.card import render
from playground.ui import ABOUT

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "assets" / "models" / "smollm2-135m"
README = (ROOT / "README.md").read_text()


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _al(value: float) -> str:
    return f"{value:.2f}"


def _times(value: float) -> str:
    return f"{value:.2f}×"


def _acceptance_quotes() -> list[str]:
    acceptance = _load(MODELS / "evaluation.json")["acceptance"]
    return [_al(acceptance[name][k]["mean_acceptance_length"]) for name in ("eagle3", "eagle3.1") for k in ("4", "8")]


def _speed_quotes() -> list[str]:
    by_drafter = _load(MODELS / "speed.json")["speed"]["by_k"]["4"]
    quotes = [_times(by_drafter[name]["median_speedup"]) for name in ("eagle3", "eagle3.1", "eagle3.1 adaptive 0.3")]
    return quotes + [_times(by_drafter["eagle3.1 adaptive 0.3"]["pooled_speedup"])]


def _drift_quotes() -> list[str]:
    """EAGLE-3.1 / EAGLE-3 acceptance length at k = 8 on the long-context and unfamiliar-template cells."""
    rows = _load(ROOT / "assets" / "bench" / "drift" / "results.json")["rows"]
    cells = {(r["drafter"], r["prompt_set"], r["template"]): r["mean_acceptance_length"] for r in rows if r["k"] == 8}
    shifted = [("long-1k", "default"), ("long-4k", "default"), ("held-out", "llama3"), ("unfamiliar-system", "default")]
    return [_times(cells[("eagle3.1", *cell)] / cells[("eagle3", *cell)]) for cell in shifted]


@pytest.mark.parametrize("where, text", [("README.md", README), ("the About tab", ABOUT)])
@pytest.mark.parametrize("quotes", [_acceptance_quotes, _speed_quotes, _drift_quotes])
def test_quoted_numbers_match_the_measurements(where: str, text: str, quotes) -> None:
    missing = [q for q in quotes() if q not in text]
    assert not missing, f"{where} does not quote {missing} from the committed measurements ({quotes.__name__})"


def test_model_card_is_rendered_from_the_committed_files() -> None:
    assert (ROOT / "assets" / "models" / "README.md").read_text() == render(MODELS), "run: python -m playground train card"


def test_model_card_says_where_the_drafters_were_trained(tmp_path: Path) -> None:
    """A pair trained on a GPU (scripts/train_on_gpu.sh) gets a card that says so, not "one thread each"."""
    for name in ("evaluation.json", "speed.json"):
        (tmp_path / name).write_text((MODELS / name).read_text())
    for variant in ("eagle3", "eagle3.1"):
        (tmp_path / variant).mkdir()
        (tmp_path / variant / "config.json").write_text((MODELS / variant / "config.json").read_text())
        log = _load(MODELS / variant / "training_log.json")
        log["config"]["device"] = "cuda"
        (tmp_path / variant / "training_log.json").write_text(json.dumps(log))
    card = render(tmp_path)
    assert "for both variants together, in one process on one CUDA GPU" in card and "one thread each" not in card
    assert "one thread each" in render(MODELS)
