"""In headless Chromium, defect 6: rewinding a completed thread to a step in the middle
pauses it. The page says who paused it and offers Continue, not the crash wording and
Retry; Continue runs it on to its next suspension."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.dashboard.test_browser import wait_live

pytestmark = pytest.mark.browser


def test_a_rewound_thread_is_paused_and_continues(signed_in, dashboard_server) -> None:
    tid = dashboard_server.start_hitl()

    def answer(client: Any) -> None:
        run = client.runs.create(tid, "hitl", command={"resume": "yes"})
        client.runs.join(tid, run["run_id"])

    dashboard_server.call(answer)
    page = signed_in("olga")
    page.goto(f"/ui/threads/{tid}/")
    wait_live(page)
    status = page.locator("#thread-header [data-status]")
    expect(status).to_have_attribute("data-status", "completed")
    # v2: node a has run, ask is next (an unfinished step, as a crash would leave).
    page.locator('#timeline li[data-version="2"] a.rewind').click()
    page.click("button[name=rewind]")
    expect(page.locator("#thread-header [data-stopped]")).to_have_text(
        "paused after a rewind to v2 by olga"
    )
    actions = page.locator("#actions")
    expect(actions.get_by_role("heading", name="Paused")).to_be_visible()
    expect(page.locator("#thread-header")).not_to_contain_text("interrupted")
    expect(actions.get_by_role("button", name="Retry")).to_have_count(0)
    # A reload tells the same.
    page.reload()
    wait_live(page)
    expect(page.locator("#thread-header [data-stopped]")).to_have_attribute(
        "data-stopped", "paused"
    )
    page.get_by_role("button", name="Continue from v6").click()
    expect(status).to_have_attribute("data-status", "suspended")
    expect(page.locator("#thread-header [data-stopped]")).to_have_count(0)
