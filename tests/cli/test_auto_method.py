"""`generate --k auto` choosing the method as well as k, on the real default pair (SmolLM2-135M and the shipped
drafters): a weightless method where the answer repeats its prompt (a function given back with one name changed),
EAGLE-3.1 on an open chat prompt. The prompts are written here, in no prompt set of the repo. Skipped, with the
reason, only where the model cannot be had; no assertion reads a timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from playground.drafting import METHODS, WEIGHTLESS
from playground.smollm2 import HUB_ID, ModelUnavailable, local_folder

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]

FUNCTION = '''def summarize_orders(orders, tax_rate=0.2):
    """Totals per customer, with tax, from a list of order dicts."""
    totals = {}
    counts = {}
    for order in orders:
        customer = order["customer"]
        amount = order["amount"]
        if amount < 0:
            raise ValueError(f"negative amount in order {order['id']}")
        if customer not in totals:
            totals[customer] = 0.0
            counts[customer] = 0
        totals[customer] += amount
        counts[customer] += 1
    report = []
    for customer in sorted(totals):
        net = totals[customer]
        tax = net * tax_rate
        gross = net + tax
        average = net / counts[customer]
        report.append({
            "customer": customer,
            "orders": counts[customer],
            "net": round(net, 2),
            "tax": round(tax, 2),
            "gross": round(gross, 2),
            "average": round(average, 2),
        })
    largest = None
    for line in report:
        if largest is None or line["gross"] > largest["gross"]:
            largest = line
    return {
        "lines": report,
        "largest": largest,
        "customers": len(report),
        "net": round(sum(totals.values()), 2),
    }
'''
EDITING = ("Return this Python function unchanged except that the variable `totals` is renamed to `net_by_customer` "
           "everywhere. Reply with the code only.\n\n```python\n" + FUNCTION + "```")
PRICED_BY_REPLAY = {name for name, method in METHODS.items() if method.priced_by == "replay"}  # k auto's others
CHAT = "What are some good habits for staying focused while studying at home? Give me a few ideas."


@pytest.fixture(scope="module", autouse=True)
def default_pair() -> None:
    try:
        local_folder(HUB_ID)
    except ModelUnavailable as err:
        pytest.skip(str(err))


def _generate(tmp_path: Path, prompt: str, drafter: str, k: str) -> tuple[dict, str]:
    """`generate --json` in a process of its own: the default preset's real models (an in-process test may have
    pointed PLAYGROUND_MODELS_DIR at the tiny pair, and a process keeps one backend per preset), step costs measured
    for this test."""
    file = tmp_path / "prompt.txt"
    file.write_text(prompt)
    env = {key: value for key, value in os.environ.items() if key != "PLAYGROUND_MODELS_DIR"}
    run = subprocess.run([sys.executable, "-m", "playground", "generate", "--prompt-file", str(file), "--drafter",
                          drafter, "--k", k, "--max-new-tokens", "48", "--json", "--no-instrument"],
                         capture_output=True, text=True, cwd=ROOT, env={**env, "PLAYGROUND_CACHE_DIR": str(tmp_path)},
                         timeout=600)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout), run.stderr


def test_k_auto_chooses_a_weightless_method_for_an_edit_and_what_the_costs_favour_for_a_chat(tmp_path: Path) -> None:
    edit, said = _generate(tmp_path, EDITING, "auto", "auto")
    auto = edit["auto_k"]
    assert edit["drafter"] in WEIGHTLESS and auto["method"] == edit["drafter"], auto["why"]
    assert set(auto["predicted_by_method"]) == {"eagle3", "eagle3.1", *PRICED_BY_REPLAY}
    best = {name: max(table.values()) for name, table in auto["predicted_by_method"].items()}
    assert best[edit["drafter"]] == max(best.values()) and auto["predicted_speedup"][str(auto["k"])] > 1
    assert f"--k auto: {auto['why']}" in said and "its replay over this answer's first 32 tokens" in auto["why"]
    assert edit["metrics"]["k"] == auto["k"] and edit["metrics"]["mean_acceptance_length"] >= 2.5  # it copies
    plain, _ = _generate(tmp_path, EDITING, "none", "1")
    assert edit["token_ids"] == plain["token_ids"]  # the method chosen is lossless, as every method is

    chat, _ = _generate(tmp_path, CHAT, "eagle3.1,ngram,suffix", "auto")
    auto = chat["auto_k"]  # a chat copies little: whichever the costs favour, or plain decoding where none pays
    assert set(auto["predicted_by_method"]) == {"eagle3.1", *PRICED_BY_REPLAY}
    best = {name: max(table.values()) for name, table in auto["predicted_by_method"].items()}
    if auto["k"] is None:
        assert chat["drafter"] == "none" and auto["why"].endswith("plain decoding"), auto["why"]
    else:
        assert chat["drafter"] == auto["method"] and best[auto["method"]] == max(best.values()), auto["why"]
        assert "is predicted fastest on this machine" in auto["why"]
