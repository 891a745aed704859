"""End to end in headless Chromium: a real Daphne server, real runs, two operators.

Runs are started over the REST API (the in-process runner executes them in the server,
so their checkpoints reach the open pages through the server's channel layer). On a
failure every page the test opened is saved under test-results/.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def card(page: Any, thread_id: str) -> Any:
    return page.locator(f'article.card.waiting[data-thread="{thread_id}"]')


def wait_live(page: Any) -> None:
    """Wait until the page's WebSocket is open and its first push (the consumer sends
    one on every connect: it re-syncs the page) has been applied. A test that acts
    before that push races it: the push re-renders what the test just clicked or
    selected."""
    expect(page.locator("body")).to_have_attribute("data-live", "open")
    expect(page.locator("body")).to_have_attribute("data-live-messages", re.compile(r"^[1-9]"))


def test_an_operator_resumes_a_workflow_and_watches_it_complete(
    signed_in, dashboard_server
) -> None:
    tid = dashboard_server.start_hitl()
    page = signed_in("olga")
    # The inbox's first live push re-renders the cards: a click before it may land on
    # a card it replaces, and then nothing opens (it failed so once, under load).
    wait_live(page)
    expect(card(page, tid)).to_be_visible()
    expect(card(page, tid)).to_contain_text("approve?")
    card(page, tid).get_by_role("link", name="Open").click()
    page.wait_for_url(f"**/ui/threads/{tid}/")
    wait_live(page)
    expect(page.locator("#thread-header [data-status]")).to_have_attribute(
        "data-status", "suspended"
    )

    page.fill("#resume-value", '"yes"')
    page.click("button[name=resume]")
    # The run executes in the server; the timeline grows live until it completes.
    expect(page.locator("#thread-header [data-status]")).to_have_attribute(
        "data-status", "completed"
    )
    expect(page.locator('#timeline li[data-version="5"]')).to_have_attribute(
        "data-status", "completed"
    )
    expect(page.locator("#actions")).to_contain_text("Decided by olga")


def test_a_new_suspension_appears_live_and_is_approved_from_the_inbox(
    signed_in, dashboard_server
) -> None:
    page = signed_in("olga")
    wait_live(page)
    before = int(page.locator("#nav-inbox-count").inner_text())
    tid = dashboard_server.start_refund("refund order 314 of 15 EUR")
    # No reload: the card and the count arrive over the socket.
    expect(card(page, tid)).to_be_visible()
    expect(card(page, tid)).to_contain_text("issue_refund")
    expect(page.locator("#nav-inbox-count")).to_have_text(str(before + 1))

    card(page, tid).locator("button[name=approve]").click()
    expect(page.locator("#flash")).to_contain_text("Approved")
    expect(card(page, tid)).to_have_count(0)

    page.goto(f"/ui/threads/{tid}/")
    expect(page.locator("#thread-header [data-status]")).to_have_attribute(
        "data-status", "completed"
    )
    expect(page.locator("#panel .transcript")).to_contain_text(
        "Done: refunded 15.00 EUR on order 314"
    )


def test_two_operators_one_decides_and_the_late_click_is_refused_politely(
    signed_in, dashboard_server
) -> None:
    tid = dashboard_server.start_refund("refund order 2718 of 20 EUR")
    olga = signed_in("olga")
    oscar = signed_in("oscar")
    wait_live(olga)
    wait_live(oscar)
    expect(card(olga, tid)).to_be_visible()
    expect(card(oscar, tid)).to_be_visible()

    # Oscar also has the thread open in a tab whose socket hears nothing (a slow
    # network): its buttons stay on screen after Olga decides.
    stale = oscar.context.new_page()
    stale.route_web_socket(re.compile(r".*/ws/.*"), lambda ws: None)
    stale.goto(f"/ui/threads/{tid}/")
    expect(stale.locator("button[name=approve]")).to_be_visible()

    card(olga, tid).locator("input[name=reason]").fill("duplicate request")
    card(olga, tid).locator("button[name=reject]").click()
    expect(olga.locator("#flash")).to_contain_text("Rejected")

    # Oscar's inbox drops the card by itself.
    expect(card(oscar, tid)).to_have_count(0)
    # His late click changes nothing and says who decided.
    stale.click("button[name=approve]")
    expect(stale.locator("#actions .flash")).to_contain_text(
        re.compile(r"Already decided by olga at \d\d:\d\d:\d\d")
    )
    runs = dashboard_server.call(lambda c: c.runs.list(tid))
    assert len(runs) == 2  # the first turn, and Olga's rejection: nothing from Oscar


def test_retry_a_failed_run_and_rewind_from_the_timeline(signed_in, dashboard_server) -> None:
    failed = dashboard_server.start_flaky()
    page = signed_in("olga")
    page.goto(f"/ui/threads/{failed}/")
    wait_live(page)
    expect(page.locator("#thread-header [data-status]")).to_have_attribute("data-status", "failed")
    expect(page.locator("#actions")).to_contain_text("card declined <b>twice</b>")
    page.get_by_role("button", name=re.compile(r"^Retry from v\d+$")).click()
    expect(page.locator("#thread-header [data-status]")).to_have_attribute(
        "data-status", "completed"
    )

    # Rewind a finished workflow to its suspension: a fork, and it waits again.
    tid = dashboard_server.start_hitl()

    def answer(client: Any) -> None:
        run = client.runs.create(tid, "hitl", command={"resume": "yes"})
        client.runs.join(tid, run["run_id"])

    dashboard_server.call(answer)
    page.goto(f"/ui/threads/{tid}/")
    wait_live(page)
    expect(page.locator("#thread-header [data-status]")).to_have_attribute(
        "data-status", "completed"
    )
    page.locator('#timeline li[data-version="3"] a.rewind').click()
    expect(page.locator("#panel")).to_contain_text("Rewind to v3?")
    page.click("button[name=rewind]")
    expect(page.locator('#timeline li[data-version="6"]')).to_contain_text("fork of v3")
    expect(page.locator("#thread-header [data-status]")).to_have_attribute(
        "data-status", "suspended"
    )
    expect(page.locator("button[name=resume]")).to_be_visible()
    expect(page.locator('#timeline li[data-version="5"]')).to_have_count(1)  # history kept


def test_keyboard_shortcuts_move_and_approve_in_the_inbox(signed_in, dashboard_server) -> None:
    tid = dashboard_server.start_refund("refund order 1618 of 5 EUR")
    page = signed_in("olga")
    wait_live(page)
    expect(card(page, tid)).to_be_visible()
    cards = page.locator("article.card.waiting")
    index = [c.get_attribute("data-thread") for c in cards.all()].index(tid)
    for _ in range(index + 1):
        page.keyboard.press("j")
    expect(card(page, tid)).to_have_class(re.compile(r"\bfocus\b"))
    page.keyboard.press("a")
    expect(page.locator("#flash")).to_contain_text("Approved")
    expect(card(page, tid)).to_have_count(0)
    page.keyboard.press("?")
    expect(page.locator("#keys-help")).to_be_visible()


@pytest.mark.postgres
@pytest.mark.redis
def test_live_updates_cross_processes_on_postgresql_and_redis(
    signed_in, pg_dashboard_server
) -> None:
    olga = signed_in("olga", pg_dashboard_server)
    oscar = signed_in("oscar", pg_dashboard_server)
    wait_live(olga)
    wait_live(oscar)
    tid = pg_dashboard_server.start_refund("refund order 1414 of 8 EUR")
    expect(card(olga, tid)).to_be_visible()
    expect(card(oscar, tid)).to_be_visible()
    card(olga, tid).locator("button[name=approve]").click()
    expect(card(oscar, tid)).to_have_count(0)
    oscar.goto(f"/ui/threads/{tid}/")
    expect(oscar.locator("#thread-header [data-status]")).to_have_attribute(
        "data-status", "completed"
    )
    expect(oscar.locator("#panel .transcript")).to_contain_text("refunded 8.00 EUR on order 1414")


def test_edit_the_arguments_then_approve_in_the_decision_panel(signed_in, dashboard_server) -> None:
    tid = dashboard_server.start_refund("refund order 77 of 100 EUR")
    page = signed_in("olga")
    page.goto(f"/ui/threads/{tid}/")
    wait_live(page)
    page.keyboard.press("e")  # opens "Edit arguments" and focuses the box
    box = page.locator("textarea[name=args-0]")
    expect(box).to_be_focused()
    box.fill('{"order_id": "77", "amount": "half"}')
    page.click("button[name=edit]")
    expect(page.locator('#actions [data-field="args-0"]')).to_contain_text(
        "args.amount must be number"
    )
    page.locator("textarea[name=args-0]").fill('{"order_id": "77", "amount": 50}')
    page.click("button[name=edit]")
    expect(page.locator("#thread-header [data-status]")).to_have_attribute(
        "data-status", "completed"
    )
    page.reload()
    expect(page.locator("#panel .transcript")).to_contain_text("refunded 50.00 EUR on order 77")
