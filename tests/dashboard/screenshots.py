"""Take the dashboard screenshots in docs/img/ (run: ``python -m tests.dashboard.screenshots``).

Starts the browser tests' server on a throwaway SQLite file, makes a few runs (waiting
workflows and agents, a failed run, a finished one), signs in as an operator and saves
one PNG per page with Debian's Chromium.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.dashboard import live_server

OUT = live_server.ROOT / "docs" / "img"


def main() -> int:
    from playwright.sync_api import sync_playwright

    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        server = live_server.start(f"sqlite://{Path(tmp) / 'shots.db'}", Path(tmp))
        try:
            from tests.dashboard.test_browser_typed import start_review

            # The demo's review step: a typed suspension (an Approve choice and a form).
            wf = start_review(server, "Refund policy")
            server.start_hitl(n=7, prefix="expense-report")
            agent = server.start_refund("Please refund order 8812 of 49.90 EUR, it arrived broken")
            server.start_refund("refund order 5120 of 12 EUR", who="oscar")
            server.start_flaky()
            done = server.start_hitl(n=3, prefix="onboarding")

            def answer(client: Any) -> None:
                run = client.runs.create(done, "hitl", command={"resume": {"approved": True}})
                client.runs.join(done, run["run_id"])

            server.call(answer)
            with sync_playwright() as playwright:
                browser = live_server.launch_browser(playwright)
                context = browser.new_context(
                    base_url=server.url, viewport={"width": 1360, "height": 900}
                )
                page = context.new_page()
                page.goto("/accounts/login/")
                page.screenshot(path=str(OUT / "sign-in.png"))
                page.fill("input[name=username]", "olga")
                page.fill("input[name=password]", live_server.PASSWORD)
                page.click("button[name=login]")
                page.wait_for_selector("body[data-live=open]")
                page.screenshot(path=str(OUT / "inbox.png"), full_page=True)
                page.goto(f"/ui/threads/{agent}/")
                page.wait_for_selector("body[data-live=open]")
                page.locator("details.edit summary").first.click()
                page.screenshot(path=str(OUT / "decision-panel.png"), full_page=True)
                page.goto(f"/ui/threads/{done}/")
                page.wait_for_selector("body[data-live=open]")
                page.locator('#timeline li[data-version="4"] a.v').click()
                page.wait_for_selector("#panel h2:has-text('v4')")
                page.screenshot(path=str(OUT / "timeline.png"), full_page=True)
                page.locator('#timeline li[data-version="3"] a.rewind').click()
                page.wait_for_selector("button[name=rewind]")
                page.screenshot(path=str(OUT / "rewind-confirm.png"))
                page.goto(f"/ui/threads/{wf}/")
                page.wait_for_selector("body[data-live=open]")
                page.screenshot(path=str(OUT / "resume-workflow.png"), full_page=True)
                page.goto("/ui/threads/")
                page.screenshot(path=str(OUT / "threads.png"), full_page=True)
                page.goto("/ui/inbox/")
                page.wait_for_selector("body[data-live=open]")
                page.locator("article.card.waiting input[type=checkbox]").first.check()
                page.fill("#bulk-form input[name=reason]", "duplicate")
                page.click("#bulk-form button[name=reject]")
                page.wait_for_selector("#bulk-results table")
                page.screenshot(path=str(OUT / "bulk-results.png"), full_page=True)
                page.goto("/ui/audit/")
                page.screenshot(path=str(OUT / "audit.png"), full_page=True)
                browser.close()
        finally:
            live_server.stop(server)
    print(f"screenshots written to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
