"""The app's page styles (token provenance, stat cards and the layout around them) and its one page script.

Gradio scopes this CSS to the app (it prefixes every selector) and keeps `@media` blocks but drops `@container`
and `@supports` ones: narrow-screen rules go in `@media`.
"""

from __future__ import annotations

from playground.viz import provenance_css, rendered_css, stats_css, tree_css

# The status line and the verdict read in the body's colour and size: they say why nothing happened.
# The chat's copy-all and delete buttons float over its top right corner: the scrolling box of messages starts
# below them (a transparent top border is not scrolled), so no line of an answer, scrolled or not, sits under them
# (a padding inside the scrolled messages kept the first message clear, but not an answer scrolled up to them).
# A refused own pair is said in the panel's status; Gradio's red "Error" mark over the name box would only repeat it.
# A Compare side keeps its height only once it shows a run: empty, it left a blank 250 px before the run (twice at
# phone width, where the sides stack).
LAYOUT_CSS = """
.side-panel { max-height: 460px; overflow-y: auto; }
.side-panel:has(.side-title) { min-height: 220px; padding: 4px 8px; }
.side-title { font-weight: 600; margin-bottom: 4px; }
.side-waiting { font-style: italic; color: var(--body-text-color-subdued, inherit); }
.status-line p { margin: 0; }
#compare-verdict p { font-weight: 600; }
#chat .wrapper > .panel-wrap { border-top: 30px solid transparent; }
#own-name .wrap:has(.error) { display: none !important; }
.preset-info p, .preset-info li { font-size: 0.85em; color: var(--body-text-color-subdued); }
"""

# Small screens and touch devices.
# - Plotly's toolbar (modebar) appears over the top right of a chart, where a narrow chart's title runs: hidden
#   where the screen is narrow or nothing can hover (a tap on a chart would leave it on top of the title).
# - Gradio moves tabs that do not fit behind a "…" menu, measuring the buttons (a hidden copy of them too, hence
#   `.tab-container button`): at phone width, less padding and a slightly smaller font fit all four.
# - A dropdown shows one line: a long choice ends in an ellipsis instead of running under the arrow (the full
#   title is in the open list, which wraps long choices and stays on screen); on a phone the Benchmark tab's two
#   menus take a row each instead of sharing one.
# - Tables scroll sideways inside their block, never widening the page.
# - Compare's prompt box takes the full width on a phone, Run both and Stop side by side under it (beside them it
#   was squeezed to 40 % of the width).
# - The replay panel's short table wraps its cells to fit the width, a phone's too (no sideways scroll): between
#   words, and inside a word only where one alone is wider than its column (a range such as 1.39–6.18 at 390 px).
SMALL_SCREEN_CSS = """
@media (max-width: 640px), (hover: none) {
  .js-plotly-plot .modebar-container { display: none !important; }
}
@media (max-width: 480px) {
  .tab-container button { padding: 0 8px !important; font-size: 13px !important; }
  #bench-profile, #bench-preset { flex: 1 1 100% !important; min-width: 100% !important; }
  #compare-prompt-row { flex-wrap: wrap !important; }
  #compare-prompt-row > * { flex: 1 1 100% !important; min-width: 100% !important; }
  #compare-buttons { flex-direction: row !important; }
  #compare-buttons > * { flex: 1 1 0 !important; }
}
.replay-table table { width: 100% !important; min-width: 0 !important; }
.replay-table th, .replay-table td { white-space: normal !important; min-width: 0 !important; }
.replay-table th, .replay-table th *, .replay-table td, .replay-table td * { word-break: normal !important;
  overflow-wrap: anywhere !important; hyphens: none; }
@media (max-width: 480px) {
  .replay-table th, .replay-table td { padding: 4px 6px !important; font-size: 12px !important; }
}
@media (max-width: 360px) {
  .tab-container button { padding: 0 6px !important; font-size: 12px !important; }
}
.wrap-inner .secondary-wrap { min-width: 0; }
.wrap-inner .secondary-wrap input { min-width: 0; text-overflow: ellipsis; overflow: hidden; white-space: nowrap;
  box-sizing: border-box; padding-right: 20px; }
.wrap > .options { max-width: calc(100vw - 16px) !important; }
.wrap > .options .item { white-space: normal; overflow-wrap: anywhere; }
.table-wrap, .table-container { max-width: 100%; min-width: 0; }
.table-wrap .virtual-table-viewport { max-width: 100%; overflow-x: auto; -webkit-overflow-scrolling: touch; }
"""

# The popup TOKEN_TAP_JS shows (it lives in .gradio-container, so the theme's colours reach it).
TOKEN_TIP_CSS = """
.tok-tip { position: fixed; z-index: 1000; max-width: min(320px, calc(100vw - 16px)); padding: 4px 8px;
  border-radius: 6px; font-size: 12px; line-height: 1.4; pointer-events: none; white-space: normal;
  color: var(--body-text-color, #111); background: var(--background-fill-primary, #fff);
  border: 1px solid var(--border-color-primary, rgba(128,128,128,0.5)); box-shadow: 0 2px 8px rgba(0,0,0,0.18); }
.tok-tip[hidden] { display: none; }
.tok-tapped { outline: 2px solid var(--color-accent, #14b8a6); outline-offset: 0; }
@media (hover: none) {
  .tok-draft, .tok-target { cursor: pointer; }
}
"""

APP_CSS = provenance_css() + rendered_css() + stats_css() + tree_css() + LAYOUT_CSS + SMALL_SCREEN_CSS + TOKEN_TIP_CSS

# Token details on tap: every token span carries its details (step, depth, the drafter's probability) in `title`,
# which touch screens never show. One delegated listener on the document: a tap or click on a token shows its title
# in a small popup beside it; the next tap anywhere else, Escape, scrolling or resizing hides it. The text goes in
# with textContent, never as HTML. For `demo.launch(js=TOKEN_TAP_JS)` (Gradio calls the function once, on load).
TOKEN_TAP_JS = """
() => {
  if (window.__eagleTokenTap) return;
  window.__eagleTokenTap = true;
  const TOKENS = ".tok-draft, .tok-target";
  let tip = null;
  let owner = null;
  const hide = () => {
    if (tip) tip.hidden = true;
    if (owner) owner.classList.remove("tok-tapped");
    owner = null;
  };
  const show = (token, text) => {
    if (!tip || !tip.isConnected) {
      tip = document.createElement("div");
      tip.className = "tok-tip";
      tip.setAttribute("role", "tooltip");
      (document.querySelector(".gradio-container") || document.body).appendChild(tip);
    }
    tip.textContent = text;
    tip.hidden = false;
    const box = token.getBoundingClientRect();
    const gap = 6, margin = 8;
    const left = Math.max(margin, Math.min(box.left, window.innerWidth - tip.offsetWidth - margin));
    let top = box.bottom + gap;
    if (top + tip.offsetHeight > window.innerHeight - margin) top = Math.max(margin, box.top - gap - tip.offsetHeight);
    tip.style.left = left + "px";
    tip.style.top = top + "px";
    if (owner) owner.classList.remove("tok-tapped");
    owner = token;
    token.classList.add("tok-tapped");
  };
  document.addEventListener("click", (event) => {
    const target = event.target instanceof Element ? event.target : null;
    const token = target ? target.closest(TOKENS) : null;
    const selecting = String(window.getSelection ? window.getSelection() : "").length > 0;
    const text = token ? (token.getAttribute("title") || "") : "";
    if (token && token !== owner && text && !selecting) show(token, text);
    else hide();
  });
  document.addEventListener("keydown", (event) => { if (event.key === "Escape") hide(); });
  window.addEventListener("scroll", hide, { capture: true, passive: true });
  window.addEventListener("resize", hide);
}
"""
