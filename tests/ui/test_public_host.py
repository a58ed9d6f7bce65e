"""A public host (a Space, or PLAYGROUND_PUBLIC=1): the Benchmark tab and its /bench API run only profiles measured on
this kind of machine to finish within PLAYGROUND_PUBLIC_BENCH_S; a refused one gets one line saying why. Off a public
host every profile runs. And the Chat tab's example prompts: measured, and wired to the prompt box."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import gradio as gr
import pytest

from playground.bench import present, public
from playground.bench.profiles import DURATIONS, app_profiles, measured_durations, profiles
from playground.bench.public import BenchRefused, Machine
from playground.presets import DEFAULT, get_preset

HERE = Machine("Test EPYC", 2, "AVX2")
ELSEWHERE = Machine("Test Xeon", 2, "AVX-512")


def _entry(seconds: float, machine: Machine, **more) -> dict:
    return {"seconds": seconds, "cpu": machine.cpu, "cores": machine.cores, "simd": machine.simd,
            "date": "2026-01-01", "command": "python -m playground bench --profile x", **more}


@pytest.fixture
def durations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """smoke 100 s here; default 300 s here; drift 60 s, but on another machine. This machine is HERE."""
    path = tmp_path / "durations.json"
    path.write_text(json.dumps({"profiles": {"smoke": _entry(100, HERE), "default": _entry(300, HERE),
                                             "drift": _entry(60, ELSEWHERE)}}))
    monkeypatch.setattr(public, "DURATIONS", path)
    monkeypatch.setattr(public, "this_machine", lambda: HERE)
    return path


@pytest.fixture
def space(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPACE_ID", "someone/eagle-playground")
    monkeypatch.delenv(public.BOUND_ENV, raising=False)


@pytest.fixture
def private(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SPACE_ID", "PLAYGROUND_PUBLIC", public.BOUND_ENV):
        monkeypatch.delenv(name, raising=False)


def _why(verdicts) -> dict[str, tuple[bool, str]]:
    return {v.profile: (v.offered, v.why) for v in verdicts}


def test_a_space_offers_the_profiles_under_the_bound_and_says_why_not_the_others(durations, space) -> None:
    assert public.bench_bound_s() == public.DEFAULT_BOUND_S == 240
    assert _why(public.verdicts(DEFAULT)) == {
        "smoke": (True, "1 min 40 s measured here"),
        "default": (False, "5 min measured here, over the bound"),
        "drift": (False, "not measured here: 1 min on a 2-core Test Xeon (AVX-512)"),  # fast, but elsewhere
    }
    assert public.offered_profiles(DEFAULT) == ["smoke"]
    public.check_offered("smoke", DEFAULT)  # no refusal
    with pytest.raises(BenchRefused) as refused:
        public.check_offered("default", DEFAULT)
    message = str(refused.value)
    assert "\n" not in message and "within 4 min (PLAYGROUND_PUBLIC_BENCH_S=240)" in message
    assert "default (5 min measured here, over the bound)" in message and "Offered on smollm2-135m: smoke." in message
    # another preset (a visitor's own pair, say) was not measured: nothing runs on it
    assert _why(public.verdicts("own:big@abc"))["smoke"] == (False, "not measured on own:big@abc: 1 min 40 s on "
                                                                    "smollm2-135m")
    with pytest.raises(BenchRefused, match="None is offered on own:big@abc"):
        public.check_offered("smoke", "own:big@abc")
    note = public.public_note(DEFAULT)
    assert "Offered: smoke (1 min 40 s measured here)." in note
    assert "default (5 min measured here, over the bound) · drift (not measured here" in note


def test_the_owner_sets_the_bound_and_a_bad_value_keeps_the_default(durations, space,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(public.BOUND_ENV, "600")
    assert public.offered_profiles(DEFAULT) == ["smoke", "default"]  # drift: still not measured here
    monkeypatch.setenv(public.BOUND_ENV, "60")
    assert public.offered_profiles(DEFAULT) == []
    for bad in ("three minutes", "-5", "0", "inf", "nan"):
        monkeypatch.setenv(public.BOUND_ENV, bad)
        assert public.bench_bound_s() == public.DEFAULT_BOUND_S, bad
    monkeypatch.delenv("SPACE_ID")
    monkeypatch.setenv("PLAYGROUND_PUBLIC", "1")  # the owner's own switch for a public host that is not a Space
    assert public.offered_profiles(DEFAULT) == ["smoke"]


def test_an_unmeasured_profile_counts_as_over_the_bound(durations, space) -> None:
    durations.write_text(json.dumps({"profiles": {"smoke": _entry(100, HERE)}}))
    assert _why(public.verdicts(DEFAULT))["drift"] == (False, "not measured")
    with pytest.raises(BenchRefused, match=r"; drift \(not measured\)\. Offered on smollm2-135m: smoke\."):
        public.check_offered("drift", DEFAULT)


def test_off_a_public_host_every_profile_runs(durations, private) -> None:
    assert public.bench_bound_s() is None
    assert public.offered_profiles(DEFAULT) == app_profiles()
    assert public.offered_profiles("own:big@abc") == app_profiles()
    for name in profiles():
        public.check_offered(name, DEFAULT)
    assert public.public_note(DEFAULT) == ""


def test_the_committed_drift_study_is_over_the_default_bound_on_its_own_machine(space) -> None:
    """The real figures: on the machine the drift study was measured on, its 12 minutes are over the bound; the
    committed smoke figure is under it on its own machine."""
    measured = measured_durations(DURATIONS)
    drift, smoke = measured["drift"], measured["smoke"]
    verdict = public.judge("drift", DEFAULT, public.bench_bound_s(), drift, Machine(drift.cpu, drift.cores, drift.simd))
    assert not verdict.offered and verdict.why == "12 min measured here, over the bound"
    assert public.judge("smoke", DEFAULT, public.bench_bound_s(), smoke,
                        Machine(smoke.cpu, smoke.cores, smoke.simd)).offered


def _component(demo: gr.Blocks, elem_id: str):
    return next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == elem_id)


def _bench_tab() -> gr.Blocks:
    from playground.ui.bench import build_bench_tab

    with gr.Blocks() as demo:
        build_bench_tab(get_preset(DEFAULT))
    return demo


def test_the_bench_tab_on_a_space_lists_only_what_it_runs(durations, space) -> None:
    demo = _bench_tab()
    assert [name for _, name in _component(demo, "bench-profile").choices] == ["smoke"]
    assert _component(demo, "bench-profile").value == "smoke"
    note = _component(demo, "bench-public")
    assert note.visible and "default (5 min measured here, over the bound)" in note.value
    assert _component(demo, "bench-run").interactive


def test_the_bench_tab_off_a_public_host_is_unchanged(durations, private) -> None:
    demo = _bench_tab()
    assert [name for _, name in _component(demo, "bench-profile").choices] == app_profiles()
    assert _component(demo, "bench-profile").value == "smoke"
    assert not _component(demo, "bench-public").visible


def test_a_space_with_nothing_under_the_bound_offers_no_run(durations, space, monkeypatch) -> None:
    monkeypatch.setenv(public.BOUND_ENV, "30")
    demo = _bench_tab()
    assert _component(demo, "bench-profile").choices == [] and _component(demo, "bench-profile").value is None
    assert not _component(demo, "bench-run").interactive
    assert "Offered: none." in _component(demo, "bench-public").value


def _must_not_run(*args, **kwargs):
    raise AssertionError("a refused profile started")


def test_a_refused_run_is_one_line_before_anything_starts(durations, space, monkeypatch) -> None:
    """The tab's handler (the /bench API) refuses with a gr.Error of one line; no bench thread starts."""
    from playground.ui.bench import run_profile_for_tab

    monkeypatch.setattr(present, "run_and_view", _must_not_run)
    with pytest.raises(gr.Error) as refused:
        list(run_profile_for_tab("drift", DEFAULT, 0.0, None))
    assert "\n" not in refused.value.message and "drift (not measured here: 1 min on a 2-core Test Xeon" in (
        refused.value.message)
    with pytest.raises(BenchRefused):
        next(present.stream_run("default", DEFAULT))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_bench_api_refuses_in_one_line_and_keeps_serving(durations, space, monkeypatch) -> None:
    """Through gradio_client against the tab served in this process: the refusal is the error's whole text, and the
    app answers the next request."""
    from gradio_client import Client

    monkeypatch.setattr(present, "run_and_view", _must_not_run)
    demo = _bench_tab()
    demo.queue().launch(server_name="127.0.0.1", server_port=_free_port(), prevent_thread_lock=True, quiet=True)
    try:
        client = Client(demo.local_url, verbose=False)
        for _ in range(2):  # the second one shows that the first left the app serving
            with pytest.raises(Exception) as refused:
                client.predict("default", DEFAULT, 0.0, api_name="/bench")
            message = str(refused.value)
            assert "default (5 min measured here, over the bound)" in message and "Traceback" not in message
            assert "\n" not in message.strip()
        client.predict(api_name="/stop_bench")  # and another endpoint answers
    finally:
        demo.close()


def test_a_space_does_not_fingerprint_a_visitors_pair(space) -> None:
    """Fingerprinting holds the machine for minutes: a public host hides the button and its API refuses in one line."""
    import gradio as gr
    from gradio_client import Client

    from playground.ui.own_pair import pair_panel, wire_pair_panel

    with gr.Blocks() as demo:
        panel = pair_panel()
        wire_pair_panel(panel, [])
    assert panel.fingerprint.visible is False
    demo.queue().launch(server_name="127.0.0.1", server_port=_free_port(), prevent_thread_lock=True, quiet=True)
    try:
        with pytest.raises(Exception) as refused:
            Client(demo.local_url, verbose=False).predict("own:anything", api_name="/fingerprint_pair")
        message = str(refused.value)
        assert "a public host does not fingerprint drafters" in message and "\n" not in message.strip()
    finally:
        demo.close()


# --- the Chat tab's example prompts ------------------------------------------------------------------------------

def test_the_examples_were_measured_to_show_both_sides() -> None:
    """At least one where EAGLE-3.1 drafts well and one where it does not, each with its figure (at most k + 1 = 5
    tokens per step at k = 4) from the committed landing file in its label, the line naming the file's kind and
    date."""
    from playground.bench.landing import chat_examples_figures, landing_records
    from playground.examples import CHAT_EXAMPLES
    from playground.ui.chat import example_labels

    line, lengths_by_prompt = chat_examples_figures(landing_records())
    lengths = [lengths_by_prompt[e.prompt] for e in CHAT_EXAMPLES]
    assert all(1.0 <= n <= 5.0 for n in lengths) and len({e.prompt for e in CHAT_EXAMPLES}) == len(CHAT_EXAMPLES)
    assert sum(n >= 3.0 for n in lengths) >= 2 and sum(n <= 2.0 for n in lengths) >= 1
    assert example_labels() == (line, [f"{e.title} · {n:.2f} tokens/step" for e, n in zip(CHAT_EXAMPLES, lengths)])
    assert all(len(label) <= 60 for label in example_labels()[1])  # the page cuts a longer label short
    assert " CPU (" in line and any(record["date"] in line for record in landing_records())


def _chat_tab() -> gr.Blocks:
    from playground.ui.chat import build_chat_tab

    with gr.Blocks() as demo:
        build_chat_tab(get_preset(DEFAULT), demo)
    return demo


def test_the_examples_fill_the_chat_prompt_box() -> None:
    """The examples' dataset sits in the Chat tab, holds the prompts, and its click writes into the prompt box (and
    nothing else: the visitor presses Send); it adds no API endpoint."""
    from playground.examples import CHAT_EXAMPLES
    from playground.ui.chat import example_labels

    demo = _chat_tab()
    dataset, prompt = _component(demo, "chat-examples"), _component(demo, "prompt")
    assert isinstance(dataset, gr.Dataset) and [s[0] for s in dataset.samples] == [e.prompt for e in CHAT_EXAMPLES]
    assert dataset.sample_labels == example_labels()[1]
    loads = [d for d in demo.fns.values() if any(t[0] == dataset._id for t in d.targets)]
    assert loads and all([o._id for o in d.outputs] == [prompt._id] for d in loads)
    assert all(d.api_visibility == "private" for d in loads)


@pytest.mark.browser
def test_clicking_an_example_fills_the_prompt_box_in_chromium() -> None:
    """The same in the page: a click on the second example puts its prompt in the box."""
    from playground.examples import CHAT_EXAMPLES
    from playground.ui.chat import example_labels
    from tests.support.browser import CHROMIUM, CHROMIUM_ARGS

    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium")
    from playwright.sync_api import sync_playwright

    demo = _chat_tab()
    demo.queue().launch(server_name="127.0.0.1", server_port=_free_port(), prevent_thread_lock=True, quiet=True)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
            page = browser.new_page()
            page.goto(demo.local_url, timeout=120_000)
            page.locator("#chat-examples").get_by_text(example_labels()[1][1]).click(timeout=60_000)
            page.wait_for_function("(want) => document.querySelector('#prompt textarea').value === want",
                                   arg=CHAT_EXAMPLES[1].prompt, timeout=30_000)
            browser.close()
    finally:
        demo.close()
