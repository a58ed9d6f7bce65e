"""Start the app, run one chat answer and one comparison in headless Chromium, and save small PNG screenshots of
every tab to assets/screenshots/ (each under 200 KB): chat, compare, benchmark (the committed drift study) and about
at 1280 px, and chat, compare and benchmark at phone width (full pages, the page loaded at that width); also a chat
waiting in line behind another user's benchmark (chat-queued), and a short answer whose speedup has too few steps
to be measured (chat-short); the own-pair panel refusing a drafter that does not fit and loading a pair, at both
widths (own-pair-refused, own-pair-loaded); a chat answer drafted with a tree of 16 nodes, its stat cards and the
latest step's tree, at both widths (chat-tree).

    python scripts/screenshots.py                  # tiny test models (fast)
    PLAYGROUND_TEST_REAL_MODELS=1 python scripts/screenshots.py
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from PIL import Image  # noqa: E402  (installed with gradio)
from playwright.sync_api import sync_playwright  # noqa: E402

from tests.support.appserver import models_dir, running_app  # noqa: E402

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
MAX_BYTES = 200_000
VIEWPORT = {"width": 1280, "height": 1100}
PHONE = {"width": 390, "height": 844}


def save_small_png(png: bytes, path: Path) -> int:
    """Quantise to a palette and shrink until the file is under MAX_BYTES; returns its size."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    while True:
        buffer = io.BytesIO()
        image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(buffer, format="PNG", optimize=True)
        if buffer.tell() < MAX_BYTES or image.width < 600:
            path.write_bytes(buffer.getvalue())
            return buffer.tell()
        image = image.resize((image.width * 9 // 10, image.height * 9 // 10), Image.Resampling.LANCZOS)


def _chat(page, prompt: str) -> None:
    page.locator("#prompt textarea").fill(prompt)
    page.locator("#send").click()
    page.wait_for_function("document.querySelector('#chat-status').innerText.includes('finished')")


def _compare(page, prompt: str) -> None:
    page.locator("#compare-prompt textarea").fill(prompt)
    page.locator("#compare-run").click()
    page.wait_for_function("document.querySelector('#compare-status').innerText.split('finished').length === 3")


def _open_tab(page, name: str) -> None:
    """Click a tab; at phone width the later tabs sit behind Gradio's "More tabs" menu."""
    tab = page.get_by_role("tab", name=name)
    if not tab.count():
        page.get_by_label("More tabs").click()
        tab = page.locator("button", has_text=name).last
    tab.click()


def _queued_and_short(browser, url: str, save) -> None:
    """Another user's benchmark holds the model while this page's Send waits in line; then an 8-token answer."""
    bench, page = (browser.new_page(viewport=VIEWPORT) for _ in range(2))
    for p in (bench, page):
        p.set_default_timeout(300_000)
        p.goto(url)
        p.locator("#prompt textarea").wait_for()
    _open_tab(bench, "Benchmark")
    bench.locator("#bench-profile input").click()
    bench.get_by_role("option", name="drift", exact=False).first.click()
    bench.locator("#bench-run").click()
    bench.wait_for_function("document.querySelector('#bench-findings').innerText.includes('warm-up')")
    page.locator("#prompt textarea").fill("Write a haiku about rain.")
    page.locator("#send").click()
    page.wait_for_function("document.querySelector('#chat-status').innerText.includes('Queued')")
    save(page, "chat-queued.png", full_page=False)
    page.locator("#stop").click()
    bench.locator("#bench-stop").click()
    bench.wait_for_function("document.querySelector('#bench-status').innerText.includes('Stopped')")
    bench.close()
    page.locator("#max-new-tokens input[type=number]").fill("8")
    page.locator("#max-new-tokens input[type=number]").press("Enter")
    _chat(page, "Write a haiku about rain.")
    save(page, "chat-short.png", full_page=False)
    page.close()


def _own_pair(page, target: str, drafter: str, done: str) -> None:
    """Fill the own-pair panel (target and EAGLE-3.1 drafter) and press Load; wait for `done` in its status."""
    own = page.locator("#own-pair")
    if not page.locator("#own-target").is_visible():
        own.get_by_text("Your own pair").first.click()
    page.locator("#own-target textarea, #own-target input").first.fill(target)
    page.locator("#own-eagle3-1 textarea, #own-eagle3-1 input").first.fill(drafter)
    page.locator("#own-load").click()
    page.wait_for_function(f"document.querySelector('#own-status').innerText.includes({done!r})")
    page.locator("#own-pair").scroll_into_view_if_needed()


def _own_pair_shots(browser, target: str, drafter: str, url: str, save) -> None:
    """The own-pair panel at both widths: a drafter that does not fit (refused in one line), then a pair that loads."""
    misfit = str(REPO_ROOT / "assets" / "models" / "kimi-tiny" / "eagle3.1")
    for viewport, suffix in ((VIEWPORT, ""), (PHONE, "-phone")):
        page = browser.new_page(viewport=viewport)
        page.set_default_timeout(300_000)
        page.goto(url)
        page.locator("#prompt textarea").wait_for()
        _own_pair(page, target, misfit, "Not loaded:")
        save(page, f"own-pair-refused{suffix}.png", full_page=False)
        _own_pair(page, target, drafter, "it is now the preset")
        save(page, f"own-pair-loaded{suffix}.png", full_page=False)
        page.close()


def _tree_shots(browser, url: str, prompt: str, save_element) -> None:
    """A chat answer drafted as a tree of 16 nodes (k = 5 deep): the cards and the latest step's tree, both widths."""
    for viewport, suffix in ((VIEWPORT, ""), (PHONE, "-phone")):
        page = browser.new_page(viewport=viewport)
        page.set_default_timeout(300_000)
        page.goto(url)
        page.locator("#k input").fill("5")
        page.locator("#tree-nodes input").fill("16")
        _chat(page, prompt)
        page.locator("#tree-view").wait_for()
        save_element(page.locator("#chat-stats"), f"chat-tree{suffix}.png")
        page.close()


def _replay_shot(browser, url: str, prompt: str, save_element) -> None:
    """A chat answer, then "What would each drafter buy on this answer?" opened and run: the chart, the table
    beneath; at desktop and phone width."""
    for viewport, suffix in ((VIEWPORT, ""), (PHONE, "-phone")):
        page = browser.new_page(viewport=viewport)
        page.set_default_timeout(600_000)
        page.goto(url)
        _chat(page, prompt)
        page.locator("#replay-panel").get_by_text("What would each drafter buy on this answer?").first.click()
        page.locator("#replay").click()
        page.wait_for_function("document.querySelector('#replay-note').innerText.includes('predicted')")
        page.locator("#replay-chart .js-plotly-plot .scatterlayer").first.wait_for()
        page.wait_for_timeout(1000)  # the charts redraw once the panel has its width
        save_element(page.locator("#replay-panel"), f"chat-replay{suffix}.png")
        page.close()


def capture(url: str, out: Path, prompt: str, dark: bool, own: tuple[str, str], only: str | None = None) -> None:
    def save(page, name: str, full_page: bool = True) -> None:
        page.mouse.move(0, 0)
        size = save_small_png(page.screenshot(full_page=full_page), out / name)
        print(f"{out / name}: {size} bytes")

    def save_element(locator, name: str) -> None:
        locator.scroll_into_view_if_needed()
        size = save_small_png(locator.screenshot(), out / name)
        print(f"{out / name}: {size} bytes")

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
        for viewport, suffix in ((VIEWPORT, ""), (PHONE, "-phone")) * (only is None):  # a phone: its own load
            page = browser.new_page(viewport=viewport)
            page.set_default_timeout(300_000)
            page.goto(url + ("?__theme=dark" if dark else ""))
            _chat(page, prompt)
            save(page, f"chat{suffix}.png")
            _open_tab(page, "Compare")
            _compare(page, prompt)
            save(page, f"compare{suffix}.png")
            _open_tab(page, "Benchmark")
            page.locator("#bench-drift-findings").wait_for()
            page.wait_for_timeout(1000)  # the committed study's figures draw after the findings
            save(page, f"benchmark{suffix}.png", full_page=bool(suffix))
            if not suffix:
                _open_tab(page, "About")
                save(page, "about.png", full_page=False)
            page.close()
        if only is None:
            _queued_and_short(browser, url, save)
        if only in (None, "own-pair"):
            _own_pair_shots(browser, *own, url, save)
        if only in (None, "tree"):
            _tree_shots(browser, url, prompt, save_element)
        if only in (None, "replay"):
            _replay_shot(browser, url, prompt, save_element)
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "assets" / "screenshots")
    parser.add_argument("--prompt", default="Write a function that reverses a list.")
    parser.add_argument("--dark", action="store_true", help="the dark theme")
    parser.add_argument("--only", choices=["own-pair", "tree", "replay"],
                        help="only the own-pair panel's, the tree's or the replay panel's shots")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        models = models_dir(Path(scratch) / "models")
        if models is None:  # the real pair: its converted target folder and a shipped drafter
            from playground.presets import SHIPPED_DRAFTERS
            from playground.smollm2 import HUB_ID, local_folder

            own = (str(local_folder(HUB_ID)), str(SHIPPED_DRAFTERS / "eagle3.1"))
        else:
            own = (str(models / "target"), str(models / "eagle3.1"))
        with running_app(models, Path(scratch) / "app.log") as url:
            capture(url, args.out, args.prompt, args.dark, own, args.only)


if __name__ == "__main__":
    main()
