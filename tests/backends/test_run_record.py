"""One run record (run_record.py): a run field added in one place reaches every export, under one name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from playground import run_record
from playground.__main__ import main
from playground.bench import BenchConfig, Sweep, run_profile
from playground.playback import Conversation, RunSettings, chat_turn, export_runs
from playground.presets import get_preset

PROMPT = "def add(a, b):"


def test_a_run_field_added_once_appears_in_generate_the_app_export_and_a_bench_row(
        pair_models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(run_record.RUN_FIELDS, "stand_in_field", lambda backend, plain: f"{backend.name}, {plain}")

    capsys.readouterr()
    assert main(["generate", "--k", "4", "--prompt", PROMPT, "--max-new-tokens", "6", "--json"]) == 0
    generated = json.loads(capsys.readouterr().out)
    assert generated["stand_in_field"] == "local, False"
    assert {"precision", "forward", "kernels", "threads"} <= set(generated) and "dtype" not in generated

    conversation = Conversation()
    *_, run = chat_turn(conversation, PROMPT, RunSettings(drafter="none", max_new_tokens=6), lambda: False)
    json_path, _ = export_runs({"turn 1": run}, conversation.messages(""), tmp_path / "export", "run")
    exported = json.loads(json_path.read_text())["runs"][0]
    assert exported["stand_in_field"] == "local, True"
    assert set(run_record.RUN_FIELDS) <= set(exported) and exported["precision"] == generated["precision"]

    prompts = tmp_path / "set.jsonl"
    prompts.write_text(json.dumps({"question_id": "q1", "category": "code", "sub_category": None, "turns": [PROMPT],
                                   "source": "test", "src_id": "1", "difficulty": "easy", "multiturn": False}) + "\n")
    config = BenchConfig(sweeps=[Sweep((str(prompts),), ("eagle3.1",), (2,))], max_new_tokens=6, repeats=1)
    rows = {row.drafter: row for row in run_profile(config, get_preset("smollm2-135m")).rows}
    assert rows["none"].run_fields["stand_in_field"] == "local, True"
    assert rows["eagle3.1"].run_fields["stand_in_field"] == "local, False"
    assert rows["eagle3.1"].to_dict()["run_fields"]["precision"] == generated["precision"]
