"""The answer's Markdown blocks, from markdown-it-py, each token that carries text knowing where its lines lie in the
answer; a streaming answer's settled beginning is parsed once.

CommonMark's block structure (fenced and indented code, headings, lists, block quotes, rules, paragraphs) and GFM
tables; raw HTML and link reference definitions off, so HTML-looking lines and ``[x]: url`` lines are paragraphs, and
markdown-it's own inline pass off (`rendered_inline` does it over the answer's own characters).

A streaming answer is rendered again on every update, a few tokens longer each time. Appended text cannot change the
blocks before a complete top-level line that starts a block after a blank line: CommonMark reads blocks forwards, and
its few look-backs (a setext underline, a table's delimiter row, a list going on after a blank line) end at such a
line. So the tokens before it are kept, and only the text from it on is parsed again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.rules_block import StateBlock, code, fence, heading, lheading, paragraph, table
from markdown_it.token import Token

BlockRule = Callable[[StateBlock, int, int, bool], bool]

RECENT_PARSES = 16  # answers whose parse is kept: the Compare tab streams two at once, and sessions run side by side


def _recording_lines(rule: BlockRule) -> BlockRule:
    """The rule, also recording in each token it makes that carries text, per source line, where the line starts,
    where its text starts (past a quote's ``>``, a list's indentation) and where it ends, in the answer
    (``meta["lines"]``). markdown-it's tokens keep line numbers only, and their text without its position; the line
    offsets exist only while the block is parsed (a quote moves them past its ``>`` for its content, then back)."""

    def rule_recording_lines(state: StateBlock, start_line: int, end_line: int, silent: bool) -> bool:
        if silent:  # a look-ahead (can this line interrupt a block?): no tokens
            return rule(state, start_line, end_line, silent)
        first_new = len(state.tokens)
        matched = rule(state, start_line, end_line, silent)
        if matched:
            for token in state.tokens[first_new:]:
                if token.map and token.type in ("inline", "fence", "code_block", "tr_open"):
                    token.meta["lines"] = [(state.bMarks[line], state.bMarks[line] + state.tShift[line],
                                            state.eMarks[line]) for line in range(*token.map)]
        return matched

    return rule_recording_lines


def _markdown_parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}).enable("table").disable(["reference", "inline", "text_join"])
    chains = ("paragraph", "reference", "blockquote", "list")  # the blocks each rule may interrupt: kept as they were
    for name, rule in (("table", table), ("code", code), ("fence", fence), ("heading", heading),
                       ("lheading", lheading), ("paragraph", paragraph)):
        interrupts = [chain for chain in chains if rule in md.block.ruler.getRules(chain)]
        md.block.ruler.at(name, _recording_lines(rule), {"alt": interrupts})
    md.parse("")  # builds the rule chains now, not in a first request's thread
    return md


MARKDOWN = _markdown_parser()


@dataclass(frozen=True)
class _Parse:
    source: str
    tokens: list[Token]
    settled: list[tuple[int, int]]  # (where a settled top-level line starts in source, its first token's index)


_recent: list[_Parse] = []
_recent_lock = threading.Lock()


def markdown_blocks(source: str) -> list[Token]:
    """markdown-it's block tokens for the source (line breaks already "\\n", as markdown-it would make them)."""
    with _recent_lock:
        known = max((p for p in _recent if source.startswith(p.source)), key=lambda p: len(p.source), default=None)
    start, kept, tokens, settled = 0, 0, [], []
    if known and known.settled:
        start, kept = known.settled[-1]  # parsed again from there: its block may go on
        tokens, settled = known.tokens[:kept], list(known.settled)
    tail = source[start:]
    tail_tokens = MARKDOWN.parse(tail)
    settled += [(start + at, kept + index) for at, index in _settled_lines(tail, tail_tokens)]
    tokens += _shifted(tail_tokens, source.count("\n", 0, start), start)
    parse = _Parse(source, tokens, settled)
    with _recent_lock:
        if known in _recent:
            _recent.remove(known)
        _recent.append(parse)
        del _recent[:-RECENT_PARSES]
    return tokens


def _shifted(tokens: list[Token], lines: int, chars: int) -> list[Token]:
    """Tokens of a parse of the source from line `lines`, character `chars` on, as if the whole source was parsed."""
    if lines:
        for token in tokens:
            if token.map:
                token.map = [token.map[0] + lines, token.map[1] + lines]
            if "lines" in token.meta:
                token.meta["lines"] = [(a + chars, b + chars, c + chars) for a, b, c in token.meta["lines"]]
    return tokens


def _settled_lines(source: str, tokens: list[Token]) -> list[tuple[int, int]]:
    """(where the line starts, the index of its first token) for each top-level line such that no text appended to
    the source can change the blocks before it: a block starts there, at the top level, after a blank line, and the
    line is complete (appended text cannot turn it into, say, an item of the list before it: "2" into "2.")."""
    line_starts = [0]
    at = source.find("\n")
    while at >= 0:
        line_starts.append(at + 1)
        at = source.find("\n", at + 1)
    settled = []
    for index, token in enumerate(tokens):
        if token.level or token.nesting < 0 or not token.map:
            continue
        line = token.map[0]
        if 0 < line < len(line_starts) - 1 and not source[line_starts[line - 1]:line_starts[line]].strip(" \t\n"):
            settled.append((line_starts[line], index))
    return settled
