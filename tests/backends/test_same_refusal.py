"""Each refusal is worded once, where its rule lives, and every entry point only displays it: the same bad request
asked of `python -m playground generate` (in process), the app's Chat turn (through the wrapper that turns a refusal
into the browser's message), the server (its requests, or `serve` itself for what is fixed when it starts) reads the
same sentence. Over the tiny pair as the default preset's models."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import gradio as gr
import pytest

from playground.__main__ import main
from playground.engine.config import max_new_tokens_problem, seed_problem, temperature_problem, top_p_problem
from playground.engine.loop import EMPTY_PROMPT, prompt_problem
from playground.playback import MAX_NEW_TOKENS, RunSettings
from playground.playback.session import Conversation, chat_turn
from playground.ui.refusals import report_user_errors

LONG_PROMPT = "word " * 6000  # past the tiny target's 512 positions
KIMI_DRAFTER = Path(__file__).resolve().parents[2] / "assets" / "models" / "kimi-tiny" / "eagle3.1"  # another model's


@pytest.fixture(scope="module")
def server(pair_models: Path) -> Iterator:
    """The server's app in process (fastapi's TestClient), over the default preset's tiny pair."""
    from fastapi.testclient import TestClient

    from playground.presets import get_preset
    from playground.serve.app import build_app
    from playground.serve.engine import load_engine

    with TestClient(build_app(load_engine(get_preset("smollm2-135m"), "eagle3.1", 4, None))) as client:
        yield client


def cli(capsys: pytest.CaptureFixture, command: str, *argv: str) -> str:
    """The one `error:` line a command refuses with, without its prefix."""
    capsys.readouterr()
    assert main([command, *argv]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0].removeprefix("error: ")


def serve_start(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, *argv: str) -> str:
    """What `serve ARGV` refuses with as it starts; a server that would start instead fails the test."""
    import playground.serve.cli as serve_cli

    def started(*args: object) -> None:
        raise AssertionError("the server started instead of refusing")

    monkeypatch.setattr(serve_cli, "_serve_on", started)
    return cli(capsys, "serve", "--port", "0", *argv)


def app(prompt: str, **settings: object) -> str:
    """The message the app shows for a Chat turn (report_user_errors, as the Chat tab wires it)."""
    with pytest.raises(gr.Error) as refused:
        list(report_user_errors(chat_turn)(Conversation(), prompt, RunSettings(**settings), lambda: False))
    return refused.value.message


def server_says(client, body: dict) -> str:
    answer = client.post("/v1/completions", json={"max_tokens": 4, **body})
    assert answer.status_code == 400, answer.text
    return answer.json()["error"]["message"]


def test_an_empty_prompt(pair_models: Path, server, capsys: pytest.CaptureFixture) -> None:
    """Nothing, or only spaces: nothing to answer (engine/loop.py's prompt_text_problem)."""
    for prompt in ("", "  \n\t"):
        assert cli(capsys, "generate", "--prompt", prompt) == EMPTY_PROMPT
        assert app(prompt) == EMPTY_PROMPT
        assert server_says(server, {"prompt": prompt}) == f"prompt: {EMPTY_PROMPT}"
    assert server_says(server, {"prompt": []}) == f"prompt: {EMPTY_PROMPT}"  # no token ids either
    chat = server.post("/v1/chat/completions", json={"max_tokens": 4, "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
        {"role": "user", "content": " \n"}]})  # the turn asked now: a Chat turn of spaces is refused too
    assert chat.status_code == 400 and chat.json()["error"]["message"] == f"messages: {EMPTY_PROMPT}"


def test_max_new_tokens_out_of_range(pair_models: Path, server, capsys: pytest.CaptureFixture) -> None:
    """One rule (engine/config.py's max_new_tokens_problem) for the CLI, the app, and the server's max_tokens and
    max_completion_tokens; the app alone bounds it above (its slider's MAX_NEW_TOKENS), in the same words."""
    problem = max_new_tokens_problem(0)
    assert problem == "max new tokens must be at least 1, got 0"
    assert cli(capsys, "generate", "--prompt", "hi", "--max-new-tokens", "0") == problem
    assert app("hi", max_new_tokens=0) == problem
    assert server_says(server, {"prompt": "hi", "max_tokens": 0}) == f"max_tokens: {problem}"
    chat = server.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                     "max_completion_tokens": 0})
    assert chat.status_code == 400 and chat.json()["error"]["message"] == f"max_completion_tokens: {problem}"
    too_many = MAX_NEW_TOKENS + 1
    assert app("hi", max_new_tokens=too_many) == max_new_tokens_problem(too_many, MAX_NEW_TOKENS) == (
        f"max new tokens must be at most {MAX_NEW_TOKENS}, got {too_many}")


def test_a_prompt_past_the_context(pair_models: Path, server, capsys: pytest.CaptureFixture) -> None:
    """The three count the prompt's tokens differently (a chat template or none), so the sentence is compared with
    its numbers as prompt_problem words them."""
    said = [cli(capsys, "generate", "--prompt", LONG_PROMPT, "--max-new-tokens", "4"),
            app(LONG_PROMPT, max_new_tokens=4), server_says(server, {"prompt": LONG_PROMPT})]
    for sentence in said:
        tokens = int(re.match(r"the prompt has (\d+) tokens", sentence).group(1))
        assert sentence == prompt_problem(tokens, 512), said


@pytest.mark.parametrize("flag, field, value, problem", [
    ("--temperature", "temperature", -1.0, temperature_problem(-1.0)),
    ("--top-p", "top_p", 0.0, top_p_problem(0.0)),
    ("--seed", "seed", -3, seed_problem(-3)),
])
def test_sampling_options_out_of_range(pair_models: Path, server, capsys: pytest.CaptureFixture, flag: str,
                                       field: str, value: float, problem: str) -> None:
    sampled = {"temperature": 1.0} if field == "seed" else {}  # a seed is for sampling
    assert cli(capsys, "generate", "--prompt", "hi", flag, str(value), *("--temperature", "1") * bool(sampled)) \
        == problem
    assert app("hi", **{**sampled, field: value}) == problem
    assert server_says(server, {"prompt": "hi", field: value}) == f"{field}: {problem}"


@pytest.mark.parametrize("argv, settings", [
    (("--k", "0"), {"k": 0}),  # k out of range: drafting.k_problem
    (("--drafter", "medusa"), {"drafter": "medusa"}),  # a drafter the preset does not have: request.check_run
    (("--k", "auto", "--tree-nodes", "8"), {"k_auto": True, "tree_nodes": 8}),  # k auto prices chains: request/check
])
def test_what_the_server_fixes_as_it_starts(pair_models: Path, capsys: pytest.CaptureFixture,
                                            monkeypatch: pytest.MonkeyPatch, argv: tuple[str, ...],
                                            settings: dict) -> None:
    said = cli(capsys, "generate", "--prompt", "hi", *argv)
    assert serve_start(capsys, monkeypatch, *argv) == said
    assert app("hi", **settings) == said


def test_a_k_that_is_not_a_number(capsys: pytest.CaptureFixture) -> None:
    """`generate` and `serve` read --k with one function (flags.k_or_auto): one sentence for both."""
    with pytest.raises(SystemExit):
        main(["generate", "--k", "four"])
    generate_says = capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["serve", "--k", "four"])
    serve_says = capsys.readouterr().err
    why = "argument --k: a whole number from 1 to 16 or auto, got 'four'"
    assert why in generate_says and why in serve_says


def test_a_drafter_that_does_not_fit(pair_models: Path, capsys: pytest.CaptureFixture,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Another model's drafter given with the tiny target: `generate` and `serve` (a drafter folder) and the app's
    own-pair panel refuse it from the configs (request/fit.py), before anything loads, in the same words."""
    from playground.own_pair import load_own_pair

    target, drafter = str(pair_models / "target"), str(KIMI_DRAFTER)
    argv = ("--target", target, "--drafter-path", drafter)
    said = cli(capsys, "generate", "--prompt", "hi", *argv)
    assert said.startswith(f"drafter {drafter} does not fit target {target}: "), said
    assert serve_start(capsys, monkeypatch, *argv) == said

    def load_pair() -> Iterator[object]:
        yield load_own_pair(target, {"eagle3.1": drafter})

    with pytest.raises(gr.Error) as refused:
        list(report_user_errors(load_pair)())
    assert refused.value.message == said
