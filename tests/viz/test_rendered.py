"""playground.viz.rendered: the answer's Markdown rendered with per-character provenance (structure, tables, escaping,
links left as text, every visible character once and in its own token's span, every prefix of a streaming answer,
one line of HTML, speed); and no U+FFFD when a run's budget cuts a character in half
(engine.text.IncrementalDecoder.flush), with real tokenizers."""

from __future__ import annotations

import html
import random
import re
import time

from markdown_it import MarkdownIt
from tokenizers import Tokenizer, decoders, models

from playground.engine import StepEvent
from playground.engine.text import IncrementalDecoder
from playground.train.tokenizer import train_tokenizer
from playground.viz import TokenPiece, provenance_html, rendered_css, rendered_html, token_pieces
from playground.viz.provenance import span_open
from playground.viz.rendered_blocks import MARKDOWN, markdown_blocks
from tests.support.tiny import SAMPLE_TEXT

SPAN = re.compile(r'<span class="(?:tok-draft depth-\d+|tok-target)"[^>]*? title="step (\d+)[,"][^>]*>(.*?)</span>')


def pieces_of(parts: list[str]) -> list[TokenPiece]:
    """One piece per part; its step is its index (so a span's title names its piece), drafts and targets mixed."""
    return [TokenPiece(i, part, i, None if i % 3 == 2 else i % 3 + 1, 0.5 if i % 2 else None)
            for i, part in enumerate(parts)]


def chunked(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def words(text: str) -> list[str]:
    return re.findall(r"\s*\S{1,4}|\s+", text)


def _unescape(fragment: str) -> str:
    return html.unescape(fragment.replace("<br>", "\n"))


def visible(page: str) -> str:
    """What a reader sees: tags stripped, <br> as a line break, entities (&#10; too) decoded."""
    return _unescape(re.sub(r"<(?!br>)[^>]+>", "", page))


def spans(page: str) -> list[tuple[int, str]]:
    """(piece index, its visible text) per provenance span, in order."""
    return [(int(m[1]), _unescape(m[2])) for m in SPAN.finditer(page)]


def skeleton(page: str) -> str:
    """The page's structure: everything but the provenance spans."""
    return SPAN.sub("", page)


def assert_provenance(pieces: list[TokenPiece], page: str) -> None:
    """Every visible character is in a span, and each span's text is the next unshown stretch of its own piece."""
    assert visible(skeleton(page)) == "", "text outside a provenance span"
    text = "".join(p.text for p in pieces)
    starts = [sum(len(p.text) for p in pieces[:k]) for k in range(len(pieces))]
    at = 0
    for k, shown in spans(page):
        found = text.find(shown, max(at, starts[k]))
        assert found >= 0 and found + len(shown) <= starts[k] + len(pieces[k].text), (k, shown)
        at = found + len(shown)
    assert "".join(shown for _, shown in spans(page)) == visible(page)


def code_of(page: str) -> list[str]:
    return [_unescape(re.sub(r"<(?!br>)[^>]+>", "", m)) for m in re.findall(r"<pre[^>]*>(.*?)</pre>", page)]


# --- code blocks ----------------------------------------------------------------------------------------------


def test_fence_is_a_code_block_with_its_language_and_each_character_in_its_token() -> None:
    parts = ["Intro", ":\n\n", "```", "python\n", "def", " f", "():\n", "    return", " 1\n", "```", "\n", "Done"]
    page = rendered_html(pieces_of(parts))
    assert '<pre class="md-code"><code class="language-python">' in page
    assert code_of(page) == ["def f():\n    return 1"]
    assert spans(page) == [(0, "Intro"), (1, ":"), (4, "def"), (5, " f"), (6, "():\n"), (7, "    return"), (8, " 1"),
                           (11, "Done")]
    assert skeleton(page) == ('<div class="rendered"><p></p><pre class="md-code"><code class="language-python">'
                              "</code></pre><p></p></div>")
    assert span_open(pieces_of(parts)[4]) + "def</span>" in page  # the same span as the monospace view's
    assert "    return" in page  # whitespace in code is kept exactly


def test_a_token_spanning_the_fence_line_is_split() -> None:
    parts = ["Run:\n```", "bash\npip", " install", " x\n```\nok"]
    page = rendered_html(pieces_of(parts))
    assert '<code class="language-bash">' in page
    assert spans(page) == [(0, "Run:"), (1, "pip"), (2, " install"), (3, " x"), (3, "ok")]
    assert_provenance(pieces_of(parts), page)


def test_an_unclosed_fence_streams_as_an_open_code_block() -> None:
    parts = ["Sure", ".\n", "~~~", "\n", "let x", " = 1;\n", "\n", "let y"]
    for n in range(len(parts) + 1):  # every state of the stream renders
        assert_provenance(pieces_of(parts[:n]), rendered_html(pieces_of(parts[:n])))
    page = rendered_html(pieces_of(parts))
    assert page.endswith("</code></pre></div>") and '<pre class="md-code"><code>' in page  # no language
    assert code_of(page) == ["let x = 1;\n\nlet y"]
    assert code_of(rendered_html(pieces_of(parts[:6]))) == ["let x = 1;\n"]
    assert code_of(rendered_html(pieces_of(parts[:4]))) == [""]


def test_a_longer_fence_and_a_backtick_info_string() -> None:
    page = rendered_html(pieces_of(chunked("````md\n```\ninner\n```\n````\n```not`a fence```", 3)))
    assert code_of(page) == ["```\ninner\n```"]
    assert skeleton(page).endswith("</code></pre><p><code></code></p></div>")  # ```x``` is inline code
    assert visible(page) == "```\ninner\n```not`a fence"


# --- blocks and inline -----------------------------------------------------------------------------------------

DOC = """# Title **bold**
## Sub ##
Text with *it*, _it2_, **b**, and `x < y`,
on two lines.

- one
- two *em*
  - nested
1. first
2. second

3. third

> quoted
> **more**

***
Last paragraph."""

DOC_VISIBLE = ("Title boldSubText with it, it2, b, and x < y,\non two lines.onetwo emnestedfirstsecondthirdquoted\nmore"
               "Last paragraph.")

# The numbered list is loose (a blank line between two of its items): CommonMark puts each item's text in <p>
DOC_SKELETON = ('<div class="rendered"><h1><strong></strong></h1><h2></h2>'
                "<p><em></em><em></em><strong></strong><code></code></p>"
                "<ul><li></li><li><em></em><ul><li></li></ul></li></ul>"
                "<ol><li><p></p></li><li><p></p></li><li><p></p></li></ol>"
                "<blockquote><p><strong></strong></p></blockquote><hr><p></p></div>")


def test_headings_lists_quotes_rules_and_emphasis() -> None:
    page = rendered_html(pieces_of(words(DOC)))
    assert skeleton(page) == DOC_SKELETON
    assert visible(page) == DOC_VISIBLE
    assert_provenance(pieces_of(words(DOC)), page)


def test_structure_and_text_do_not_depend_on_how_the_answer_was_tokenised() -> None:
    for parts in [list(DOC), words(DOC), [DOC], *(chunked(DOC, n) for n in (2, 3, 5, 7, 11))]:
        page = rendered_html(pieces_of(parts))
        assert skeleton(page) == DOC_SKELETON and visible(page) == DOC_VISIBLE, parts[:3]
        assert_provenance(pieces_of(parts), page)


FRAGMENTS = ["\n", "\n\n", " ", "   ", "\t", "#", "## ", "- ", "* ", "1. ", "2) ", "> ", "```", "~~~", "py", "`", "**",
             "*", "_", "__", "word", "snake_case", "<b>", "&", "---", "***", "\\", "é🦅", "\"'", "10. ", "    "]


def test_random_markdown_keeps_provenance_whatever_the_tokenisation() -> None:
    rng = random.Random(0)
    for _ in range(300):
        text = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 40)))
        pages = [rendered_html(pieces_of(parts)) for parts in (list(text), [text], chunked(text, 3), chunked(text, 5))]
        for parts, page in zip((list(text), [text], chunked(text, 3), chunked(text, 5)), pages):
            assert "\n" not in page
            assert_provenance(pieces_of(parts), page)
        assert len({(skeleton(page), visible(page)) for page in pages}) == 1, text


def test_numbered_list_start_and_list_items_with_code() -> None:
    text = "4. install:\n   ```sh\n   pip install x\n   ```\n5. run `x`\n\nDone."
    page = rendered_html(pieces_of(words(text)))
    assert skeleton(page) == ('<div class="rendered"><ol start="4"><li><pre class="md-code"><code class="language-sh">'
                              "</code></pre></li><li><code></code></li></ol><p></p></div>")
    assert code_of(page) == ["pip install x"]  # the fence's indentation is not code
    assert visible(page) == "install:pip install xrun xDone."


def test_snake_case_dunders_and_unmatched_markers_stay_literal() -> None:
    text = "use my_var_name, __init__ and a_b_, 2 * 3 = 6, **open and *half, `tick, ***x***"
    page = rendered_html(pieces_of(words(text)))
    assert "<em>" not in page and "<strong>" not in page and "<code>" not in page
    assert visible(page) == text
    assert rendered_html(pieces_of(["_yes_ and *yes* but \\*no\\*"])).count("<em>") == 2


def test_model_html_is_escaped_everywhere() -> None:
    bad = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    text = (f"# {bad}\n\n{bad} & more\n\n- {bad}\n\n> {bad}\n\n`{bad}` and **{bad}**\n\n"
            f'```"><script>alert(1)</script>\n{bad}\n```\n')
    for parts in (words(text), list(text)):
        page = rendered_html(pieces_of(parts))
        assert "<script" not in page and "<img" not in page and "onerror=alert(1)>" not in page
        assert visible(page).count(bad) == 7  # heading, paragraph, list, quote, inline code, bold, code block
        assert re.findall(r'class="([^"]*)"', skeleton(page)) == ["rendered", "md-code"]  # no injected language
        assert "&amp;" in page and not re.search(r"&(?!amp;|lt;|gt;|quot;|#x27;|#10;)", page)
        assert_provenance(pieces_of(parts), page)


def test_links_images_and_html_stay_text() -> None:
    text = ('[click](javascript:alert(1)) <javascript:alert(1)> ![i](javascript:alert(1)) https://example.com\n\n'
            '[ref]: javascript:alert(1)\n\n[ref] <a href="javascript:alert(1)">x</a>\n\n'
            '<div onclick="alert(1)">\n<script>alert(1)</script>\n</div>\n\n| <b>x</b> |\n|---|\n| [y](javascript:z) |')
    for parts in (words(text), list(text)):
        page = rendered_html(pieces_of(parts))
        tags = re.findall(r"<([a-z0-9]+)([^>]*)>", page)
        assert {tag for tag, _ in tags} == {"div", "p", "br", "span", "table", "thead", "tbody", "tr", "th", "td"}
        assert not [attributes for _, attributes in tags if re.search(r"href|src|\bon", attributes)]
        assert skeleton(page) == ('<div class="rendered"><p></p><p></p><p></p><p></p><table><thead><tr><th></th></tr>'
                                  "</thead><tbody><tr><td></td></tr></tbody></table></div>")
        assert re.sub(r"\s", "", visible(page)) == re.sub(r"\s|\|-*", "", text)  # all of it, as written
        assert_provenance(pieces_of(parts), page)


def test_table_cells_with_each_character_in_its_token() -> None:
    parts = ["| Name", " | Size |\n", "|:--", "-|--:|\n", "| a", "lpha | `", "1", "0` |\n", "| b \\", "| c |", " 2 |"]
    page = rendered_html(pieces_of(parts))
    left, right = '<td style="text-align:left">', '<td style="text-align:right">'
    assert skeleton(page) == ('<div class="rendered"><table><thead><tr><th style="text-align:left"></th>'
                              '<th style="text-align:right"></th></tr></thead><tbody>'
                              f"<tr>{left}</td>{right}<code></code></td></tr><tr>{left}</td>{right}</td></tr>"
                              "</tbody></table></div>")
    # the delimiter row and the pipes are consumed; an escaped pipe is shown without its backslash
    assert spans(page) == [(0, "Name"), (1, "Size"), (4, "a"), (5, "lpha"), (6, "1"), (7, "0"), (8, "b "), (9, "| c"),
                           (10, "2")]
    assert_provenance(pieces_of(parts), page)


def test_commonmark_blocks() -> None:
    """Where CommonMark's blocks differ from a line-by-line reading: setext headings, indented code, a quote's lazy
    line, a loose list's paragraphs, a fence in a list item ending with the item, a table row without pipes."""
    cases = {
        "Title\n===\nSub\n---": "<h1></h1><h2></h2>",
        "Text\n\n    code\n      more": '<p></p><pre class="md-code"><code></code></pre>',
        "> quoted\nlazy": "<blockquote><p></p></blockquote>",
        "- a\n\n  b\n- c": "<ul><li><p></p><p></p></li><li><p></p></li></ul>",
        "- ```\n  code\nafter": '<ul><li><pre class="md-code"><code></code></pre></li></ul><p></p>',
        "a | b\n--|--\n1 | 2\n3": "<table><thead><tr><th></th><th></th></tr></thead><tbody><tr><td></td><td></td></tr>"
                                "<tr><td></td><td></td></tr></tbody></table>",
    }
    for text, structure in cases.items():
        page = rendered_html(pieces_of(words(text)))
        assert skeleton(page) == f'<div class="rendered">{structure}</div>', text
        assert_provenance(pieces_of(words(text)), page)
    assert code_of(rendered_html(pieces_of(words("Text\n\n    code\n      more")))) == ["code\n  more"]


STREAMED = [
    "# Setting up\n\nInstall it with `pip install x`, then **check** the *version*:\n\n1. Open a shell\n2. Run:\n\n"
    "   ```bash\n   pip install x  # <b>not bold</b>\n   ```\n\n   - nested *item*\n   - another\n       - deeper\n\n"
    "> A quote with a list:\n> - one\n> - two\n\n| Option | Default | Meaning |\n|:--|:-:|--:|\n"
    "| `k` | 4 | drafts <i>per</i> step |\n| a \\| b | none | x < y && y > z |\n\nSetext heading\n---\n   \nDone.",
    "Here is the code:\n\n```python\ndef f(x):\n    return x * 2  # <script>alert(1)</script>\n\n\nprint(f(2))\n```\n"
    "\nA tilde fence:\n\n~~~\nraw <html> & more\n~~~\n\n    indented code\n\n<div>\n*not* html\n</div>\n",
    "* a\n* b\n    * c deep\n        * d deeper\n\n  continued *a* paragraph\n1) one\n2) two\n\n10. ten\n\n***\n___\n"
    "\t tab line\n  \n## Closing ##\n`code` and `` a ` tick `` and ***x*** and snake_case_name\n\n"
    "1. a loose\n\n2. list\n\n3. goes on\n",
]


def letters(text: str) -> str:
    return "".join(c for c in text if c.isalnum())


def test_every_prefix_of_a_streaming_answer_renders() -> None:
    """Each prefix, as the stream shows it: no error, one line, every visible character once and in order in its own
    token's span, and the same letters and digits as CommonMark's own HTML of that prefix (punctuation and spaces
    may differ: this view keeps line breaks and backslashes, and leaves a link as written). The parse it reuses from
    the previous prefix gives the same blocks as a parse from scratch."""
    reference = MarkdownIt("commonmark", {"html": False}).enable("table").disable("reference")
    for answer in STREAMED:
        for end in range(len(answer) + 1):
            prefix = answer[:end]
            reused = markdown_blocks(prefix)  # what the render below uses
            assert [(t.type, t.map, t.content, t.hidden, t.attrs, t.meta) for t in reused] == \
                   [(t.type, t.map, t.content, t.hidden, t.attrs, t.meta) for t in MARKDOWN.parse(prefix)], prefix
            pieces = pieces_of(chunked(prefix, 3))
            page = rendered_html(pieces)
            assert "\n" not in page and page.startswith('<div class="rendered">'), prefix
            assert_provenance(pieces, page)
            assert letters(visible(page)) == letters(visible(reference.render(prefix))), prefix


def test_one_line_of_html() -> None:
    text = "Para\r\nnext\r\n\r\n```py\r\nx = 1\r\n\r\ny = 2\r\n```\r\n- a\n- b\n\n\nend\tof it\rcr"
    page = rendered_html(pieces_of(words(text)))
    assert "\n" not in page and "\r" not in page  # in <pre> too: line breaks there are &#10;
    assert page.startswith('<div class="rendered">') and page.endswith("</div>")
    assert code_of(page) == ["x = 1\n\ny = 2"]
    assert "&#10;&#10;" in re.sub(r"<[^>]+>", "", page)
    assert visible(page) == "Para\nnextx = 1\n\ny = 2abend\tof it\ncr"


def test_empty_and_textless_pieces() -> None:
    assert rendered_html([]) == '<div class="rendered"></div>'
    pieces = [TokenPiece(1, "", 0, None), TokenPiece(2, "**hi**", 1, 1), TokenPiece(3, "", 2, None)]
    expected = f'<div class="rendered"><p><strong>{span_open(pieces[1])}hi</span></strong></p></div>'
    assert rendered_html(pieces) == expected


def test_css_and_speed() -> None:
    css = rendered_css()
    for rule in (".rendered ", "pre.md-code", "pre-wrap", "var(--body-text-color", "var(--code-background-fill",
                 "var(--font-mono", ".rendered table", ".rendered th, .rendered td"):
        assert rule in css
    section = ("## Step {n}: set up the *environment*\n\nA **short** note on `pip install`, with my_var.\n"
               "A second line.\n\n- item with `code`\n  - nested\n1. one\n2. two\n\n```python\n"
               "def handler_{n}(request, *args, **kwargs):\n    return {{'ok': request.get('k', 0) * 2}}\n```\n\n"
               "> A quote.\n\n")
    answer = pieces_of(words("".join(section.format(n=i) for i in range(16))))[:1000]
    assert len(answer) == 1000
    times = []
    for k in range(5):  # each a new answer (its first word differs), so no earlier parse is reused
        pieces = [TokenPiece(0, f"Answer{k}\n\n", 0, None), *answer]
        start = time.perf_counter()
        rendered_html(pieces)
        times.append(time.perf_counter() - start)
    # about 4 ms on one free core (2 ms for a streaming update, which reuses the parse of the answer's settled
    # beginning): the bound only catches a blow-up (such as quadratic time) on a loaded machine
    assert sorted(times)[2] < 0.05, times
    assert_provenance(answer, rendered_html(answer))


# --- no U+FFFD when the budget cuts a character -------------------------------------------------------------------


def _run_cut_at(ids: list[int], n: int) -> list[StepEvent]:
    """A run whose budget ends after n of these tokens: prefill, then steps of two (a draft and the target's)."""
    steps = [ids[:1]] + [ids[at:min(at + 2, n)] for at in range(1, n, 2)]
    return [StepEvent(step=i, drafted=emitted[:-1], accepted=len(emitted) - 1, emitted=emitted,
                      finished=i == len(steps) - 1, finish_reason="length" if i == len(steps) - 1 else None)
            for i, emitted in enumerate(steps)]


def _byte_fallback_tokenizer() -> Tokenizer:
    """A real byte-fallback tokenizer (SentencePiece style, as Llama 2's): an unknown character is one token per byte,
    and an unfinished character decodes to one U+FFFD per byte."""
    vocab = {f"<0x{b:02X}>": b for b in range(256)} | {c: 256 + i for i, c in enumerate("ok é")}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], byte_fallback=True))
    tokenizer.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    return tokenizer


def test_a_character_cut_by_the_budget_shows_no_replacement_character() -> None:
    byte_level = train_tokenizer(SAMPLE_TEXT, vocab_size=400)  # the tiny target's kind of tokenizer
    fallback = _byte_fallback_tokenizer()
    cases = [(lambda s: byte_level.encode(s, add_special_tokens=False),
              lambda ids: byte_level.decode(ids, skip_special_tokens=True)),
             (lambda s: fallback.encode(s, add_special_tokens=False).ids, fallback.decode)]
    for encode, decode in cases:
        text = "ok é 🦅"
        ids = encode(text)
        whole = max(n for n in range(len(ids)) if decode(ids[:n]) == "ok é ")
        assert len(ids) >= whole + 3, "the emoji should take several tokens"
        for n in range(whole + 1, len(ids)):  # cut inside the emoji
            assert decode(ids[:n]).endswith("\ufffd")
            pieces = token_pieces(_run_cut_at(ids, n), decode)
            assert "".join(p.text for p in pieces) == "ok é ", (n, [p.text for p in pieces])
            assert "\ufffd" not in provenance_html(pieces) + rendered_html(pieces)
        assert "".join(p.text for p in token_pieces(_run_cut_at(ids, len(ids)), decode)) == text
        decoder = IncrementalDecoder(decode)  # the server's and CLI's use: extend, then flush at the end
        assert decoder.extend(ids[:-1]) + decoder.flush() == "ok é "


def test_invalid_bytes_before_the_end_still_show_as_replacement_characters() -> None:
    def decode(ids: list[int]) -> str:  # ids are bytes
        return bytes(ids).decode("utf-8", errors="replace")

    decoder = IncrementalDecoder(decode)
    assert decoder.extend(list(b"a\xffb\x80\x80\x80\x80\x80c")) + decoder.flush() == "a\ufffdb" + "\ufffd" * 5 + "c"
    decoder = IncrementalDecoder(decode)
    assert decoder.extend(list("é".encode()) + list("🦅".encode())[:3]) + decoder.flush() == "é"
    decoder = IncrementalDecoder(decode)
    assert decoder.extend(list(b"ok")) == "ok" and decoder.flush() == ""  # nothing held back
