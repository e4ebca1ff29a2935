"""Debian's Chromium driven by Playwright, for the tests that look at the real UI as a person does.

Playwright's own browser download is never used; `.ci/run` installs Debian's `chromium`.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

VIEWPORT = {"width": 1600, "height": 1000}
STEP_TIMEOUT_MS = 30_000


def playwright_api():
    """Playwright's sync API; skips the calling test (or module), saying why, without it or a Chromium."""
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed: pip install -e '.[test]'"
    )
    if shutil.which("chromium") is None:
        pytest.skip("no Chromium on PATH: apt-get install -y chromium (.ci/run installs it)", allow_module_level=True)
    return sync_api


@contextmanager
def browser_page() -> Iterator:
    """A fresh Chromium page, closed after."""
    with playwright_api().sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"))
        page = browser.new_page(viewport=VIEWPORT)
        page.set_default_timeout(STEP_TIMEOUT_MS)
        # A fresh instance greets its first visitor with a newsletter dialog, over whatever page comes first.
        page.add_locator_handler(
            page.get_by_text("Join the Dagster community"), lambda: page.get_by_role("button", name="Skip").click()
        )
        try:
            yield page
        finally:
            browser.close()
