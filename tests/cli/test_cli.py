"""`python -m playground generate` end to end against the tiny models (never the network).

Three real subprocesses (JSON by --target/--drafter-path, JSON by preset, and one error); the other error cases
and `--drafter none` go through the same `main()` in process, because each subprocess spends seconds of CPU
importing torch and transformers on a machine whose cores belong to a training run."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

if TYPE_CHECKING:
    from tests.conftest import TinyModels

REPO_ROOT = Path(__file__).resolve().parents[2]
PROMPT = "def add(a, b):"
MAX_NEW = 24
K = 4


def _env(extra: dict[str, str] | None) -> dict[str, str]:
    env = {
        **os.environ, "OMP_NUM_THREADS": "1", "PLAYGROUND_THREADS": "1", "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT), **(extra or {}),
    }
    env.pop("PLAYGROUND_DEFAULT_PRESET", None)
    env.pop("PLAYGROUND_PRESETS", None)
    return env


def start_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    command = ["nice", "-n", "19", sys.executable, "-m", "playground", "generate", *args]
    return subprocess.Popen(command, cwd=REPO_ROOT, env=_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def finish(process: subprocess.Popen, timeout: float = 900) -> subprocess.CompletedProcess:
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def json_args(*args: str) -> tuple[str, ...]:
    return ("--json", "--prompt", PROMPT, "--max-new-tokens", str(MAX_NEW), "--k", str(K), *args)


def parse(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def processes(tiny: TinyModels, broken_drafter: Path) -> dict[str, subprocess.CompletedProcess]:
    """The subprocess runs, started together (each pays for importing torch and transformers)."""
    root = tiny.root
    preset = {"PLAYGROUND_MODELS_DIR": str(root)}
    started = {
        "eagle3-by-path": start_cli(*json_args("--target", str(root / "target"), "--drafter-path",
                                               str(root / "eagle3"))),
        "eagle3.1-preset": start_cli(*json_args("--drafter", "eagle3.1"), env=preset),
        "broken": start_cli("--target", str(root / "target"), "--drafter-path", str(broken_drafter), "--prompt", PROMPT,
                            "--json"),
    }
    try:
        return {name: finish(process) for name, process in started.items()}
    finally:
        for process in started.values():
            if process.poll() is None:
                process.kill()


@pytest.fixture(scope="module")
def outputs(processes: dict[str, subprocess.CompletedProcess]) -> dict[str, dict]:
    return {name: parse(done) for name, done in processes.items() if name != "broken"}


def run_in_process(capsys: pytest.CaptureFixture, *args: str) -> subprocess.CompletedProcess:
    """`python -m playground generate ARGS` through the same main(), in this process (no import cost)."""
    from playground.__main__ import main

    capsys.readouterr()
    code = main(["generate", *args])
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, captured.out, captured.err)


def check_speculative_json(result: dict, tiny: TinyModels) -> None:
    ids = result["token_ids"]
    assert isinstance(result["text"], str) and result["text"] == tiny.target.decode(ids)
    assert 1 <= len(ids) <= MAX_NEW and all(isinstance(t, int) for t in ids)
    steps = result["steps"]
    assert [t for s in steps for t in s["emitted"]] == ids
    drafting = [s for s in steps if s["drafted"]]
    assert drafting, "no drafting step"
    for s in steps:
        assert {"drafted", "accepted", "emitted", "attention", "hidden_rms", "draft_ms", "verify_ms"} <= set(s)
    for s in drafting:
        n = len(s["drafted"])
        assert (1 <= n <= K and 0 <= s["accepted"] <= n
                and s["emitted"][: s["accepted"]] == s["drafted"][: s["accepted"]])
        assert isinstance(s["draft_ms"], float) and isinstance(s["verify_ms"], float)
        assert isinstance(s["attention"], list) and len(s["attention"]) == n
        for mass in s["attention"]:
            assert set(mass) == {"sink", "context", "draft"}
            assert mass["context"] + mass["draft"] == pytest.approx(1.0, abs=1e-5)
        assert s["attention"][0]["draft"] == 0.0
        assert len(s["hidden_rms"]) == n and all(r > 0 for r in s["hidden_rms"])
    accepted = sum(s["accepted"] for s in drafting)
    assert result["metrics"]["mean_acceptance_length"] == pytest.approx(1 + accepted / len(drafting))
    per_position = result["metrics"]["per_position_acceptance"]
    assert len(per_position) == K and all(0 <= a <= 1 for a in per_position)
    assert all(a >= b for a, b in zip(per_position, per_position[1:]))
    assert per_position[0] == pytest.approx(sum(s["accepted"] >= 1 for s in drafting) / len(drafting))
    assert result["metrics"]["tokens_per_second"] > 0 and math.isfinite(result["metrics"]["tokens_per_second"])


def test_generate_json_with_target_and_drafter_path(outputs: dict[str, dict], tiny: TinyModels) -> None:
    result = outputs["eagle3-by-path"]
    check_speculative_json(result, tiny)
    assert result["target"] == str(tiny.root / "target")


def test_generate_json_with_preset(outputs: dict[str, dict], tiny: TinyModels) -> None:
    result = outputs["eagle3.1-preset"]
    check_speculative_json(result, tiny)
    assert result["preset"] == "smollm2-135m" and result["drafter"] == "eagle3.1"
    assert result["target"] == str(tiny.root / "target")


def test_drafter_none_gives_the_same_greedy_tokens(outputs: dict[str, dict], tiny: TinyModels,
                                                   capsys: pytest.CaptureFixture,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLAYGROUND_MODELS_DIR", str(tiny.root))
    plain = parse(run_in_process(capsys, *json_args("--drafter", "none")))
    assert plain["metrics"]["mean_acceptance_length"] is None
    assert all(s["drafted"] == [] and len(s["emitted"]) == 1 for s in plain["steps"])
    assert plain["token_ids"] == outputs["eagle3-by-path"]["token_ids"] == outputs["eagle3.1-preset"]["token_ids"]
    assert plain["prompt_tokens"] == outputs["eagle3.1-preset"]["prompt_tokens"] > 0


def _one_line_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert done.stdout == ""
    return lines[0]


@pytest.fixture(scope="module")
def broken_drafter(tmp_path_factory: pytest.TempPathFactory, tiny: TinyModels) -> Path:
    folder = tmp_path_factory.mktemp("broken")
    (folder / "config.json").write_text((tiny.root / "eagle3" / "config.json").read_text())
    data = (tiny.root / "eagle3" / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 3])  # truncated download
    return folder


def test_broken_checkpoint_error_in_a_real_process(processes: dict[str, subprocess.CompletedProcess]) -> None:
    line = _one_line_error(processes["broken"])
    assert "cannot read model.safetensors" in line


def test_errors_are_one_line_on_stderr(tiny: TinyModels, broken_drafter: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same main() as the subprocess runs above, in process: exit code 2 and one `error:` line, no exception."""
    root = tiny.root
    monkeypatch.setenv("PLAYGROUND_MODELS_DIR", str(root))
    by_path = ("--target", str(root / "target"), "--prompt", PROMPT, "--max-new-tokens", "4", "--json")

    assert "must be between 1 and 16, got 0" in _one_line_error(run_in_process(capsys, "--prompt", PROMPT, "--k", "0"))
    assert "prompt is empty" in _one_line_error(run_in_process(capsys, "--prompt", "   "))
    for target, words in (("/no/such/folder", "error: target: no such folder: /no/such/folder"),
                          (str(root / "target" / "config.json"), "is a file, not a folder")):
        line = _one_line_error(run_in_process(capsys, "--target", target, "--prompt", PROMPT))
        assert words in line and "Repo id" not in line, line
    missing = tmp_path / "no-such-drafter"
    assert str(missing) in _one_line_error(run_in_process(capsys, *by_path, "--drafter-path", str(missing)))
    line = _one_line_error(run_in_process(capsys, *by_path, "--drafter-path", str(broken_drafter)))
    assert "cannot read model.safetensors" in line
    not_a_checkpoint = tmp_path / "bad-json"
    not_a_checkpoint.mkdir()
    (not_a_checkpoint / "config.json").write_text("{oops")
    assert "not valid JSON" in _one_line_error(run_in_process(capsys, *by_path, "--drafter-path",
                                                              str(not_a_checkpoint)))
    assert "unknown-drafter" in _one_line_error(run_in_process(capsys, "--prompt", PROMPT, "--drafter",
                                                               "unknown-drafter"))
    if not torch.cuda.is_available():
        line = _one_line_error(run_in_process(capsys, "--prompt", PROMPT, "--device", "cuda"))
        assert "cuda" in line.lower() or "gpu" in line.lower()


def test_the_json_is_a_run_record_that_reads_back_typed(outputs: dict[str, dict]) -> None:
    """`--json` is `RunRecord.to_dict()` plus preset, target, precision, forward, weights (and their MB), the fast
    path's kernels, the thread policy, tree (None for a chain), auto_k (None for a fixed k) and the drafter's health;
    `from_dict` gives back the same record, typed, prompt ids too."""
    from playground.engine import AttentionMass, GenerationConfig, RunRecord, StepEvent

    result = dict(outputs["eagle3.1-preset"])
    assert {result.pop("preset"), result.pop("target")} and "metrics" in result
    assert (result.pop("precision"), result.pop("forward"), result.pop("tree")) == ("float32", "fast", None)
    assert result.pop("weights") == "float32" and result.pop("weights_mb") > 0  # the weights the products read
    assert result.pop("kernels").split(" + ")[0].startswith(("onednn-packed", "mkl-packed", "plain"))
    assert "thread" in result.pop("threads")  # the tests fix the threads: "1 thread (set by the user)"
    assert result.pop("auto_k") is None  # a fixed k
    health = result.pop("health")  # the tests' tiny drafter has no fingerprint: said so, with the way to make one
    assert health["status"] == "not checked" and "python -m playground fingerprint" in health["text"]
    record = RunRecord.from_dict(result)
    assert json.loads(json.dumps(record.to_dict())) == result
    assert record.prompt_ids and all(isinstance(t, int) for t in record.prompt_ids)
    assert isinstance(record.config, GenerationConfig) and isinstance(record.steps[1], StepEvent)
    assert isinstance(record.metrics.attention_by_depth[0], AttentionMass)
    assert isinstance(record.steps[1].attention[0], AttentionMass)


def test_distill_draws_parse_numbers_and_ranges() -> None:
    from playground.train.cli import parse_draws

    assert parse_draws("0") == [0] and parse_draws("0,2-4") == [0, 2, 3, 4]
    for bad in ("", "a", "-1", "3-x"):
        with pytest.raises(SystemExit, match="--draws"):
            parse_draws(bad)


def test_tree_flags_draft_trees_that_equal_plain_decoding(capsys: pytest.CaptureFixture, pair_models: Path) -> None:
    """`--tree-nodes N` drafts greedy trees (engine.tree); the answer equals plain decoding's, the JSON names the
    tree's shape; a sampled tree run repeats with its seed, and what trees cannot do is refused in one line."""
    plain = run_in_process(capsys, "--prompt", PROMPT, "--drafter", "none", "--max-new-tokens", "24", "--json")
    tree = run_in_process(capsys, "--prompt", PROMPT, "--drafter", "eagle3.1", "--max-new-tokens", "24",
                          "--tree-nodes", "8", "--tree-depth", "3", "--tree-topk", "2", "--json")
    assert plain.returncode == tree.returncode == 0, tree.stderr
    result = json.loads(tree.stdout)
    assert result["token_ids"] == json.loads(plain.stdout)["token_ids"]
    assert result["tree"] == {"depth": 3, "topk": 2, "nodes": 8}
    assert any(step["tree_tokens"] for step in result["steps"])
    sampled = [run_in_process(capsys, "--prompt", PROMPT, "--max-new-tokens", "16", "--tree-nodes", "8", "--k", "3",
                              "--temperature", "0.7", "--seed", "3", "--json") for _ in range(2)]
    assert sampled[0].returncode == 0 and json.loads(sampled[0].stdout)["token_ids"] == \
        json.loads(sampled[1].stdout)["token_ids"]  # a sampled tree run repeats with its seed
    assert json.loads(sampled[0].stdout)["tree"] == {"depth": 3, "topk": 4, "nodes": 8}  # k deep, as the app
    line = _one_line_error(run_in_process(capsys, "--prompt", PROMPT, "--tree-nodes", "8", "--min-draft-prob", "0.3"))
    assert "chains" in line
