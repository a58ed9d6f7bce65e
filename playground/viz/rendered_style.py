"""The rendered answer view's styles (`rendered.py` writes the HTML they apply to)."""

from __future__ import annotations


def rendered_css() -> str:
    """Styles for `rendered_html`: proportional prose, monospace code blocks whose long lines wrap, tables whose cells
    wrap, light and dark themes through Gradio's theme variables. The token fills come from `provenance_css`.

    Code and tables wrap rather than scrolling sideways: phones show no scrollbar, so a long line looked cut off, and
    every update of a streaming answer replaces the block, which put its scroll back to the start."""
    return """
.rendered { line-height: 1.6; overflow-wrap: anywhere; color: var(--body-text-color, inherit);
  font-family: var(--font, ui-sans-serif, system-ui, -apple-system, "Segoe UI", Roboto, sans-serif); }
.rendered > :first-child { margin-top: 0; }
.rendered > :last-child { margin-bottom: 0; }
.rendered p { margin: 0 0 0.75em; }
.rendered h1, .rendered h2, .rendered h3, .rendered h4, .rendered h5, .rendered h6 {
  margin: 0.9em 0 0.4em; line-height: 1.3; font-weight: 600; color: var(--body-text-color, inherit); }
.rendered h1 { font-size: 1.4em; }
.rendered h2 { font-size: 1.25em; }
.rendered h3 { font-size: 1.1em; }
.rendered h4, .rendered h5, .rendered h6 { font-size: 1em; }
.rendered ul, .rendered ol { margin: 0.25em 0 0.75em; padding-left: 1.6em; }
.rendered ul { list-style: disc; }
.rendered ol { list-style: decimal; }
.rendered li { margin: 0.15em 0; }
.rendered li > p { margin: 0.4em 0 0; }
.rendered li > ul, .rendered li > ol { margin: 0.15em 0 0.25em; }
.rendered blockquote { margin: 0 0 0.75em; padding: 0.1em 0 0.1em 0.9em;
  border-left: 3px solid var(--border-color-primary, #d0d0d0); color: var(--body-text-color-subdued, inherit); }
.rendered hr { border: none; border-top: 1px solid var(--border-color-primary, #d0d0d0); margin: 1em 0; }
.rendered code { font-family: var(--font-mono, ui-monospace, SFMono-Regular, Menlo, Consolas, monospace);
  font-size: 0.9em; }
.rendered :not(pre) > code { padding: 0.1em 0.3em; border-radius: 4px;
  background: var(--code-background-fill, rgba(127, 127, 127, 0.15)); }
.rendered pre.md-code { margin: 0 0 0.75em; padding: 0.7em 0.9em; border-radius: 6px;
  white-space: pre-wrap; overflow-wrap: anywhere; line-height: 1.45; tab-size: 4;
  background: var(--code-background-fill, rgba(127, 127, 127, 0.12));
  border: 1px solid var(--border-color-primary, rgba(127, 127, 127, 0.25)); }
.rendered pre.md-code > code { padding: 0; background: none; border-radius: 0; white-space: pre-wrap;
  color: var(--body-text-color, inherit); }
.rendered pre.md-code, .rendered pre.md-code > code, .rendered pre.md-code span {
  font-size: 0.9rem !important; }  /* Gradio's Chatbot shrinks code in messages to a size hard to read */
.rendered table { border-collapse: collapse; margin: 0 0 0.75em; max-width: 100%; }
.rendered th, .rendered td { border: 1px solid var(--border-color-primary, rgba(127, 127, 127, 0.35));
  padding: 0.25em 0.6em; vertical-align: top; }
.rendered th { font-weight: 600; background: var(--background-fill-secondary, rgba(127, 127, 127, 0.08)); }
.rendered strong { font-weight: 650; }
.rendered .tok-draft, .rendered .tok-target { border-radius: 2px; }
"""
