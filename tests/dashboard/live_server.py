"""A real dashboard server for browser tests, screenshots and the benchmark.

The server itself is ``tests.servers``' (:func:`start` is
``tests.servers.start_dashboard``): a fresh database migrated, the cast of personas with
:data:`PASSWORD` and API tokens, Daphne's runserver on a free port with the in-process
runner — runs execute in the server, and their checkpoints reach the open pages through
the server's channel layer, as in production. This module keeps the browser's side:
:func:`launch_browser` starts Debian's Chromium through Playwright, :func:`sign_in` signs
a persona in through the login form.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.conftest import PASSWORD, need_service
from tests.servers import ROOT, DashboardServer, free_port, stop
from tests.servers import manage as _manage
from tests.servers import start_dashboard as start

__all__ = [
    "CHROMIUM",
    "CHROMIUM_ARGS",
    "PASSWORD",
    "ROOT",
    "DashboardServer",
    "chromium_available",
    "headless_chromium",
    "free_port",
    "launch_browser",
    "sign_in",
    "start",
    "stop",
    "_manage",
]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium_available() -> bool:
    return Path(CHROMIUM).exists()


def launch_browser(playwright: Any) -> Any:
    """Headless Debian Chromium (never a downloaded browser)."""
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)


def headless_chromium() -> Iterator[Any]:
    """:func:`launch_browser` for a module-scoped ``chromium`` fixture to ``yield from``
    (fails in CI when Chromium is missing); closed when the fixture ends.

    Module-scoped: Playwright's sync API keeps an event loop running in the main thread
    while it is open, and Django refuses ORM calls from a thread with a running loop, so
    it must be closed before the (randomly ordered) tests of other modules run.
    """
    need_service("Chromium", chromium_available(), "apt-get update && apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch_browser(playwright)
        yield browser
        browser.close()


def sign_in(browser: Any, server: DashboardServer, who: str, **context_options: Any) -> Any:
    """A new browser context signed in as ``who`` through the login form; its page."""
    context = browser.new_context(base_url=server.url, **context_options)
    page = context.new_page()
    page.goto("/ui/inbox/")
    page.fill("input[name=username]", who)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[name=login]")
    page.wait_for_url("**/ui/inbox/")
    return page
