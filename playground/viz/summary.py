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
SPEEDUP_HELP = ("Speedup = the engine's decode rate of this run / plain decoding's, measured alongside it on this "
                "machine (never derived from acceptance length). The range sets this run's slowest stretch against "
                "the fastest group of plain steps and its fastest against the slowest: how much the machine's noise "
                "could move the figure.")
BASELINE_HELP = ("Plain decode steps of this target on this machine, timed one at a time between this run's steps "
                 "at the position the run has reached, so both see the same load and context length (it costs the "
                 "run some time). The rate pools every timed step.")
TOKENS_PER_SECOND_HELP = ("The engine's decode rate: tokens after the first / time inside the decode loop after the "
                          "first step (which holds the prefill). Pauses while the page renders, the other side of a "
                          "comparison steps or the baseline measures are left out. The speedup uses this rate.")
SEEN_TOKENS_PER_SECOND_HELP = ("The rate you saw: generated tokens / wall-clock seconds since the answer started, "
                               "including the pauses while the page renders, the plain baseline measures alongside "
                               "and, in Compare, the other side steps.")
NOT_AVAILABLE = "—"
SUMMARY_COLUMNS = ["drafter", "k", "tokens", "decode tok/s", "speedup", "speedup range", "mean acceptance length",
                   "draft acceptance rate"]


def _fmt(value: float | None, pattern: str) -> str:
    return NOT_AVAILABLE if value is None else pattern.format(value)


def _card(value: str, name: str, help_text: str) -> str:
    return (f'<div class="stat" title="{html.escape(help_text, quote=True)}"><div class="stat-value">'
            f'{html.escape(value)}</div><div class="stat-name">{html.escape(name)}</div></div>')


def baseline_card(view: RunView) -> tuple[str, str, str]:
    """Value, name and tooltip of the plain-baseline card."""
    b = view.baseline
    if b is None:
        missing = view.missing.get("baseline")
        return ("n/a", "plain tok/s", missing) if missing else ("measuring…", "plain tok/s", BASELINE_HELP)
    return (f"{b.tokens_per_second:.0f}", f"plain tok/s ({b.tokens} step{'s' * (b.tokens != 1)})",
            f"{BASELINE_HELP} {b.tokens} steps in {b.groups} groups; slowest group {b.slowest:.1f}, fastest "
            f"{b.fastest:.1f} tok/s.")


def speedup_text(view: RunView) -> str:
    """'1.42× (1.30–1.55)': the speedup and its range, or '—'."""
    if view.speedup is None:
        return NOT_AVAILABLE
    low, high = view.speedup_range
    return f"{view.speedup:.2f}× ({low:.2f}–{high:.2f})"


def stats_html(view: RunView, note: str = "") -> str:
    """Live numbers of one run as a row of cards; each card's tooltip gives its definition."""
    m = view.metrics
    no_drafts = "Plain decoding drafts nothing." if view.plain else ""
    speedup_range = view.speedup_range
    cards = [
        _card(str(m.generated_tokens), "tokens", f"{m.steps} target forwards (steps)."),
        _card(_fmt(m.decode_tokens_per_second, "{:.0f}"), "tok/s (engine)", TOKENS_PER_SECOND_HELP),
        _card(_fmt(view.seen_tokens_per_second, "{:.0f}"), "tok/s seen", SEEN_TOKENS_PER_SECOND_HELP),
        _card(*baseline_card(view)),
        _card(_fmt(view.speedup, "{:.2f}×"),
              "speedup" + (f" ({speedup_range[0]:.2f}–{speedup_range[1]:.2f})" if speedup_range else ""), SPEEDUP_HELP),
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
    """One row per run: drafter, k, tokens, decode rate, speedup (and range) vs the plain baseline, acceptance."""
    rows = []
    for view in views:
        m, speedup_range = view.metrics, view.speedup_range
        rows.append([view.drafter, NOT_AVAILABLE if view.plain else view.k, m.generated_tokens,
                     _round(m.decode_tokens_per_second, 1), _round(view.speedup, 2),
                     f"{speedup_range[0]:.2f}–{speedup_range[1]:.2f}" if speedup_range else NOT_AVAILABLE,
                     _round(m.mean_acceptance_length, 2), _round(m.draft_acceptance_rate, 3)])
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
