"""A weightless method in a real browser (Playwright + Debian's Chromium), on the default pair: Compare with EAGLE-3.1
on one side and suffix decoding on the other."""

from __future__ import annotations

import re

from tests.support.browser import needs_chromium, open_page, plot_marks

pytestmark = needs_chromium


def _answer_text(page, side: str) -> str:
    return "".join(page.locator(f"{side} .tok-draft, {side} .tok-target").all_text_contents())


def test_compare_eagle_31_against_suffix_decoding_on_the_default_pair(browser, real_app_url: str) -> None:
    """A weightless method beside EAGLE-3.1 on one prompt: the same answer on both sides, suffix decoding's settings
    shown on its side only, its acceptance drawn and its empty drift panel saying why, its health not checked."""
    from playwright.sync_api import expect

    page = open_page(browser, real_app_url)
    page.get_by_role("tab", name="Compare").click()
    page.get_by_text("Shared settings").click()
    page.locator("#compare-max-new-tokens input[type=number]").fill("48")
    page.locator("#compare-max-new-tokens input[type=number]").press("Enter")
    page.locator("#compare-left-drafter").get_by_label("EAGLE-3.1", exact=True).check()
    page.locator("#compare-right-drafter").get_by_label("suffix decoding", exact=True).check()
    expect(page.locator("#compare-right-suffix-settings")).to_be_visible()
    expect(page.locator("#compare-left-suffix-settings")).to_be_hidden()
    expect(page.locator("#compare-right-suffix-decoding-max-tree-depth input[type=number]")).to_have_value("24")
    page.locator("#compare-prompt textarea").fill("Repeat this line three times: the cat sat on the mat.")
    page.locator("#compare-run").click()
    page.wait_for_function("document.querySelector('#compare-status').innerText.split('finished').length === 3")
    expect(page.locator("#compare-left")).to_contain_text("EAGLE-3.1, k=4")
    expect(page.locator("#compare-right")).to_contain_text("suffix decoding, k=4")
    left, right = _answer_text(page, "#compare-left"), _answer_text(page, "#compare-right")
    assert left and left == right
    assert page.locator("#compare-right .tok-draft").count() > 0, "suffix decoding accepted none of its proposals"
    assert plot_marks(page, "compare-position-plot") > 0 and plot_marks(page, "compare-drift-plot") > 0
    expect(page.locator("#compare-drift-plot")).to_contain_text(
        re.compile(r"suffix decoding, k=4: proposes\s*from\s*the\s*text\s*alone"))
    expect(page.locator("#compare-right-stats .health-badge")).to_contain_text("not checked")
    expect(page.locator("#compare-table")).to_contain_text("suffix decoding")
    page.close()
