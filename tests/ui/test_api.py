"""The app's API through gradio_client, against the real app.py in a subprocess: chat and compare stream text and
metrics; bad inputs get a clear message and the server keeps serving."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import gradio as gr
import pytest
from gradio_client import Client
from gradio_client.utils import Status

from playground.engine import CheckpointError
from playground.presets import DRAFTER_LABELS, REPO_ROOT
from tests.support.appserver import long_answer_prompt

PROMPT = long_answer_prompt()
CHAT_DEFAULTS = dict(drafter="eagle3.1", k=4, k_auto=False, preset="smollm2-135m", temperature=0.0, top_p=1.0,
                     max_new_tokens=48, chat_template="default", system="", seed="")
COMPARE_DEFAULTS = dict(left_drafter="eagle3", left_k=4, right_drafter="eagle3.1", right_k=4, preset="smollm2-135m",
                        temperature=0.0, top_p=1.0, max_new_tokens=48, chat_template="default", system="", seed="")


@pytest.fixture
def client(app_url: str) -> Client:
    """A fresh client is a fresh session (its own chat history and stop switch)."""
    return Client(app_url, verbose=False)


def chat(client: Client, prompt: str = PROMPT, **settings) -> list[tuple]:
    job = client.submit(prompt, **{**CHAT_DEFAULTS, **settings}, api_name="/chat")
    job.result(timeout=300)
    return job.outputs()


def test_chat_streams_text_and_metrics(client: Client) -> None:
    outputs = chat(client)
    assert len(outputs) >= 2, "expected a status update and then tokens"
    prompt_box, chatbot, status, stats, accept, speedup, position, drift, rms, run = outputs[-1]
    assert prompt_box == "" and "finished" in status
    answer = chatbot[-1]["content"]
    answer = answer[0]["text"] if isinstance(answer, list) else answer
    assert chatbot[-2]["role"] == "user" and 'class="tok-' in answer
    assert run["text"] and run["metrics"]["generated_tokens"] == len(run["token_ids"]) > 0
    assert run["metrics"]["mean_acceptance_length"] >= 1 and run["baseline"]["groups"] >= 3
    low, high = run["speedup_range"]
    assert 0 < low <= run["speedup"] <= high and "mean acceptance length" in stats
    assert all(fig["type"] == "plotly" for fig in (accept, speedup, position, drift, rms))
    assert any(trace["type"] == "bar" for trace in json.loads(accept["plot"])["data"])


def test_the_status_says_which_precision_ran(client: Client) -> None:
    """float32 by default; the bf16 preset says bfloat16, and where its verification cannot be row-exact (a CPU
    without bf16 instructions, or whose bf16 products round a row differently among several: measured when the
    app loads the target) that speculative tokens may differ from plain decoding's."""
    from playground.engine.llama import native_bfloat16

    status, run = (chat(client)[-1][i] for i in (2, -1))
    assert "float32" in status and run["precision"] == "float32"
    assert run["kernels"] and "thread" in run["threads"]  # the live record names the kernels and the thread policy, as
    # --json does, under the same names (run_record.py)
    status, run = (chat(client, preset="smollm2-135m-bf16")[-1][i] for i in (2, -1))
    assert "bfloat16" in status and "finished" in status
    assert native_bfloat16() or "not token-identical" in run["precision"]  # exactness claimed only with bf16 kernels
    status, run = (chat(client, preset="smollm2-135m-int4")[-1][i] for i in (2, -1))
    assert "int4" in status and run["precision"] == "int4" or "not be token-identical" in status, status


def test_adaptive_drafting_reaches_the_engine(client: Client, app_url: str) -> None:
    """min_draft_prob (0 unless given) is part of the run's settings; with it no chain continues past an unlikely
    draft, and the answer is the one plain decoding gives."""
    assert chat(client, min_draft_prob=0.5)[-1][-1]["config"]["min_draft_prob"] == 0.5
    adaptive = json.loads(Path(client.predict(system="", api_name="/export_chat")[0]).read_text())["runs"][0]
    drafting = [s for s in adaptive["steps"] if s["drafted"]]
    assert drafting and all(p >= 0.5 for s in drafting for p in s["draft_probs"][:-1])
    assert any(len(s["drafted"]) < CHAT_DEFAULTS["k"] and s["draft_probs"][-1] < 0.5 for s in drafting)
    plain = chat(Client(app_url, verbose=False), drafter="none")[-1][-1]  # a new session: the same first turn
    assert adaptive["token_ids"] == plain["token_ids"]


def test_a_draft_tree_run_answers_as_plain_decoding_and_shows_its_tree(client: Client, app_url: str) -> None:
    """tree_nodes (0 unless given) drafts a tree of that many nodes, k deep: the answer is plain decoding's, the steps
    carry their trees, at most tree_nodes nodes each, and the cards show the latest step's tree."""
    *_, stats, _, _, _, _, _, record = chat(client, tree_nodes=8)[-1]
    assert record["settings"]["tree_nodes"] == 8 and record["config"]["tree"]["nodes"] == 8
    assert 'id="tree-view"' in stats and "accepted" in stats
    tree = json.loads(Path(client.predict(system="", api_name="/export_chat")[0]).read_text())["runs"][0]
    drafting = [s for s in tree["steps"] if s["drafted"]]
    assert drafting and all(0 < len(s["tree_tokens"]) <= 8 and len(s["tree_path"]) == s["accepted"] for s in drafting)
    first = drafting[0]["step"]
    drawn = client.predict(first, api_name="/tree_of_step")
    assert f"Step {first}:" in drawn and 'id="tree-of-step-view"' in drawn and drawn.count('class="tree-node') == len(
        drafting[0]["tree_tokens"])
    assert "drafted no tree" in client.predict(10_000, api_name="/tree_of_step")
    plain = chat(Client(app_url, verbose=False), drafter="none")[-1][-1]  # a new session: the same first turn
    assert tree["token_ids"] == plain["token_ids"]


def test_a_weightless_method_and_its_settings_are_taken_by_the_api(client: Client, app_url: str) -> None:
    """drafter=suffix with one of its settings by name (the others at the registry's defaults): plain decoding's
    answer, the setting in the run's record, and the drift chart saying why it is empty."""
    *_, drift, _, record = chat(client, drafter="suffix", suffix_decoding_max_tree_depth=12)[-1]
    assert record["drafter"] == "suffix" and dict(record["config"]["method_settings"])[
        "suffix_decoding_max_tree_depth"] == 12
    notes = " ".join(a["text"] for a in json.loads(drift["plot"])["layout"]["annotations"]).replace("<br>", " ")
    assert "suffix decoding max_tree_depth 12, k=4: proposes from the text alone" in notes
    plain = chat(Client(app_url, verbose=False), drafter="none")[-1][-1]
    assert record["token_ids"] == plain["token_ids"]


def test_history_stays_plain_text_and_exports(client: Client) -> None:
    chat(client)
    chat(client, "And then?", chat_template="llama3")
    json_file, csv_file = client.predict(system="", api_name="/export_chat")
    exported = json.loads(Path(json_file).read_text())
    assert [m["role"] for m in exported["messages"]] == ["user", "assistant", "user", "assistant"]
    assert not any("<" in m["content"] and "tok-" in m["content"] for m in exported["messages"])
    assert [r["run"] for r in exported["runs"]] == ["turn 1", "turn 2"] and exported["runs"][1]["steps"]
    assert exported["runs"][1]["settings"]["chat_template"] == "llama3"
    assert Path(csv_file).read_text().startswith("run,drafter,k,step,")
    regenerated = client.submit(**{**CHAT_DEFAULTS, "drafter": "none"}, api_name="/regenerate")
    assert "plain decoding" in regenerated.result(timeout=300)[1]
    runs = json.loads(Path(client.predict(system="", api_name="/export_chat")[0]).read_text())["runs"]
    assert len(runs) == 2 and runs[1]["settings"]["drafter"] == "none"
    client.predict(api_name="/clear")
    with pytest.raises(Exception, match="nothing to export"):
        client.predict(system="", api_name="/export_chat")


def test_the_last_answer_replays_under_every_drafter_and_k(client: Client) -> None:
    """/replay: the chat's last greedy answer under both drafters at every k and two trees; the configuration that
    ran replays to its own acceptance, beside its prediction and its measured speedup. A sampled answer is refused
    in one line."""
    with pytest.raises(Exception, match="nothing to replay yet"):
        client.predict(api_name="/replay")
    run = chat(client)[-1][-1]
    note, chart, table, costs = client.predict(api_name="/replay")
    rows = table["data"]
    lines = [trace["name"] for trace in json.loads(costs["plot"])["data"]]  # the step costs the predictions read
    assert lines == ["target forward over N rows", "EAGLE-3: drafting a chain of k", "EAGLE-3.1: drafting a chain of k"]
    traces = {trace["name"]: trace for trace in json.loads(chart["plot"])["data"]}  # every configuration, charted
    measured = traces.pop("The answer: measured", None)  # a star where the run measured its speedup
    assert set(traces) == {"EAGLE-3, chains", "EAGLE-3.1, chains", "EAGLE-3, trees of 8 / 16 nodes",
                           "EAGLE-3.1, trees of 8 / 16 nodes", "prompt lookup (n-gram), chains",
                           "suffix decoding, chains"}  # early exit is replayed, not priced: no line
    assert [len(traces[f"EAGLE-3{v}, {shape}"]["x"]) for v in ("", ".1")
            for shape in ("chains", "trees of 8 / 16 nodes")] == \
        [7, 2, 7, 2]  # k 1-6 and 8, and trees of 8 and 16 nodes at k = 4
    assert (measured is None) == (run["speedup"] is None), (measured, run["speedup"])
    assert measured is None or (measured["x"] == [4] and measured["y"] == [pytest.approx(run["speedup"])])
    # the table: each drafter's best chain and best tree, each other method's best chain, and what ran
    assert sum("best" in r[0] for r in rows) == 7 and len(rows) <= 8
    ran = next(r for r in rows if "ran" in r[0])
    assert ran[0].startswith("EAGLE-3.1 chain, k = 4 (")
    assert float(ran[1]) == pytest.approx(run["metrics"]["mean_acceptance_length"], abs=0.005)
    assert "The answer ran with EAGLE-3.1, k = 4: predicted" in note and "measured" in note
    assert "Predicted from step costs measured on " in note
    priced = [r for r in rows if not r[0].startswith("early exit")]
    assert all(re.fullmatch(r"\d+\.\d\d× \(\d+\.\d\d–\d+\.\d\d\)", r[2]) for r in priced), rows
    assert [r[2] for r in rows if r[0].startswith("early exit")] == ["—"]  # its drafting is not in the step costs
    exported = json.loads(Path(client.predict(system="", api_name="/export_chat")[0]).read_text())["runs"][-1]
    replayed = exported["replay"]  # the export carries the panel's answer: every configuration
    assert replayed["line"] == note and len(replayed["configs"]) == 2 * (7 + 2) + 3 * 7  # + the other methods' chains
    assert set(replayed["profiles"]) == {"eagle3", "eagle3.1"} and replayed["configs"][0]["predicted_speedup"] > 0
    chat(client, temperature=0.8, seed="3")  # sampled: each drafter's expectation at k = 1 instead
    note, _, table, _ = client.predict(api_name="/replay")
    assert note.startswith("Sampled at temperature 0.8: not replayed") and "The answer ran with EAGLE-3.1" in note
    assert [r[0] for r in table["data"]] == ["EAGLE-3 chain, k = 1 (best)", "EAGLE-3.1 chain, k = 1 (best)"]
    assert all(r[1].endswith(" expected") and 1 <= float(r[1].split()[0]) <= 2 for r in table["data"])


def test_a_comparison_replays_under_every_drafter_and_k_and_sets_each_side_against_its_prediction(
        client: Client) -> None:
    """/replay_compare: the comparison's answer (greedy sides wrote the same text) under both drafters at every k
    and two trees; the line sets each side's measured speedup beside its prediction; both sides' exports carry it."""
    with pytest.raises(Exception, match="nothing to replay yet: run a comparison first"):
        client.predict(api_name="/replay_compare")
    client.predict(PROMPT, **{**COMPARE_DEFAULTS, "right_drafter": "none"}, api_name="/compare")
    note, chart, table, _ = client.predict(api_name="/replay_compare")
    assert 7 <= len(table["data"]) <= 8 and any("left ran" in r[0] for r in table["data"])  # right ran plain
    assert {"EAGLE-3, chains", "EAGLE-3.1, chains"} <= {trace["name"] for trace in json.loads(chart["plot"])["data"]}
    assert "Left ran with EAGLE-3, k = 4: predicted" in note and "measured" in note
    assert "Right ran plain decoding: the baseline every prediction divides by" in note
    exported = json.loads(Path(client.predict(api_name="/export_compare")[0]).read_text())
    assert [run["replay"]["line"] for run in exported["runs"]] == [note, note]


def test_sessions_do_not_share_history(app_url: str) -> None:
    alice, bob = Client(app_url, verbose=False), Client(app_url, verbose=False)
    chat(alice, "Alice asks")
    chat(bob, "Bob asks")
    for client, mine in ((alice, "Alice asks"), (bob, "Bob asks")):
        messages = json.loads(Path(client.predict(system="", api_name="/export_chat")[0]).read_text())["messages"]
        assert [m["content"] for m in messages if m["role"] == "user"] == [mine]


def test_compare_streams_both_sides(client: Client) -> None:
    job = client.submit(PROMPT, **COMPARE_DEFAULTS, api_name="/compare")
    job.result(timeout=300)
    outputs = job.outputs()
    assert len(outputs) >= 2
    left, right, left_stats, right_stats, status, verdict, table, position, drift, speedup = outputs[-1]
    assert "EAGLE-3, k=4" in left and "EAGLE-3.1, k=4" in right
    assert 'class="tok-' in left and 'class="tok-' in right and status.count("finished") == 2
    assert [row[0] for row in table["data"]] == ["EAGLE-3", "EAGLE-3.1"] and "speedup" in table["headers"]
    assert len(json.loads(position["plot"])["data"]) == 2
    files = client.predict(api_name="/export_compare")
    exported = json.loads(Path(files[0]).read_text())
    assert [r["run"] for r in exported["runs"]] == ["left", "right"]
    assert_one_baseline_and_an_honest_verdict(exported)
    assert exported["comparison"]["verdict"]["sentence"] in verdict.replace("&gt;", ">")


def test_compare_puts_a_chain_and_a_tree_of_one_drafter_side_by_side(client: Client) -> None:
    """Each side has its own tree_nodes: a chain and a tree of EAGLE-3.1 give the same greedy answer, each labelled,
    against one baseline; only the tree's steps carry trees."""
    job = client.submit(PROMPT, **{**COMPARE_DEFAULTS, "left_drafter": "eagle3.1", "right_tree_nodes": 8},
                        api_name="/compare")
    job.result(timeout=300)
    left, right, *_, table, _, _, _ = job.outputs()[-1]
    assert "EAGLE-3.1, k=4" in left and "EAGLE-3.1 tree 8, k=4" in right
    assert [row[0] for row in table["data"]] == ["EAGLE-3.1", "EAGLE-3.1 tree 8"]
    exported = json.loads(Path(client.predict(api_name="/export_compare")[0]).read_text())
    chain, tree = exported["runs"]
    assert chain["token_ids"] == tree["token_ids"] and chain["baseline"] == tree["baseline"]
    assert (chain["settings"]["tree_nodes"], tree["settings"]["tree_nodes"]) == (0, 8)
    assert not any(s.get("tree_tokens") for s in chain["steps"])
    assert any(s.get("tree_tokens") for s in tree["steps"])


def assert_one_baseline_and_an_honest_verdict(exported: dict) -> None:
    """A comparison of two drafters on one engine: one baseline, timed alongside both sides, read by both; a verdict
    that names a faster side only where the speedup ranges do not overlap."""
    comparison, (left, right) = exported["comparison"], exported["runs"]
    assert comparison["baseline_shared"] and comparison["baseline"]["timing"] == "alongside the runs"
    assert left["baseline"] == right["baseline"] == comparison["baseline"]
    verdict = comparison["verdict"]
    assert verdict["measured"], verdict
    (a_low, a_high), (b_low, b_high) = left["speedup_range"], right["speedup_range"]
    overlap = a_low <= b_high and b_low <= a_high
    if overlap:
        assert verdict["faster"] is None and "within noise on this machine" in verdict["sentence"]
    else:
        faster = left if left["speedup"] > right["speedup"] else right
        assert verdict["faster"] == f"{DRAFTER_LABELS[faster['settings']['drafter']]}, k={faster['settings']['k']}"


@pytest.mark.parametrize("prompt", ["Write a Python function that checks whether a number is prime.",
                                    "Explain what a hash table is, in three sentences."])
def test_compare_on_the_default_pair_shares_one_baseline_and_names_no_winner_inside_the_noise(
        real_app_url: str, prompt: str) -> None:
    client = Client(real_app_url, verbose=False)
    client.predict(prompt, **{**COMPARE_DEFAULTS, "max_new_tokens": 48}, api_name="/compare")
    assert_one_baseline_and_an_honest_verdict(json.loads(Path(client.predict(api_name="/export_compare")[0])
                                                         .read_text()))


REAL_PROMPT = "Write a long story about a dragon who learns to paint."  # the real pair answers it at length


def stream_until_tokens(job) -> dict:
    """Follow a streaming /chat job until its answer has begun; its live run record then. Updates that leave the
    record as it was carry Gradio's skip marker in its place (it is sent at most once a second)."""
    for output in job:
        record = output[-1]
        if isinstance(record, dict) and "metrics" in record and record["metrics"]["generated_tokens"] > 0:
            return record
    raise AssertionError(f"the answer never began: {job.outputs()[-1:]}")


@contextmanager
def busy_machine(seconds: float = 240.0) -> Iterator[None]:
    """Two CPU-bound processes, one per core, at the app's own priority (it runs niced): a busy machine. Each stops
    by itself after `seconds` if the test does not end it first."""
    hog = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass"
    hogs = [subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", hog]) for _ in range(2)]
    try:
        yield
    finally:
        for process in hogs:
            process.kill()
            process.wait()


def test_stop_ends_long_answers_on_a_busy_machine(real_app_url: str) -> None:
    """On the real pair (the tiny models finish before a Stop can arrive) with both cores kept busy: Stop ends each of
    8 long streaming answers within 3 s of being pressed, and a Send right after it answers."""
    client = Client(real_app_url, verbose=False)
    settings = {**CHAT_DEFAULTS, "max_new_tokens": 1024}
    took_s = []
    with busy_machine():
        for drafter in ["eagle3.1", "eagle3", "none"] * 2 + ["eagle3.1", "eagle3"]:
            job = client.submit(REAL_PROMPT, **{**settings, "drafter": drafter}, api_name="/chat")
            stream_until_tokens(job)
            pressed = time.monotonic()
            client.predict(api_name="/stop")
            job.result(timeout=60)
            took = time.monotonic() - pressed
            took_s.append(f"{drafter} {took:.2f}")
            run = job.outputs()[-1][-1]
            assert run["finish_reason"] == "cancelled" and run["metrics"]["generated_tokens"] < 1024, drafter
            assert took < 3.0, f"{drafter}: the answer ended {took:.1f} s after Stop"
            assert chat(client, "hi", drafter=drafter, max_new_tokens=4)[-1][-1]["metrics"]["generated_tokens"] > 0
            client.predict(api_name="/clear")
    print("seconds from Stop to the answer's end:", ", ".join(took_s))  # shown with pytest -s


def test_stop_cancels_a_queued_run(real_app_url: str) -> None:
    """The app runs one model job at a time: B waits behind A, and B's Stop must cancel B before it starts. On the real
    pair: A must still be answering when B joins the queue, which the tiny models do not promise."""
    first, second = Client(real_app_url, verbose=False), Client(real_app_url, verbose=False)
    running = first.submit(REAL_PROMPT, **{**CHAT_DEFAULTS, "max_new_tokens": 1024}, api_name="/chat")
    stream_until_tokens(running)
    queued = second.submit(REAL_PROMPT, **CHAT_DEFAULTS, api_name="/chat")
    deadline = time.monotonic() + 30  # submit() joins the queue in the background: Stop must come after the join
    while queued.status().code != Status.IN_QUEUE:
        assert time.monotonic() < deadline and not queued.done(), f"not queued: {queued.status().code}"
        time.sleep(0.05)
    second.predict(api_name="/stop")
    first.predict(api_name="/stop")
    running.result(timeout=300)
    started = time.monotonic()
    queued.result(timeout=300)
    assert time.monotonic() - started < 2
    assert queued.outputs() and not any(isinstance(o, tuple) and "metrics" in o[-1] for o in queued.outputs()), \
        "the queued run answered"  # it only sent "leave every output as it was"
    assert chat(second, max_new_tokens=8)[-1][-1]["metrics"]["generated_tokens"] > 0  # a later Send runs normally


def test_clear_during_a_run_leaves_no_hidden_context(real_app_url: str) -> None:
    """Clear while an answer streams: the next message goes out as a fresh one (the same prompt tokens as in a new
    session), Regenerate finds nothing, and the export finds nothing; three times over, since it is a race."""
    fresh = chat(Client(real_app_url, verbose=False), "hi", max_new_tokens=4)[-1][-1]["prompt_tokens"]
    client = Client(real_app_url, verbose=False)
    for _ in range(3):
        job = client.submit(REAL_PROMPT, **{**CHAT_DEFAULTS, "max_new_tokens": 1024}, api_name="/chat")
        stream_until_tokens(job)
        client.predict(api_name="/clear")
        job.result(timeout=60)
        with pytest.raises(Exception, match="nothing to export"):
            client.predict(system="", api_name="/export_chat")
        with pytest.raises(Exception, match="nothing to regenerate"):
            client.predict(**CHAT_DEFAULTS, api_name="/regenerate")
        after = chat(client, "hi", max_new_tokens=4)[-1]
        assert after[-1]["prompt_tokens"] == fresh and [m["role"] for m in after[1]] == ["user", "assistant"]
        client.predict(api_name="/clear")


def test_a_seed_repeats_a_sampled_answer(app_url: str) -> None:
    settings = {"temperature": 1.0, "seed": "1234", "max_new_tokens": 24}
    answers = [chat(Client(app_url, verbose=False), **settings)[-1][-1]["token_ids"] for _ in range(2)]
    assert answers[0] == answers[1]
    assert chat(Client(app_url, verbose=False), **settings)[-1][-1]["settings"]["seed"] == 1234


@pytest.mark.parametrize("change, message", [
    ({"prompt": "   "}, "prompt is empty"),
    ({"k": 0}, "k .* must be between 1 and 16, got 0"),
    ({"k": 17}, "k .* must be between 1 and 16, got 17"),
    ({"max_new_tokens": 0}, "max new tokens must be at least 1, got 0"),
    ({"temperature": -1.0}, "temperature must be >= 0"),
    ({"temperature": 5.0}, "temperature must be in \\[0, 2\\] \\(as vLLM's\\), got 5.0"),
    ({"temperature": 1.0, "seed": "-3"}, "seed must be a whole number from 0"),
    ({"drafter": "medusa"}, "medusa"),
    ({"chat_template": "chatml"}, "chatml"),
    ({"temperature": 1.0, "seed": "2.5"}, "seed must be a whole number"),
    ({"temperature": 1.0, "seed": "abc"}, "seed must be a whole number"),
    ({"temperature": 1.0, "seed": "<img src=x onerror=alert(1)>"}, "got '&lt;img src=x onerror=alert\\(1\\)>'"),
    ({"k": 2.5}, "k must be a whole number"),
    ({"prompt": "word " * 6000}, "the prompt has .* tokens"),
    ({"preset": "remote"}, "PLAYGROUND_REMOTE_URL"),  # a preset that cannot run here (no server configured)
    ({"tree_nodes": 300}, "the draft tree's nodes must be from 0 \\(a chain\\) to 256, got 300"),
    ({"tree_nodes": 8, "min_draft_prob": 0.3}, "applies to chains, not to draft trees"),
    ({"drafter": "suffix", "suffix_decoding_max_tree_depth": 100}, "must be from 2 to 64, got 100"),
    ({"drafter": "ngram", "prompt_lookup_min": 6, "prompt_lookup_max": 3}, "prompt_lookup_min .* must not exceed"),
    ({"drafter": "ngram", "tree_nodes": 8}, "prompt lookup .* drafts chains"),
])
def test_bad_input_gets_a_clear_message(client: Client, app_log: Path, change: dict, message: str) -> None:
    args = {"prompt": PROMPT, **CHAT_DEFAULTS, "max_new_tokens": 4, **change}
    with pytest.raises(Exception, match=message):
        client.predict(**args, api_name="/chat")
    assert chat(client, max_new_tokens=4)[-1][-1]["metrics"]["generated_tokens"] > 0  # still serving
    assert "Traceback" not in app_log.read_text()  # a user's mistake is one log line, not a traceback


def test_engine_errors_become_messages_not_crashes() -> None:
    from playground.ui.refusals import report_user_errors

    @report_user_errors
    def handler():
        yield "first"
        raise CheckpointError("drafter does not fit the target: drafter vocab_size 401 != target vocab_size 400")

    stream = handler()
    assert next(stream) == "first"
    with pytest.raises(gr.Error, match="does not fit"):
        next(stream)


def test_an_own_pair_is_fingerprinted_from_the_panel_and_its_runs_are_then_checked(app_url: str, tiny,
                                                                                   tmp_path: Path) -> None:
    """/fingerprint_pair: the loaded pair's drafters measured (a copy of the tests' tiny pair, so the fingerprints
    are written beside drafters no other test reads), each fingerprint.json beside its drafter; a chat with the pair
    is then held against it. Without a loaded pair it is refused in one line."""
    import shutil

    client = Client(app_url, verbose=False)
    with pytest.raises(Exception, match="load a pair first"):
        client.predict("", api_name="/fingerprint_pair")
    for part in ("eagle3", "eagle3.1"):
        shutil.copytree(tiny.root / part, tmp_path / part)
    name, *_ = client.predict(str(tiny.root / "target"), str(tmp_path / "eagle3"), str(tmp_path / "eagle3.1"),
                              api_name="/load_pair")
    status = client.predict(name, api_name="/fingerprint_pair")
    assert status.startswith("Fingerprinted: EAGLE-3: ") and "EAGLE-3.1: " in status
    for part in ("eagle3", "eagle3.1"):
        assert str(tmp_path / part / "fingerprint.json") in status and (tmp_path / part / "fingerprint.json").is_file()
    run = chat(Client(app_url, verbose=False), "Say something.", preset=name, drafter="eagle3.1",
               max_new_tokens=48)[-1][-1]
    assert run["health"]["status"] != "not checked", run["health"]["text"]


def test_load_pair_of_ones_own_folders_answers_losslessly_and_refuses_a_misfit(app_url: str, tiny,
                                                                              tmp_path: Path) -> None:
    """/load_pair on folders the repository does not ship: the tests' random tiny Llama with its drafters in all three
    layouts (EAGLE-3 official then vLLM-export, EAGLE-3.1 speculators), and the shipped kimi-tiny MLA + MoE pair. Each
    becomes a preset that /chat takes, and its greedy EAGLE answers equal its plain one (the drafters drafted; on these
random tiny models few drafts are accepted on a chat prompt, none for some). A drafter
    that does not fit the target (another model's), and a revision for a folder, are refused in one line each, and the
    app's default pair answers right after."""
    from tests.support.checkpoints import write_layout

    client = Client(app_url, verbose=False)
    speculators = write_layout(tiny, tmp_path / "eagle3.1-speculators", "eagle3.1", "speculators")
    vllm_export = write_layout(tiny, tmp_path / "eagle3-vllm", "eagle3", "vllm")
    kimi = REPO_ROOT / "assets" / "models" / "kimi-tiny"
    pairs = [(str(tiny.root / "target"), str(tiny.root / "eagle3"), str(speculators), ("eagle3.1", "eagle3")),
             (str(tiny.root / "target"), str(vllm_export), "", ("eagle3",)),
             (str(kimi / "target"), "", str(kimi / "eagle3.1"), ("eagle3.1",))]
    names = set()
    for target, eagle3, eagle3_1, drafters in pairs:
        name, status, *_ = client.predict(target, eagle3, eagle3_1, api_name="/load_pair")
        assert name.startswith(f"own:{Path(target).name}@") and "Loaded" in status
        names.add(name)
        plain = chat(Client(app_url, verbose=False), "Say something.", preset=name, drafter="none",
                     max_new_tokens=24)[-1][-1]["token_ids"]
        for drafter in drafters:  # each chat in a new session (a fresh Client): no history before the prompt
            run = chat(Client(app_url, verbose=False), "Say something.", preset=name, drafter=drafter,
                       max_new_tokens=24)[-1][-1]
            assert run["token_ids"] == plain, (name, drafter)
            assert run["metrics"]["drafted_tokens"] > 0 and run["settings"]["preset"] == name
    assert len(names) == 3  # two pairs of one target are two presets
    for args, refusal in [((str(tiny.root / "target"), "", str(kimi / "eagle3.1")), "does not fit target"),
                          ((str(tiny.root / "target"), str(vllm_export), "", "main"), "the target is a folder")]:
        with pytest.raises(Exception) as refused:
            client.predict(*args, api_name="/load_pair")
        assert refusal in str(refused.value) and "\n" not in str(refused.value).strip()
    assert chat(client, "hi", max_new_tokens=4)[-1][-1]["metrics"]["generated_tokens"] > 0
