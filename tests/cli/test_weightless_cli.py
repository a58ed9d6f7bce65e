"""`generate --drafter ngram` and `--drafter suffix` (weightless methods, engine/weightless.py) through the same main()
as `python -m playground generate`, in process, on the tiny pair: the answer equals plain decoding's, the record
names the method, and what they cannot do is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from playground.engine import GenerationConfig, TreeShape
from playground.presets import get_preset
from playground.request import RequestError
from playground.request.check import check_method
from tests.cli.test_cli import _one_line_error, run_in_process

PROMPT = "def add(a, b):\n    return a + b\n\ndef add(a, b):"
ARGS = ("--prompt", PROMPT, "--max-new-tokens", "24", "--json")


@pytest.mark.parametrize("method", ["ngram", "suffix"])
def test_weightless_methods_answer_as_plain_decoding(capsys: pytest.CaptureFixture, pair_models: Path,
                                                      method: str) -> None:
    plain = run_in_process(capsys, *ARGS, "--drafter", "none")
    run = run_in_process(capsys, *ARGS, "--drafter", method, "--k", "4", "--prompt-lookup-min", "1")
    if method == "suffix":  # a setting of the other method is refused; the run without it goes ahead
        assert "prompt_lookup_min is a setting of ngram" in _one_line_error(run)
        run = run_in_process(capsys, *ARGS, "--drafter", method, "--k", "4", "--suffix-decoding-min-token-prob", "0.2")
    assert plain.returncode == run.returncode == 0, run.stderr
    record = json.loads(run.stdout)
    assert record["token_ids"] == json.loads(plain.stdout)["token_ids"]
    assert record["drafter"] == method and record["metrics"]["drafting_steps"] > 0
    assert record["config"]["method_settings"] == ([["prompt_lookup_min", 1]] if method == "ngram"
                                                   else [["suffix_decoding_min_token_prob", 0.2]])
    health = record["health"]
    assert health["status"] == "not checked" and "no trained drafter to fingerprint" in health["why_not"]
    assert all(step["attention"] is None and step["hidden_rms"] is None for step in record["steps"])


def test_any_target_runs_a_weightless_method(capsys: pytest.CaptureFixture, pair_models: Path) -> None:
    by_target = ("--target", str(pair_models / "target"), *ARGS)
    plain = run_in_process(capsys, *by_target, "--drafter", "none")
    run = run_in_process(capsys, *by_target, "--drafter", "suffix", "--k", "3")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["token_ids"] == json.loads(plain.stdout)["token_ids"]


def test_refusals_are_one_line(capsys: pytest.CaptureFixture, pair_models: Path) -> None:
    base = ("--prompt", PROMPT, "--max-new-tokens", "4")
    refusals = {
        ("--drafter", "ngram", "--prompt-lookup-min", "6", "--prompt-lookup-max", "3"): "must not exceed",
        ("--drafter", "ngram", "--prompt-lookup-max", "17"): "from 1 to 16, got 17",
        ("--drafter", "suffix", "--suffix-decoding-min-token-prob", "2"): "suffix_decoding_min_token_prob",
        ("--drafter", "eagle3.1", "--suffix-decoding-max-tree-depth", "8"): "a setting of suffix, not of eagle3.1",
        ("--drafter", "auto", "--k", "4"): "asks k auto to choose the method: set k to auto",
        ("--drafter", "ngram,lookahead", "--k", "auto"): "k auto cannot choose lookahead",
        ("--drafter", "ngram", "--tree-nodes", "8"): "drafts chains",
        ("--drafter", "suffix", "--min-draft-prob", "0.3"): "set it to 0",
        ("--drafter", "lookahead"): "choose one of none, eagle3, eagle3.1, ngram, suffix",
    }
    for flags, words in refusals.items():
        line = _one_line_error(run_in_process(capsys, *base, *flags))
        assert words in line, (flags, line)


def test_other_engines_are_refused_by_name() -> None:
    """Prompt lookup runs on vLLM too (tests/backends/test_vllm_cpu.py), not on a remote preset; suffix decoding on
    vLLM needs a package not installed here: each said before anything starts."""
    check_method(get_preset("smollm2-135m-vllm"), "ngram", GenerationConfig())
    with pytest.raises(RequestError, match="runs on our engine for now, not on the remote backend"):
        check_method(get_preset("remote"), "ngram", GenerationConfig())
    with pytest.raises(RequestError, match="runs on vLLM only with the arctic-inference package"):
        check_method(get_preset("smollm2-135m-vllm"), "suffix", GenerationConfig())
    check_method(get_preset("smollm2-135m"), "suffix", GenerationConfig(tree=TreeShape(3, 2, 6)))  # trees
    with pytest.raises(RequestError, match="drafts chains: set the tree.s nodes to 0 .of the methods, "
                                                r"EAGLE-3, EAGLE-3.1, suffix decoding draft trees"):
        check_method(get_preset("smollm2-135m"), "ngram", GenerationConfig(tree=TreeShape(3, 2, 6)))


def test_replay_gives_a_weightless_method_its_live_acceptance(capsys: pytest.CaptureFixture, pair_models: Path,
                                                              tmp_path: Path) -> None:
    """A plain greedy record replayed under ngram and suffix: each k's acceptance is that of its live run."""
    ran = run_in_process(capsys, *ARGS, "--drafter", "none")
    assert ran.returncode == 0, ran.stderr
    (tmp_path / "plain.json").write_text(ran.stdout)
    from playground.__main__ import main

    capsys.readouterr()
    assert main(["replay", str(tmp_path / "plain.json"), "--drafters", "ngram,suffix", "--k", "2,4", "--json"]) == 0
    configs = json.loads(capsys.readouterr().out)["configs"]
    assert [(c["drafter"], c["k"]) for c in configs] == [("ngram", 2), ("ngram", 4), ("suffix", 2), ("suffix", 4)]
    for config in configs:
        live = json.loads(run_in_process(capsys, *ARGS, "--drafter", config["drafter"], "--k",
                                         str(config["k"])).stdout)["metrics"]
        assert config["drafting_steps"] == live["drafting_steps"] > 0
        assert config["acceptance_length"] == pytest.approx(live["mean_acceptance_length"])
        low, high = config["predicted_range"]  # from the target's costs alone: nothing to draft with
        assert 0 < low <= config["predicted_speedup"] <= high, config
