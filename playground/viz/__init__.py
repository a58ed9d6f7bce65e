"""Pictures of runs: token-provenance HTML, plotly figures, stat cards and tables, built from StepEvents.

Pure functions with no Gradio import, so the app and the benchmark report draw the same pictures.
"""

from .figures import (
    TITLES,
    Measured,
    Predicted,
    acceptance_by_position_figure,
    accepted_per_step_figure,
    attention_drift_figure,
    hidden_rms_figure,
    message_figure,
    replay_figure,
    speedup_figure,
    step_costs_figure,
)
from .provenance import (
    ProvenanceBuilder,
    TokenPiece,
    depth_colour,
    escape_html,
    legend_html,
    provenance_css,
    provenance_html,
    token_pieces,
)
from .rendered import rendered_css, rendered_html
from .summary import (
    DRAFT_ACCEPTANCE_RATE_HELP,
    MEAN_ACCEPTANCE_LENGTH_HELP,
    SUMMARY_COLUMNS,
    health_badge,
    stats_css,
    stats_html,
    summary_table,
)
from .tree import TreeStep, tree_css, tree_html
from .verdict import Verdict, comparison_verdict, engine_verdict, plain_verdict
from .view import RunView

__all__ = [
    "DRAFT_ACCEPTANCE_RATE_HELP", "MEAN_ACCEPTANCE_LENGTH_HELP", "SUMMARY_COLUMNS", "TITLES", "Measured", "Predicted",
    "ProvenanceBuilder", "RunView", "TokenPiece", "TreeStep", "Verdict", "accepted_per_step_figure",
    "acceptance_by_position_figure", "attention_drift_figure", "comparison_verdict", "depth_colour",
    "engine_verdict", "escape_html", "health_badge", "hidden_rms_figure", "legend_html",
    "message_figure", "plain_verdict", "provenance_css", "provenance_html", "rendered_css", "rendered_html",
    "replay_figure", "speedup_figure", "stats_css", "stats_html", "step_costs_figure", "summary_table",
    "token_pieces", "tree_css", "tree_html",
]
