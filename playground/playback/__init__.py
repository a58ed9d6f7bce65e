"""Runs as the playground plays them: settings → backend stream → a live run record, plus exports.

Gradio-free so it can be tested on its own; the UI turns `Run` records into components with `playground.viz`.
`settings` checks what the user picked, `run` advances a backend stream into a `Run`, `session` holds chat and
compare, `stop` the stop switches, `line` who holds the model and who waits, and `exports` the files a user
downloads.
"""

from .exports import CSV_COLUMNS, TIMING_NOTE, export_runs
from .line import EngineLine
from .run import FINISH_REASONS, RENDER_INTERVAL_S, ChartPace, Run, RunDriver, play
from .run_settings import MAX_NEW_TOKENS, RequestError, RunSettings
from .session import Comparison, Conversation, Exchange, chat_turn, compare, load_preset, regenerate_turn
from .stop import StopSwitches

__all__ = [
    "CSV_COLUMNS", "ChartPace", "FINISH_REASONS", "EngineLine", "MAX_NEW_TOKENS", "RENDER_INTERVAL_S", "TIMING_NOTE",
    "Comparison", "Conversation", "Exchange", "RequestError", "Run", "RunDriver", "RunSettings", "StopSwitches",
    "chat_turn", "compare", "export_runs", "load_preset", "play", "regenerate_turn",
]
