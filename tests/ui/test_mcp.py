"""The app's MCP tools, called by the `mcp` package's own client over streamable HTTP against the running app
(app.py on the tiny pair): listed with their documentation, each called, a bad input answered in words, and the app
still serving after it."""

from __future__ import annotations

import asyncio
import json

import httpx
from mcp import Client

from playground.agent.server import MCP_PATH

PROMPT = "Write a short poem about the sea."


def _call(url: str, calls: list[tuple[str, dict]]) -> tuple[list, list]:
    async def run() -> tuple[list, list]:
        async with Client(url.rstrip("/") + MCP_PATH + "/", read_timeout_seconds=600) as client:
            tools = (await client.list_tools()).tools
            results = [await client.call_tool(name, arguments) for name, arguments in calls]
            return tools, results
    return asyncio.run(run())


def _result(result) -> dict:
    assert not result.is_error, result.content[0].text
    structured = result.structured_content
    if structured is not None and set(structured) == {"result"}:  # a dict return wrapped by the SDK
        structured = structured["result"]
    return structured if structured is not None else json.loads(result.content[0].text)


def test_a_real_mcp_client_lists_documented_tools_and_gets_measured_answers(app_url: str) -> None:
    tools, (facts, answered, empty, after, too_long) = _call(app_url, [
        ("machine_facts", {}),
        ("answer", {"prompt": PROMPT, "method": "eagle3.1", "k": 3, "max_new_tokens": 48}),
        ("answer", {"prompt": "   "}),
        ("answer", {"prompt": PROMPT, "method": "none", "k": 1, "max_new_tokens": 16}),
        ("answer", {"prompt": PROMPT, "max_new_tokens": 100_000}),
    ])
    by_name = {tool.name: tool for tool in tools}
    assert {"answer", "compare", "replay", "machine_facts"} <= set(by_name)
    for tool in by_name.values():
        assert len(tool.description) > 200, f"{tool.name} is not documented for an agent"
    assert by_name["answer"].input_schema["properties"]["max_new_tokens"]["type"] == "integer"

    facts = _result(facts)
    assert facts["cpu_kind"] and facts["presets"] and facts["default_preset"] in [p["name"] for p in facts["presets"]]
    assert "eagle3.1" in next(p for p in facts["presets"] if p["name"] == facts["default_preset"])["methods"]

    run = _result(answered)
    assert run["method"] == "eagle3.1" and run["k"] == 3 and run["tokens"] > 0 and run["text"]
    assert run["mean_acceptance_length"] >= 1 and len(run["acceptance_by_position"]) == 3
    assert run["tokens_per_second"] > 0 and run["cpu_kind"] == facts["cpu_kind"]
    assert (run["speedup"] is None) == (run["speedup_range"] is None)
    assert run["speedup"] is not None or run["speedup_not_measured"]

    assert empty.is_error and "empty" in empty.content[0].text.lower()
    assert "Traceback" not in empty.content[0].text
    assert too_long.is_error and "max_new_tokens" in too_long.content[0].text
    plain = _result(after)  # the app answers the next call after a refused one
    assert plain["method"] == "none" and plain["tokens"] > 0 and plain["speedup"] is None
    assert httpx.get(app_url, timeout=30).status_code == 200  # and its page still serves


def test_the_compare_and_replay_tools_answer(app_url: str) -> None:
    _, (compared, replayed) = _call(app_url, [
        ("compare", {"prompt": PROMPT, "left_method": "eagle3", "right_method": "eagle3.1", "left_k": 2,
                     "right_k": 2, "max_new_tokens": 40}),
        ("replay", {"prompt": PROMPT, "max_new_tokens": 40}),
    ])
    compared = _result(compared)
    assert compared["left"]["method"] == "eagle3" and compared["right"]["method"] == "eagle3.1"
    assert compared["shared_baseline"] and compared["verdict"]
    assert compared["left"]["text"] == compared["right"]["text"]  # greedy: both equal plain decoding's answer

    replayed = _result(replayed)
    methods = {row["drafter"] for row in replayed["configs"]}
    assert {"eagle3", "eagle3.1", "suffix"} <= methods and replayed["text"]
    assert all(row["acceptance_length"] is None or row["acceptance_length"] >= 1 for row in replayed["configs"])
    assert replayed["recommended"]["method"] in methods | {"none"} and replayed["why"]
