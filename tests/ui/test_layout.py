"""The page's layout in Chromium at desktop and phone width: a long code line in an answer is shown whole, in both
answer views, in Chat and in Compare; and the Compare tab leaves no blank space where its answers will go."""

from __future__ import annotations

from playground.viz import TokenPiece, provenance_html, rendered_html
from tests.support.browser import needs_chromium

pytestmark = needs_chromium

WIDTHS = (1280, 390)  # desktop, phone
LINE = ("squares = [" + ", ".join(str(n * n) for n in range(60)))[:200]
ANSWER = f"Here it is:\n\n```python\n{LINE}\n```\n"
PIECES = [TokenPiece(i, ANSWER[at:at + 5], i, i % 4 + 1 if i % 3 else None)
          for i, at in enumerate(range(0, len(ANSWER), 5))]
VIEWS = {"rendered": (rendered_html(PIECES), "pre.md-code"), "tokens": (provenance_html(PIECES), ".provenance")}

# Whether `block` shows all its text (nothing past its right edge, nothing past its box's), and how many lines it takes.
SHOWN_WHOLE = """([box, block]) => {
  box = document.querySelector(box); block = box.querySelector(block);
  const style = getComputedStyle(block);
  return {block_fits: block.scrollWidth <= block.clientWidth, box_fits: box.scrollWidth <= box.clientWidth,
          on_screen: block.getBoundingClientRect().right <= window.innerWidth,
          lines: Math.round((block.clientHeight - parseFloat(style.paddingTop) - parseFloat(style.paddingBottom))
                            / parseFloat(style.lineHeight))};
}"""


def answer_briefly(page, tokens: int) -> None:
    """Send a prompt for at most `tokens` tokens and wait for the answer."""
    page.locator("#max-new-tokens input[type=number]").fill(str(tokens))
    page.locator("#max-new-tokens input[type=number]").press("Enter")
    page.locator("#prompt textarea").fill("Hello there")
    page.locator("#send").click()
    page.wait_for_function("document.querySelector('#chat-status').innerText.includes('finished')")


def test_a_long_code_line_is_shown_whole_in_chat_and_compare(page) -> None:
    """Code wraps instead of scrolling sideways (no scrollbar shows on a phone, and each update of a streaming answer
    starts the block scrolled back to its start). The tiny models write no code: a run gives the chat its answer,
    whose view is then swapped for one with a 200-character code line, in the page's own containers and styles."""
    answer_briefly(page, 8)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        for view, (answer, block) in VIEWS.items():
            for tab, box, swap in (
                ("Chat", "#chat .message-content:has(.rendered, .provenance)",
                 "([a]) => { document.querySelector('#chat .rendered, #chat .provenance').outerHTML = a; }"),
                ("Compare", "#compare-left .prose",
                 "([a]) => { document.querySelector('#compare-left .prose').innerHTML = "
                 "'<div class=\"side-title\">EAGLE-3, k=4</div>' + a; }"),
            ):
                page.get_by_role("tab", name=tab).click()
                page.evaluate(swap, [answer])
                shown = page.evaluate(SHOWN_WHOLE, [box, block])
                assert shown["lines"] > 1, (width, view, tab, shown)  # the line is longer than the box is wide
                assert shown["block_fits"] and shown["box_fits"] and shown["on_screen"], (width, view, tab, shown)


def test_compare_leaves_no_blank_space_before_a_run(page) -> None:
    """Before a run the answer panels are empty: at phone width, where the sides stack, each reserved 250 px."""
    page.set_viewport_size({"width": 390, "height": 900})
    page.get_by_role("tab", name="Compare").click()
    for side in ("#compare-left", "#compare-right"):
        assert page.locator(side).bounding_box()["height"] < 40, side


def test_the_chat_buttons_sit_above_the_first_message_and_the_status_under_send(page) -> None:
    """The chat's copy-all and delete buttons float over its top right corner: at phone and desktop width they end
    before the first message starts, and before the scrolled messages' box shows anything (issue 57: they covered
    the end of an answer's first line). The status line follows the buttons, on screen without scrolling at desktop
    width, where a refusal is read."""
    answer_briefly(page, 4)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.evaluate("window.scrollTo(0, 0)")
        buttons = page.locator("#chat .top-panel").bounding_box()
        first = page.locator("#chat .message-row").first.bounding_box()
        assert buttons["y"] + buttons["height"] <= first["y"] + 1, (width, buttons, first)
        # and whatever is scrolled (an answer's first line, scrolled up to them) stays below them: the scrolling
        # box's visible content starts under the buttons
        shown_from = page.evaluate("() => { const box = document.querySelector('#chat .panel-wrap'); "
                                   "box.scrollTop = box.scrollHeight; return box.getBoundingClientRect().top "
                                   "+ parseFloat(getComputedStyle(box).borderTopWidth); }")
        assert buttons["y"] + buttons["height"] <= shown_from + 1, (width, buttons, shown_from)
    page.set_viewport_size({"width": 1280, "height": 900})
    status, send = page.locator("#chat-status").bounding_box(), page.locator("#send").bounding_box()
    assert send["y"] < status["y"] < send["y"] + send["height"] + 40, (send, status)
    assert status["y"] + status["height"] <= 900, status


def test_compare_stacks_its_prompt_over_run_both_on_a_phone(page) -> None:
    """At 390 px the prompt box beside Run both was squeezed to ~40 % of the width: it takes the row, the buttons go
    under it side by side; at desktop width they stay beside it."""
    page.get_by_role("tab", name="Compare").click()
    for width, stacked in ((390, True), (1280, False)):
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(300)
        prompt, run, stop = (page.locator(f"#compare-{name}").bounding_box() for name in ("prompt", "run", "stop"))
        row = page.locator("#compare-prompt-row").bounding_box()
        if stacked:
            assert prompt["width"] >= 0.9 * row["width"], (prompt, row)
            assert run["y"] >= prompt["y"] + prompt["height"] - 1 and abs(run["y"] - stop["y"]) < 2, (prompt, run, stop)
        else:
            assert run["x"] >= prompt["x"] + prompt["width"] - 1, (prompt, run)
