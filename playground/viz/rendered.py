"""The answer rendered from its Markdown, with every visible character still inside its token's provenance span.

`provenance_html` shows the raw text; this view renders what the model wrote as Markdown so prose, code and tables
are readable, and keeps provenance per character. markdown-it-py finds the blocks (`rendered_blocks`: CommonMark's
code blocks, headings, lists, quotes, rules and paragraphs, and GFM tables), each with the source lines of its text;
this module writes their tags and, from the answer itself, their text: code as written (less the block's
indentation), and the rest through `rendered_inline`, which does the inline Markdown (code, bold, italic, line breaks)
and puts each run of characters from one token in that token's span. The block markers (fences and their info
string, ``#``, list markers, ``>``, a table's pipes and delimiter row, setext underlines) and indentation are
consumed; everything else is shown exactly once, HTML-escaped.

The model's text never becomes markup of its own: raw HTML is off (an HTML-looking line is a paragraph, shown as
text), link reference definitions are off (shown as written), and no links are made at all, so no URL,
``javascript:`` or other, reaches an ``href``. A fence that is not closed yet (the answer is still streaming) renders
as an open code block; any prefix of an answer renders.

The output is one line of HTML starting with ``<div``: Gradio's Chatbot runs messages through Markdown, which passes
such a block through untouched (a raw newline inside ``<pre>`` could end the block at a blank line), then through its
sanitiser (class and title survive). Line breaks are ``<br>`` in prose and ``&#10;`` in code.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from markdown_it.token import Token

from .provenance import TokenPiece
from .rendered_blocks import markdown_blocks
from .rendered_inline import ProvenanceWriter, Segment, write_inline
from .rendered_style import rendered_css

__all__ = ["rendered_css", "rendered_html"]

LANGUAGE = re.compile(r"[\w#+.-]+")
BLOCK_TAGS = frozenset({"p", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "ul", "ol", "li",
                        "table", "thead", "tbody", "tr", "th", "td"})
TEXT_ALIGNS = frozenset({"text-align:left", "text-align:center", "text-align:right"})
# What markdown-it trims from a table row and its cells: ASCII whitespace, Unicode's space separators, line and
# paragraph separators
MARKDOWN_SPACE = "\t\n\v\f\r \xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"

Lines = list[tuple[int, int, int]]  # per source line of a block: (start, start of its text, end) in the answer


def rendered_html(pieces: Iterable[TokenPiece]) -> str:
    """The answer's Markdown as HTML inside ``<div class="rendered">``, on one line, with provenance spans."""
    writer = ProvenanceWriter(pieces)
    writer.out.append('<div class="rendered">')
    if writer.text:
        source = writer.text.replace("\0", "\ufffd")  # as markdown-it reads it (the same length)
        _write_blocks(writer, source, markdown_blocks(source))
    writer.out.append("</div>")
    return "".join(writer.out)


def _write_blocks(writer: ProvenanceWriter, source: str, tokens: list[Token]) -> None:
    out = writer.out
    row_cells: Iterable[list[Segment]] = iter(())
    for i, token in enumerate(tokens):
        kind = token.type
        if kind == "inline":
            parent = tokens[i - 1]
            if parent.type in ("th_open", "td_open"):
                segments = next(row_cells, [])
            elif parent.type == "heading_open" and parent.markup.startswith("#"):
                segments = _atx_heading_text(source, token)
            else:
                segments = _paragraph_text(source, token.meta["lines"])
            write_inline(writer, segments)
        elif kind in ("fence", "code_block"):
            _write_code(writer, token)
        elif kind == "hr":
            out.append("<hr>")
        elif token.hidden or token.tag not in BLOCK_TAGS:  # hidden: a paragraph in a tight list goes without <p>
            continue
        elif token.nesting == -1:
            out.append(f"</{token.tag}>")
        elif kind == "ordered_list_open" and token.attrs.get("start", 1) != 1:
            out.append(f'<ol start="{int(token.attrs["start"])}">')
        elif kind in ("th_open", "td_open") and token.attrs.get("style") in TEXT_ALIGNS:
            out.append(f'<{token.tag} style="{token.attrs["style"]}">')
        else:
            if kind == "tr_open":
                row_cells = iter(_table_cells(source, token.meta["lines"][0]))
            out.append(f"<{token.tag}>")


def _paragraph_text(source: str, lines: Lines) -> list[Segment]:
    """A paragraph's (or setext heading's) lines without their indentation and trailing blanks, and the line breaks
    between them."""
    segments = []
    for k, (_, start, end) in enumerate(lines):
        if k:
            segments.append((lines[k - 1][2], lines[k - 1][2] + 1))  # the previous line's "\n"
        while end > start and source[end - 1] in " \t":
            end -= 1
        segments.append((start, end))
    return segments


def _atx_heading_text(source: str, token: Token) -> list[Segment]:
    _, start, end = token.meta["lines"][0]
    while start < end and source[start] == "#":  # the opening run of #; the text is the first match after it
        start += 1
    at = source.find(token.content, start, end) if token.content else -1
    return [(at, at + len(token.content))] if at >= 0 else []


def _table_cells(source: str, line: tuple[int, int, int]) -> list[list[Segment]]:
    """A table row's cells, as markdown-it splits them (at each pipe not preceded by a backslash; a leading and a
    trailing pipe are the row's edges), each trimmed, an escaped pipe shown without its backslash."""
    _, start, end = line
    while start < end and source[start] in MARKDOWN_SPACE:
        start += 1
    while end > start and source[end - 1] in MARKDOWN_SPACE:
        end -= 1
    cells: list[list[Segment]] = []
    cell_start, escapes = start, []
    for at in range(start, end + 1):
        if at < end and source[at] != "|":
            continue
        if at < end and at > start and source[at - 1] == "\\":
            escapes.append(at - 1)
            continue
        cells.append(_cell_segments(source, cell_start, at, escapes))
        cell_start, escapes = at + 1, []
    if source[start:start + 1] == "|":
        cells.pop(0)
    if end > start and source[end - 1] == "|" and (end - 1 == start or source[end - 2] != "\\"):
        cells.pop()
    return cells


def _cell_segments(source: str, start: int, end: int, escapes: list[int]) -> list[Segment]:
    while start < end and source[start] in MARKDOWN_SPACE:
        start += 1
    while end > start and source[end - 1] in MARKDOWN_SPACE:
        end -= 1
    segments = []
    for backslash in escapes:
        if start <= backslash < end:
            segments.append((start, backslash))
            start = backslash + 1
    segments.append((start, end))
    return segments


def _write_code(writer: ProvenanceWriter, token: Token) -> None:
    """A fenced or indented code block, each line as written but for the block's indentation. A fence that is not
    closed yet shows its last line break (more code is on its way); a closed one leaves it to the closing fence."""
    out = writer.out
    info = token.info.split()
    language = LANGUAGE.fullmatch(info[0]) if info else None
    out.append(f'<pre class="md-code"><code class="language-{language.group()}">' if language
               else '<pre class="md-code"><code>')
    code_lines = token.content.split("\n")
    if code_lines[-1] == "":  # the content's last line break, or no content at all
        code_lines.pop()
    lines = token.meta["lines"]
    if token.type == "fence":
        lines = lines[1:]  # the opening fence
        closed = len(lines) > len(code_lines)
    else:
        closed = True
    count = min(len(lines), len(code_lines))
    for k in range(count):
        line_start, _, line_end = lines[k]
        # the line as written, less the indentation markdown-it cut (a tab it cut only partly is kept whole)
        with_break = (k < count - 1 or not closed) and line_end < len(writer.text)
        writer.write(max(line_start, line_end - len(code_lines[k])), line_end + with_break, "&#10;")
    out.append("</code></pre>")
