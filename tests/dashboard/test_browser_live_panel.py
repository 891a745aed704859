"""In headless Chromium: a live update of the thread page loses nothing. What the
operator typed in the decision panel survives a re-render of the same suspension (a
reconnect's sync), and a checkpoint panel that showed the head follows the new head."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.dashboard.test_browser import wait_live

pytestmark = pytest.mark.browser


def live_messages(page: Any) -> int:
    return int(page.evaluate("() => Number(document.body.dataset.liveMessages || 0)"))


def test_typed_text_survives_a_live_re_render_of_the_same_suspension(
    signed_in, dashboard_server
) -> None:
    tid = dashboard_server.start_refund("refund order 5 of 5 EUR")
    page = signed_in("olga")
    # Keep the page's socket at hand, to reconnect it as a dropped network would.
    page.add_init_script(
        "document.addEventListener('htmx:wsOpen', e => { window.__socket = e.detail.socketWrapper; });"
    )
    page.goto(f"/ui/threads/{tid}/")
    wait_live(page)
    page.locator("#actions details.edit summary").click()
    page.locator("textarea[name=args-0]").fill('{"order_id": "5", "amount": 4}')
    reason = page.locator("#actions input[name=reason]")
    reason.fill("half typed")
    reason.focus()
    seen = live_messages(page)
    # A new socket's first message re-renders the whole panel (same suspension).
    page.evaluate("() => window.__socket.reconnect()")
    expect(page.locator("body")).not_to_have_attribute("data-live-messages", str(seen))
    expect(reason).to_have_value("half typed")
    expect(reason).to_be_focused()
    expect(page.locator("#actions details.edit")).to_have_attribute("open", "")
    expect(page.locator("textarea[name=args-0]")).to_have_value('{"order_id": "5", "amount": 4}')


def test_the_panel_follows_the_head_it_showed(signed_in, dashboard_server) -> None:
    tid = dashboard_server.start_refund("refund order 6 of 6 EUR")
    page = signed_in("olga")
    page.goto(f"/ui/threads/{tid}/")
    wait_live(page)
    expect(page.locator("#panel .transcript")).not_to_contain_text("Done:")

    def approve(client: Any) -> None:
        run = client.runs.create(tid, "refunds", command={"resume": "approve"})
        client.runs.join(tid, run["run_id"])

    dashboard_server.call(approve, "oscar")
    expect(page.locator("#thread-header [data-status]")).to_have_attribute(
        "data-status", "completed"
    )
    expect(page.locator("#panel .transcript")).to_contain_text("Done: refunded 6.00 EUR on order 6")
    # A checkpoint picked by hand stays put when the thread moves on.
    page.locator('#timeline li[data-version="2"] a.v').click()
    expect(page.locator("#panel h2")).to_contain_text("v2")


def test_the_timeline_row_selected_with_j_stays_selected_across_a_live_re_render(
    signed_in, dashboard_server
) -> None:
    tid = dashboard_server.start_refund("refund order 7 of 7 EUR")
    page = signed_in("olga")
    page.add_init_script(
        "document.addEventListener('htmx:wsOpen', e => { window.__socket = e.detail.socketWrapper; });"
    )
    page.goto(f"/ui/threads/{tid}/")
    wait_live(page)
    page.locator("body").press("j")
    page.locator("body").press("j")  # the second row: not where a fresh page starts
    second = page.locator("#timeline li.cp").nth(1)
    expect(second).to_be_focused()
    version = second.get_attribute("data-version")
    seen = live_messages(page)
    # A new socket's first message re-renders the timeline.
    page.evaluate("() => window.__socket.reconnect()")
    expect(page.locator("body")).not_to_have_attribute("data-live-messages", str(seen))
    row = page.locator(f'#timeline li.cp[data-version="{version}"]')
    expect(row).to_be_focused()
    expect(row).to_have_attribute("aria-current", "true")
    expect(page.locator("#timeline li.cp[aria-current]")).to_have_count(1)
