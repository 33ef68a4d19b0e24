"""A real browser for the dashboard's tests: Debian's chromium, driven by Playwright."""

from __future__ import annotations

from contextlib import contextmanager

CHROMIUM = "/usr/bin/chromium"
# as root, with no network: no sandbox, and nothing that would call out at start
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def chromium():
    """A headless chromium, closed on leaving."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()
