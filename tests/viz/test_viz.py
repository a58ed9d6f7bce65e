"""playground.viz: token provenance HTML (classes, attributes, escaping, multi-byte text) and figures built from real
step events, including fields a run or a backend leaves None."""

from __future__ import annotations

import html
import math
import re
import statistics
from pathlib import Path

import plotly.graph_objects as go
import pytest
from transformers import AutoTokenizer

from playground.backends import shared_backend
from playground.engine import Baseline, GenerationConfig, StepEvent
from playground.engine.text import IncrementalDecoder
from playground.engine.trace import t_quantile, window_rates
from playground.presets import get_preset
from playground.viz import (
    MEAN_ACCEPTANCE_LENGTH_HELP,
    SUMMARY_COLUMNS,
    RunView,
    TokenPiece,
    acceptance_by_position_figure,
    accepted_per_step_figure,
    attention_drift_figure,
    depth_colour,
    escape_html,
    hidden_rms_figure,
    legend_html,
    provenance_css,
    provenance_html,
    rendered_html,
    speedup_figure,
    stats_html,
    summary_table,
    token_pieces,
)
from playground.viz.figures import MESSAGE_LINE_CHARS
from playground.viz.provenance import BIDI_CONTROLS
from playground.viz.summary import STAT_CARDS, STATS_ROW_MIN_PX, stats_css
from tests.support.appserver import long_answer_prompt

# --- provenance, with a scripted decoder (the one test double here) --------------------------------------------

HOSTILE = {1: "<script>alert(1)</script>", 2: "\n", 3: '<img src=x onerror=alert(1)>', 4: " & ok", 5: '"q"'}


def scripted_decode(ids: list[int]) -> str:
    return "".join(HOSTILE[i] for i in ids)


SCRIPTED_EVENTS = [
    StepEvent(step=0, drafted=[], accepted=0, emitted=[1]),  # prefill: the target's token
    StepEvent(step=1, drafted=[2, 3, 4], accepted=2, emitted=[2, 3, 5], draft_probs=[0.83, 0.5, 0.1]),
    StepEvent(step=2, drafted=[4, 4], accepted=2, emitted=[4, 4, 1], draft_probs=None, finished=True,
              finish_reason="length"),
]


def test_model_text_is_escaped() -> None:
    page = provenance_html(token_pieces(SCRIPTED_EVENTS, scripted_decode))
    assert "<script" not in page and "<img" not in page
    assert html.escape("<script>alert(1)</script>") in page
    assert html.escape("<img src=x onerror=alert(1)>") in page
    assert "&amp; ok" in page and "&quot;q&quot;" in page
    assert "\n" not in page and "<br>" in page  # one line of HTML, so Markdown renderers pass it through


def test_bidirectional_controls_are_shown_not_applied() -> None:
    override = "abc \u202edcba\u202c \u2067x\u2069 \u200f"
    piece = TokenPiece(0, override, 0, None)
    for shown in (escape_html(override), rendered_html([piece]), provenance_html([piece])):
        assert not BIDI_CONTROLS.intersection(shown), shown
        assert "&lt;U+202E&gt;dcba&lt;U+202C&gt;" in shown and "&lt;U+2067&gt;x&lt;U+2069&gt;" in shown
    assert escape_html("plain <b>") == html.escape("plain <b>")


def test_spans_carry_origin_depth_and_step() -> None:
    pieces = token_pieces(SCRIPTED_EVENTS, scripted_decode)
    assert [(p.step, p.depth) for p in pieces] == [(0, None), (1, 1), (1, 2), (1, None), (2, 1), (2, 2), (2, None)]
    page = provenance_html(pieces)
    assert page.count('class="tok-target"') == 3 and page.count('class="tok-draft') == 4
    assert '<span class="tok-draft depth-1" data-depth="1" data-step="1" title="step 1, depth 1, p=0.83">' in page
    assert '<span class="tok-draft depth-2" data-depth="2" data-step="2" title="step 2, depth 2">' in page
    assert '<span class="tok-target" data-step="0" title="step 0, target token">' in page


def test_legend_and_css_cover_every_depth() -> None:
    legend, css = legend_html(10), provenance_css()
    assert all(f'depth-{d}"' in legend for d in range(1, 11))
    assert all(f".tok-draft.depth-{d} " in css for d in range(1, 11))
    assert "white-space: pre-wrap" in css and "var(--body-text-color" in css


def test_multibyte_characters_are_never_split(pair_models: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(pair_models / "target")

    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)

    text = "naïve café → 🦅 €5"
    ids = tokenizer.encode(text, add_special_tokens=False)
    decoder = IncrementalDecoder(decode)
    parts = [decoder.push(i) for i in ids] + [decoder.flush()]
    assert "".join(parts) == decode(ids) == text
    assert not any("\ufffd" in part for part in parts)
    assert "" in parts[:-1], "expected at least one token that ends inside a character"


# --- figures from real runs ---------------------------------------------------------------------------------


PROMPT = long_answer_prompt()


def _run(drafter: str, k: int = 4, instrument: bool = True) -> list[StepEvent]:
    backend = shared_backend(get_preset("smollm2-135m"))
    prompt = backend.encode([{"role": "user", "content": PROMPT}])
    events = list(backend.stream(prompt, drafter, GenerationConfig(max_new_tokens=48, k=k, instrument=instrument)))
    assert sum(len(e.emitted) for e in events) > 8, "the model stopped at once; pick another PROMPT"
    return events


BASELINE = Baseline(tokens_per_second=100.0, slowest=80.0, fastest=125.0, groups=5, tokens=20)


@pytest.fixture(scope="module")
def views(pair_models: Path) -> dict[str, RunView]:
    return {
        "eagle3.1": RunView.from_events("EAGLE-3.1", False, 4, _run("eagle3.1"), BASELINE),
        "eagle3": RunView.from_events("EAGLE-3", False, 3, _run("eagle3", k=3), BASELINE),
        "plain": RunView.from_events("plain decoding", True, 4, _run("none"), BASELINE),
        "uninstrumented": RunView.from_events("EAGLE-3", False, 4, _run("eagle3", instrument=False)),
    }


def _message(fig: go.Figure) -> str:
    """What the figure's notes say, read as sentences (they are broken into short lines)."""
    return " ".join(a.text.replace("<br>", " ") for a in fig.layout.annotations)


def test_figures_draw_what_a_run_has(views: dict[str, RunView]) -> None:
    v = views["eagle3.1"]
    assert v.metrics.drafting_steps > 0 and v.metrics.attention_by_depth and v.metrics.hidden_rms_by_depth
    accept = accepted_per_step_figure(v)
    assert len([t for t in accept.data if t.type == "bar"]) == v.k  # one stacked segment per depth
    assert [s.y0 for s in accept.layout.shapes] == [v.k]  # the ceiling line
    assert sum(sum(t.y) for t in accept.data) == v.metrics.accepted_tokens
    assert [t.marker.color for t in accept.data] == [depth_colour(d, 0.85) for d in range(1, v.k + 1)]
    position = acceptance_by_position_figure([v])
    assert list(position.data[0].y) == pytest.approx(v.metrics.per_position_acceptance)
    drift = attention_drift_figure([v])
    assert [t.name for t in drift.data] == ["sink (first token)", "context (excl. sink)", "own drafts"]
    masses = v.metrics.attention_by_depth
    assert list(drift.data[0].y) == pytest.approx([a.sink for a in masses])
    assert list(drift.data[1].y) == pytest.approx([a.context - a.sink for a in masses])  # context includes the sink
    totals = [sum(t.y[d] for t in drift.data) for d in range(v.k)]
    assert totals == pytest.approx([1.0] * v.k, abs=1e-4)
    assert len(hidden_rms_figure([v]).data[0].y) == v.k
    speed = speedup_figure([v])
    assert [t.y[0] for t in speed.data] == ["plain decoding", v.label] and "Speedup" in speed.layout.title.text
    assert speed.data[0].x[0] == 100.0 and speed.data[1].x[0] == pytest.approx(v.metrics.decode_tokens_per_second)
    assert (speed.data[0].error_x.arrayminus[0], speed.data[0].error_x.array[0]) == (20.0, 25.0)  # slowest–fastest
    stretches = window_rates(v.events, BASELINE.groups)  # the run cut into as many stretches as there are groups
    assert len(stretches) == BASELINE.groups and min(stretches) <= v.metrics.decode_tokens_per_second <= max(stretches)
    low, high = v.speedup_range  # the 95 % interval of the ratio's log: the run's and the baseline's standard errors
    run_error = statistics.stdev(stretches) / statistics.mean(stretches) / math.sqrt(len(stretches))
    spread = t_quantile(len(stretches) - 1) * math.hypot(run_error, BASELINE.relative_error)
    assert low == pytest.approx(v.speedup * math.exp(-spread)) and high == pytest.approx(v.speedup * math.exp(spread))
    assert 0 < low < v.speedup < high
    assert f"{v.speedup:.2f}× ({low:.2f}–{high:.2f})" in speed.layout.title.text


def test_overlaid_runs(views: dict[str, RunView]) -> None:
    pair = [views["eagle3"], views["eagle3.1"]]
    assert len(acceptance_by_position_figure(pair).data) == 2
    drift = attention_drift_figure(pair)
    assert {t.offsetgroup for t in drift.data} == {"0", "1"}
    assert [t.name for t in drift.data if t.x == (None,)] == ["EAGLE-3, k=3", "EAGLE-3.1, k=4"]  # pattern key
    assert [t.y[0] for t in speedup_figure(pair).data] == ["plain decoding", "EAGLE-3, k=3", "EAGLE-3.1, k=4"]


def test_missing_fields_are_explained_not_drawn_as_zero(views: dict[str, RunView]) -> None:
    plain, bare = views["plain"], views["uninstrumented"]
    assert plain.metrics.per_position_acceptance is None and bare.metrics.attention_by_depth is None
    for fig in (accepted_per_step_figure(plain), acceptance_by_position_figure([plain]),
                attention_drift_figure([plain]), hidden_rms_figure([plain])):
        assert not fig.data and "no drafter" in _message(fig)
    for fig in (attention_drift_figure([bare]), hidden_rms_figure([bare])):
        assert not fig.data and "does not report" in _message(fig)
    told = RunView(bare.drafter, False, 4, bare.events, bare.metrics, None,
                   {"attention": "vLLM does not expose the drafter's attention weights",
                    "baseline": "plain decoding needs a second server"})
    assert "vLLM does not expose" in _message(attention_drift_figure([told]))
    lines = attention_drift_figure([told]).layout.annotations[0].text.split("<br>")  # plotly does not wrap them
    assert len(lines) > 1 and max(map(len, lines)) <= MESSAGE_LINE_CHARS
    assert "needs a second server" in _message(speedup_figure([told]))
    assert "measuring plain decoding" in speedup_figure([bare]).layout.title.text  # no baseline yet, none missing
    mixed = attention_drift_figure([views["eagle3.1"], plain])  # one side drawn, the other explained
    assert mixed.data and "no drafter" in _message(mixed)


def test_summary_table_and_stats(views: dict[str, RunView]) -> None:
    table = summary_table([views["eagle3"], views["plain"]])
    assert list(table.columns) == SUMMARY_COLUMNS
    assert table["drafter"].tolist() == ["EAGLE-3", "plain decoding"]
    assert table["verified rows / step"].tolist() == [f"{views['eagle3'].metrics.verified_per_step:.1f}", "1.0"]
    assert 3.5 <= float(table.loc[0, "verified rows / step"]) <= 4.0  # k = 3: three drafts and the target's own
    v = views["eagle3"]
    assert table.loc[1, "mean acceptance length"] == "—" and table.loc[0, "speedup"] == f"{v.speedup:.2f}×"
    low, high = v.speedup_range
    assert table.loc[0, "speedup range"] == f"{low:.2f}–{high:.2f}" and table.loc[1, "speedup range"] == "—"
    stats = stats_html(views["eagle3.1"])
    assert html.escape(MEAN_ACCEPTANCE_LENGTH_HELP, quote=True) in stats and ">speedup " in stats
    assert "plain tok/s (20 steps)" in stats and "slowest group 80, fastest 125 tok/s" in stats


def _card_values(stats: str) -> dict[str, str]:
    names = [html.unescape(n) for n in re.findall(r'<div class="stat-name">(.*?)</div>', stats)]
    values = [html.unescape(v) for v in re.findall(r'<div class="stat-value">(.*?)</div>', stats)]
    return dict(zip(names, values))


def test_one_format_per_kind_of_number_in_cards_table_and_charts(views: dict[str, RunView]) -> None:
    """The same quantity reads the same everywhere: tok/s whole, speedup 2 decimals and ×, acceptance length 2
    decimals, rates as whole percents (never 0.368 beside 0.34, or 1 beside 1.00)."""
    v, m = views["eagle3.1"], views["eagle3.1"].metrics
    cards = _card_values(stats_html(v))
    assert len(cards) == STAT_CARDS
    row = summary_table([v]).loc[0]
    assert cards["tok/s (engine)"] == row["decode tok/s"] == f"{m.decode_tokens_per_second:.0f}"
    assert re.fullmatch(r"\d+", cards["tok/s (engine)"]) and re.fullmatch(r"\d+", cards["plain tok/s (20 steps)"])
    speedup_name = next(n for n in cards if n.startswith("speedup"))
    assert row["speedup"] == f"{v.speedup:.2f}×"
    low, high = v.speedup_range
    if low <= 1.0 <= high:  # a range that holds 1× heads the card with its verdict, the figure after it
        assert cards[speedup_name] == "within noise"
        assert speedup_name == f"speedup {row['speedup']} ({row['speedup range']})"
    else:
        assert cards[speedup_name] == row["speedup"] and speedup_name == f"speedup ({row['speedup range']})"
    assert cards["mean acceptance length"] == row["mean acceptance length"] == f"{m.mean_acceptance_length:.2f}"
    assert cards["draft acceptance rate"] == row["draft acceptance rate"] == f"{m.draft_acceptance_rate:.0%}"
    assert re.fullmatch(r"\d+%", row["draft acceptance rate"])
    plain = summary_table([views["plain"]]).loc[0]
    assert plain["mean acceptance length"] == plain["draft acceptance rate"] == "—"
    speed = speedup_figure([v])
    assert f"{m.decode_tokens_per_second:.0f} tok/s · {v.speedup:.2f}×" in speed.data[1].text[0]
    assert speed.data[0].text[0] == "100 tok/s (20 steps)" and "groups of steps 80–125" in speed.data[0].hovertemplate
    assert all("%{x:.0f} tokens/s" in t.hovertemplate for t in speed.data)
    assert "%{y:.0%}" in acceptance_by_position_figure([v]).data[0].hovertemplate
    assert f"mean acceptance length {m.mean_acceptance_length:.2f}" in accepted_per_step_figure(v).layout.title.text
    assert "RMS %{y:.2f}" in hidden_rms_figure([v]).data[0].hovertemplate


def test_stat_cards_lay_out_evenly() -> None:
    """Seven cards: all in one row where the row is wide enough, else 4 + 3; on a phone two columns, the last card
    across both (never one card alone under a full row)."""
    css = stats_css()
    assert "flex" not in css.split(".stats .stat {")[0]
    assert f"({STATS_ROW_MIN_PX}px - 100%) * 1000" in css and "/ 7 - 1px)" in css and "/ 4 - 1px)" in css
    assert "repeat(auto-fit, minmax(" in css
    phone = css.split("@media (max-width: 480px) {")[1].split("\n}\n")[0]
    assert "repeat(2, minmax(0, 1fr))" in phone and ".stat:last-child:nth-child(odd) { grid-column: 1 / -1; }" in phone
    assert "@container" not in css  # Gradio's CSS scoping drops @container rules


def test_depth_colours_are_a_sequential_palette_shared_by_text_and_charts() -> None:
    """Depth colours get darker with depth (an ordered palette, so depth reads without telling hues apart), every
    coloured depth has its own colour, and the dark theme has its own (lighter) rules."""
    from playground.viz.provenance import DEPTH_POSITIONS

    def luminance(css: str) -> float:
        r, g, b = (float(v) for v in css[css.index("(") + 1 : -1].split(",")[:3])
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    colours = [depth_colour(d) for d in range(1, len(DEPTH_POSITIONS) + 1)]
    assert len(set(colours)) == len(colours)
    lum = [luminance(c) for c in colours]
    assert all(a > b for a, b in zip(lum, lum[1:]))
    assert min(a - b for a, b in zip(lum[:5], lum[1:5])) > 15  # the common depths (k <= 5) are well apart
    assert f".tok-draft.depth-1 {{ background: {depth_colour(1, 0.35)}" in provenance_css()
    assert ".dark .tok-draft.depth-10" in provenance_css()


def test_the_token_tap_script_shows_titles_as_text() -> None:
    """The page script behind "tap a token for its details" (ui/style.py, passed to demo.launch(js=...)): one delegated
    listener on the document for the token classes provenance_html writes, the title copied as text, never as HTML,
    and a style for its popup in the app CSS. (It runs in the browser; here only its shape is checked.)"""
    from playground.ui.style import APP_CSS, TOKEN_TAP_JS

    script = TOKEN_TAP_JS.strip()
    assert script.startswith("() => {") and script.endswith("}")  # Gradio calls a function once, on load
    assert script.count("document.addEventListener(\"click\"") == 1 and ".tok-draft, .tok-target" in script
    assert "textContent = text" in script and 'getAttribute("title")' in script
    assert "innerHTML" not in script and "insertAdjacentHTML" not in script and "eval(" not in script
    page = provenance_html(token_pieces(SCRIPTED_EVENTS, scripted_decode))
    assert 'class="tok-draft depth-1"' in page and 'class="tok-target"' in page and "title=" in page
    assert ".tok-tip {" in APP_CSS and ".tok-tip[hidden]" in APP_CSS


def test_too_few_steps_show_no_speedup_anywhere(views: dict[str, RunView]) -> None:
    """A stopped or young run: 2 groups of plain steps (or 3 decode steps of the run) are no measurement, so the card,
    the table, the chart and the run record say so instead of a point range like 1.75× (1.75–1.75)."""
    from dataclasses import replace

    from playground.engine.trace import MIN_SPEEDUP_GROUPS

    full = views["eagle3.1"]
    thin = replace(full, baseline=Baseline(100.0, 99.0, 101.0, groups=MIN_SPEEDUP_GROUPS - 1, tokens=8))
    short = replace(full, events=full.events[:3])
    assert full.speedup is not None and full.too_few_steps is None
    for view, words in ((thin, "too few plain steps"), (short, "too few steps of this run")):
        assert view.speedup is None and view.speedup_range is None and "too few steps" in view.too_few_steps
        assert _card_values(stats_html(view))[f"speedup ({words})"] == "—"  # whose: beside "plain tok/s (8 steps)"
        assert summary_table([view]).loc[0, "speedup"] == words
        assert "too few steps" in speedup_figure([view]).layout.title.text
    assert "8 plain steps in 4 of 5 groups" in thin.too_few_steps
    both = replace(thin, events=full.events[:3])
    assert _card_values(stats_html(both))["speedup (too few steps)"] == "—"


def test_a_plain_run_shows_no_speedup_over_itself(views: dict[str, RunView]) -> None:
    """Issue 55: a plain-decoding run's card read "1.12× speedup (0.81–1.50)", its rate over the plain steps timed
    beside it. Card, table and chart now say plain decoding is the baseline."""
    plain = views["plain"]
    assert plain.speedup is not None  # the ratio exists (what the card showed)
    cards = _card_values(stats_html(plain))
    assert cards["speedup (plain decoding is the baseline)"] == "—"
    assert not [name for name in cards if name.startswith("speedup (") and "×" in cards[name]]
    row = summary_table([plain]).loc[0]
    assert row["speedup"] == "plain decoding is the baseline" and row["speedup range"] == "—"
    figure = speedup_figure([plain])
    assert "Speedup" not in figure.layout.title.text and all("×" not in t for bar in figure.data for t in bar.text)
    mixed = speedup_figure([views["eagle3.1"], plain])  # beside an EAGLE run: only its speedup is named
    assert mixed.layout.title.text.count("×") == 1


def test_a_step_tree_is_drawn_under_its_parents_escaped_with_its_path_marked() -> None:
    """Nodes nest under their parents; the accepted path is marked; token text is escaped (a model's '<b>' stays
    text); a step without a tree gives none."""
    from playground.viz import TreeStep, tree_html

    texts = {1: " the", 2: "<b>", 3: " a", 4: " cat", 9: "!"}
    event = StepEvent(3, [1, 4], 2, [1, 4, 9], tree_tokens=[1, 2, 3, 4], tree_parents=[-1, -1, -1, 0],
                      tree_depths=[1, 1, 1, 2], tree_probs=[0.6, 0.2, 0.1, 0.9], tree_path=[0, 3])
    tree = TreeStep.of(event, lambda ids: "".join(texts[i] for i in ids))
    page = tree_html(tree)
    assert "<b>" not in page.replace("<b>␣the␣cat</b>", "") and "&lt;b&gt;" in page
    assert page.count('class="tree-node tree-accepted"') == 2 and page.count('class="tree-node"') == 2
    nested = page.index("␣the") < page.index("␣cat") < page.index("&lt;b&gt;")  # the child sits inside its parent
    assert nested and "4 drafted nodes verified in one forward, 2 accepted" in page and "<code>!</code>" in page
    assert TreeStep.of(StepEvent(4, [1], 1, [1, 9]), lambda ids: "x") is None


def test_the_step_cost_chart_draws_each_measured_cost_with_its_spread() -> None:
    from playground.engine.costs import Cost, CostProfile
    from playground.viz import step_costs_figure

    profile = CostProfile(machine={}, target="t", drafter="d", context=128, plain=Cost(40.0, 38.0, 45.0),
                          verify={1: Cost(40.0, 38.0, 45.0), 5: Cost(47.0, 45.0, 52.0), 9: Cost(60.0, 55.0, 70.0)},
                          chain={1: Cost(3.0, 2.5, 3.5), 4: Cost(11.0, 10.0, 13.0)})
    fig = step_costs_figure({"EAGLE-3.1": profile})
    verify, chain = fig.data
    assert verify.name == "target forward over N rows"
    assert (list(verify.x), list(verify.y)) == ([1, 5, 9], [40.0, 47.0, 60.0])
    assert list(verify.error_y.array) == [5.0, 5.0, 10.0] and list(verify.error_y.arrayminus) == [2.0, 2.0, 5.0]
    assert chain.name == "EAGLE-3.1: drafting a chain of k" and list(chain.x) == [1, 4]
    assert "no cost profile" in step_costs_figure({}).layout.annotations[0].text



def test_the_replay_chart_draws_each_drafters_predictions_against_k_beside_the_measured_run() -> None:
    """Chains a line per drafter, trees their own marks beside their k (nodes written on them), each prediction's
    range as its bar; plain decoding the dashed 1× line; what ran a star at its measured speedup."""
    from playground.viz import Measured, Predicted, replay_figure

    predicted = [Predicted("EAGLE-3", k, 0, 1.0 + k / 10, 0.9 + k / 10, 1.2 + k / 10, 1.5) for k in (1, 2, 4)]
    predicted += [Predicted("EAGLE-3.1", k, 0, 1.5 + k / 10, 1.4 + k / 10, 1.6 + k / 10) for k in (1, 2, 4)]
    predicted += [Predicted("EAGLE-3.1", 4, nodes, 2.5, 2.3, 2.8) for nodes in (8, 16)]
    fig = replay_figure(predicted, [Measured("The answer", "EAGLE-3.1", 4, 0, 1.8)])
    chains3, chains31, trees31, ran = fig.data
    assert (chains3.name, chains3.mode, list(chains3.x)) == ("EAGLE-3, chains", "lines+markers", [1, 2, 4])
    assert list(chains3.y) == pytest.approx([1.1, 1.2, 1.4])
    assert list(chains3.error_y.array) == pytest.approx([0.2] * 3)  # up to the range's high end
    assert list(chains3.error_y.arrayminus) == pytest.approx([0.1] * 3)
    assert chains31.line.color != chains3.line.color and chains31.name == "EAGLE-3.1, chains"
    assert trees31.name == "EAGLE-3.1, trees of 8 / 16 nodes" and "lines" not in trees31.mode
    assert list(trees31.text) == ["8", "16"]
    assert all(4 < x < 5 for x in trees31.x) and len(set(trees31.x)) == 2 and len(set(trees31.marker.symbol)) == 2
    assert (ran.name, list(ran.x), list(ran.y), ran.marker.symbol) == ("The answer: measured", [4], [1.8], "star")
    plain = [shape for shape in fig.layout.shapes if shape.y0 == shape.y1 == 1]
    assert len(plain) == 1 and plain[0].line.dash == "dash"
    assert any("plain decoding, 1×" in a.text for a in fig.layout.annotations)
    assert fig.layout.yaxis.range[0] == 0 and fig.layout.yaxis.range[1] >= 2.8  # every range on the chart
    alone = replay_figure(predicted[:3])  # nothing measured (plain decoding ran): no star
    assert [t.name for t in alone.data] == ["EAGLE-3, chains"]
    assert "nothing was predicted" in replay_figure([]).layout.annotations[0].text

def test_the_drafters_usual_form_is_drawn_behind_the_run(views: dict[str, RunView]) -> None:
    """A run whose drafter has a fingerprint: its usual acceptance by position, the usual start of its own drafts in
    the attention stack, and its usual RMS, each as a mark with its 10th-90th percentile bar."""
    from dataclasses import replace

    from playground.viz import acceptance_by_position_figure

    usual = replace(views["eagle3.1"], usual_by_position=[(0.6, 0.4, 0.8), (0.4, 0.2, 0.6), (0.3, 0.1, 0.5),
                                                          (0.2, 0.0, 0.4)],
                    usual_drift={"draft": [(0.0, 0.0, 0.0), (0.2, 0.1, 0.3)],
                                 "rms": [(1.4, 1.3, 1.5), (1.0, 0.9, 1.2)]})
    position = acceptance_by_position_figure([usual]).data[-1]
    assert position.name == "EAGLE-3.1, k=4: usual" and list(position.y) == [0.6, 0.4, 0.3, 0.2]
    assert list(position.error_y.array) == pytest.approx([0.2] * 4)
    boundary = attention_drift_figure([usual]).data[-1]  # where its own drafts usually begin: 1 - their share
    assert list(boundary.y) == pytest.approx([1.0, 0.8])
    assert list(boundary.error_y.array) == pytest.approx([0.0, 0.1]) and list(boundary.error_y.arrayminus) == \
        pytest.approx([0.0, 0.1])
    rms = hidden_rms_figure([usual]).data[-1]
    assert list(rms.y) == [1.4, 1.0] and list(rms.error_y.array) == pytest.approx([0.1, 0.2])
    assert len(hidden_rms_figure([views["eagle3.1"]]).data) == 1  # no fingerprint: nothing added
