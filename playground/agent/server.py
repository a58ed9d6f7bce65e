"""The tools served over MCP's streamable HTTP transport inside the app, at /gradio_api/mcp/ (where Gradio serves
its own): `mcp_middleware()` gives the Gradio app an ASGI middleware that hands that path to the MCP server, and a
lifespan that runs the server's session manager.

Gradio's `launch(mcp_server=True)` is not used: its `mcp` extra pins mcp<2, while vLLM's CPU build needs mcp>=2,
and with mcp 2 installed Gradio's MCP server fails to start (no `call_tool`). This uses the mcp 2 SDK's own server.
Each tool runs in a worker thread, so a run never blocks the page's event loop."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Receive, Scope, Send

from . import tools

MCP_PATH = "/gradio_api/mcp"

INSTRUCTIONS = (
    "EAGLE Playground measures speculative decoding on the machine it runs on: which drafting method (EAGLE-3, "
    "EAGLE-3.1, prompt lookup, suffix decoding, early exit) and which k make this target faster than its own plain "
    "decoding, on this CPU, for a given text. Speedups are measured (decode rate over plain decoding of the same "
    "prompt, timed alongside) with a 95 % interval; a range that holds 1.0 is within noise. Greedy speculative "
    "answers are token-identical to plain decoding's. One run at a time: a call waits for the model.")


async def _in_thread(work, *args: Any) -> dict:
    """`work(*args)` in a worker thread; a refused input (ValueError: one sentence) as the tool's error."""
    try:
        return await anyio.to_thread.run_sync(lambda: work(*args))
    except ValueError as err:
        raise ToolError(str(err)) from None


def build_server(line: tools.ModelLine) -> MCPServer:
    server = MCPServer("eagle-playground", instructions=INSTRUCTIONS)

    @server.tool()
    async def answer(prompt: str, method: str = "auto", k: int | str = "auto", max_new_tokens: int = 128,
                     temperature: float = 0.0) -> dict[str, Any]:
        """Answer one prompt with the default target and a drafting method, and measure what it bought.

        method: "auto" (the method and k predicted fastest here, plain decoding where none pays), "none" (plain
        decoding), "eagle3", "eagle3.1", "prompt-lookup", "suffix" or "early-exit" (machine_facts lists each preset's
        methods). k: draft tokens per step (1-16) or "auto". max_new_tokens: at most 512 (256 on a public host).
        temperature 0 is greedy (the answer equals plain decoding's); above 0 samples exactly.

        Returns the answer's text; which method and k ran (and why, for auto) on which weights and CPU kind; decode
        tokens per second; `speedup` over plain decoding of the same prompt timed alongside, with its 95 %
        `speedup_range` and a `verdict` sentence (null with `speedup_not_measured` when the answer was too short to
        time); `mean_acceptance_length` (tokens per target forward) and `acceptance_by_position` (the share of steps
        whose draft at depth i was accepted)."""
        return await _in_thread(tools.answer, line, prompt, method, k, max_new_tokens, temperature)

    @server.tool()
    async def compare(prompt: str, left_method: str, right_method: str, left_k: int | str = "auto",
                      right_k: int | str = "auto", max_new_tokens: int = 128) -> dict[str, Any]:
        """Run two configurations on one prompt, greedy, steps alternating, each against one plain-decoding baseline
        timed alongside both (the app's Compare tab). Methods and k as for `answer`, e.g. left "eagle3", right
        "eagle3.1", both k 4.

        Returns each side's summary (as `answer` returns it) and a `verdict`: a side is called faster only where the
        two speedup ranges do not overlap; otherwise the difference is within noise."""
        return await _in_thread(tools.compare_two, line, prompt, left_method, right_method, left_k, right_k,
                                max_new_tokens)

    @server.tool()
    async def replay(prompt: str, max_new_tokens: int = 128) -> dict[str, Any]:
        """Decode one prompt plainly (greedy), then replay that answer under every method the default preset offers,
        at several k and draft trees, and predict each one's speedup on this machine from step costs measured here.

        A greedy replay is exact: each configuration's acceptance is what it would have accepted on this answer.
        The predicted speedups are predictions (from measured step costs), not measurements. Returns every
        configuration (`acceptance_length`, `predicted_speedup`, `predicted_range`), the `recommended` one (plain
        decoding where no configuration's predicted range lies above 1.0) and a sentence on what the costs read."""
        return await _in_thread(tools.replay, line, prompt, max_new_tokens)

    @server.tool()
    async def machine_facts() -> dict[str, Any]:
        """The machine the playground runs on and what it offers: the CPU kind (vector and matrix units, which
        decide what speculation buys), the presets (target, engine, drafting methods), and the committed benchmark
        figures of the nearest CPU kind (speedups over plain decoding, measured by `bench --profile landing`;
        `same_kind` false means they are a guide, not a measurement of this machine)."""
        return await _in_thread(tools.machine_facts)

    return server


class McpMount:
    """ASGI middleware: requests under MCP_PATH go to the MCP server, everything else to Gradio."""

    def __init__(self, app: ASGIApp, mcp_app: ASGIApp) -> None:
        self.app, self.mcp_app = app, mcp_app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path.rstrip("/") == MCP_PATH:
            await self.mcp_app({**scope, "path": MCP_PATH}, receive, send)
        else:
            await self.app(scope, receive, send)


def _security() -> TransportSecuritySettings:
    """DNS-rebinding protection where the app listens on this machine only (a web page must not reach the tools
    through a name that resolves here); a server bound to every interface (a Space, Docker) names no hosts."""
    host = os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1")
    if host in ("127.0.0.1", "localhost", "::1"):
        return TransportSecuritySettings(allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
                                         allowed_origins=["http://127.0.0.1:*", "http://localhost:*",
                                                          "http://[::1]:*"])
    return TransportSecuritySettings(enable_dns_rebinding_protection=False)


def mcp_middleware(line: tools.ModelLine) -> tuple[Middleware, Any]:
    """(the middleware for Gradio's app_kwargs, the lifespan that runs the MCP session manager); the tools' runs
    hold places on `line`."""
    server = build_server(line)
    mcp_app = server.streamable_http_app(streamable_http_path=MCP_PATH, stateless_http=True, json_response=True,
                                         transport_security=_security())

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        async with server.session_manager.run():
            yield

    return Middleware(McpMount, mcp_app=mcp_app), lifespan
