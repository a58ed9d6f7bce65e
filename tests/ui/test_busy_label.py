"""Issue 55's must-show: on an idle machine with only the browser open, a Chat answer carries no "the machine was
busy" label, though Chromium rendering the stream takes CPU time of its own (0.37-0.51 cores measured; docs/engine.md
"Threads on a shared CPU"). The app runs with the thread policy a user gets (every core), not the tests' one thread,
so the browser's time falls on cores the run wants. Marked `idle`: it measures what else ran beside each answer and
skips, saying so, where other work took CPU time, so it cannot flake on a loaded machine."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psutil
import pytest

from playground.engine.threads import BUSY_CORES, machine_busy_seconds
from tests.support.browser import TIMEOUT_MS, needs_chromium, open_page

pytestmark = [needs_chromium, pytest.mark.idle]
PROMPTS = ("Write a function that reverses a list.", "Explain recursion in two sentences.",
           "Name three uses of a hash map.")
ELSEWHERE_MAX = BUSY_CORES / 4  # other work than the app, the browser and pytest: more, and the machine is not idle


@pytest.fixture(scope="module")
def user_app_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from playground.smollm2 import unavailable_reason
    from tests.support.appserver import running_app

    if unavailable_reason():
        pytest.skip(unavailable_reason())
    with running_app(None, tmp_path_factory.mktemp("busy-label") / "app.log", one_thread=False) as url:
        yield url


def cpu_seconds(processes: list[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def elsewhere_cores(answer) -> float:
    """Run `answer()`; the CPU time, in cores, that processes other than pytest and those it started (the app,
    Playwright, Chromium) took meanwhile."""
    ours = [psutil.Process(), *psutil.Process().children(recursive=True)]
    start, machine, mine = time.monotonic(), machine_busy_seconds(), cpu_seconds(ours)
    answer()
    wall = time.monotonic() - start
    return ((machine_busy_seconds() - machine) - (cpu_seconds(ours) - mine)) / wall


def ask(page, prompt: str) -> None:
    page.locator("#prompt textarea").fill(prompt)
    page.locator("#send").click()
    while "finished" in page.locator("#chat-status").inner_text():  # the answer before this one's
        time.sleep(0.05)
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while "finished" not in page.locator("#chat-status").inner_text():
        assert time.monotonic() < deadline, page.locator("#chat-status").inner_text()
        time.sleep(0.2)


def test_no_busy_label_with_only_the_browser_beside_the_app(browser, user_app_url: str) -> None:
    if machine_busy_seconds() is None:
        pytest.skip("the system does not say the machine's CPU time (/proc/stat)")
    page = open_page(browser, user_app_url)
    page.locator("#max-new-tokens input[type=number]").fill("96")
    page.locator("#max-new-tokens input[type=number]").press("Enter")
    for prompt in PROMPTS:
        elsewhere = elsewhere_cores(lambda prompt=prompt: ask(page, prompt))
        if elsewhere >= ELSEWHERE_MAX:
            pytest.skip(f"needs an idle machine: other processes took {elsewhere:.2f} cores beside an answer")
        status, stats = page.locator("#chat-status").inner_text(), page.locator("#chat-stats").inner_text()
        assert "busy" not in status and "busy" not in stats, (prompt, status, elsewhere)
