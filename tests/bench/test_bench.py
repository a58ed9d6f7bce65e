"""The bench on tiny models: outputs and their columns, prompt-set loaders, the lossless check, findings.

No test here asserts a speed: timings on shared CPUs are noise at this size.
"""

from __future__ import annotations

import csv
import html
import json
from pathlib import Path

import pandas as pd
import pytest

from playground.__main__ import main
from playground.bench import (
    BenchConfig,
    BenchResult,
    BenchRow,
    BenchStopped,
    Sweep,
    findings,
    load_prompt_set,
    run_profile,
)
from playground.bench.methods import Method
from playground.bench.plan import make_plan
from playground.bench.present import STARTING, TAB_PROFILES, stream_run, tab_profiles
from playground.bench.profiles import DURATIONS, measured_durations, profiles
from playground.bench.progress import BenchProgress, Run, format_duration
from playground.engine import AttentionMass, decode
from playground.presets import REPO_ROOT, get_preset
from playground.prompt_sets import SCHEMA, builtin_sets
from tests.support.step_costs import CHOSEN_K, use_hand_costs
from tests.support.step_costs import predicted as hand_predicted

ROW_COLUMNS = {
    "drafter", "k", "context_tokens", "template", "prompt_set", "tokens_per_second", "baseline_tokens_per_second",
    "speedup", "speedup_runs", "mean_acceptance_length", "per_position_acceptance", "attention_by_depth",
    "hidden_rms_by_depth", "lossless", "note",
}
RECORDS = [
    {"question_id": "q1", "category": "code", "sub_category": None, "turns": ["Write a function `add(a, b)`."],
     "source": "test", "src_id": "1", "difficulty": "easy", "multiturn": False},
    {"question_id": "q2", "category": "multi-turn", "sub_category": None,
     "turns": ["Explain what `os.path.join` does.", "And `os.path.split`?"], "source": "test", "src_id": None,
     "difficulty": None, "multiturn": True, "system": "You are a helpful Python assistant."},
]


@pytest.fixture
def tiny_pair(tiny_root: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("PLAYGROUND_MODELS_DIR", str(tiny_root))
    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path / "cache"))  # the rows' step-cost profiles
    return tiny_root


def _jsonl(path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return path


def test_smoke_profile_writes_three_outputs_and_prints_its_findings(tiny_pair: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "smoke"
    assert main(["bench", "--profile", "smoke", "--out", str(out)]) == 0
    printed = capsys.readouterr().out

    with open(out / "results.csv", newline="") as f:
        csv_rows = list(csv.DictReader(f))
    assert ROW_COLUMNS <= set(csv_rows[0])
    data = json.loads((out / "results.json").read_text())
    assert {"cpu", "cores", "torch", "transformers", "python"} <= set(data["machine"])
    assert data["config"]["profile"] == "smoke" and len(data["rows"]) == len(csv_rows)
    typed = BenchResult.from_dict(data)  # read back typed, nothing lost
    assert typed.to_dict() == {key: value for key, value in data.items() if key != "findings"}
    assert all(isinstance(a, AttentionMass) for r in typed.rows for a in r.attention_by_depth or [])
    rows = {(r["drafter"], r["k"]): r for r in data["rows"]}
    assert set(rows) == {("none", None), ("hf-greedy", None)} | {
        (name, k) for name in ("eagle3", "eagle3.1", "prompt-lookup", "hf-assisted") for k in (1, 3)}

    assert rows[("none", None)]["speedup"] == pytest.approx(1.0)
    for (name, k), row in rows.items():
        if name == "hf-assisted":  # no draft model exists for this target: said, not faked
            assert row["tokens_per_second"] is None and "no small draft model" in row["note"]
            continue
        assert row["lossless"] is True, (name, k)
        assert row["tokens_per_second"] > 0 and row["baseline_tokens_per_second"] > 0
        if name.startswith("eagle"):
            assert len(row["per_position_acceptance"]) == k and len(row["hidden_rms_by_depth"]) == k
            assert [set(a) for a in row["attention_by_depth"]] == [{"sink", "context", "draft"}] * k
            assert 1 <= row["mean_acceptance_length"] <= k + 1
        else:
            assert row["mean_acceptance_length"] is None and row["attention_by_depth"] is None

    report = (out / "report.html").read_text()
    assert report.count("plotly.js v") == 1  # plotly.js inlined exactly once
    assert data["findings"][0].startswith("Lossless") and data["findings"][0] in report
    said = printed.split("Findings:\n", 1)[1].splitlines()  # the findings close what the command prints
    assert said == [f"- {finding}" for finding in data["findings"]] and len(said) > 1
    config_block = html.unescape(report.split("<h2>Machine and configuration</h2><pre>")[1].split("</pre>")[0])
    assert json.loads(config_block)["config"] == data["config"]
    assert '"ks": [1, 3]' in config_block  # a list of plain values on one line


def test_prompt_sets_load_from_parquet_and_jsonl(tmp_path: Path) -> None:
    parquet = tmp_path / "speed.parquet"
    pd.DataFrame([{c: r[c] for c in SCHEMA} for r in RECORDS]).to_parquet(parquet)  # SPEED-Bench columns only
    from_parquet = load_prompt_set(str(parquet))
    from_jsonl = load_prompt_set(str(_jsonl(tmp_path / "set.jsonl")), limit=1)

    assert [r.turns for r in from_parquet.records] == [tuple(r["turns"]) for r in RECORDS]
    assert from_parquet.records[1].multiturn and from_parquet.records[0].difficulty == "easy"
    assert from_parquet.records[0].sub_category is None and from_parquet.records[1].system is None
    assert len(from_jsonl.records) == 1 and from_jsonl.name == "set"
    two_turns = load_prompt_set(str(tmp_path / "set.jsonl")).records[1]
    assert two_turns.messages(["It joins paths."]) == [
        {"role": "system", "content": "You are a helpful Python assistant."},
        {"role": "user", "content": "Explain what `os.path.join` does."},
        {"role": "assistant", "content": "It joins paths."},
        {"role": "user", "content": "And `os.path.split`?"},
    ]
    for name in ("held-out", "humaneval", "mt-bench", "long-1k", "long-2k", "long-4k", "numpy-1k", "numpy-8k",
                 "unfamiliar-system"):
        assert name in builtin_sets()
    for name in ("numpy-1k", "numpy-2k", "numpy-4k", "numpy-8k"):  # the held-out library, 8 prompts a length
        long = load_prompt_set(name).records
        assert len(long) == 8 and {r.source for r in long} == {"numpy"} and len({r.src_id for r in long}) == 8
    assert len(load_prompt_set("humaneval").records) == 164
    assert all(len(r.turns) == 2 for r in load_prompt_set("mt-bench").records)
    for kind in ("code-editing", "rewriting", "multilingual", "multi-turn"):  # the prompt kinds written here
        records = load_prompt_set(kind).records
        assert len(records) == 3 and all(r.multiturn == (len(r.turns) > 1) for r in records), kind
    assert all(len(r.turns) == 3 for r in load_prompt_set("multi-turn").records)
    with pytest.raises(FileNotFoundError):
        load_prompt_set("no-such-set")


def test_lossless_flag_catches_a_broken_verifier(tiny_pair: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    def accept_one_wrong_token(drafted, target_logits):
        accepted, bonus = real(drafted, target_logits)
        if accepted < len(drafted):  # keep the first rejected draft as if the target had agreed
            return accepted + 1, int(target_logits[accepted + 1].argmax())
        return accepted, bonus

    real = decode.accept_greedy
    monkeypatch.setattr(decode, "accept_greedy", accept_one_wrong_token)
    config = BenchConfig(sweeps=[Sweep((str(_jsonl(tmp_path / "set.jsonl")),), ("eagle3", "eagle3.1"), (3,))],
                         max_new_tokens=12, repeats=1)
    calls: list[tuple[int, int, str]] = []
    result = run_profile(config, get_preset("smollm2-135m"), lambda *call: calls.append(call))

    rows = {r.drafter: r for r in result.rows}
    assert rows["none"].lossless is True and rows["none"].turns == 3  # the multi-turn record ran both turns
    assert any(rows[name].lossless is False and rows[name].mismatched_prompts for name in ("eagle3", "eagle3.1"))
    # 3 warm-ups (plain, both EAGLEs), then per record 3 timed runs (plain, both EAGLEs) and 2 instrumented
    assert [done for done, _, _ in calls] == [*range(3 + 2 * 5), 3 + 2 * 5]  # one call before each run, one at the end
    assert calls[0][2] == "warm-up 1 of 3 (set, plain decoding)…"
    assert calls[3][2].startswith("run 1 of 10 (set, plain decoding), ~") and calls[3][2].endswith(" left")
    assert calls[-2][2].startswith("run 10 of 10 (set, EAGLE-3.1, k=3, instrumented pass), ~")


def test_a_bench_with_tree_methods_sets_trees_beside_their_chains(tiny_pair: Path, tmp_path: Path) -> None:
    """`--tree-nodes`: each EAGLE drafter's tree at each k gets its own row beside its chain, lossless, with its own
    acceptance length; the EAGLE-3 vs EAGLE-3.1 findings still pair the chains, and a finding sets each tree against
    its chain. A tree with adaptive drafting is refused before anything runs."""
    sweep = Sweep((str(_jsonl(tmp_path / "set.jsonl")),), ("eagle3", "eagle3.1"), (3,), tree_nodes=(8,))
    config = BenchConfig(sweeps=[sweep], max_new_tokens=12, repeats=1)
    result = run_profile(config, get_preset("smollm2-135m"), lambda *call: None)
    rows = {(r.drafter, r.tree_nodes): r for r in result.rows}
    assert set(rows) == {("none", None), ("eagle3", None), ("eagle3", 8), ("eagle3.1", None), ("eagle3.1", 8)}
    tree, chain = rows["eagle3.1", 8], rows["eagle3.1", None]
    assert tree.label == "EAGLE-3.1 tree 8" and tree.k == 3 and tree.lossless is True
    assert tree.mean_acceptance_length is not None and tree.speedup is not None
    # step costs: a chain of 3 verifies at most 4 rows a step, the tree at most 9; plain decoding drafts nothing
    assert 1 < chain.verified_per_step <= 4 < tree.verified_per_step <= 9
    assert tree.draft_ms > 0 and tree.verify_ms > 0 and chain.draft_ms > 0
    plain = rows["none", None]
    assert plain.verified_per_step is None and plain.draft_ms is None and plain.verify_ms > 0
    # each EAGLE row's own steps priced at this machine's measured step costs, beside its measured speedup
    for row in (chain, tree):
        low, high = row.predicted_range
        assert 0 < low <= row.predicted_speedup <= high, row
    assert plain.predicted_speedup is None and plain.predicted_range is None
    # each answer held against its drafter's fingerprint: the tiny drafters have none, which the rows say
    assert plain.health is None and chain.health["checked"] == tree.health["checked"] == 0
    assert "no fingerprint" in chain.health["not_checked"] and "no fingerprint" in tree.health["not_checked"]
    said = findings(result.rows, greedy=True)
    assert any(f.startswith(f"On {tree.prompt_set} · default, EAGLE-3.1 tree 8 k=3 accepted "
                            f"{tree.mean_acceptance_length:.2f} tokens per step against its chain's "
                            f"{chain.mean_acceptance_length:.2f}") and "per step it verified" in f for f in said), said
    assert any("EAGLE-3.1 had the longer mean acceptance length in" in f and "of 1 matched" in f for f in said)
    assert any(f.startswith("Predicted from this machine's step costs") and "4 rows" in f for f in said), said
    with pytest.raises(ValueError, match="applies to chains"):
        BenchConfig(sweeps=[sweep], min_draft_prob=0.3).validate()


def test_k_auto_rows_say_what_they_chose_and_stand_beside_the_fastest_fixed_k(tiny_pair: Path, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """`--k 1,3,auto`: each preset drafter gets a k auto row beside its fixed ks — each prompt's k chosen from the
    drafter's acceptance by position (evaluation.json beside the drafters) and the step costs the run measures
    (written by hand here: timed, they move with the machine's load) — lossless, saying what it chose; an untrained
    drafter's auto runs plain decoding. A finding sets each against the fastest fixed k. Without an acceptance by
    position the row says why it has no numbers."""
    use_hand_costs(monkeypatch)
    evaluation = tiny_pair / "evaluation.json"  # beside the drafter folders, as `train evaluate` writes it
    prompts = str(_jsonl(tmp_path / "set.jsonl"))
    args = ["bench", "--profile", "smoke", "--drafters", "eagle3,eagle3.1", "--k", "1,3,auto", "--prompts", prompts,
            "--max-new-tokens", "12", "--repeats", "2"]
    try:
        evaluation.write_text(json.dumps({"acceptance": {
            "eagle3": {"8": {"per_position_acceptance": [0.01] * 8}},
            "eagle3.1": {"8": {"per_position_acceptance": [0.99] * 8}}}}))
        assert main([*args, "--out", str(tmp_path / "auto")]) == 0
        data = json.loads((tmp_path / "auto" / "results.json").read_text())
        rows = {(r["drafter"], r["k"], r["k_auto"]): r for r in data["rows"]}
        assert data["config"]["sweeps"][0]["k_auto"] is True
        untrained, confident = rows["eagle3", None, True], rows["eagle3.1", None, True]
        assert untrained["label"] == "EAGLE-3 k auto" and untrained["lossless"] is True
        assert [c["k"] for c in untrained["auto_k"]] == [None] and untrained["auto_k"][0]["answers"] == 3
        assert untrained["mean_acceptance_length"] is None  # plain decoding drafted nothing to accept
        chose = confident["auto_k"]  # one choice per prompt's context bucket: the prompts differ in length
        assert sum(c["answers"] for c in chose) == 3 and confident["lossless"] is True
        for c in chose:
            assert c["k"] == CHOSEN_K and f"k={CHOSEN_K} is predicted fastest on this machine" in c["why"], c["why"]
            assert set(c["predicted_speedup"]) == {str(k) for k in range(1, 9)}
            assert c["predicted_speedup"][str(CHOSEN_K)] == pytest.approx(hand_predicted(0.99, CHOSEN_K), abs=1e-3)
        assert confident["mean_acceptance_length"] > 1
        table = html.unescape((tmp_path / "auto" / "report.html").read_text())
        shown = ", ".join(str(c["k"]) for c in chose)
        assert f"<td>auto: {shown}</td>" in table and "<td>auto: plain</td>" in table
        said = [f for f in data["findings"] if "k auto chose" in f]
        assert len(said) == 2 and any(f"EAGLE-3.1 k auto chose k={chose[0]['k']} on {chose[0]['answers']} answer" in f
                                      and "of the fastest fixed k's speed" in f for f in said), said
        evaluation.unlink()
        assert main([*args, "--out", str(tmp_path / "none")]) == 0
        rows = json.loads((tmp_path / "none" / "results.json").read_text())["rows"]
        (auto,) = [r for r in rows if r["k_auto"] and r["drafter"] == "eagle3.1"]
        assert auto["tokens_per_second"] is None and "k auto needs eagle3.1's acceptance by position" in auto["note"]
    finally:
        evaluation.unlink(missing_ok=True)


def test_weightless_methods_get_bench_rows_beside_the_eagle_drafters(tiny_pair: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture) -> None:
    """`--drafters eagle3.1,ngram,suffix`: prompt lookup and suffix decoding run in our loop at each k (a multi-turn
    record's turns included), checked token for token against plain decoding, with acceptance, speedup and a speedup
    predicted from the target's step costs; no drift or health (nothing to instrument or fingerprint). Their settings
    come from the registry, or the method flags; a bad setting is refused in one line before anything loads."""
    prompts = str(_jsonl(tmp_path / "set.jsonl"))
    args = ["bench", "--profile", "smoke", "--drafters", "eagle3.1,ngram,suffix", "--k", "3", "--prompts", prompts,
            "--max-new-tokens", "12", "--repeats", "2"]
    assert main([*args, "--prompt-lookup-max", "3", "--out", str(tmp_path / "out")]) == 0
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["config"]["method_settings"] == [["prompt_lookup_max", 3]]
    rows = {r["drafter"]: r for r in data["rows"]}
    assert set(rows) == {"none", "eagle3.1", "ngram", "suffix"}
    for name in ("ngram", "suffix"):
        row = rows[name]
        assert row["kind"] == "weightless" and row["k"] == 3 and row["lossless"] is True, row
        assert row["turns"] == 3  # the multi-turn record's second turn ran too
        assert 1 <= row["mean_acceptance_length"] <= 4 and len(row["per_position_acceptance"]) == 3
        assert row["speedup"] > 0 and row["speedup_runs"] and 0 < row["predicted_speedup"]
        assert row["attention_by_depth"] is None and row["hidden_rms_by_depth"] is None and row["health"] is None
    assert rows["ngram"]["label"] == "prompt lookup (n-gram)" and rows["suffix"]["label"] == "suffix decoding"
    (ranked,) = [f for f in data["findings"] if "by method at its fastest k" in f]
    assert all(f"{rows[n]['label']} k=3 {rows[n]['speedup']:.2f}× plain decoding" in ranked
               for n in ("eagle3.1", "ngram", "suffix")), ranked
    capsys.readouterr()
    assert main([*args, "--prompt-lookup-min", "4", "--prompt-lookup-max", "3"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: prompt_lookup_min (4) must not exceed prompt_lookup_max (3)"]


def test_findings_rank_every_method_and_say_where_each_wins() -> None:
    """No two EAGLE variants assumed: each method (its fastest k) ranked per prompt set, and the winner of each set
    named, plain decoding where no method beat it."""
    rows = []
    for prompt_set, speeds in (("chat", {"EAGLE-3.1": 1.6, "suffix decoding": 1.1}),
                               ("editing", {"EAGLE-3.1": 1.5, "suffix decoding": 2.4}),
                               ("quiz", {"EAGLE-3.1": 0.9, "suffix decoding": 0.8})):
        for label, speedup in speeds.items():
            row = _row(label, 4, speedup, prompt_set)
            row.kind = "weightless" if label == "suffix decoding" else "eagle"
            rows.append(row)
    said = findings(rows, greedy=True)
    assert ("On editing · default, by method at its fastest k: suffix decoding k=4 2.40× plain decoding, mean "
            "acceptance length 2.40; EAGLE-3.1 k=4 1.50× plain decoding, mean acceptance length 1.50.") in said
    assert ("Where each method was fastest: EAGLE-3.1 k=4 on chat · default; suffix decoding k=4 on editing · default; "
            "plain decoding (no method beat it) on quiz · default.") in said, said


def _row(variant: str, k: int, al: float, prompt_set: str = "held-out", template: str = "default") -> BenchRow:
    return BenchRow(drafter=variant.lower(), label=variant, kind="eagle", variant=variant, k=k, prompt_set=prompt_set,
                    template=template, studies=["k"], prompts=2, prompts_skipped=0, context_tokens=100,
                    tokens_per_second=10.0 * al, baseline_tokens_per_second=10.0, speedup=al,
                    mean_acceptance_length=al, lossless=True)


def test_findings_follow_the_numbers_either_way() -> None:
    better = findings([_row("EAGLE-3", 1, 1.5), _row("EAGLE-3", 4, 2.0),
                       _row("EAGLE-3.1", 1, 1.5), _row("EAGLE-3.1", 4, 2.5)], greedy=True)
    worse = findings([_row("EAGLE-3", 1, 1.5), _row("EAGLE-3", 4, 2.5),
                      _row("EAGLE-3.1", 1, 1.5), _row("EAGLE-3.1", 4, 2.0)], greedy=True)
    assert any("1.25× (longer) EAGLE-3's at k=4" in f for f in better)
    assert any("0.80× (shorter) EAGLE-3's at k=4" in f for f in worse)
    assert any("in 1 of 2 matched" in f for f in better) and any("in 0 of 2 matched" in f for f in worse)
    assert "sampled" in findings([_row("EAGLE-3", 1, 1.5)], greedy=False)[0]


def test_the_prediction_finding_reads_each_row_against_its_measured_speedup() -> None:
    rows = [_row("EAGLE-3", 4, 2.0), _row("EAGLE-3.1", 4, 2.5), _row("EAGLE-3.1", 6, 2.0)]
    for row, predicted in zip(rows, (1.7, 2.75, 2.0)):  # -15 %, +10 %, 0 %
        row.predicted_speedup, row.predicted_range = predicted, [predicted - 0.1, predicted + 0.1]
    (said,) = [f for f in findings(rows, greedy=True) if f.startswith("Predicted")]
    assert "-15% to +10% off the measured ones (median +0%, 3 rows)" in said
    assert "the furthest: EAGLE-3 k=4 on held-out · default, 1.70× predicted against 2.00× measured" in said, said


def test_speed_findings_know_their_noise() -> None:
    """The fastest method is named with its spread over passes; a runner-up whose range overlaps is 'within noise';
    a single pass says it has no spread."""
    fast, close, slow = _row("EAGLE-3.1", 4, 2.5), _row("EAGLE-3", 4, 2.4), _row("EAGLE-3", 1, 1.5)
    fast.speedup_runs, fast.tokens_per_second = [2.3, 2.5, 2.7], 25.0
    close.speedup_runs, close.tokens_per_second = [2.2, 2.4, 2.6], 24.0
    slow.speedup_runs, slow.tokens_per_second = [1.4, 1.5, 1.6], 15.0
    speed = [f for f in findings([fast, close, slow], greedy=True) if "fastest method" in f]
    assert (len(speed) == 1 and "2.50× plain decoding" in speed[0]
            and "median of 3 passes, which ranged 2.30–2.70×" in speed[0])
    assert "Within noise of EAGLE-3 k=4" in speed[0] and "k=1" not in speed[0].split("Within noise")[1]
    close.speedup_runs = [2.0, 2.1, 2.2]
    apart = [f for f in findings([fast, close, slow], greedy=True) if "fastest method" in f][0]
    assert "Within noise" not in apart
    fast.speedup_runs = [2.5]
    assert "one pass, so no spread was measured" in [f for f in findings([fast], greedy=True) if "fastest" in f][0]


def test_the_plan_is_made_without_a_model(tmp_path: Path) -> None:
    """plan.py is pure: prompt lengths from a given encoder, availability from a given function. A record too long
    for the context leaves its cell; a cell with none left marks every method with the reason; run counts add up."""
    prompts = _jsonl(tmp_path / "set.jsonl")
    lengths = {"Write a function `add(a, b)`.": 10, "Explain what `os.path.join` does.": 30}

    def encode(messages: list[dict], template: str) -> list[int]:
        return [0] * (lengths[messages[-1]["content"]] + (5 if template == "llama3" else 0))

    config = BenchConfig([Sweep((str(prompts),), ("none", "eagle3", "prompt-lookup"), (2,), ("default", "llama3"))],
                         max_new_tokens=8, repeats=3)
    plan = make_plan(config, encode, max_positions=40,
                     unavailable=lambda m: "no peers here" if m.kind == "peer" else None)
    default, llama3 = plan.cells
    assert (len(default.records), default.skipped, default.context_tokens) == (2, 0, 20)
    assert (len(llama3.records), llama3.skipped, llama3.context_tokens) == (1, 1, 15)  # 35 + 8 > 40
    assert ([m.name for m in default.runnable] == ["none", "eagle3"]
            and "no peers" in default.unavailable[default.methods[2]])
    # warm-ups: 2 cells' plain + eagle3; timed: 3 repeats x 2 methods per record; one instrumented eagle3 pass per
    # record
    assert (plan.count_warmups(), plan.count_runs()) == (2 + 1, (2 + 1) * (3 * 2 + 1))
    run_seconds = plan.run_seconds({0: (1.0, 0.5), 1: (2.0, 0.5)}, {Method("eagle3", 2): 0.5}, all_turns=True)
    # one conversation = turns x (prefill + max_new_tokens x per-token x relative speed); the default cell's mean
    # turns is 1.5 (one record of 1 turn, one of 2), the llama3 cell's only record has 1 turn
    assert run_seconds == {(0, Method("none")): 1.5 * 5, (0, Method("eagle3", 2)): 1.5 * 3,
                           (1, Method("none")): 6, (1, Method("eagle3", 2)): 4}
    assert plan.estimate_seconds(run_seconds) == 2 * (3 * 7.5 + 4 * 4.5) + 1 * (3 * 6 + 4 * 4)
    tight = make_plan(config, encode, max_positions=20, unavailable=lambda m: None)  # llama3: 15 + 8 > 20
    assert len(tight.cells[0].records) == 1 and not tight.cells[1].records and not tight.cells[1].runnable
    assert all("fits the target's context (20 tokens)" in why for why in tight.cells[1].unavailable.values())
    with pytest.raises(ValueError, match="no prompt fits"):
        make_plan(config, encode, max_positions=12, unavailable=lambda m: None)


def test_engine_bench_rows_on_our_engine(tiny_pair: Path) -> None:
    """`bench-engines` on our engine alone: every method at each C (the weightless ones too), plus an instrumented row
    per EAGLE method at the lowest C whose cost is its own tokens/s against the uninstrumented row's; greedy rows
    equal plain decoding's."""
    from playground.bench.engines import DEFAULT_METHODS, EngineBenchConfig, run_engine_bench, table

    config = EngineBenchConfig(prompt_set="mt-bench", prompts=2, max_new_tokens=12, concurrency=(1, 2),
                               engines=("local",), methods=(*DEFAULT_METHODS, "ngram", "suffix"))
    result = run_engine_bench(config, log=lambda line: None)
    rows = result["rows"]
    assert {(r["drafter"], r["concurrency"], r["instrumented"]) for r in rows} == {
        (d, c, False) for d in ("none", "eagle3", "eagle3.1", "ngram", "suffix") for c in (1, 2)} | {
        ("eagle3", 1, True), ("eagle3.1", 1, True)}
    assert all(r["mean_acceptance_length"] for r in rows if r["drafter"] in ("ngram", "suffix"))
    assert all(r["identical_to_plain"] for r in rows) and result["machine"]["engines"]["local"]["forward"] == "fast"
    for row in (r for r in rows if r["instrumented"]):
        uninstrumented = next(r for r in rows if (r["drafter"], r["concurrency"], r["instrumented"]) ==
                         (row["drafter"], 1, False))
        assert row["instrumentation_cost"] == pytest.approx(
            1 - row["per_user_tokens_per_second"] / uninstrumented["per_user_tokens_per_second"])
    assert table(result).count(", instrumented (") == 2


def test_progress_says_what_runs_and_the_time_left_refined_by_the_runs_so_far() -> None:
    now = [0.0]
    progress = BenchProgress(warmups=2, runs=3, clock=lambda: now[0])
    plain, eagle = Method("none"), Method("eagle3.1", 4)
    warm_plain = Run(0, "held-out", "default", plain, "warm-up")
    warm_eagle = Run(0, "held-out", "default", eagle, "warm-up")

    assert progress.starting(warm_plain) == "warm-up 1 of 2 (held-out, plain decoding)…"
    progress.finished(warm_plain)
    assert progress.starting(warm_eagle) == "warm-up 2 of 2 (held-out, EAGLE-3.1, k=4)…"
    progress.finished(warm_eagle)
    now[0] = 10.0
    progress.warmed_up({(0, plain): 60.0, (0, eagle): 30.0}, estimated_total=150.0)  # plain twice, EAGLE once
    first = Run(0, "held-out", "default", plain, "timed")
    assert progress.starting(first) == "run 1 of 3 (held-out, plain decoding), ~2 min 30 s left"  # the plan's
    now[0] = 40.0  # it took half its estimate: so will the rest, (150 - 60) / 2
    progress.finished(first)
    assert progress.starting(Run(0, "unfamiliar-system", "llama3", eagle, "instrumented")) == (
        "run 2 of 3 (unfamiliar-system, llama3 template, EAGLE-3.1, k=4, instrumented pass), ~45 s left")
    assert (progress.done, progress.total) == (3, 5)
    assert [format_duration(s) for s in (4, 58, 62, 145, 600, 704.7, 3600, 21_900)] == [
        "5 s", "1 min", "1 min", "2 min 25 s", "10 min", "12 min", "1 h", "6 h 5 min"]


def test_profile_labels_read_the_measured_durations(tmp_path: Path) -> None:
    """The tab's menu and the CLI's help say how long each profile took, from assets/bench/durations.json alone."""
    committed = measured_durations()
    assert committed and set(committed) <= set(profiles())  # each with its machine and command
    assert all(d.seconds > 0 and d.cores and d.cpu and d.simd in ("AVX2", "AVX-512") and "--profile" in d.command
               for d in committed.values())
    labels = {name: label for label, name in TAB_PROFILES}  # the tab's menu
    for name, measured in committed.items():
        assert labels[name].endswith(f" — {format_duration(measured.seconds)} measured on a {measured.cores}-core "
                                     f"{measured.cpu} ({measured.simd})")

    for name, entry in json.loads(DURATIONS.read_text())["profiles"].items():
        if "result" in entry:  # a committed run's own record is the figure's one home
            assert committed[name].seconds == json.loads((REPO_ROOT / entry["result"]).read_text())["seconds"]

    result = tmp_path / "results.json"
    result.write_text(json.dumps({"seconds": 704.6, "started": "2026-01-02T00:00:00Z",
                                  "machine": {"cpu": "Test Xeon", "cores": 2}}))
    other = tmp_path / "durations.json"
    other.write_text(json.dumps({"profiles": {
        "smoke": {"seconds": 90.4, "cpu": "Test CPU", "cores": 4, "simd": "AVX-512", "date": "2026-01-01",
                  "command": "python -m playground bench --profile smoke", "load_average": 3.5},
        "drift": {"result": str(result), "simd": "AVX2", "command": "python -m playground bench --profile drift"}}}))
    assert tab_profiles(other) == (
        ("smoke: 3 prompts, k 1 and 3, 16 tokens, 2 passes — 1 min 30 s measured on a 4-core Test CPU (AVX-512)",
         "smoke"),
        ("default: speed of every method beside the peers, k 4, 128 tokens — duration not measured yet", "default"),
        ("drift: EAGLE-3 vs EAGLE-3.1 by k, context, template — 12 min measured on a 2-core Test Xeon (AVX2)", "drift"))


def test_stream_run_reports_before_every_run_and_stops(tiny_pair: Path) -> None:
    """The tab's run: a status at once, then one before every generation run, then the view; Stop raises."""
    updates = list(stream_run("smoke", "smollm2-135m"))
    assert updates[0].status == STARTING and "Lossless" in updates[-1].view.findings_markdown
    statuses = [u.status for u in updates[1:-1]]
    assert statuses[0] == "warm-up 1 of 8 (held-out, plain decoding)…" and statuses[-1] == "finished"
    assert [s.split(" (")[0] for s in statuses if s.startswith("run ")] == [f"run {n} of 60" for n in range(1, 61)]

    stopping = stream_run("smoke", "smollm2-135m", should_stop=lambda: True)
    assert next(stopping).status == STARTING
    with pytest.raises(BenchStopped, match="stopped after 1 of "):
        list(stopping)


@pytest.mark.slow
def test_the_smoke_profile_runs_on_the_default_pair(tmp_path: Path) -> None:
    """`bench --profile smoke` on the default preset as a newcomer runs it (its int4 target, no models folder): it
    exits 0, every row of ours is lossless, and transformers' peers, which need float weights, carry the reason
    instead of numbers."""
    import os
    import subprocess
    import sys

    from playground.smollm2 import unavailable_reason

    if unavailable_reason():
        pytest.skip(unavailable_reason())
    env = {k: v for k, v in os.environ.items() if k != "PLAYGROUND_MODELS_DIR"}
    done = subprocess.run([sys.executable, "-m", "playground", "bench", "--profile", "smoke", "--preset",
                           "smollm2-135m", "--out", str(tmp_path)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    ours = [r for r in rows if r["drafter"] in ("none", "eagle3", "eagle3.1")]
    assert ours and all(r["lossless"] is not False and r["tokens_per_second"] > 0 for r in ours)
    peers = [r for r in rows if r["drafter"] in ("hf-greedy", "prompt-lookup", "hf-assisted")]
    assert peers and all(r["tokens_per_second"] is None and "float weights" in r["note"] for r in peers)
