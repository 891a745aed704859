"""In headless Chromium: signing out in one tab ends the live updates of the others.

On the embedded setup (SQLite, in-memory channel layer) and the production one
(PostgreSQL, Redis channel layer).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.dashboard.live_server import PASSWORD

pytestmark = pytest.mark.browser


def card(page: Any, thread_id: str) -> Any:
    return page.locator(f'article.card.waiting[data-thread="{thread_id}"]')


@pytest.mark.parametrize("server", ["dashboard_server", "pg_dashboard_server"])
def test_sign_out_in_one_tab_closes_the_other_tabs_socket_before_the_next_event(
    request: pytest.FixtureRequest, signed_in: Any, server: str
) -> None:
    live = request.getfixturevalue(server)
    tab = signed_in("olga", live)
    other_tab = tab.context.new_page()  # the same browser: the same session
    other_tab.set_default_timeout(10_000)
    other_tab.goto("/ui/inbox/")
    colleague = signed_in("oscar", live)  # tells when the next event went out
    for page in (tab, other_tab, colleague):
        expect(page.locator("body")).to_have_attribute("data-live", "open")
    count = other_tab.locator("#nav-inbox-count").inner_text()
    pushes = other_tab.evaluate("document.body.dataset.liveMessages")

    tab.get_by_role("button", name="Sign out olga").click()
    # The other tab learns it at once, and says so where the live indicator is.
    expect(other_tab.locator("body")).to_have_attribute("data-live", "ended")
    expect(other_tab.locator("body")).to_have_attribute("data-live-closed", "4401")
    notice = other_tab.locator("#live-status a")
    expect(notice).to_contain_text("Signed out")
    expect(notice).to_have_attribute("href", re.compile(r"/accounts/login/\?next=%2Fui%2Finbox%2F"))

    thread_id = live.start_hitl(prefix="signed-out")  # the next event
    expect(card(colleague, thread_id)).to_be_visible()
    expect(card(other_tab, thread_id)).to_have_count(0)
    assert other_tab.locator("#nav-inbox-count").inner_text() == count
    assert other_tab.evaluate("document.body.dataset.liveMessages") == pushes

    # Following the notice signs in again and returns to the page, live.
    notice.click()
    other_tab.wait_for_url("**/accounts/login/**")
    other_tab.fill("input[name=username]", "olga")
    other_tab.fill("input[name=password]", PASSWORD)
    other_tab.click("button[name=login]")
    other_tab.wait_for_url("**/ui/inbox/")
    expect(other_tab.locator("body")).to_have_attribute("data-live", "open")
    expect(card(other_tab, thread_id)).to_be_visible()
