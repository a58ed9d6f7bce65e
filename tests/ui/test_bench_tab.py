"""The Benchmark tab through gradio_client, against the real app.py: the smoke profile runs, fills the table and
writes its three files; a bad profile gets a clear message."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from gradio_client import Client

from playground.bench.present import STARTING, TAB_HEADERS


def test_bench_smoke_profile_from_the_ui(app_url: str) -> None:
    client = Client(app_url, verbose=False)
    status, findings, table, speed, by_k, position, files = client.predict("smoke", "smollm2-135m", api_name="/bench")
    assert "finished" in status and "This run (smoke)" in findings and "Lossless" in findings
    assert table["headers"] == TAB_HEADERS and "speedup vs plain" in TAB_HEADERS
    drafters = {row[0] for row in table["data"]}
    assert {"none", "eagle3", "eagle3.1"} <= drafters
    assert {row[1] for row in table["data"] if row[0] == "eagle3.1"} == {"1", "3"}  # as text ("auto: 5")
    assert all(fig["type"] == "plotly" for fig in (speed, by_k, position))
    assert len(json.loads(by_k["plot"])["data"]) == 2  # one line per EAGLE drafter
    names = sorted(Path(f).name for f in files)
    assert names == ["report.html", "results.csv", "results.json"] and all(Path(f).stat().st_size for f in files)
    saved = json.loads(next(Path(f) for f in files if f.endswith(".json")).read_text())
    assert saved["config"]["profile"] == "smoke" and len(saved["rows"]) == len(table["data"])
    with pytest.raises(Exception, match="the bench runs the local engine, and preset 'remote' uses the remote backend"):
        client.predict("smoke", "remote", api_name="/bench")


def test_bench_tab_runs_a_profile_with_adaptive_drafting(app_url: str) -> None:
    """The tab's slider reaches every EAGLE run of the profile; the findings and the saved config say so."""
    client = Client(app_url, verbose=False)
    _, findings, table, *_, files = client.predict("smoke", "smollm2-135m", 0.5, api_name="/bench")
    assert "adaptive drafting: a chain ends after a draft below **0.5**" in findings and "Lossless" in findings
    saved = json.loads(next(Path(f) for f in files if f.endswith(".json")).read_text())
    assert saved["config"]["min_draft_prob"] == 0.5
    with pytest.raises(Exception, match=r"minimum draft probability must be in \[0, 1\)"):
        client.predict("smoke", "smollm2-135m", 1.5, api_name="/bench")


def test_stop_ends_a_benchmark_run(app_url: str) -> None:
    """The drift profile takes minutes; Stop ends it within seconds, with no result and a line that says so, and the
    model is free again at once."""
    client = Client(app_url, verbose=False)
    job = client.submit("drift", "smollm2-135m", api_name="/bench")
    deadline = time.monotonic() + 60
    while not any("warm-up" in status for status, *_ in job.outputs()):  # the status line streams its progress
        assert time.monotonic() < deadline and not job.done(), f"the bench did not start: {job.status().code}"
        time.sleep(0.05)
    assert job.outputs()[0][0] == f"**drift**: {STARTING}"
    pressed = time.monotonic()
    client.predict(api_name="/stop_bench")
    status, *rest = job.result(timeout=120)
    assert time.monotonic() - pressed < 15 and status.startswith("Stopped: the benchmark was stopped after ")
    assert "a partial run has no result" in status
    answer = Client(app_url, verbose=False).predict("Hello there", "eagle3.1", 4, "smollm2-135m", 0.0, 1.0, 4,
                                                   "default", "", "", k_auto=False,
                                                   api_name="/chat")
    assert answer[-1]["metrics"]["generated_tokens"] > 0
