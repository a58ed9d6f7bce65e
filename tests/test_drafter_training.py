"""The drafter training stage runs end to end on a tiny target (and resumes), and the shipped drafters differ
from each other exactly in the two EAGLE-3.1 flags."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from playground.engine import Target, load_drafter
from playground.presets import REPO_ROOT
from playground.train.drafter import DrafterTrainConfig, assistant_mask, train_drafters

SHIPPED = REPO_ROOT / "assets" / "models" / "embedded"


def _conversations(n: int) -> list[dict]:
    return [{"messages": [{"role": "system", "content": "You are helpful."},
                          {"role": "user", "content": f"Write add{i}"},
                          {"role": "assistant", "content": f"def add{i}(a, b):\n    return a + b\n" * 3}]}
            for i in range(n)]


def test_assistant_mask_covers_answers_only() -> None:
    assistant, end = 5, 1
    ids = [0, 4, 9, 9, 1, 9, assistant, 9, 7, 8, end, 9]
    assert assistant_mask(ids, assistant, end) == [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0]


def test_train_drafters_runs_resumes_and_saves_both_generations(tiny_root: Path, tmp_path: Path) -> None:
    data = (_conversations(40), _conversations(8))
    settings = dict(seq_len=64, batch_size=4, draft_vocab_size=200, eval_every=2, eval_blocks=2, threads=1)
    first = train_drafters(tiny_root / "target", tmp_path / "out", tmp_path / "run",
                           DrafterTrainConfig(steps=2, **settings), data=data)
    assert first["steps"] == 2 and set(first["final"]) == {"eagle3", "eagle3.1"}
    resumed = train_drafters(tiny_root / "target", tmp_path / "out", tmp_path / "run",
                             DrafterTrainConfig(steps=4, **settings), resume=True, data=data)
    assert resumed["steps"] == 4 and len(resumed["history"]) == 2  # evaluations at steps 2 and 4
    target = Target.load(str(tiny_root / "target"))
    for generation, flag in (("eagle3", False), ("eagle3.1", True)):
        drafter, layout = load_drafter(tmp_path / "out" / generation)
        target.attach(drafter)
        assert layout == "official"
        assert (drafter.config.fc_norm, drafter.config.norm_output) == (flag, flag)


def test_shipped_drafters_differ_only_in_the_eagle31_flags() -> None:
    configs = {g: json.loads((SHIPPED / g / "config.json").read_text()) for g in ("eagle3", "eagle3.1")}
    assert (configs["eagle3"]["fc_norm"], configs["eagle3"]["norm_output"]) == (False, False)
    assert (configs["eagle3.1"]["fc_norm"], configs["eagle3.1"]["norm_output"]) == (True, True)
    rest = [{k: v for k, v in c.items() if k not in ("fc_norm", "norm_output")} for c in configs.values()]
    assert rest[0] == rest[1]
    target = Target.load(str(SHIPPED / "target"), dtype=torch.float32)
    for generation in configs:
        drafter, layout = load_drafter(SHIPPED / generation)
        assert layout == "official" and target.attach(drafter) == target.default_aux_layer_ids()
