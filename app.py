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

from playground import flags
from playground.machine import release_freed_memory
from playground.playback import load_preset
from playground.presets import default_preset_name
from playground.ui import APP_CSS, THEME, build_app, session_capacity
from playground.ui.line import ENGINE_SLOTS, StampArrival
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


def main() -> None:
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
    demo.launch(ssr_mode=False, css=APP_CSS, theme=THEME, js=TOKEN_TAP_JS, state_session_capacity=session_capacity(),
                app_kwargs={"middleware": [Middleware(StampArrival)]})


if __name__ == "__main__":
    main()
