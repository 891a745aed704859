"""Take the dashboard screenshots in docs/img/ (run: ``python -m tests.dashboard.screenshots``).

Starts the browser tests' server on a throwaway SQLite file, makes runs as the demo
would (waiting workflows and agents, a failed run, a finished one, enough waiting
threads for a second inbox page), signs in as the operators olga and oscar and the
admin ada, and saves one PNG per page and feature with Debian's Chromium: the inbox with
claims and its pages, a decision panel, a timeline with an edited decision's diff, the
typed answer form, the typed state form, the notification settings.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.dashboard import live_server

OUT = live_server.ROOT / "docs" / "img"
FILLER = 52
"""Waiting threads added after the interesting ones, so the inbox has a second page."""


def sign_in(browser: Any, server: Any, who: str) -> Any:
    context = browser.new_context(base_url=server.url, viewport={"width": 1360, "height": 900})
    page = context.new_page()
    page.goto("/accounts/login/")
    page.fill("input[name=username]", who)
    page.fill("input[name=password]", live_server.PASSWORD)
    page.click("button[name=login]")
    page.wait_for_selector("body[data-live=open]")
    return page


def live(page: Any, path: str) -> None:
    page.goto(path)
    page.wait_for_selector("body[data-live=open]")


def shot(page: Any, name: str, *, full_page: bool = True) -> None:
    """Save the page as ``docs/img/<name>.png``; a full page is scrolled to the top
    first (taken after a click lower down, it would show the sticky header mid-page)."""
    if full_page:
        page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(OUT / f"{name}.png"), full_page=full_page)


def main() -> int:
    from playwright.sync_api import sync_playwright

    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        server = live_server.start(f"sqlite://{Path(tmp) / 'shots.db'}", Path(tmp))
        try:
            from tests.dashboard.test_browser_fix_retry import start_steps
            from tests.dashboard.test_browser_typed import start_review

            # The demo's review step: a typed suspension (an Approve choice and a form).
            wf = start_review(server, "Refund policy")
            claimed = server.start_hitl(n=7, prefix="expense-report")
            agent = server.start_refund("Please refund order 8812 of 49.90 EUR, it arrived broken")
            mine = server.start_refund("refund order 5120 of 12 EUR", who="oscar")
            edited = server.start_refund("refund order 6034 of 80 EUR, half was delivered")
            server.start_flaky()
            # The demo's failed run: steps with {"fail": true}, fixed with the state form.
            failed, _ = start_steps(server, {"n": 0, "fail": True}, join=True)
            done = server.start_hitl(n=3, prefix="onboarding")

            def answer(client: Any) -> None:
                run = client.runs.create(done, "hitl", command={"resume": {"approved": True}})
                client.runs.join(done, run["run_id"])

            server.call(answer)
            for i in range(FILLER):
                server.start_hitl(n=i, prefix=f"batch-{i:02d}")
            with sync_playwright() as playwright:
                browser = live_server.launch_browser(playwright)
                anonymous = browser.new_context(
                    base_url=server.url, viewport={"width": 1360, "height": 900}
                ).new_page()
                anonymous.goto("/accounts/login/")
                shot(anonymous, "sign-in", full_page=False)

                # Claims: oscar is on one thread, olga on another.
                oscar = sign_in(browser, server, "oscar")
                live(oscar, f"/ui/threads/{claimed}/")
                oscar.locator("#claim [data-claim-button=claim]").click()
                oscar.wait_for_selector("#claim [data-claim=mine]")
                page = sign_in(browser, server, "olga")
                live(page, f"/ui/threads/{mine}/")
                page.locator("#claim [data-claim-button=claim]").click()
                page.wait_for_selector("#claim [data-claim=mine]")
                live(page, "/ui/inbox/")
                shot(page, "inbox", full_page=False)
                live(page, "/ui/inbox/?claim=mine")
                shot(page, "inbox-mine", full_page=False)
                live(page, "/ui/inbox/")
                page.get_by_role("link", name="Next page").click()
                page.wait_for_url("**after=*")
                page.wait_for_selector("body[data-live=open]")
                shot(page, "inbox-page-2")

                # Presence: oscar has the agent's page open while olga looks at it.
                live(oscar, f"/ui/threads/{agent}/")
                live(page, f"/ui/threads/{agent}/")
                page.wait_for_selector("#presence :text('oscar')")
                page.locator("details.edit summary").first.click()
                shot(page, "decision-panel")

                # An edited decision: the timeline's event carries the arguments' diff.
                live(page, f"/ui/threads/{edited}/")
                page.locator("details.edit summary").first.click()
                page.locator("textarea[name=args-0]").fill('{"order_id": "6034", "amount": 40}')
                page.click("button[name=edit]")
                page.wait_for_selector('#thread-header [data-status="completed"]')
                page.wait_for_selector('#timeline li.event[data-action="decide"] table.argdiff')
                shot(page, "timeline-decision")

                live(page, f"/ui/threads/{done}/")
                page.locator('#timeline li[data-version="4"] a.v').click()
                page.wait_for_selector("#panel h2:has-text('v4')")
                shot(page, "timeline")
                page.locator('#timeline li[data-version="3"] a.rewind').click()
                page.wait_for_selector("button[name=rewind]")
                shot(page, "rewind-confirm", full_page=False)

                # The typed answer form, with a refused field.
                live(page, f"/ui/threads/{wf}/")
                page.click("#actions button[name=resume]")
                page.wait_for_selector("#f-answer-decision-error")
                shot(page, "resume-workflow")

                # The typed state form of the demo's failed run, with a refused field.
                live(page, f"/ui/threads/{failed}/")
                page.get_by_text("Edit the state before retrying").click()
                page.locator("#f-values-fail").uncheck()
                page.locator("#f-values-sleep").fill("-1")
                page.locator("form.state-form button[name=save_state]").click()
                page.wait_for_selector("#f-values-sleep-error")
                shot(page, "state-form")

                page.goto("/ui/threads/")
                shot(page, "threads", full_page=False)
                live(page, "/ui/inbox/")
                page.locator("article.card.waiting input[type=checkbox]").first.check()
                page.fill("#bulk-form input[name=reason]", "duplicate")
                page.click("#bulk-form button[name=reject]")
                page.wait_for_selector("#bulk-results table")
                shot(page, "bulk-results", full_page=False)
                page.goto("/ui/audit/")
                shot(page, "audit")

                admin = sign_in(browser, server, "ada")
                admin.goto("/ui/notifications/")
                saved = admin.locator("section.notify").nth(1)
                saved.get_by_label("Webhook URL").fill(
                    "https://hooks.slack.com/services/T000/B000/XXXX"
                )
                saved.get_by_role("button", name="Save").click()
                admin.wait_for_selector("#page-messages")
                first = admin.locator("section.notify").first
                first.get_by_label("Webhook URL").fill("hooks.example.com/T000/B000")
                first.get_by_label("E-mail addresses").fill("ops@example.com\noncall@example.com")
                first.get_by_role("button", name="Save").click()
                admin.wait_for_selector("section.notify [aria-invalid=true]")
                shot(admin, "notifications")
                browser.close()
        finally:
            live_server.stop(server)
    print(f"screenshots written to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
