"""The answer rendered from its Markdown, with every visible character still inside its token's provenance span.

`provenance_html` shows the raw text; this view renders what the model wrote as Markdown (code fences, headings,
lists, quotes, rules, paragraphs; inline code, bold, italic) so prose and code are readable, and keeps provenance
per character: each character of the answer maps to the token that produced it, and every run of visible text is
cut into runs of one token, each in that token's span (`provenance.span_open`: the same classes and tooltips). A
token that straddles Markdown structure (a fence line and the code after it, a paragraph break and the next word) is
simply split; the Markdown markers themselves (fences and their info string, ``#``, list markers, ``>``, ``**``,
``*``, ``_``, backticks, rules, blank lines) are consumed. Everything else is shown exactly once, HTML-escaped.

A small renderer written for this, not a CommonMark implementation, and conservative: an unmatched marker is shown
literally, ``_`` emphasises only at word boundaries (``snake_case`` stays as it is) and ``__`` never does
(``__init__`` stays as it is), runs of three or more ``*`` are literal, backslashes are shown as written (an escaped
marker is literal), and there are no tables, setext headings, indented code blocks or raw HTML. A fence that is not
closed yet (the answer is still streaming) renders as an open code block.

The output is one line of HTML starting with ``<div``: Gradio's Chatbot runs messages through Markdown, which passes
such a block through untouched (a raw newline inside ``<pre>`` could end the block at a blank line), then through its
sanitiser (class and title survive). Line breaks are ``<br>`` in prose and ``&#10;`` in code.

It runs on every UI update of a streaming answer, so it is linear in the answer's length: a few regular-expression
matches per line, one pass over the delimiter runs of each paragraph, and one span per (token, text run).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from .provenance import TokenPiece, escape_text, span_open

Line = tuple[int, int, int]  # (start, end, break_end) in the answer: text[start:end] is the content (any prefix such
# as indentation or "> " already skipped), text[end:break_end] its line break ("" on the last line)

FENCE = re.compile(r"( {0,3})(`{3,}|~{3,})(.*)$")
FENCE_CLOSE = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*$")
HEADING = re.compile(r" {0,3}(#{1,6})(?:[ \t]+|$)")
HEADING_CLOSE = re.compile(r"[ \t]+#+[ \t]*$|^#+[ \t]*$")
RULE = re.compile(r" {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
QUOTE = re.compile(r" {0,3}> ?")
ITEM = re.compile(r"( {0,3})(?:[-+*]|(\d{1,9})[.)])(?:[ \t]+|$)")
DELIMS = re.compile(r"`+|\*+|_+")
LANGUAGE = re.compile(r"[\w#+.-]+")


def rendered_html(pieces: Iterable[TokenPiece]) -> str:
    """The answer's Markdown as HTML inside ``<div class="rendered">``, on one line, with provenance spans."""
    return _Renderer([p for p in pieces if p.text]).html()


# A streaming answer is rendered again on every update, its earlier tokens unchanged: their spans are cached.
_span_open = lru_cache(maxsize=8192)(span_open)


@lru_cache(maxsize=8192)
def _whole_span(piece: TokenPiece, newline: str) -> str:
    return f"{span_open(piece)}{escape_text(piece.text, newline)}</span>"


class _Renderer:
    def __init__(self, pieces: list[TokenPiece]) -> None:
        self.pieces = pieces
        self.text = text = "".join(p.text for p in pieces)
        self.owner = [k for k, p in enumerate(pieces) for _ in p.text]  # per character: the piece it came from
        self.starts: list[int] = []  # per piece: where its text starts and ends in the answer
        self.ends: list[int] = []
        end = 0
        for p in pieces:
            self.starts.append(end)
            end += len(p.text)
            self.ends.append(end)
        self.out: list[str] = []
        self.lines: list[Line] = []
        pos = 0
        while (nl := text.find("\n", pos)) >= 0:
            self.lines.append((pos, nl - 1 if nl > pos and text[nl - 1] == "\r" else nl, nl + 1))
            pos = nl + 1
        self.lines.append((pos, len(text), len(text)))

    def html(self) -> str:
        self.out.append('<div class="rendered">')
        if self.text:
            self.blocks(self.lines)
        self.out.append("</div>")
        return "".join(self.out)

    # --- text with provenance ---------------------------------------------------------------------------------

    def emit(self, a: int, b: int, newline: str = "<br>") -> None:
        """text[a:b], escaped, as one span per run of characters from the same token."""
        owner, starts, ends, pieces, out = self.owner, self.starts, self.ends, self.pieces, self.out
        while a < b:
            k = owner[a]
            e = ends[k]
            if a == starts[k] and e <= b:  # the whole token, as almost always
                out.append(_whole_span(pieces[k], newline))
            else:
                e = min(e, b)
                out += (_span_open(pieces[k]), escape_text(self.text[a:e], newline), "</span>")
            a = e

    # --- blocks -------------------------------------------------------------------------------------------------

    def blocks(self, lines: list[Line], bare_first: bool = False) -> None:
        """Render lines as blocks; with bare_first (a list item), a first paragraph goes without <p>."""
        text, out = self.text, self.out
        i, n = 0, len(lines)
        while i < n:
            s, e, _ = lines[i]
            line = text[s:e]
            if not line.strip():
                i += 1
                continue
            first, bare_first = bare_first, False
            if m := self.fence(line):
                i = self.code_block(lines, i, m)
            elif m := HEADING.match(line):
                level = len(m.group(1))
                rest = line[m.end():]
                close = HEADING_CLOSE.search(rest)
                out.append(f"<h{level}>")
                self.inline([(s + m.end(), s + m.end() + (close.start() if close else len(rest)), e)])
                out.append(f"</h{level}>")
                i += 1
            elif RULE.match(line):
                out.append("<hr>")
                i += 1
            elif QUOTE.match(line):
                inner = []
                while i < n and (m := QUOTE.match(text[lines[i][0]:lines[i][1]])):
                    inner.append((lines[i][0] + m.end(), lines[i][1], lines[i][2]))
                    i += 1
                out.append("<blockquote>")
                self.blocks(inner)
                out.append("</blockquote>")
            elif ITEM.match(line):
                i = self.list_block(lines, i)
            else:
                j = i + 1
                while j < n and not self.ends_paragraph(text[lines[j][0]:lines[j][1]]):
                    j += 1
                if not first:
                    out.append("<p>")
                self.inline(lines[i:j])
                if not first:
                    out.append("</p>")
                i = j

    @staticmethod
    def fence(line: str) -> re.Match | None:
        m = FENCE.match(line)
        return m if m and not (m.group(2)[0] == "`" and "`" in m.group(3)) else None  # ```x``` is inline code

    def starts_block(self, line: str, in_paragraph: bool = False) -> bool:
        if self.fence(line) or HEADING.match(line) or RULE.match(line) or QUOTE.match(line):
            return True
        m = ITEM.match(line)
        if not m or not in_paragraph:
            return bool(m)
        # CommonMark: only a non-empty item, and of numbered ones only "1.", interrupts a paragraph
        return m.end() < len(line) and m.group(2) in (None, "1")

    def ends_paragraph(self, line: str) -> bool:
        return not line.strip() or self.starts_block(line, in_paragraph=True)

    def code_block(self, lines: list[Line], i: int, m: re.Match) -> int:
        text, out = self.text, self.out
        indent, marker = len(m.group(1)), m.group(2)
        info = m.group(3).split()
        language = LANGUAGE.fullmatch(info[0]) if info else None
        out.append('<pre class="md-code"><code class="language-' + language.group() + '">' if language
                   else '<pre class="md-code"><code>')
        j, n = i + 1, len(lines)
        body = []
        while j < n:
            s, e, b = lines[j]
            line = text[s:e]
            if (c := FENCE_CLOSE.match(line)) and c.group(1)[0] == marker[0] and len(c.group(1)) >= len(marker):
                break
            for _ in range(indent):  # the fence's own indentation is not part of the code
                if s < e and text[s] == " ":
                    s += 1
            body.append((s, e, b))
            j += 1
        closed = j < n
        for k, (s, e, b) in enumerate(body):
            if k == len(body) - 1 and closed:  # the line break before a closing fence belongs to the fence
                self.emit(s, e, "&#10;")
            elif b - e == 2:  # of "\r\n", only the "\n" is shown (the two may be different tokens')
                self.emit(s, e, "&#10;")
                self.emit(b - 1, b, "&#10;")
            else:
                self.emit(s, b, "&#10;")
        out.append("</code></pre>")
        return j + 1 if closed else j

    def list_block(self, lines: list[Line], i: int) -> int:
        text, out = self.text, self.out
        first = ITEM.match(text[lines[i][0]:lines[i][1]])
        ordered = first.group(2) is not None
        start = int(first.group(2)) if ordered else 1
        out.append(("<ol>" if start == 1 else f'<ol start="{start}">') if ordered else "<ul>")
        n = len(lines)
        while i < n:
            s, e, b = lines[i]
            line = text[s:e]
            m = ITEM.match(line)
            if not m or RULE.match(line) or (m.group(2) is not None) != ordered:
                break
            marker_indent = len(m.group(1))
            marker_end = len(m.group(0).rstrip(" \t"))
            content_indent = _columns(line[:m.end()]) if m.end() < len(line) else _columns(line[:marker_end]) + 1
            threshold = min(content_indent, marker_indent + 2)
            item = [(s + m.end(), e, b)]
            i += 1
            after_blank = m.end() == len(line)
            while i < n:
                s, e, b = lines[i]
                line = text[s:e]
                if not line.strip():
                    item.append((s, e, b))
                    after_blank = True
                elif _columns(line[:len(line) - len(line.lstrip(" \t"))]) >= threshold:
                    item.append((_skip_columns(text, s, e, content_indent), e, b))
                    after_blank = False
                elif not after_blank and not self.starts_block(line):  # a lazy continuation line
                    item.append((s, e, b))
                else:
                    break
                i += 1
            out.append("<li>")
            self.blocks(item, bare_first=True)
            out.append("</li>")
        out.append("</ol>" if ordered else "</ul>")
        return i

    # --- inline -----------------------------------------------------------------------------------------------

    def inline(self, lines: list[Line]) -> None:
        """Inline Markdown over these lines, joined by their line breaks (<br>)."""
        text = self.text
        parts, chunks = [], []  # chunks: (virtual start, source start, source end) of each piece of `virtual`
        at = 0
        for k, (s, e, b) in enumerate(lines):
            last = k == len(lines) - 1
            if not last and b - e == 1:  # the line and its "\n", as in the source
                parts.append(text[s:b])
                chunks.append((at, s, b))
                at += b - s
                continue
            parts.append(text[s:e])
            chunks.append((at, s, e))
            at += e - s
            if not last:  # of "\r\n", the "\n" (the two may be different tokens')
                parts.append("\n")
                chunks.append((at, b - 1, b))
                at += 1
        virtual = "".join(parts)
        ci = 0

        def emit(x: int, y: int) -> None:  # virtual [x, y): chunks are visited left to right, once overall
            nonlocal ci
            while x < y:
                while ci + 1 < len(chunks) and chunks[ci + 1][0] <= x:
                    ci += 1
                v0, s0, e0 = chunks[ci]
                stop = min(y, v0 + e0 - s0)
                self.emit(s0 + x - v0, s0 + stop - v0)
                x = stop

        marks = _inline_marks(virtual)
        pos = 0
        for start, end, kind in marks:
            emit(pos, start)
            if kind == "code":
                width = _run_length(virtual, start)
                self.out.append("<code>")
                emit(start + width, end - width)
                self.out.append("</code>")
            else:
                self.out.append(kind)
            pos = end
        emit(pos, len(virtual))


def _columns(prefix: str) -> int:
    cols = 0
    for c in prefix:
        cols = cols + 4 - cols % 4 if c == "\t" else cols + 1
    return cols


def _skip_columns(text: str, s: int, e: int, cols: int) -> int:
    at = 0
    while s < e and at < cols and text[s] in " \t":
        at = at + 4 - at % 4 if text[s] == "\t" else at + 1
        s += 1
    return s


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
    for m in DELIMS.finditer(v):
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


def rendered_css() -> str:
    """Styles for `rendered_html`: proportional prose, monospace code blocks whose long lines wrap, light and dark
    themes through Gradio's theme variables. The token fills come from `provenance_css`.

    Code wraps rather than scrolling sideways: phones show no scrollbar, so a long line looked cut off, and every
    update of a streaming answer replaces the block, which put its scroll back to the start."""
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
.rendered strong { font-weight: 650; }
.rendered .tok-draft, .rendered .tok-target { border-radius: 2px; }
"""
