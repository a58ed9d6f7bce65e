"""EAGLE Playground: build the Gradio UI and serve it (GRADIO_SERVER_NAME / GRADIO_SERVER_PORT are honoured).

Environment: PLAYGROUND_MODELS_DIR (models folder), PLAYGROUND_THREADS (torch CPU threads),
PLAYGROUND_CONCURRENCY (model runs at once; default 1 so measured speeds are not shared with another run).
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys

import playground.backends.zerogpu  # noqa: F401 - on a ZeroGPU Space `spaces` must be imported before CUDA is touched

# isort: split
from starlette.middleware import Middleware

from playground import environment, flags
from playground.machine import release_freed_memory
from playground.playback import load_preset
from playground.presets import default_preset_name
from playground.ui import APP_CSS, THEME, build_app, session_capacity
from playground.ui.line import ENGINE_SLOTS, LINE, StampArrival, release_memory_when_idle
from playground.ui.style import TOKEN_TAP_JS

log = logging.getLogger("playground")


def _exit_on_sigterm(signum: int, frame) -> None:
    """SIGTERM (a Space restarting, `docker stop`, a test) runs the atexit callbacks, which stop vLLM's engine-core
    processes (the default action would kill this process alone and leave them running, ~3 GB each), then exits at
    once: the interpreter's own teardown, a garbage collection over every loaded module, took 2-4 s more here. An
    engine still starting is killed, not awaited (VllmBackend.shutdown)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one would run the callbacks again, inside the first run
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _patient_url_ok(url: str, within_s: float = 60.0) -> bool:
    """Gradio's check that the page's server answers before `launch` returns (`networking.url_ok`) gives it one
    3-second HEAD and raises ("When localhost is not accessible ...") where none answers: on a busy 2-core machine
    the server's thread answered later, and the app died at start. The same check, waiting up to `within_s`."""
    import time

    import httpx

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if httpx.head(url, timeout=10, verify=False).status_code in (200, 401, 301, 302, 303, 307, 308):
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    return False


def main() -> None:
    from gradio import networking

    networking.url_ok = _patient_url_ok
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)  # ours at INFO (a refused request is one line); other libraries at WARNING
    flags.apply_engine_settings()
    problem = load_preset(default_preset_name())
    release_freed_memory()  # what loading and converting the weights freed (~100 MiB of the default pair's)
    if problem:
        log.warning("not loaded: %s", problem)
    demo = build_app(problem)
    demo.queue(default_concurrency_limit=ENGINE_SLOTS, max_size=64)
    middleware, app_kwargs = [Middleware(StampArrival)], {}
    if (environment.text("PLAYGROUND_MCP") or "1") != "0":  # the agents' tools (docs/mcp.md), on by default
        from playground.agent.server import mcp_middleware
        from playground.agent.tools import ModelLine

        mcp, app_kwargs["lifespan"] = mcp_middleware(ModelLine(LINE, release_memory_when_idle))
        middleware.append(mcp)
    demo.launch(ssr_mode=False, css=APP_CSS, theme=THEME, js=TOKEN_TAP_JS, state_session_capacity=session_capacity(),
                app_kwargs={"middleware": middleware, **app_kwargs})


if __name__ == "__main__":
    main()
