"""The app's page styles: token provenance, stat cards and the layout around them."""

from __future__ import annotations

from playground.viz import provenance_css, stats_css

LAYOUT_CSS = """
.side-panel { min-height: 220px; max-height: 460px; overflow-y: auto; padding: 4px 8px; }
.side-title { font-weight: 600; margin-bottom: 4px; }
.status-line p { margin: 0; font-size: 0.9em; color: var(--body-text-color-subdued); }
.preset-info p, .preset-info li { font-size: 0.85em; color: var(--body-text-color-subdued); }
"""
APP_CSS = provenance_css() + stats_css() + LAYOUT_CSS
