"""Chromium for the browser tests: Debian's build driven by Playwright, and the `browser` and `page` fixtures (a page
of the session's app at desktop size). A test that uses either is marked `browser` (conftest)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
TIMEOUT_MS = 120_000

needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                    "(apt-get install chromium)")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def open_page(browser, url: str):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url)
    page.locator("#prompt textarea").wait_for()
    return page


def fixed_chain(page, drafter: str = "EAGLE-3.1", k: int | None = None) -> None:
    """Chat's drafter and k set as a visitor who wants one configuration sets them: the drafter picked (the page opens
    on "auto"), k auto unticked (it opens ticked), then k typed where given."""
    page.locator("#drafter").get_by_text(drafter, exact=True).click()
    # The page's "auto" leaves the box ticked and disabled; the drafter's own state (ticked and enabled, or unticked
    # and disabled where k auto cannot price it) arrives a round trip after the click. Unticking before it arrives
    # clicks a box about to be disabled, which Playwright then waits on forever (seen on a busy CI machine).
    page.wait_for_function("""() => {
        const box = document.querySelector('#k-auto input[type=checkbox]');
        return box !== null && !(box.checked && box.disabled);
    }""")
    box = page.locator("#k-auto input[type=checkbox]")
    if box.is_checked():
        box.uncheck()
    if k is not None:
        page.locator("#k input[type=number]").fill(str(k))
        page.locator("#k input[type=number]").press("Enter")


def plot_marks(page, elem_id: str) -> int:
    """Bars drawn in a plotly chart (0 while it shows a message instead)."""
    return page.locator(f"#{elem_id} .plotly .bars path").count()


@pytest.fixture
def page(browser, app_url: str):
    page = open_page(browser, app_url)
    yield page
    page.close()
