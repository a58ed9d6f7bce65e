"""The browser fixtures for this folder's tests (tests/support/browser.py)."""

from tests.support.browser import browser, page  # noqa: F401 - fixtures
