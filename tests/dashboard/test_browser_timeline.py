"""In headless Chromium, feature 13: the timeline tells what happened. Each checkpoint
shows what wrote it and how long its step took; a decision is a row of its own (actor,
verb, door, time), an edit with the diff of the arguments; the transcript shows next to
an edited call the arguments that actually ran."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.dashboard.test_browser import wait_live

pytestmark = pytest.mark.browser


def test_the_timeline_shows_nodes_durations_decisions_and_edits(
    signed_in, dashboard_server
) -> None:
    tid = dashboard_server.start_refund("refund order 808 of 40 EUR")
    page = signed_in("olga")
    page.goto(f"/ui/threads/{tid}/")
    wait_live(page)
    page.keyboard.press("e")
    page.locator("textarea[name=args-0]").fill('{"order_id": "808", "amount": 25}')
    page.click("button[name=edit]")
    expect(page.locator("#thread-header [data-status]")).to_have_attribute(
        "data-status", "completed"
    )
    timeline = page.locator("#timeline")
    # What wrote each checkpoint: the model's phase, the tools' phase, the operator's input.
    expect(timeline.locator('li[data-version="2"] .wrote')).to_have_text("model")
    expect(timeline.locator('li[data-version="3"] .wrote')).to_have_text("tools")
    expect(timeline.locator('li[data-version="4"] .wrote')).to_have_text("input by olga")
    expect(timeline.locator('li[data-version="5"] .wrote')).to_have_text("tools")
    expect(timeline.locator('li[data-version="5"] .took')).to_have_text(re.compile(r"^\d+ ms$|s$"))
    # The decision, between the suspension and the checkpoint it wrote.
    event = timeline.locator('li.event[data-action="decide"]')
    expect(event).to_have_count(1)
    expect(event.locator(".who")).to_have_text("olga")
    expect(event.locator(".verb")).to_have_text("edited issue_refund")
    expect(event).to_contain_text("via ui")
    expect(event.locator("time")).to_have_text(re.compile(r"^\d\d:\d\d:\d\d \S+$"))
    diff = event.locator("table.argdiff tr.d-changed")
    expect(diff).to_have_count(1)
    expect(diff.locator("th")).to_have_text("amount")
    expect(diff.locator("td.old")).to_have_text("40.0")
    expect(diff.locator("td.new")).to_have_text("25.0")
    order = [
        el.get_attribute("data-version") or el.get_attribute("data-action")
        for el in timeline.locator("li").all()
    ]
    assert order.index("4") < order.index("decide") < order.index("3")
    # The transcript: the model's arguments, and the ones that ran.
    page.reload()
    call = page.locator("#panel .transcript .toolcall.edited")
    expect(call).to_have_count(1)
    expect(call.locator("[data-ran]")).to_contain_text('"amount": 25.0')
    expect(call).to_contain_text("edited by olga")
    expect(page.locator("#panel .transcript")).to_contain_text("refunded 25.00 EUR on order 808")
