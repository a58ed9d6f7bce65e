"""A weightless method in a real browser (Playwright + Debian's Chromium), on the default pair: Compare with EAGLE-3.1
on one side and suffix decoding on the other."""

from __future__ import annotations

import re

from tests.support.browser import TIMEOUT_MS, needs_chromium, open_page, plot_marks

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


def test_each_methods_controls_offer_what_the_registry_says_it_can(browser, app_url: str) -> None:
    """Chat's controls follow the chosen method's capabilities (drafting.Method): suffix decoding drafts trees and k
    auto prices it, but it has no probabilities for the adaptive stop; prompt lookup drafts chains; early exit has
    probabilities but no tree and no price for k auto; auto, the default, leaves k to k auto. Then an early-exit answer
    (the target's first layers drafting) is run: it finishes, and its drift panel says what it drafts from."""
    from playwright.sync_api import expect

    page = open_page(browser, app_url)
    tree, auto = page.locator("#tree-nodes input[type=number]"), page.locator("#k-auto input[type=checkbox]")
    adaptive, k = page.locator("#min-draft-prob input[type=number]"), page.locator("#k input[type=number]")
    expect(page.locator("#drafter input[value=auto]")).to_be_checked()
    expect(auto).to_be_checked()
    expect(k).to_be_disabled()
    offered = {  # method label: (tree, k auto, adaptive stop)
        "suffix decoding": (True, True, False),
        "prompt lookup (n-gram)": (False, True, False),
        "early exit (self-speculation)": (False, False, True),
        "EAGLE-3.1": (True, False, True),  # the tests' tiny drafters ship no acceptance by position to price
    }
    for label, (trees, prices, probabilities) in offered.items():
        page.locator("#drafter").get_by_text(label, exact=True).click()
        for control, enabled in ((tree, trees), (auto, prices), (adaptive, probabilities)):
            (expect(control).to_be_enabled if enabled else expect(control).to_be_disabled)(timeout=TIMEOUT_MS)
    page.locator("#drafter").get_by_text("early exit (self-speculation)", exact=True).click()
    expect(page.locator("#early-exit-settings")).to_be_visible()
    expect(page.locator("#suffix-settings")).to_be_hidden()
    expect(k).to_be_enabled()
    page.locator("#max-new-tokens input[type=number]").fill("24")
    page.locator("#max-new-tokens input[type=number]").press("Enter")
    page.locator("#prompt textarea").fill("Say something.")
    page.locator("#send").click()
    page.wait_for_function("document.querySelector('#chat-status').innerText.includes('finished')")
    words = "early exit (self-speculation), k=4: proposes from the target's own first layers".split()
    said = r"\s*".join(map(re.escape, words))
    expect(page.locator("#drift-plot")).to_contain_text(re.compile(said))  # the chart wraps its message anywhere
    page.close()


def test_the_default_chat_says_what_auto_chose(browser, real_app_url: str) -> None:
    """What a visitor gets with no settings touched, on the default pair: k auto chooses the method and k (or plain
    decoding) before the answer, and the status line says which, with its prediction, in one line."""
    page = open_page(browser, real_app_url)
    page.locator("#max-new-tokens input[type=number]").fill("32")
    page.locator("#max-new-tokens input[type=number]").press("Enter")
    page.locator("#prompt textarea").fill("Write a function that returns the largest of three numbers.")
    page.locator("#send").click()
    page.wait_for_function("document.querySelector('#chat-status').innerText.includes('finished')")
    status = page.locator("#chat-status").inner_text()
    assert re.search(r"k auto chose (plain decoding|.+ k=\d+, predicted \d+\.\d\d×)", status), status
    page.close()
