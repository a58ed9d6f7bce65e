"""Figures per CPU kind: the README table, the About tab and the Chat's example line rendered from the landing files
(altered copies here, so a figure that did not come from its file would show), and the committed README holding
what the files render."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from playground.bench.landing import chat_examples_figures, landing_records, nearest_record, speedup_table
from playground.bench.landing_run import LANDING_DIR
from playground.examples import CHAT_EXAMPLES
from playground.presets import REPO_ROOT


def _committed() -> dict:
    records = landing_records()
    assert records, "no landing file committed under assets/bench/landing/"
    return records[0]


def _row(drafter: str, prompt_set: str, speedup: float | None, auto: bool = False) -> dict:
    return {"drafter": drafter, "prompt_set": prompt_set, "template": "default", "k": None if auto or drafter == "none"
            else 4, "k_auto": auto, "prompts": 1, "speedup": speedup, "speedup_runs": [speedup * 0.9, speedup * 1.1],
            "auto_k": [{"k": 3, "answers": 1}] if auto else None}


def _record() -> dict:
    """A landing record as bench --profile landing writes one (the keys the renderings read)."""
    sets = ("held-out", "mt-bench", "humaneval")
    rows = [_row("none", s, 1.0) for s in sets]
    rows += [_row(d, s, 1.5 + 0.1 * i, auto) for i, s in enumerate(sets) for d in ("eagle3", "eagle3.1")
             for auto in (False, True)]
    return {"cpu_kind": "amd-zen4-avx512-bf16", "date": "2026-12-06", "started": "2026-12-06T04:00:00Z",
            "machine": {"cpu": "AMD EPYC", "cores": 2, "cpu_kind": "amd-zen4-avx512-bf16"},
            "config": {"repeats": 2, "max_new_tokens": 96}, "rows": rows,
            "other_work": {"other_cpu_share": 0.5, "beside_other_work": True},
            "chat_examples": {"drafter": "eagle3.1", "k": 4, "max_new_tokens": 256,
                              "prompts": [{"prompt": e.prompt, "mean_acceptance_length": 2.0 + i}
                                          for i, e in enumerate(CHAT_EXAMPLES)]}}


def _altered(tmp_path: Path, kind: str, date: str, scale: float, share: float) -> dict:
    record = _record()
    record.update(cpu_kind=kind, date=date)
    record["machine"]["cpu_kind"] = kind
    record["other_work"]["other_cpu_share"], record["other_work"]["beside_other_work"] = share, share >= 0.05
    for row in record["rows"]:
        if row.get("speedup") is not None and row["drafter"] != "none":
            row["speedup"] = round(row["speedup"] * scale, 4)
    for example in record["chat_examples"]["prompts"]:
        example["mean_acceptance_length"] = round(example["mean_acceptance_length"] * scale, 3)
    (tmp_path / f"{kind}.json").write_text(json.dumps(record))
    return record


def test_the_table_names_each_rows_kind_date_and_load_from_its_file(tmp_path: Path) -> None:
    zen5 = _altered(tmp_path, "amd-zen5-avx512-bf16", "2031-01-02", 1.5, 0.0)
    _altered(tmp_path, "intel-avx512-bf16-amx", "2030-05-06", 0.5, 0.4)
    table = speedup_table(tmp_path)
    lines = table.splitlines()
    zen5_line = next(line for line in lines if "2031-01-02" in line)
    assert "AMD Zen 5, family 26" in zen5_line and "on an otherwise idle machine" in zen5_line
    amx_line = next(line for line in lines if "2030-05-06" in line)
    assert "Intel: AVX-512, AVX-512 BF16, AMX" in amx_line
    assert "beside other work (other processes took 40 %" in amx_line
    assert lines.index(zen5_line) < lines.index(amx_line)  # newest first
    held_out = next(r for r in zen5["rows"] if (r["drafter"], r["k"], r["prompt_set"]) == ("eagle3.1", 4, "held-out"))
    assert f"{held_out['speedup']:.2f}× held-out" in zen5_line
    assert "Intel Xeon CPU (its CPU flags not recorded), date not recorded" in table  # the older rows say so


def test_the_readme_holds_what_the_files_render() -> None:
    done = subprocess.run([sys.executable, "scripts/render_readme.py", "--check"], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_committed_landing_file_names_its_kind_date_and_load() -> None:
    record = _committed()
    assert record["path"] == LANDING_DIR / f"{record['cpu_kind']}.json"
    assert record["date"] == record["started"][:10] and record["machine"]["cpu_kind"] == record["cpu_kind"]
    assert record["other_work"]["beside_other_work"] in (True, False)


def test_about_says_which_committed_kind_is_nearest(tmp_path: Path) -> None:
    from playground.ui.about import Measurements, about_markdown, nearest_kind_line

    zen5 = _altered(tmp_path, "amd-zen5-avx512-bf16", "2031-01-02", 1.5, 0.0)
    zen5["path"] = tmp_path / "amd-zen5-avx512-bf16.json"
    m = Measurements(None, None, None, None, None, None, None, landing=[zen5], kind="amd-zen4-avx512-bf16")
    line = nearest_kind_line(m)
    assert "AMD Zen 4, family 25" in line and "the nearest committed kind is AMD Zen 5, family 26" in line
    assert "this very kind" in nearest_kind_line(Measurements(None, None, None, None, None, None, None,
                                                              landing=[zen5], kind="amd-zen5-avx512-bf16"))
    assert "none of the committed kinds" in nearest_kind_line(
        Measurements(None, None, None, None, None, None, None, landing=[zen5], kind="amd-zen3-avx2"))
    held_out = next(r for r in zen5["rows"] if (r["drafter"], r["k"], r["prompt_set"]) == ("eagle3", 4, "held-out"))
    text = about_markdown(m)
    assert "2031-01-02" in text and f"EAGLE-3 {held_out['speedup']:.2f}× held-out" in text
    assert nearest_record([zen5], "amd-zen3-avx2") is None


def test_the_chat_example_line_reads_the_nearest_file(tmp_path: Path) -> None:
    from playground.ui.chat import example_labels

    zen5 = _altered(tmp_path, "amd-zen5-avx512-bf16", "2031-01-02", 1.1, 0.0)
    amx = _altered(tmp_path, "intel-avx512-bf16-amx", "2032-01-01", 0.9, 0.0)
    line, lengths = chat_examples_figures([amx, zen5], "amd-zen4-avx512-bf16")
    assert "2031-01-02" in line and "AMD Zen 5" in line  # the nearer kind, though older
    assert lengths == {e["prompt"]: e["mean_acceptance_length"] for e in zen5["chat_examples"]["prompts"]}
    line, labels = example_labels([amx])  # no near kind: the newest that measured them
    assert "2032-01-01" in line
    first = amx["chat_examples"]["prompts"][0]
    assert labels[0] == f"{CHAT_EXAMPLES[0].title} · {first['mean_acceptance_length']:.2f} tokens/step"
    assert example_labels([]) == ("Examples", [e.title for e in CHAT_EXAMPLES])


def _vllm_record(kind: str, started: str, vllm: dict[str, float], ours: dict[str, float]) -> dict:
    """A vLLM landing file as `bench-engines --landing` writes one (the keys the renderings read)."""
    def row(engine: str, drafter: str, speedup: float | None, instrumented: bool = False) -> dict:
        return {"engine": engine, "drafter": drafter, "concurrency": 1, "speedup": speedup,
                "instrumented": instrumented, "neighbours": 0}

    rows = [row(e, "none", None) for e in ("local", "vllm")]
    rows += [row("vllm", d, s) for d, s in vllm.items()] + [row("local", d, s) for d, s in ours.items()]
    rows += [row("local", d, 0.1, instrumented=True) for d in ours]  # instrumented rows are not the figure
    return {"rows": rows, "started": started, "machine": {"cpu": "AMD EPYC", "cores": 2, "cpu_kind": kind},
            "config": {"prompt_set": "mt-bench", "prompts": 5, "max_new_tokens": 96, "k": 4},
            "other_work": {"other_cpu_share": 0.01, "beside_other_work": False}}


def test_vllms_rows_follow_their_kinds_landing_rows_and_read_their_file(tmp_path: Path) -> None:
    from playground.ui.about import Measurements, about_markdown

    zen5 = _altered(tmp_path, "amd-zen5-avx512-bf16", "2031-01-02", 1.5, 0.0)
    _altered(tmp_path, "intel-avx512-bf16-amx", "2030-05-06", 0.5, 0.4)
    (tmp_path / "vllm").mkdir()
    vllm = _vllm_record("amd-zen5-avx512-bf16", "2031-01-03 10:00:00", {"eagle3": 1.234, "eagle3.1": 1.567},
                        {"eagle3": 1.876, "eagle3.1": 2.345})
    (tmp_path / "vllm" / "amd-zen5-avx512-bf16.json").write_text(json.dumps(vllm))
    lines = speedup_table(tmp_path).splitlines()
    vllm_line = next(line for line in lines if "vLLM's CPU build, k = 4, 5 MT-Bench prompts" in line)
    zen5_auto = next(i for i, line in enumerate(lines) if "2031-01-02" in line) + 1  # k = 4, then k auto, then vLLM
    assert lines.index(vllm_line) == zen5_auto + 1
    assert "| 1.23× | 1.57× |" in vllm_line and "our engine in the same run: 1.88× and 2.35×" in vllm_line
    assert "the same CPU, 2031-01-03, one request, other processes (vLLM's ended engine processes among them) took 1 " \
        "% of the CPU time" in vllm_line
    assert "the shipped pair" in vllm_line and "requests at once" not in lines[lines.index(vllm_line) + 1]
    assert sum("vLLM's CPU build" in line for line in lines) == 2  # this kind's, and the older Xeon file's
    zen5["path"] = tmp_path / "amd-zen5-avx512-bf16.json"
    text = about_markdown(Measurements(None, None, None, None, None, None, None, landing=[zen5],
                                       vllm_landing={"amd-zen5-avx512-bf16": vllm}, kind="amd-zen4-avx512-bf16"))
    assert "vLLM's CPU build on the same machine, 2031-01-03" in text and "EAGLE-3.1 1.57× (ours 2.35×)" in text


def test_bench_engines_refuses_a_landing_run_that_is_not_the_landing_tables() -> None:
    done = subprocess.run([sys.executable, "-m", "playground", "bench-engines", "--landing", "--engines", "local",
                           "--out", "/nonexistent/never-written"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "needs --engines with local and vllm" in done.stderr
