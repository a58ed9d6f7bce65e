"""The numbers the README and its docs pages quote are the ones in the committed measurement files.

The measured prose moved from the README to docs/ pages: the default pair's findings are in docs/benchmarks.md, the
two-engine table in docs/vllm.md, the tiny MLA pair's numbers in docs/kimi.md; the README keeps a table of speedups
("Does EAGLE pay here?"), each cell checked against its file below. Each test names the page it reads.

The docs' prose is written by hand, the numbers are measured by `train evaluate`, `train speed` and `bench --profile
drift`; after a re-measurement this test names every quote that was not updated. The About tab is not checked here:
it is rendered from the same files (playground/ui/about.py, tests/ui/test_about.py). The model card is checked whole: it
must be what `train card` renders from the same files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from playground.train.card import render
from playground.ui import ABOUT

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "assets" / "models" / "smollm2-135m"
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
BENCHMARKS = (DOCS / "benchmarks.md").read_text()  # the default pair's measured findings (once the README's)
VLLM_DOC = (DOCS / "vllm.md").read_text()  # bench-engines' table (once the README's)
KIMI_DOC = (DOCS / "kimi.md").read_text()  # the tiny MLA pair's numbers (once the README's)


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


@pytest.mark.parametrize("quotes", [_acceptance_quotes, _speed_quotes, _drift_quotes])
def test_quoted_numbers_match_the_measurements(quotes) -> None:
    missing = [q for q in quotes() if q not in BENCHMARKS]
    assert not missing, f"docs/benchmarks.md does not quote {missing} from the measurements ({quotes.__name__})"


def _flat(text: str) -> str:
    """Text with every run of whitespace as one space: a quote may wrap anywhere in the prose."""
    return " ".join(text.split())


def _cell(rows: list[dict], drafter: str, prompt_set: str = "held-out", template: str = "default", k: int = 8) -> dict:
    (row,) = [r for r in rows if (r["drafter"], r["prompt_set"], r["template"], r["k"]) == (drafter, prompt_set,
                                                                                             template, k)]
    return row


def test_the_about_tab_does_not_call_verification_free() -> None:
    assert "for free" not in ABOUT and "the check is not free" in _flat(ABOUT)


def test_model_card_is_rendered_from_the_committed_files() -> None:
    committed = (ROOT / "assets" / "models" / "README.md").read_text()
    assert committed == render(MODELS), "run: python -m playground train card"


def _first_stage(log: dict) -> dict:
    while log.get("continued_from"):  # the stage the pair started with
        log = log["continued_from"]
    return log


def _card_with_logs(root: Path, edit) -> str:
    """The card of the shipped pair with each variant's training log passed through `edit` first."""
    for name in ("evaluation.json", "speed.json"):
        (root / name).write_text((MODELS / name).read_text())
    for variant in ("eagle3", "eagle3.1"):
        (root / variant).mkdir()
        (root / variant / "config.json").write_text((MODELS / variant / "config.json").read_text())
        (root / variant / "training_log.json").write_text(
            json.dumps(edit(_load(MODELS / variant / "training_log.json"))))
    return render(root)


def test_model_card_says_where_the_drafters_were_trained(tmp_path: Path) -> None:
    """A pair trained on a GPU (scripts/train_on_gpu.sh) gets a card that says so, not "one thread each"."""
    def on_a_gpu(log: dict) -> dict:
        _first_stage(log)["config"]["device"] = "cuda"
        return log

    card = _card_with_logs(tmp_path, on_a_gpu)
    assert "for both variants together, in one process on one CUDA GPU" in card and "one thread each" not in card
    assert "one thread each" in render(MODELS)


def test_model_card_lists_every_training_stage(tmp_path: Path) -> None:
    """A pair continued with --init-from (the long-context stage) keeps its first stage's story and adds its own."""
    from playground.train.card import training_stages

    def continued(log: dict) -> dict:
        trained = next(stage for stage in reversed(training_stages(log)) if "config" in stage)  # not a merge
        return {**trained, "steps": 7, "data": "runs/elsewhere", "continued_from": log,
                "config": {**trained["config"], "pack": False, "seq_len": 4096}}

    card = _card_with_logs(tmp_path, continued)
    assert f"same {_first_stage(_load(MODELS / 'eagle3' / 'training_log.json'))['steps']} steps" in card
    assert "Then 7 more steps on `runs/elsewhere`" in card and "one conversation per block" in card
    shipped = _load(MODELS / "eagle3" / "training_log.json")
    if "merge" in shipped:  # the shipped pair is an average of two stages (train merge): the card says so
        assert f"`train merge --alpha {shipped['merge']['alpha']}`" in render(MODELS)


def test_the_two_engine_table_is_the_committed_result() -> None:
    """docs/vllm.md and About show `bench-engines`' table of assets/bench/engines-cpu/results.json, rows for both
    engines × {plain, EAGLE-3, EAGLE-3.1} × {C = 1, 4, 16} from one run."""
    from playground.bench.engines import (
        COMMITTED,
        committed_section,
        instrumentation_label,
        instrumentation_note,
        table,
    )

    result = _load(COMMITTED)
    cells = {(r["engine"], r["drafter"], r["concurrency"]) for r in result["rows"]}
    assert cells == {(e, d, c) for e in ("local", "vllm") for d in ("none", "eagle3", "eagle3.1") for c in (1, 4, 16)}
    assert table(result) in VLLM_DOC and committed_section() in ABOUT
    assert all(r["identical_to_plain"] for r in result["rows"])  # greedy: every method gives plain decoding's tokens
    instrumented = [r for r in result["rows"] if r["instrumented"]]
    assert {(r["engine"], r["drafter"], r["concurrency"]) for r in instrumented} == {("local", "eagle3", 1),
                                                                                    ("local", "eagle3.1", 1)}
    assert instrumentation_note() and all(instrumentation_label(r["instrumentation_cost"]) in instrumentation_note()
                                          for r in instrumented)


def test_the_evaluations_measured_the_shipped_files() -> None:
    """evaluation.json and long-context.json name the SHA-256 of the drafters they measured: the shipped ones."""
    from playground.train.evaluate_long import drafter_digests

    shipped = drafter_digests({name: str(MODELS / name) for name in ("eagle3", "eagle3.1")})
    for name in ("evaluation.json", "long-context.json"):
        assert _load(MODELS / name)["drafter_sha256"] == shipped, f"{name} measured other drafters: re-run it"


def test_long_context_quotes_are_the_committed_evaluation() -> None:
    """The held-out long-context medians (EAGLE-3 vs EAGLE-3.1, every length) as `train evaluate-long` wrote them, and
    the claims made of them: EAGLE-3.1 ahead at every length, and 1.2× ahead only at ~1k, not from ~2k on (the
    long-context issue's bar)."""
    sets = _load(MODELS / "long-context.json")["sets"]
    medians = {name: [c["drafters"][d]["median_acceptance_length"] for d in ("eagle3", "eagle3.1")]
               for name, c in sets.items()}
    missing = [f"{a:.2f} vs {b:.2f}" for a, b in medians.values() if f"{a:.2f} vs {b:.2f}" not in _flat(BENCHMARKS)]
    assert not missing, f"docs/benchmarks.md does not quote {missing} from long-context.json"
    ratios = {name: b / a for name, (a, b) in medians.items()}
    assert min(ratios.values()) > 1, "the 'ahead at every length' claim no longer holds"
    assert ratios["numpy-1k"] >= 1.2 and all(r < 1.2 for name, r in ratios.items() if name != "numpy-1k"), \
        "the '1.2× only at ~1k' claim no longer holds"
    assert "reaches the 1.2× the EAGLE-3.1 work reports only at ~1k" in _flat(BENCHMARKS)
    ratios = list(ratios.values())
    assert f"by {100 * (min(ratios) - 1):.0f}–{100 * (max(ratios) - 1):.0f} %" in _flat(BENCHMARKS)
    assert all(c["drafters"][d]["lossless"] for c in sets.values() for d in ("eagle3", "eagle3.1"))


KIMI_TINY = ROOT / "assets" / "models" / "kimi-tiny"


def test_the_kimi_tiny_card_is_rendered_from_its_files() -> None:
    from playground.train.card import render_mla_pair

    assert (KIMI_TINY / "README.md").read_text() == render_mla_pair(KIMI_TINY), \
        "run: python -m playground train card --root assets/models/kimi-tiny --out assets/models/kimi-tiny/README.md"


def test_the_kimi_tiny_measurements_are_of_the_shipped_files_and_quoted() -> None:
    """evaluation.json measured the shipped MLA drafters; docs/kimi.md and the About tab quote its k = 3 acceptance and
    the engines' agreement from engines.json: the same tokens on both engines, acceptance above 1.5 at k = 3."""
    from playground.train.evaluate_long import drafter_digests

    evaluation = _load(KIMI_TINY / "evaluation.json")
    assert evaluation["drafter_sha256"] == drafter_digests({v: str(KIMI_TINY / v) for v in ("eagle3", "eagle3.1")})
    by_drafter = {v: evaluation["acceptance"][v]["3"] for v in ("eagle3", "eagle3.1")}
    assert all(m["lossless"] for m in by_drafter.values())
    engines = _load(KIMI_TINY / "engines.json")
    assert engines["k"] == 3 and all(r["same_ids"] == r["prompts"] for r in engines["rows"])
    vllm = {r["method"]: r["acceptance"]["vllm"]["mean_acceptance_length"] for r in engines["rows"]
            if r["method"] != "none"}
    ours = {r["method"]: r["acceptance"]["ours"]["mean_acceptance_length"] for r in engines["rows"]
            if r["method"] != "none"}
    assert min(vllm["eagle3.1"], ours["eagle3.1"], by_drafter["eagle3.1"]["mean_acceptance_length"]) > 1.5
    quotes = [_al(by_drafter[v]["mean_acceptance_length"]) for v in by_drafter]
    quotes += [f"{ours[v]:.3f} / {vllm[v]:.3f}" for v in ("eagle3", "eagle3.1")]
    missing = [q for q in quotes if q not in _flat(KIMI_DOC)]
    assert not missing, f"docs/kimi.md does not quote {missing} from kimi-tiny's evaluation.json / engines.json"


def test_the_kimi_tiny_drift_quotes_are_its_drift_study() -> None:
    rows = _load(ROOT / "assets" / "bench" / "drift-kimi-tiny" / "results.json")["rows"]
    rms3, rms31 = (_cell(rows, d)["hidden_rms_by_depth"] for d in ("eagle3", "eagle3.1"))
    assert max(rms31[1:]) - min(rms31[1:]) < 0.1 and rms3[-1] > 1.5 * rms3[0]  # "stays near 1.0", "grows"

    def ratio(**cell) -> str:
        return _times(_cell(rows, "eagle3.1", **cell)["mean_acceptance_length"] /
                      _cell(rows, "eagle3", **cell)["mean_acceptance_length"])

    kimi = [f"RMS grows from {rms3[0]:.2f} to {rms3[-1]:.2f} over depths 1–8 for EAGLE-3",
              f"({rms31[0]:.2f} → {rms31[-1]:.2f})", f"{ratio()} EAGLE-3's on held-out prompts",
              f"{ratio(prompt_set='unfamiliar-system')} with unfamiliar system prompts",
              f"{ratio(template='llama3')} under the unfamiliar `llama3` template"]
    missing = [q for q in kimi if _flat(q) not in _flat(KIMI_DOC)]
    assert not missing, f"docs/kimi.md does not quote {missing} from assets/bench/drift-kimi-tiny/results.json"


def test_the_readme_speedup_table_is_the_committed_files() -> None:
    """The README's "Does EAGLE pay here?" table is what playground/bench/landing.py renders from speed.json,
    engines-cpu, the drift study and the H200 bench."""
    from playground.bench.landing import with_table

    assert with_table(README) == README, "README.md's speedup table is stale: run python scripts/render_readme.py"


def test_the_speedup_tables_verdicts_follow_the_numbers() -> None:
    from playground.bench.landing import pays, row_verdict

    assert pays([1.2, 1.3]) == "yes" and pays([0.8, 0.9]) == "no"
    assert pays([1.2], lows=[0.7]).startswith("a little, on average") and pays([1.2], lows=[1.05]) == "yes"
    assert pays([0.9, 1.4]) == "on some prompts, not on others"
    assert row_verdict({"eagle3": [1.1], "eagle3.1": [1.2]}) == "yes"
    assert row_verdict({"eagle3": [0.8, 1.4], "eagle3.1": [1.2]}) == "EAGLE-3: on some prompts, not on others; " \
                                                                    "EAGLE-3.1: yes"


@pytest.mark.parametrize("name", ["tree_vs_chain.json", "tree_vs_chain-t0.7.json"])
def test_the_tree_numbers_are_the_committed_runs(name: str) -> None:
    """docs/trees.md's tables are scripts/tree_vs_chain.py's result files (greedy; sampled), row for row, with the
    tree-over-chain ratios it quotes."""
    result = json.loads((ROOT / "assets" / "bench" / "trees" / name).read_text())
    trees = _flat((DOCS / "trees.md").read_text())
    rows = {row["method"]: row for row in result["methods"]}
    for row in result["methods"]:
        speed = ("1.00" if "speedup_median" not in row else
                 f"{row['speedup_median']:.2f} ({row['speedup_q1']:.2f}-{row['speedup_q3']:.2f})")
        assert f"| {row['method']} | {row['mean_acceptance_length'] or 1:.2f} | {row['verified_rows']} | {speed} |" \
            in trees, row["method"]
    costs = result["verify_ms_by_rows"]
    assert "| forward ms | " + " | ".join(f"{ms:.1f}" for ms in costs.values()) + " |" in trees
    for drafter in ("EAGLE-3.1", "EAGLE-3"):
        tree, chain = (rows[f"{kind}, {drafter}"]["mean_acceptance_length"]
                       for kind in ("tree n16 d5 k4", "chain k=4"))
        assert f"{tree:.2f} against {chain:.2f} with {drafter} ({tree / chain:.2f}x)" in trees or \
            f"accepts {tree:.2f} tokens per step with {drafter} against {chain:.2f} for a chain of 4 " \
            f"({tree / chain:.2f}x)" in trees or f"{tree:.2f} tokens per step against a chain's {chain:.2f} with " \
            f"{drafter} ({tree / chain:.2f}x)" in trees, (name, drafter)


def test_the_tree_bench_table_is_the_committed_run() -> None:
    """docs/trees.md's table of the bench on three prompt sets is assets/bench/trees/sets/results.json, row for row,
    and the ranges its prose quotes (a tree's step cost and acceptance over its chain's) are the file's."""
    result = json.loads((ROOT / "assets" / "bench" / "trees" / "sets" / "results.json").read_text())
    trees = (DOCS / "trees.md").read_text()
    for r in result["rows"]:
        if r["kind"] == "baseline":
            cells = ["plain decoding", "1.00", "1", "1.00", "-"]
        else:
            runs = r["speedup_runs"]
            cells = [f"{r['label']} k={r['k']}", f"{r['mean_acceptance_length']:.2f}", f"{r['verified_per_step']:.1f}",
                     f"{r['speedup']:.2f} ({min(runs):.2f}-{max(runs):.2f})", f"{r['draft_ms']:.1f}"]
        assert f"| {r['prompt_set']} | " + " | ".join(cells) + f" | {r['verify_ms']:.1f} |" in trees, r["label"]
    chains = {(r["drafter"], r["k"], r["prompt_set"]): r for r in result["rows"]
              if r["kind"] == "eagle" and r["tree_nodes"] is None}
    cost, acceptance = [], []
    for tree in (r for r in result["rows"] if r["tree_nodes"]):
        chain = chains[tree["drafter"], tree["k"], tree["prompt_set"]]
        cost.append((tree["draft_ms"] + tree["verify_ms"]) / (chain["draft_ms"] + chain["verify_ms"]))
        acceptance.append(tree["mean_acceptance_length"] / chain["mean_acceptance_length"])
    flat = _flat(trees)
    assert f"took {min(cost):.2f}-{max(cost):.2f}x its chain's" in flat
    assert f"acceptance was {min(acceptance):.2f}-{max(acceptance):.2f}x its chain's" in flat
    assert f"accepts {min(acceptance):.2f}x to {max(acceptance):.2f}x the tokens per step" in flat


def test_the_threads_table_is_the_committed_runs() -> None:
    """docs/engine.md's shared-CPU table: every cell from assets/bench/threads/ (ours now and vLLM in one run, ours
    before in the other), rounded as the page rounds."""
    folder = ROOT / "assets" / "bench" / "threads"
    now, before = _load(folder / "ours-vs-vllm.json")["rows"], _load(folder / "before-96a30d4.json")["rows"]
    page = (DOCS / "engine.md").read_text()

    def row(rows: list[dict], engine: str, method: str, neighbours: int) -> dict:
        return next(r for r in rows if (r["engine"], r["method"], r["neighbours"]) == (engine, method, neighbours))

    def cell(r: dict, speedup_word: str = "") -> str:
        rate = (f"{r['median']:.1f} ({r['min']:.1f}–{r['max']:.1f})" if not r["neighbours"]
                else f"{r['median']:.1f}, kept {r['kept_of_idle']:.2f}×")
        return rate + (f"; {speedup_word}{r['speedup']:.2f}×" if r["speedup"] else "")

    for neighbours in (0, 1, 2):
        for method, label in (("none", "plain"), ("eagle3.1", "EAGLE-3.1")):
            ours, theirs = row(now, "ours", method, neighbours), row(now, "vllm", method, neighbours)
            assert ours["same_ids_as_plain"] in (None, ours["prompts"])
            line = (f"| {neighbours} | {label} | {cell(row(before, 'ours', method, neighbours), 'speedup ')} | "
                    f"{cell(ours)} | {cell(theirs)} | {ours['median'] / theirs['median']:.2f}× |")
            assert line in page, line


def test_docs_app_quotes_the_measured_memory_sessions() -> None:
    """docs/app.md's memory paragraph quotes both committed sessions (scripts/app_memory.py): the app's size after the
    first chat, the most it reached and the growth between, before the bounds and after."""
    doc = (DOCS / "app.md").read_text().replace("\n", " ")
    for name in ("app-session.json", "app-session-before.json"):
        session = _load(ROOT / "assets" / "bench" / "memory" / name)
        for key in ("after_first_chat_mib", "most_mib", "growth_after_first_chat_mib"):
            assert f"{session[key]:,.0f} MiB" in doc, (name, key, session[key])


def _best_eagle(runs: dict[str, dict]) -> tuple[str, dict]:
    """The fastest EAGLE-3.1 run of a kind of prompt (one per k): (its k, its figures)."""
    name = max((n for n in runs if n.startswith("ours int4 EAGLE-3.1")), key=lambda n: runs[n]["median_tok_s"])
    return name.rsplit("=", 1)[1], runs[name]


def test_the_readme_and_engine_doc_quote_the_llamacpp_files() -> None:
    """README's "Faster than what?" prose and docs/engine.md quote the Zen 4 files of scripts/int4_vs_llamacpp.py
    (idle and beside one busy loop) and scripts/llamacpp_threads.py: each figure as the file holds it."""
    int4 = ROOT / "assets" / "bench" / "int4"
    idle, busy = (_load(int4 / f"amd-zen4-avx512-bf16{tail}.json")["rows"] for tail in ("", "-beside-1"))
    one_thread = _load(int4 / "threads" / "amd-zen4-avx512-bf16.json")["rates"]["beside 1 busy"]["1 threads"][
        "median_tok_s"]
    fresh, editing = idle["fresh"], idle["editing"]
    k, eagle = _best_eagle(fresh)
    busy_k, busy_eagle = _best_eagle(busy["fresh"])
    plain_busy = busy["fresh"]["ours int4 plain"]["median_tok_s"]
    suffix = editing["ours int4 suffix k=4"]
    plain_quote = (f"{fresh['ours int4 plain']['vs_llamacpp_plain']:.2f}× llama.cpp's on fresh writing, "
                   f"{editing['ours int4 plain']['vs_llamacpp_plain']:.2f}× on editing")
    llamacpp_quote = (f"llama.cpp plain {fresh['llama.cpp plain']['median_tok_s']} and "
                      f"{editing['llama.cpp plain']['median_tok_s']} tok/s")
    quoted = {
        "README.md": [plain_quote, llamacpp_quote,
                      f"EAGLE-3.1 at k = {k} {eagle['vs_llamacpp_plain']:.2f}× llama.cpp, "
                      f"{eagle['median_tok_s'] / fresh['ours int4 plain']['median_tok_s']:.2f}× our plain",
                      f"suffix decoding {suffix['vs_llamacpp_plain']:.2f}×, "
                      f"{suffix['median_tok_s'] / editing['ours int4 plain']['median_tok_s']:.2f}× our plain",
                      f"fell to {busy['fresh']['llama.cpp plain']['median_tok_s']} tok/s",
                      f"kept {plain_busy:.0f} tok/s plain and {busy_eagle['median_tok_s']:.0f} with EAGLE-3.1 "
                      f"(k = {busy_k})", f"kept {one_thread} tok/s",
                      f"ours plain {plain_busy / one_thread:.2f}×, "
                      f"EAGLE-3.1 {busy_eagle['median_tok_s'] / one_thread:.2f}×"],
        "docs/engine.md": [plain_quote, llamacpp_quote],
    }
    engine = (ROOT / "docs" / "engine.md").read_text()
    texts = {"README.md": " ".join(README.split()), "docs/engine.md": " ".join(engine.split())}
    missing = [(doc, q) for doc, quotes in quoted.items() for q in quotes if q not in texts[doc]]
    assert not missing, missing


def test_benchmarks_quote_the_predictions_made_after_a_busy_profile() -> None:
    """docs/benchmarks.md's check of predictions on an idle machine after a profile kept from beside a busy loop."""
    pooled = _load(ROOT / "assets" / "bench" / "replay" / "after-busy" / "idle.json")["pooled"]
    predicted = ", ".join(f"{row['predicted_speedup']:.2f}×" for row in pooled)
    measured = ", ".join(f"{row['measured_speedup']:.2f}×" for row in pooled)
    flat = " ".join(BENCHMARKS.split())
    for quoted in (predicted, measured):
        assert " and ".join(quoted.rsplit(", ", 1)) in flat, quoted
    low = min(row["prediction_error_range"][0] for row in pooled)
    high = max(row["prediction_error_range"][1] for row in pooled)
    assert f"−{-low:.0%} to +{high:.0%}".replace("%", " %") in flat


METHOD_KINDS = ("mt-bench", "code-editing", "rewriting", "multilingual", "multi-turn")
METHOD_COLUMNS = ("eagle3", "eagle3.1", "ngram", "suffix")


def test_benchmarks_quote_the_methods_file() -> None:
    """docs/benchmarks.md's every-method table, row by row, from the committed file."""
    rows = _load(ROOT / "assets" / "bench" / "methods" / "amd-zen4-avx512-bf16.json")["rows"]

    def cell(row: dict) -> str:
        runs = row["speedup_runs"]
        return f"{row['speedup']:.2f}× ({min(runs):.2f}–{max(runs):.2f}), {row['mean_acceptance_length']:.2f}"

    by_kind = {kind: {r["drafter"]: r for r in rows if r["prompt_set"] == kind} for kind in METHOD_KINDS}
    for kind, methods in by_kind.items():
        line = (f"| `{kind}` | {methods['none']['tokens_per_second']:.1f} | "
                + " | ".join(cell(methods[m]) for m in METHOD_COLUMNS) + " |")
        assert line in BENCHMARKS, line


def test_benchmarks_quote_the_method_check_on_two_unseen_prompts() -> None:
    rows = _load(ROOT / "assets" / "bench" / "methods" / "must-show" / "results.json")["rows"]
    flat = " ".join(BENCHMARKS.split())
    for row in rows:
        if row["drafter"] == "none":
            continue
        runs = row["speedup_runs"]
        assert f"{row['speedup']:.2f}× ({min(runs):.2f}–{max(runs):.2f})" in flat, (row["prompt_set"], row["drafter"])
        assert f"{row['mean_acceptance_length']:.2f}" in flat or row["prompt_set"] == "open-chat"
