"""Run numbers as HTML stat cards and as a summary table, with the metric definitions attached."""

from __future__ import annotations

import html

import pandas as pd

from playground.engine.trace import MIN_SPEEDUP_GROUPS, RANGE_CONFIDENCE

from .view import RunView

MEAN_ACCEPTANCE_LENGTH_HELP = (
    "Mean acceptance length = 1 + accepted drafts / drafting steps: tokens gained per target forward, "
    "counting the target's own bonus token (vLLM's definition)."
)
DRAFT_ACCEPTANCE_RATE_HELP = "Draft acceptance rate = accepted draft tokens / drafted tokens."
# How a speedup is measured and judged, worded once from the constants the code uses: the cards' tooltips, the
# exports' timing note (playback/exports.py) and the About tab render these; how the plain steps are sampled is
# playback/baseline.py's SAMPLING_HELP.
WITHIN_NOISE = "within noise on this machine"  # the verdict's words where the speedup ranges overlap (verdict.py)
SPEEDUP_RANGE_HELP = (f"The range is the speedup's {RANGE_CONFIDENCE:.0%} interval: the run's decode rate, over "
                      "stretches of its time, "
                      "and plain decoding's, over groups of its timed steps, each as uncertain as their spread says; "
                      "it narrows as more steps are timed (a chat pools its earlier answers' plain steps taken at a "
                      "similar context).")
TOO_FEW_STEPS_HELP = (f"Below {MIN_SPEEDUP_GROUPS} groups of plain steps, or {MIN_SPEEDUP_GROUPS} decode steps of the "
                      f"run, neither is given: too few steps to measure.")
VERDICT_HELP = ("A run is called faster or slower than another (or than plain decoding, whose own speedup is 1.00×) "
                f"only where the ranges do not overlap; otherwise the verdict says {WITHIN_NOISE}, next to what did "
                "differ beyond noise (acceptance length, verified tokens per step, acceptance by position).")
SPEEDUP_HELP = ("Speedup = the engine's decode rate of this run / plain decoding's, measured in the same run on this "
                f"machine (never derived from acceptance length). {SPEEDUP_RANGE_HELP} {TOO_FEW_STEPS_HELP} "
                f"{VERDICT_HELP}")
BASELINE_HELP = ("Plain decode steps of this target on this machine, timed one at a time on this run's own text "
                 "between the run's steps, at the position it has reached (one baseline for both sides of a "
                 "comparison; on vLLM after the answer). The rate pools every timed step.")
TOKENS_PER_SECOND_HELP = ("The engine's decode rate: tokens after the first / time inside the decode loop after the "
                          "first step (which holds the prefill). Pauses while the page renders, the other side of a "
                          "comparison steps or the baseline measures are left out. The speedup uses this rate.")
SEEN_TOKENS_PER_SECOND_HELP = ("The rate you saw: generated tokens / wall-clock seconds since the answer started, "
                               "including the pauses while the page renders and, in Compare, while the other side "
                               "and the plain baseline step.")
NOT_AVAILABLE = "—"
SUMMARY_COLUMNS = ["drafter", "k", "verified rows / step", "tokens", "decode tok/s", "speedup", "speedup range",
                   "mean acceptance length", "draft acceptance rate"]

# One format per kind of number, wherever the number appears: the stat cards, the summary table, the charts' labels
# and hover text (figures.py, bench.py use the d3 twins below).
#   tokens per second        whole numbers                 24
#   speedup                  two decimals and ×            1.42×, its range 1.30–1.55
#   mean acceptance length   two decimals                  2.92
#   acceptance rates         percent, no decimals          37%
#   attention shares         percent, one decimal          0.3% (the sink's share is under 1 %)
#   hidden-state RMS         two decimals                  1.39
RATE_D3, LENGTH_D3, PERCENT_D3, SHARE_D3, RMS_D3 = ".0f", ".2f", ".0%", ".1%", ".2f"


def rate_text(tokens_per_second: float | None) -> str:
    return NOT_AVAILABLE if tokens_per_second is None else f"{tokens_per_second:.0f}"


def times_text(ratio: float | None) -> str:
    return NOT_AVAILABLE if ratio is None else f"{ratio:.2f}×"


def range_text(span: tuple[float, float] | None) -> str:
    """'1.30–1.55' (a speedup range; the × follows the speedup itself)."""
    return NOT_AVAILABLE if span is None else f"{span[0]:.2f}–{span[1]:.2f}"


def length_text(mean_acceptance_length: float | None) -> str:
    return NOT_AVAILABLE if mean_acceptance_length is None else f"{mean_acceptance_length:.2f}"


def percent_text(rate: float | None) -> str:
    return NOT_AVAILABLE if rate is None else f"{rate:.0%}"


def _card(value: str, name: str, help_text: str) -> str:
    return (f'<div class="stat" title="{html.escape(help_text, quote=True)}"><div class="stat-value">'
            f'{html.escape(value)}</div><div class="stat-name">{html.escape(name)}</div></div>')


def baseline_card(view: RunView) -> tuple[str, str, str]:
    """Value, name and tooltip of the plain-baseline card."""
    b = view.baseline
    if b is None:
        missing = view.missing.get("baseline")
        return ("n/a", "plain tok/s", missing) if missing else ("…", "plain tok/s (measuring)", BASELINE_HELP)
    return (rate_text(b.tokens_per_second), f"plain tok/s ({b.tokens} step{'s' * (b.tokens != 1)})",
            f"{BASELINE_HELP} {b.tokens} steps in {b.groups} groups, timed {b.timing}; slowest group "
            f"{rate_text(b.slowest)}, fastest {rate_text(b.fastest)} tok/s; measuring took {b.measuring_s:.1f} s.")


TOO_FEW_STEPS = "too few steps"  # where a speedup would stand, below the steps a measurement needs


NOTHING_ACCEPTED = "no draft accepted"  # the speedup card's headline where every draft was rejected
NOTHING_ACCEPTED_HELP = ("Every draft of this run was rejected (mean acceptance length 1.00): any speedup shown beside "
                         "this is the machine's noise, not the method's gain.")
WITHIN_NOISE_HEADLINE = "within noise"  # the speedup card's headline where its range holds 1×
WITHIN_NOISE_HELP = ("The speedup's range holds 1×: on this machine, now, this run was not measurably faster or "
                     "slower than plain decoding, whatever the middle figure says.")
THE_BASELINE = "plain decoding is the baseline"  # where a plain run's speedup would stand: it is not over itself
PLAIN_SPEEDUP_HELP = ("A speedup is a run's rate over plain decoding's; this run is plain decoding, so it has none: "
                      "its rate set against the plain steps timed beside it would measure only their noise.")


def too_few_steps_words(view: RunView) -> str:
    """Whose steps are too few: the plain baseline's (after Stop it may hold few groups beside a long answer), the
    run's, or both."""
    b, run_steps = view.baseline, max(len(view.events) - 1, 0)
    plain_short = b is not None and b.groups < MIN_SPEEDUP_GROUPS
    run_short = run_steps < MIN_SPEEDUP_GROUPS
    if plain_short and not run_short:
        return "too few plain steps"
    if run_short and not plain_short:
        return "too few steps of this run"
    return TOO_FEW_STEPS


def speedup_value(view: RunView) -> str:
    """'1.42×', 'too few plain steps' (or the run's) while the baseline or the run has too few steps to measure
    one, 'plain decoding is the baseline' for a plain run, or '—'."""
    if view.plain:
        return THE_BASELINE
    return too_few_steps_words(view) if view.too_few_steps else times_text(view.speedup)


def speedup_card(view: RunView) -> tuple[str, str, str]:
    """Value, name and tooltip of the speedup card: '1.42×' named 'speedup (1.30–1.55)', or '—' named 'speedup (too
    few plain steps)' (the long words go where the card has room for them); a plain run '—' named 'speedup (plain
    decoding is the baseline)', never its rate over its own baseline."""
    if view.plain:
        return times_text(None), f"speedup ({THE_BASELINE})", PLAIN_SPEEDUP_HELP
    if view.too_few_steps:
        return times_text(None), f"speedup ({too_few_steps_words(view)})", f"{view.too_few_steps}. {SPEEDUP_HELP}"
    speedup_range, m = view.speedup_range, view.metrics
    measured = times_text(view.speedup) + (f" ({range_text(speedup_range)})" if speedup_range else "")
    if m.drafted_tokens and not m.accepted_tokens:  # what to read first: the drafts were all rejected
        return NOTHING_ACCEPTED, f"speedup {measured}", f"{NOTHING_ACCEPTED_HELP} {SPEEDUP_HELP}"
    if view.speedup is not None and speedup_range and speedup_range[0] <= 1.0 <= speedup_range[1]:
        return WITHIN_NOISE_HEADLINE, f"speedup {measured}", f"{WITHIN_NOISE_HELP} {SPEEDUP_HELP}"
    return (times_text(view.speedup), "speedup" + (f" ({range_text(speedup_range)})" if speedup_range else ""),
            SPEEDUP_HELP)


def speedup_text(view: RunView) -> str:
    """'1.42× (1.30–1.55)': the speedup and its range, 'too few steps', 'plain decoding is the baseline', or '—'."""
    if view.speedup is None or view.plain:
        return speedup_value(view)
    return f"{times_text(view.speedup)} ({range_text(view.speedup_range)})"


VERIFIED_ROWS_HELP = ("the rows one target forward checks: the drafts (a tree: all its nodes) and the target's own "
                      "next token; plain decoding 1.")


def verified_rows_text(per_step: float | None) -> str:
    """Rows the target verified per step, one decimal: a chain of k 'k + 1' (fewer where drafting ended early), a
    tree of N nodes 'N + 1'; plain decoding (nothing drafted) 1.0."""
    return f"{1.0 if per_step is None else per_step:.1f}"


STAT_CARDS = 7  # stats_html's cards; stats_css lays out exactly this many (7 in a row, 4 + 3, or 2 columns)


def stats_html(view: RunView, note: str = "") -> str:
    """Live numbers of one run as a row of cards; each card's tooltip gives its definition."""
    m = view.metrics
    no_drafts = "Plain decoding drafts nothing." if view.plain else ""
    cards = [
        _card(str(m.generated_tokens), "tokens", f"{m.steps} target forwards (steps), each verifying "
              f"{verified_rows_text(m.verified_per_step)} rows: {VERIFIED_ROWS_HELP}"),
        _card(rate_text(m.decode_tokens_per_second), "tok/s (engine)", TOKENS_PER_SECOND_HELP),
        _card(rate_text(view.seen_tokens_per_second), "tok/s seen", SEEN_TOKENS_PER_SECOND_HELP),
        _card(*baseline_card(view)),
        _card(*speedup_card(view)),
        _card(length_text(m.mean_acceptance_length), "mean acceptance length",
              f"{MEAN_ACCEPTANCE_LENGTH_HELP} {no_drafts}".strip()),
        _card(percent_text(m.draft_acceptance_rate), "draft acceptance rate",
              f"{DRAFT_ACCEPTANCE_RATE_HELP} {no_drafts}".strip()),
    ]
    note_html = f'<div class="stat-note">{html.escape(note)}</div>' if note else ""
    return f'<div class="stats" lang="en">{"".join(cards)}</div>{note_html}'  # lang: where to hyphenate


def health_badge(health) -> str:
    """The drafter's health under the cards (a health.Health, or None): quiet unless flagged."""
    if health is None:
        return ""
    mark = "flagged" if health.flagged else "quiet"
    return f'<div class="health-badge {mark}" title="{html.escape(HEALTH_HELP)}">{html.escape(health.text())}</div>'


HEALTH_HELP = ("The drafter's acceptance at depth 1 held against its fingerprint: the spread of its answers on the "
               "project's prompts (python -m playground fingerprint). Flagged only when this run leaves that spread "
               "beyond its own noise, low or high; the likely cause is named from what differs (target weights, chat "
               "template, context length, temperature, draft vocabulary).")


def summary_table(views: list[RunView]) -> pd.DataFrame:
    """One row per run: drafter, k, tokens, decode rate, speedup (and range) vs the plain baseline, acceptance.
    Numbers as text in the cards' formats (a float column would show 1.0 as "1" beside "1.42")."""
    rows = []
    for view in views:
        m = view.metrics
        rows.append([view.drafter, NOT_AVAILABLE if view.plain else view.k, verified_rows_text(m.verified_per_step),
                     m.generated_tokens,
                     rate_text(m.decode_tokens_per_second), speedup_value(view),
                     range_text(None if view.plain else view.speedup_range),
                     length_text(m.mean_acceptance_length), percent_text(m.draft_acceptance_rate)])
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


STATS_ROW_MIN_PX = 560  # narrowest row that holds all STAT_CARDS cards (Chat's column at a 1200 px window: ~566)


def stats_css() -> str:
    """The cards on an even grid, never one card alone on a row: all STAT_CARDS (7) in one row where the row is at
    least STATS_ROW_MIN_PX wide (Chat's column at desktop widths, each side of Compare on a wide screen), 4 + 3 where
    it is narrower, and on a phone 2 columns with the last card across both.

    The row's own width decides (Chat's wide column and Compare's half-width sides differ), without `@container`,
    which Gradio's CSS scoping drops: the columns' minimum width is a seventh of the row where the row is wide enough
    and a quarter below that (`(STATS_ROW_MIN_PX - 100%) * 1000` is hugely positive below the threshold and negative
    above it), and auto-fit then makes exactly that many columns. The same switch, on the row's width in `cqi`, gives
    the names a slightly smaller font in a row of seven, so "acceptance" fits a card's width."""
    gap = 6
    seventh, quarter = f"calc((100% - {6 * gap}px) / 7 - 1px)", f"calc((100% - {3 * gap}px) / 4 - 1px)"
    narrow = f"calc(({STATS_ROW_MIN_PX}px - 100%) * 1000)"
    return f"""
.stats {{ display: grid; gap: {gap}px; container-type: inline-size;
  grid-template-columns: repeat(auto-fit, minmax(max({seventh}, min({quarter}, {narrow})), 1fr)); }}
@media (max-width: 480px) {{
  .stats {{ grid-template-columns: repeat(2, minmax(0, 1fr)); }}
  .stats .stat:last-child:nth-child(odd) {{ grid-column: 1 / -1; }}
}}
.stats .stat {{ min-width: 0; padding: 6px 5px 6px 7px; border-radius: 8px; cursor: help;
  border: 1px solid var(--border-color-primary, rgba(128,128,128,0.35));
  background: var(--block-background-fill, transparent); }}
.stats .stat-value {{ font-size: 1.2em; font-weight: 600; color: var(--body-text-color, inherit);
  font-variant-numeric: tabular-nums; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }}
.stats .stat-name {{ font-size: 0.74em;
  font-size: max(0.74em, min(0.8em, calc(({STATS_ROW_MIN_PX}px - 100cqi) * 1000)));
  color: var(--body-text-color-subdued, inherit); overflow-wrap: break-word; hyphens: auto;
  text-decoration: underline dotted; text-underline-offset: 2px; }}
.stat-note {{ margin-top: 4px; font-size: 0.85em; color: var(--body-text-color-subdued, inherit); }}
.health-badge {{ margin-top: 4px; font-size: 0.85em; padding: 2px 8px; border-radius: 6px; display: inline-block; }}
.health-badge.quiet {{ color: var(--body-text-color-subdued, inherit); border: 1px solid var(--border-color-primary); }}
.health-badge.flagged {{ color: var(--body-text-color); border: 1px solid #d97706; background: rgba(217, 119, 6, 0.12);
  font-weight: 600; }}
"""
