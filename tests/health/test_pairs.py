"""The health check on real pairs: the fingerprint command on the tests' tiny pair, and the shipped kimi-tiny pair's
fingerprint held against runs through `generate --json` — an ordinary one, an unfamiliar chat template, a target
whose weights were perturbed."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from playground.__main__ import main
from playground.drafting import MAX_K
from playground.health import load_fingerprint, weights_digest
from playground.prompt_sets import load_prompt_set

ROOT = Path(__file__).resolve().parents[2]
KIMI = ROOT / "assets" / "models" / "kimi-tiny"


def run_json(*argv: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(argv)) == 0
    return json.loads(out.getvalue())


def noisy_copy(folder: Path, out: Path, scale: float) -> Path:
    """The checkpoint with Gaussian noise of `scale` × each matrix's standard deviation added to every matrix."""
    shutil.copytree(folder, out)
    generator = torch.Generator().manual_seed(0)
    for path in out.glob("*.safetensors"):
        weights = load_file(str(path))
        save_file({name: (w.float() + scale * w.float().std() * torch.randn(w.shape, generator=generator)).to(w.dtype)
                   if w.dim() == 2 else w for name, w in weights.items()}, str(path), metadata={"format": "pt"})
    return out


def unseen_prompt(i: int) -> str:
    """A held-out prompt the shipped fingerprints were not measured on (they read the first 24)."""
    return load_prompt_set("held-out").records[40 + i].turns[0]


def test_the_fingerprint_command_writes_what_the_check_reads(pair_models: Path, tmp_path: Path) -> None:
    out = tmp_path / "fingerprint.json"
    summary = run_json("fingerprint", "--sets", "held-out:4", "--sampled", "2", "--max-new-tokens", "32",
                       "--out", str(out), "--json")
    data = json.loads(out.read_text())
    assert summary["fingerprint"] == str(out) and summary["answers"] == data["prompts"]["answers"] >= 3
    assert data["target_digest"] == weights_digest(pair_models / "target") and data["chat_template_sha256"]
    assert sorted(map(int, data["greedy"]["answers"])) == list(range(1, MAX_K + 1))
    for k, rows in data["greedy"]["answers"].items():
        for row in rows:  # [steps, ≥1, …, ≥k]: each depth accepted no more often than the one before
            assert len(row) == int(k) + 1 and all(a >= b for a, b in zip(row[1:], row[2:])) and row[1] <= row[0]
    assert len(data["sampled"]["answers"]["4"]) == 2 and data["sampled"]["temperature"] == 0.7
    assert {"draft", "sink", "rms"} == set(data["greedy"]["drift"]["4"][0])
    assert 0 < data["draft_coverage"] <= 1  # the tiny drafters propose 300 of the 400 ids
    shutil.copy(out, pair_models / "eagle3.1" / "fingerprint.json")
    try:
        record = run_json("generate", "--k", "4", "--prompt", unseen_prompt(0), "--max-new-tokens", "48", "--json")
        assert record["health"]["status"] in ("in range", "flagged", "too few steps")
        assert record["health"]["text"] and record["health"]["differences"] == []
    finally:
        (pair_models / "eagle3.1" / "fingerprint.json").unlink()


def test_the_target_digest_reads_values_not_files(tmp_path: Path) -> None:
    """The same weights in float32 and bfloat16 share a digest; the slightest noise does not."""
    target = KIMI / "target"
    wide = shutil.copytree(target, tmp_path / "wide")
    for path in wide.glob("*.safetensors"):
        save_file({n: w.float() for n, w in load_file(str(path)).items()}, str(path), metadata={"format": "pt"})
    assert weights_digest(wide) == weights_digest(target)
    assert weights_digest(noisy_copy(target, tmp_path / "noisy", 0.01)) != weights_digest(target)
    assert weights_digest(tmp_path / "nothing") is None


@pytest.mark.parametrize("drafter", ["eagle3", "eagle3.1"])
def test_the_shipped_kimi_tiny_fingerprints_pass_ordinary_runs(drafter: str) -> None:
    assert load_fingerprint(str(KIMI / drafter)) is not None
    for i in range(3):
        health = run_json("generate", "--preset", "kimi-tiny", "--drafter", drafter, "--prompt", unseen_prompt(i),
                          "--max-new-tokens", "128", "--json")["health"]
        assert health["status"] in ("in range", "too few steps") and health["differences"] == [], health["text"]


def test_a_perturbed_target_is_flagged_naming_its_weights(tmp_path: Path) -> None:
    """kimi-tiny's target with noise of half each matrix's spread, the shipped drafter given by path. (A quarter, which
    takes the default pair's EAGLE-3.1 to no acceptance, leaves kimi-tiny's at 0.65-0.93 on three prompts: in range,
    with the weights named as a note.)"""
    noisy = noisy_copy(KIMI / "target", tmp_path / "noisy", 0.5)
    health = run_json("generate", "--preset", "kimi-tiny", "--target", str(noisy), "--drafter-path",
                      str(KIMI / "eagle3.1"), "--prompt", unseen_prompt(0), "--max-new-tokens", "128",
                      "--json")["health"]
    assert health["status"] == "flagged" and health["direction"] == "low", health["text"]
    assert health["causes"][0].startswith("the target's weights differ"), health["causes"]


def test_an_unfamiliar_template_is_named_and_flagged_only_out_of_range() -> None:
    health = run_json("generate", "--k", "4", "--preset", "kimi-tiny", "--chat-template", "llama3", "--prompt",
                      unseen_prompt(1), "--max-new-tokens", "128", "--json")["health"]
    assert health["differences"] and "chat template (llama3)" in health["differences"][0]
    assert health["status"] in ("in range", "flagged")  # the template alone is a note, not a flag
    if health["status"] == "flagged":
        assert "chat template" in health["causes"][0]


def test_a_sag_too_small_for_one_answer_is_flagged_over_a_bench_rows_answers(tmp_path: Path) -> None:
    """kimi-tiny's target with a quarter of each matrix's spread as noise: each answer stays in range alone (0.65-0.74
    measured, against answers of 0.72-0.93), but a bench row's answers held together leave the range of that many
    answers, the flag naming the weights (health.check.pooled)."""
    noisy = noisy_copy(KIMI / "target", tmp_path / "noisy", 0.25)
    prompts = tmp_path / "unseen.jsonl"
    prompts.write_text("".join(json.dumps({"question_id": f"u{i}", "category": "code", "turns": [unseen_prompt(i)]})
                               + "\n" for i in range(5)))
    out = tmp_path / "bench"
    drafter = str(KIMI / "eagle3.1")  # the shipped drafter, by path: another target keeps no preset drafters
    assert main(["bench", "--preset", "kimi-tiny", "--target", str(noisy), "--drafters", drafter, "--k", "4",
                 "--prompts", str(prompts), "--max-new-tokens", "128", "--repeats", "1", "--out", str(out)]) == 0
    (row,) = [r for r in json.loads((out / "results.json").read_text())["rows"] if r["drafter"] == drafter]
    health = row["health"]
    print(f"{health['flagged']} of {health['checked']} flagged: {health['flags']}")
    assert health["checked"] >= 3 and health["flagged"] >= 1, health
    assert any("answers under the same difference" in flag and "the target's weights differ" in flag
               for flag in health["flags"]), health["flags"]
