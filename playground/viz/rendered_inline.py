"""The rendered view's text with provenance: each character of the answer mapped to the token that produced it, and
the inline Markdown pass over a block's text (`rendered_blocks` finds the blocks, `rendered` writes them).

`ProvenanceWriter` writes any stretch of the answer as HTML, escaped, cut into runs of one token, each run in that
token's span (`provenance.span_open`: the same classes and tooltips as the monospace view). A token that straddles
Markdown structure is simply split; what is not written (markers, indentation) leaves no trace.

`write_inline` renders a block's text: code spans, bold and italic, line breaks as ``<br>``. It is conservative where
CommonMark is not: an unmatched marker is shown literally, ``_`` emphasises only at word boundaries (``snake_case``
stays as it is) and ``__`` never does (``__init__`` stays as it is), runs of three or more ``*`` are literal,
backslashes are shown as written (an escaped marker is literal), and links, images, autolinks, entities and HTML are
shown as written, escaped: the model's text never becomes a link or markup of its own.

Linear in the answer's length: one pass over the delimiter runs of each block, one span per (token, text run), and
the spans of whole tokens cached, since a streaming answer is rendered again on every update with its earlier tokens
unchanged.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from functools import lru_cache

from .provenance import TokenPiece, escape_text, span_open

Segment = tuple[int, int]  # [start, end) of the answer's text

DELIMITER_RUNS = re.compile(r"`+|\*+|_+")

_span_open = lru_cache(maxsize=8192)(span_open)


@lru_cache(maxsize=8192)
def _whole_span(piece: TokenPiece, newline: str) -> str:
    return f"{span_open(piece)}{escape_text(piece.text, newline)}</span>"


class ProvenanceWriter:
    """The answer's text (``\\r\\n`` and ``\\r`` read as ``\\n``, as Markdown reads them) and the HTML written so far
    (`out`); `write` adds a stretch of the text with each character in its token's span."""

    def __init__(self, pieces: Iterable[TokenPiece]) -> None:
        self.pieces = _with_unix_line_breaks([p for p in pieces if p.text])
        self.text = "".join(p.text for p in self.pieces)
        self.owner = [k for k, p in enumerate(self.pieces) for _ in p.text]  # per character: the piece it came from
        self.starts: list[int] = []  # per piece: where its text starts and ends in the answer
        self.ends: list[int] = []
        end = 0
        for p in self.pieces:
            self.starts.append(end)
            end += len(p.text)
            self.ends.append(end)
        self.out: list[str] = []

    def write(self, start: int, end: int, newline: str = "<br>") -> None:
        """text[start:end], escaped, as one span per run of characters from the same token."""
        owner, starts, ends, pieces, out = self.owner, self.starts, self.ends, self.pieces, self.out
        while start < end:
            k = owner[start]
            stop = ends[k]
            if start == starts[k] and stop <= end:  # the whole token, as almost always
                out.append(_whole_span(pieces[k], newline))
            else:
                stop = min(stop, end)
                out += (_span_open(pieces[k]), escape_text(self.text[start:stop], newline), "</span>")
            start = stop


def _with_unix_line_breaks(pieces: list[TokenPiece]) -> list[TokenPiece]:
    """The pieces with each "\\r\\n" and "\\r" as one "\\n": that of the "\\n" where there is one (the two may be
    different tokens'). A piece left with no text is dropped."""
    if not any("\r" in p.text for p in pieces):
        return pieces
    unix = []
    for k, p in enumerate(pieces):
        text = p.text
        if text.endswith("\r") and k + 1 < len(pieces) and pieces[k + 1].text.startswith("\n"):
            text = text[:-1]
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        if text:
            unix.append(dataclasses.replace(p, text=text))
    return unix


def write_inline(writer: ProvenanceWriter, segments: list[Segment]) -> None:
    """Inline Markdown over the text of these segments read as one string (a block's lines and the line breaks
    between them, its markers and indentation left out)."""
    text = writer.text
    joined: list[Segment] = []
    for start, end in segments:
        if start == end:
            continue
        if joined and joined[-1][1] == start:
            joined[-1] = (joined[-1][0], end)
        else:
            joined.append((start, end))
    if not joined:
        return
    block = "".join(text[start:end] for start, end in joined)
    at_in_block = []  # per joined segment: where it starts in `block`
    length = 0
    for start, end in joined:
        at_in_block.append(length)
        length += end - start
    cursor = 0

    def write_block(x: int, y: int) -> None:  # block[x:y]; visits the segments left to right, once overall
        nonlocal cursor
        while x < y:
            while cursor + 1 < len(joined) and at_in_block[cursor + 1] <= x:
                cursor += 1
            offset, (start, end) = at_in_block[cursor], joined[cursor]
            stop = min(y, offset + end - start)
            writer.write(start + x - offset, start + stop - offset)
            x = stop

    at = 0
    for start, end, kind in _inline_marks(block):
        write_block(at, start)
        if kind == "code":
            width = _run_length(block, start)
            writer.out.append("<code>")
            write_block(start + width, end - width)
            writer.out.append("</code>")
        else:
            writer.out.append(kind)
        at = end
    write_block(at, len(block))


def _run_length(text: str, at: int) -> int:
    c, n = text[at], at
    while n < len(text) and text[n] == c:
        n += 1
    return n - at


def _is_punct(c: str) -> bool:
    return not c.isalnum() and not c.isspace()


def _inline_marks(v: str) -> list[tuple[int, int, str]]:
    """(start, end, what) for the consumed markers of inline Markdown in v, in order: a code span whole (kind
    "code": its backtick runs at both ends), or an emphasis delimiter (kind: the tag to write in its place)."""
    runs = []
    for m in DELIMITER_RUNS.finditer(v):
        start, end = m.span()
        if start and v[start - 1] == "\\":  # an escaped marker is literal (the backslash is shown)
            start += 1
        if start < end:
            runs.append((start, end))
    marks: list[tuple[int, int, str]] = []
    # code spans first: a backtick run up to the next run of the same length; what lies between is code
    ticks: dict[int, list[int]] = {}
    for k, (start, end) in enumerate(runs):
        if v[start] == "`":
            ticks.setdefault(end - start, []).append(k)
    taken = [False] * len(runs)
    seen: dict[int, int] = {}  # per length: how far into ticks[length] the scan has gone
    k = 0
    while k < len(runs):
        start, end = runs[k]
        if v[start] == "`" and not taken[k]:
            same, at = ticks[end - start], seen.get(end - start, 0)
            while at < len(same) and same[at] <= k:
                at += 1
            seen[end - start] = at
            if at < len(same):
                close = same[at]
                marks.append((start, runs[close][1], "code"))
                for j in range(k, close + 1):
                    taken[j] = True
                k = close + 1
                continue
        k += 1
    # emphasis: ** (bold), * and _ (italic), paired nearest-first with a stack; unpaired delimiters stay literal
    stack: list[tuple[int, int, str]] = []
    waiting: dict[tuple[str, int], int] = {}
    for k, (start, end) in enumerate(runs):
        c, width = v[start], end - start
        if taken[k] or c == "`" or width > 2 or (c == "_" and width == 2):
            continue
        before = v[start - 1] if start else " "
        after = v[end] if end < len(v) else " "
        left = not after.isspace() and (not _is_punct(after) or before.isspace() or _is_punct(before))
        right = not before.isspace() and (not _is_punct(before) or after.isspace() or _is_punct(after))
        if c == "_":
            can_open, can_close = left and (not right or _is_punct(before)), right and (not left or _is_punct(after))
        else:
            can_open, can_close = left, right
        key = (c, width)
        if can_close and waiting.get(key):
            at = len(stack) - 1
            while stack[at][2] != c or stack[at][1] - stack[at][0] != width:
                at -= 1
            o_start, o_end, _ = stack[at]
            for s_start, s_end, s_c in stack[at:]:
                waiting[(s_c, s_end - s_start)] -= 1
            del stack[at:]
            tag = "strong" if width == 2 else "em"
            marks += [(o_start, o_end, f"<{tag}>"), (start, end, f"</{tag}>")]
        elif can_open:
            stack.append((start, end, c))
            waiting[key] = waiting.get(key, 0) + 1
    marks.sort()
    return marks
