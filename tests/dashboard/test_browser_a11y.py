"""In headless Chromium, feature 17: every dashboard page passes axe-core's WCAG 2.1
A and AA rules (contrast included), in the states operators see: waiting cards, a
decision panel, a typed form with an error, a timeline with decisions, a failure, the
lists, the audit log, the tokens page and the sign-in form. Keyboard selection moves
real focus and says so with ARIA; a refused field is aria-invalid and announced; times
name their time zone.

axe-core is the npm package in tests/dashboard/a11y (``make install-a11y``), read from
disk and injected into each page: no browser or script is downloaded.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.conftest import IN_CI
from tests.dashboard.test_browser import card, wait_live
from tests.dashboard.test_browser_typed import start_review

pytestmark = pytest.mark.browser

AXE = Path(__file__).parent / "a11y" / "node_modules" / "axe-core" / "axe.min.js"
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]


@pytest.fixture(scope="module")
def axe_source() -> str:
    if not AXE.exists():
        message = "axe-core is not installed; run: make install-a11y"
        if IN_CI:
            pytest.fail(f"CI=true and {message}")
        pytest.skip(message)
    return AXE.read_text()


def violations(page: Any, axe_source: str) -> list[dict[str, Any]]:
    """axe-core's WCAG A/AA violations on the page as it is now."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.add_script_tag(content=axe_source)
    result = page.evaluate(
        "async (tags) => (await axe.run(document, {runOnly: {type: 'tag', values: tags}}))"
        ".violations.map(v => ({id: v.id, impact: v.impact, help: v.help,"
        " nodes: v.nodes.slice(0, 5).map(n => n.target.join(' ') + ': ' + n.failureSummary)}))",
        TAGS,
    )
    return list(result)


def assert_accessible(page: Any, axe_source: str, what: str) -> None:
    found = violations(page, axe_source)
    assert not found, f"{what}: WCAG violations\n" + json.dumps(found, indent=2)


def test_every_page_passes_axe_core(
    signed_in, dashboard_server, axe_source, browser_page=None
) -> None:
    refund = dashboard_server.start_refund("refund order 4711 of 9 EUR")
    review = start_review(dashboard_server, "Accessible")
    failed = dashboard_server.start_flaky()
    page = signed_in("olga")

    page.goto("/ui/inbox/")
    wait_live(page)
    expect(card(page, refund)).to_be_visible()
    assert_accessible(page, axe_source, "inbox")

    page.goto(f"/ui/threads/{refund}/")
    wait_live(page)
    assert_accessible(page, axe_source, "thread waiting for approval")
    page.locator("#actions input[name=reason]").fill("x" * 2001)
    page.click("#actions button[name=reject]")
    expect(page.locator("#actions input[name=reason]")).to_have_attribute("aria-invalid", "true")
    assert_accessible(page, axe_source, "thread with a refused reason")
    page.locator("#actions input[name=reason]").fill("")
    page.click("#actions button[name=approve]")
    expect(page.locator("#thread-header [data-status]")).to_have_attribute(
        "data-status", "completed"
    )
    page.reload()
    assert_accessible(page, axe_source, "completed agent thread with its transcript")

    page.goto(f"/ui/threads/{review}/")
    wait_live(page)
    page.click("#actions button[name=resume]")
    expect(page.locator("#f-answer-decision-error")).to_be_visible()
    assert_accessible(page, axe_source, "typed form with an error")

    page.goto(f"/ui/threads/{failed}/")
    wait_live(page)
    assert_accessible(page, axe_source, "failed thread")
    page.locator("#timeline li.cp a.rewind").first.click()
    expect(page.locator("#panel")).to_contain_text("Rewind to")
    assert_accessible(page, axe_source, "rewind confirmation")

    for path, what in (
        ("/ui/threads/", "threads list"),
        ("/ui/threads/?status=nope", "threads list with a bad filter"),
        ("/ui/audit/", "audit log"),
        ("/ui/tokens/", "API tokens"),
    ):
        page.goto(path)
        assert_accessible(page, axe_source, what)
    page.keyboard.press("?")
    expect(page.locator("#keys-help")).to_be_visible()
    assert_accessible(page, axe_source, "keyboard help")

    anonymous = page.context.browser.new_context(base_url=dashboard_server.url).new_page()
    anonymous.goto("/accounts/login/")
    assert_accessible(anonymous, axe_source, "sign-in")
    anonymous.fill("input[name=username]", "olga")
    anonymous.fill("input[name=password]", "wrong")
    anonymous.click("button[name=login]")
    assert_accessible(anonymous, axe_source, "sign-in refused")
    anonymous.context.close()


def test_keyboard_selection_moves_real_focus_with_aria_state(signed_in, dashboard_server) -> None:
    first = dashboard_server.start_refund("refund order 1 of 1 EUR")
    second = dashboard_server.start_refund("refund order 2 of 2 EUR")
    page = signed_in("olga")
    wait_live(page)
    expect(card(page, second)).to_be_visible()
    cards = page.locator("article.card.waiting")
    ids = [c.get_attribute("data-thread") for c in cards.all()]
    page.locator("body").press("j")
    expect(cards.nth(0)).to_be_focused()
    expect(cards.nth(0)).to_have_attribute("aria-current", "true")
    page.keyboard.press("j")
    expect(cards.nth(1)).to_be_focused()
    expect(cards.nth(1)).to_have_attribute("aria-current", "true")
    expect(cards.nth(0)).not_to_have_attribute("aria-current", "true")
    # Selection survives a live swap of the list, focus included.
    target = ids[1]
    dashboard_server.start_refund("refund order 3 of 3 EUR")
    expect(page.locator("article.card.waiting")).to_have_count(len(ids) + 1)
    expect(card(page, target)).to_be_focused()
    # The timeline: j moves focus along the checkpoints.
    page.goto(f"/ui/threads/{first}/")
    wait_live(page)
    page.locator("body").press("j")
    row = page.locator("#timeline li.cp").first
    expect(row).to_be_focused()
    expect(row).to_have_attribute("aria-current", "true")


def test_an_inbox_card_refusal_marks_the_field_and_is_announced(
    signed_in, dashboard_server
) -> None:
    tid = dashboard_server.start_refund("refund order 9 of 9 EUR")
    page = signed_in("olga")
    wait_live(page)
    the_card = card(page, tid)
    the_card.locator("button[name=reject]").click()  # no reason
    reason = the_card.locator("input[name=reason]")
    expect(reason).to_have_attribute("aria-invalid", "true")
    described = reason.get_attribute("aria-describedby")
    assert described
    message = page.locator(f"#{described}")
    expect(message).to_contain_text("Say why you reject it")
    expect(message).to_have_attribute("role", "alert")


def test_times_name_their_time_zone(signed_in, dashboard_server) -> None:
    tid = dashboard_server.start_refund("refund order 10 of 1 EUR")
    page = signed_in("olga")
    page.goto(f"/ui/threads/{tid}/")
    wait_live(page)
    zone = re.compile(r"\d\d:\d\d:\d\d (UTC|[A-Z]{2,5}|[+-]\d\d(:?\d\d)?)")
    expect(page.locator("#timeline li.cp time").first).to_have_text(zone)
    expect(page.locator("#actions table.runs td:nth-child(5)").last).to_have_text(zone)
    expect(page.locator("#panel h2")).to_contain_text(zone)
    page.goto("/ui/audit/")
    expect(page.locator("main table time, main table td[title]").first).to_have_text(zone)


def test_the_state_form_and_the_notification_settings_pass_axe_core(
    signed_in, dashboard_server, axe_source
) -> None:
    from tests.dashboard.test_browser_fix_retry import start_steps

    tid, _ = start_steps(dashboard_server, {"n": 0, "fail": True}, join=True)
    page = signed_in("ada")
    page.goto(f"/ui/threads/{tid}/")
    wait_live(page)
    page.get_by_text("Edit the state before retrying").click()
    page.locator("#f-values-sleep").fill("-1")
    page.locator("form.state-form button[name=save_state]").click()
    expect(page.locator("#f-values-sleep")).to_have_attribute("aria-invalid", "true")
    page.get_by_text("Edit as JSON").click()
    assert_accessible(page, axe_source, "typed state form with an error")

    page.goto("/ui/notifications/")
    assert_accessible(page, axe_source, "notification settings")
    first = page.locator("section.notify").first
    first.get_by_label("Webhook URL").fill("not a url")
    first.get_by_role("button", name="Save").click()
    expect(page.locator("section.notify [aria-invalid=true]")).to_have_count(1)
    assert_accessible(page, axe_source, "notification settings with an error")
