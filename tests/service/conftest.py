"""The browser the dashboard's tests drive: Playwright for Python with Debian's Chromium
(``apt-get install chromium-headless-shell``; never the browser download of ``playwright
install``). One browser per test session, a fresh context (cookies, storage) per test; the tests
marked ``browser`` skip with one line where no Chromium (or no Playwright) is found."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

# Where Debian puts its Chromium builds; UNSTALL_CHROMIUM names another.
CHROMIUM_NAMES = ("chromium-headless-shell", "chromium", "chromium-browser")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def find_chromium() -> str | None:
    """The Chromium to drive: UNSTALL_CHROMIUM, else the first of Debian's on the PATH."""
    named = os.environ.get("UNSTALL_CHROMIUM")
    if named:
        return named if os.access(named, os.X_OK) else None
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium for the session's browser tests."""
    executable = find_chromium()
    if executable is None:
        pytest.skip(
            "no Chromium: apt-get install chromium-headless-shell (or set UNSTALL_CHROMIUM)"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("no Playwright: pip install playwright (the dev extras)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A page of its own (fresh storage), its dialogs recorded (a script that ran would show
    one) and dismissed."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    opened.dialogs = []
    opened.on("dialog", lambda dialog: (opened.dialogs.append(dialog.message), dialog.dismiss()))
    opened.set_default_timeout(60_000)
    try:
        yield opened
    finally:
        context.close()
