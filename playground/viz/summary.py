"""Run numbers as HTML stat cards and as a summary table, with the metric definitions attached."""

from __future__ import annotations

import html

import pandas as pd

from .view import RunView

MEAN_ACCEPTANCE_LENGTH_HELP = (
    "Mean acceptance length = 1 + accepted drafts / drafting steps: tokens gained per target forward, "
    "counting the target's own bonus token (vLLM's definition)."
)
DRAFT_ACCEPTANCE_RATE_HELP = "Draft acceptance rate = accepted draft tokens / drafted tokens."
SPEEDUP_HELP = ("Speedup = tokens/s of this run / tokens/s of plain decoding, both measured on this machine with the "
                "same target (never derived from acceptance length).")
BASELINE_HELP = ("Plain greedy decoding of the same target on this machine, after a warm-up: the median of three "
                 "runs, measured once per prompt-length bucket.")
TOKENS_PER_SECOND_HELP = ("The engine's rate: generated tokens / time inside the decode loop (prefill included; "
                          "pauses while the page renders left out). The speedup uses this rate.")
SEEN_TOKENS_PER_SECOND_HELP = ("The rate you saw: generated tokens / wall-clock seconds since the answer started, "
                               "including the pauses while the page renders (and, in Compare, while the other side "
                               "steps).")
NOT_AVAILABLE = "—"
SUMMARY_COLUMNS = ["drafter", "k", "tokens", "tok/s", "speedup", "mean acceptance length", "draft acceptance rate"]


def _fmt(value: float | None, pattern: str) -> str:
    return NOT_AVAILABLE if value is None else pattern.format(value)


def _card(value: str, name: str, help_text: str) -> str:
    return (f'<div class="stat" title="{html.escape(help_text, quote=True)}"><div class="stat-value">'
            f'{html.escape(value)}</div><div class="stat-name">{html.escape(name)}</div></div>')


def stats_html(view: RunView, note: str = "") -> str:
    """Live numbers of one run as a row of cards; each card's tooltip gives its definition."""
    m = view.metrics
    no_drafts = "Plain decoding drafts nothing." if view.plain else ""
    baseline = view.baseline_tokens_per_second
    cards = [
        _card(str(m.generated_tokens), "tokens", f"{m.steps} target forwards (steps)."),
        _card(_fmt(m.tokens_per_second, "{:.0f}"), "tok/s (engine)", TOKENS_PER_SECOND_HELP),
        _card(_fmt(view.seen_tokens_per_second, "{:.0f}"), "tok/s seen", SEEN_TOKENS_PER_SECOND_HELP),
        _card(_fmt(baseline, "{:.0f}") if baseline else ("n/a" if "baseline" in view.missing else "measuring…"),
              "plain tok/s (baseline)", view.missing.get("baseline") or BASELINE_HELP),
        _card(_fmt(view.speedup, "{:.2f}×"), "speedup", SPEEDUP_HELP),
        _card(_fmt(m.mean_acceptance_length, "{:.2f}"), "mean acceptance length",
              f"{MEAN_ACCEPTANCE_LENGTH_HELP} {no_drafts}".strip()),
        _card(_fmt(m.draft_acceptance_rate, "{:.0%}"), "draft acceptance rate",
              f"{DRAFT_ACCEPTANCE_RATE_HELP} {no_drafts}".strip()),
    ]
    note_html = f'<div class="stat-note">{html.escape(note)}</div>' if note else ""
    return f'<div class="stats">{"".join(cards)}</div>{note_html}'


def _round(value: float | None, digits: int) -> float | str:
    return NOT_AVAILABLE if value is None else round(value, digits)


def summary_table(views: list[RunView]) -> pd.DataFrame:
    """One row per run: drafter, k, tokens, tok/s, speedup vs measured baseline, acceptance length and rate."""
    rows = []
    for view in views:
        m = view.metrics
        rows.append([view.drafter, NOT_AVAILABLE if view.plain else view.k, m.generated_tokens,
                     _round(m.tokens_per_second, 1), _round(view.speedup, 2), _round(m.mean_acceptance_length, 2),
                     _round(m.draft_acceptance_rate, 3)])
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def stats_css() -> str:
    return """
.stats { display: flex; flex-wrap: wrap; gap: 8px; }
.stats .stat { flex: 1 1 110px; padding: 6px 10px; border-radius: 8px; cursor: help;
  border: 1px solid var(--border-color-primary, rgba(128,128,128,0.35));
  background: var(--block-background-fill, transparent); }
.stats .stat-value { font-size: 1.25em; font-weight: 600; color: var(--body-text-color, inherit);
  font-variant-numeric: tabular-nums; }
.stats .stat-name { font-size: 0.8em; color: var(--body-text-color-subdued, inherit);
  text-decoration: underline dotted; text-underline-offset: 2px; }
.stat-note { margin-top: 4px; font-size: 0.85em; color: var(--body-text-color-subdued, inherit); }
"""
