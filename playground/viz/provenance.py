"""Token provenance: which generated token came from an accepted draft (and at which depth) and which from the target.

Built from token ids in StepEvents, never from string matching: ``event.emitted = drafted[:accepted] + [bonus]``,
so ``emitted[i]`` for ``i < accepted`` is a draft accepted at depth ``i + 1`` and the last one is the target's own
(bonus) token. The prefill event has no drafts, so its token is the target's.

Text is decoded incrementally from ids (`engine.text.IncrementalDecoder`): a token whose bytes end inside a
multi-byte character contributes no text, and the character is shown on the token that completes it.
All model text is HTML-escaped, and bidirectional control characters are shown, not applied.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from plotly.colors import sample_colorscale

from playground.engine import MAX_K, StepEvent
from playground.engine.text import IncrementalDecoder

# Draft depths on Viridis (ordered light to dark, readable with the common colour-vision deficiencies): depth 1 is
# yellow, then green, teal, blue, indigo, purple. The first depths, where most accepted drafts are, take the widest
# steps; depths beyond the last share its colour.
DEPTH_POSITIONS = (1.0, 0.8, 0.6, 0.45, 0.33, 0.24, 0.16, 0.1, 0.05, 0.0)
_DEPTH_RGB = [tuple(int(float(v)) for v in c[c.index("(") + 1 : -1].split(","))
              for c in sample_colorscale("Viridis", list(DEPTH_POSITIONS))]
DARK_THEME_LIFT = 0.35  # on a dark page the deep (dark) colours are mixed this far towards white


def depth_colour(depth: int, alpha: float = 1.0, lift: float = 0.0) -> str:
    """Colour of draft depth d (1-based) as CSS rgba; the charts use it too. `lift` mixes it towards white."""
    rgb = _DEPTH_RGB[min(max(depth, 1), len(_DEPTH_RGB)) - 1]
    r, g, b = (round(c + (255 - c) * lift) for c in rgb)
    return f"rgba({r}, {g}, {b}, {alpha})"


@dataclass(frozen=True)
class TokenPiece:
    """One generated token and the text it adds to the answer."""

    token_id: int
    text: str  # "" while its bytes are an unfinished character (the completing token carries the character)
    step: int
    depth: int | None  # 1..k for an accepted draft; None for the target's own token
    draft_prob: float | None = None  # the drafter's probability of this draft token, when known

    @property
    def from_draft(self) -> bool:
        return self.depth is not None


class ProvenanceBuilder:
    """Accumulates TokenPieces from StepEvents as they stream in."""

    def __init__(self, decode: Callable[[list[int]], str]) -> None:
        self._decoder = IncrementalDecoder(decode)
        self.pieces: list[TokenPiece] = []

    def add(self, event: StepEvent) -> list[TokenPiece]:
        new = []
        for i, token in enumerate(event.emitted):
            is_draft = i < event.accepted
            prob = event.draft_probs[i] if is_draft and event.draft_probs and i < len(event.draft_probs) else None
            new.append(TokenPiece(token, self._decoder.push(token), event.step, i + 1 if is_draft else None, prob))
        if event.finished:
            self._finish(new)
        self.pieces += new
        return new

    def _finish(self, new: list[TokenPiece]) -> None:
        rest = self._decoder.flush()
        if not rest:
            return
        if new:
            new[-1] = _with_more_text(new[-1], rest)
        elif self.pieces:
            self.pieces[-1] = _with_more_text(self.pieces[-1], rest)

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.pieces)


def _with_more_text(piece: TokenPiece, extra: str) -> TokenPiece:
    return TokenPiece(piece.token_id, piece.text + extra, piece.step, piece.depth, piece.draft_prob)


def token_pieces(events: Iterable[StepEvent], decode: Callable[[list[int]], str]) -> list[TokenPiece]:
    """Provenance of a finished (or partial) run in one go."""
    builder = ProvenanceBuilder(decode)
    for event in events:
        builder.add(event)
    return builder.pieces


# Unicode's bidirectional controls (embeddings, overrides, isolates, marks): in shown text they would reorder
# whatever follows them, so they are shown as their code point instead of being applied.
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def escape_html(text: str) -> str:
    """User or model text as inert HTML: escaped, with bidirectional controls made visible (e.g. `<U+202E>`)."""
    text = html.escape(text, quote=True)
    if BIDI_CONTROLS.isdisjoint(text):
        return text
    return "".join(f"&lt;U+{ord(c):04X}&gt;" if c in BIDI_CONTROLS else c for c in text)


def escape_text(text: str, newline: str = "<br>") -> str:
    """Model text as HTML on one line: escaped (`escape_html`), and line breaks (\\n, \\r\\n, \\r) as `newline`, so
    that a Markdown renderer treats the block as raw HTML."""
    text = escape_html(text).replace("\r\n", "\n").replace("\r", "\n")
    return text.replace("\n", newline)


def span_open(piece: TokenPiece) -> str:
    """The opening tag of a token's provenance span: its class (origin, depth) and a tooltip. Shared by the
    monospace view here and the rendered Markdown view (`viz.rendered`), which may split a token across spans."""
    if piece.from_draft:
        prob = f", p={piece.draft_prob:.2f}" if piece.draft_prob is not None else ""
        return (f'<span class="tok-draft depth-{piece.depth}" data-depth="{piece.depth}" data-step="{piece.step}" '
                f'title="step {piece.step}, depth {piece.depth}{prob}">')
    return f'<span class="tok-target" data-step="{piece.step}" title="step {piece.step}, target token">'


def _span(piece: TokenPiece) -> str:
    return f"{span_open(piece)}{escape_text(piece.text)}</span>"


def provenance_html(pieces: Iterable[TokenPiece]) -> str:
    """The answer as coloured spans inside ``<div class="provenance">``, on one line of HTML."""
    return f'<div class="provenance">{"".join(_span(p) for p in pieces if p.text)}</div>'


def legend_html(k: int) -> str:
    chips = "".join(f'<span class="tok-draft depth-{d}" data-depth="{d}" title="accepted draft at depth {d}">'
                    f"{d}</span>" for d in range(1, k + 1))
    return ('<div class="provenance-legend"><span class="tok-target legend-target" title="the target\'s own token">'
            f'target token</span><span class="legend-label">accepted draft at depth</span>{chips}</div>')


def provenance_css() -> str:
    """Styles for the spans above; readable in light and dark themes (only theme variables and translucent fills).

    Colours key off the ``depth-d`` class, not ``data-depth``: Gradio's Chatbot sanitiser drops data attributes."""
    depth_rules = "\n".join(
        f".tok-draft.depth-{d} {{ background: {depth_colour(d, 0.35)}; "
        f"border-bottom: 2px solid {depth_colour(d)}; }}\n"
        f".dark .tok-draft.depth-{d} {{ background: {depth_colour(d, 0.45, DARK_THEME_LIFT)}; "
        f"border-bottom-color: {depth_colour(d, 1.0, DARK_THEME_LIFT)}; }}"
        for d in range(1, MAX_K + 1)
    )
    return f"""
.provenance {{ white-space: pre-wrap; overflow-wrap: anywhere; line-height: 1.6;
  font-family: var(--font-mono, ui-monospace, SFMono-Regular, Menlo, Consolas, monospace); font-size: 0.92em;
  color: var(--body-text-color, inherit); }}
.provenance .tok-draft, .provenance .tok-target {{ border-radius: 2px; }}
.tok-draft {{ color: inherit; }}
.tok-target {{ color: inherit; }}
.provenance-legend {{ display: flex; flex-wrap: wrap; gap: 4px; align-items: center; font-size: 0.85em;
  color: var(--body-text-color-subdued, inherit); }}
.provenance-legend .tok-draft, .provenance-legend .tok-target {{ padding: 0 6px; border-radius: 3px;
  font-family: var(--font-mono, monospace); }}
.provenance-legend .tok-draft {{ color: var(--body-text-color, inherit); font-weight: 600; }}
.provenance-legend .legend-target {{ border: 1px dashed var(--border-color-primary, #999); }}
.provenance-legend .legend-label {{ margin-left: 10px; }}
{depth_rules}
"""
