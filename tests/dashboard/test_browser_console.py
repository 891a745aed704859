"""In headless Chromium: no dead ends. An expired session signs in as a whole page and
returns; a failed request says so next to the form and keeps what was typed; ages tick;
the pages fit a phone's screen.

Same server and helpers as ``test_browser.py`` (a real Daphne server, runs started
over the REST API); on a failure every page the test opened is saved under
test-results/.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.dashboard.live_server import PASSWORD
from tests.dashboard.test_browser import card, wait_live

pytestmark = pytest.mark.browser

ERROR = "[data-request-error]"


def test_an_expired_session_signs_in_as_a_whole_page_and_returns_to_it(
    signed_in, dashboard_server
) -> None:
    tid = dashboard_server.start_refund("refund order 5150 of 12 EUR")
    page = signed_in("olga")
    page.goto(f"/ui/threads/{tid}/")
    wait_live(page)
    # The session ends (expired, or deleted on the server): the cookie names no session.
    page.context.clear_cookies(name="sessionid")
    page.context.add_cookies([{"name": "sessionid", "value": "gone", "url": dashboard_server.url}])
    page.click("#actions button[name=approve]")
    # Not the sign-in form inside the decision panel: the sign-in page itself.
    page.wait_for_url(re.compile(r"/accounts/login/\?next="))
    expect(page.locator("#actions")).to_have_count(0)
    page.fill("input[name=username]", "olga")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[name=login]")
    page.wait_for_url(f"**/ui/threads/{tid}/")
    expect(page.locator("#actions button[name=approve]")).to_be_visible()
    expect(page.locator("#actions form.login")).to_have_count(0)
    # Nothing was decided while signed out; now it can be.
    page.click("#actions button[name=approve]")
    expect(page.locator("#actions [role=status]")).to_contain_text(
        re.compile("Approved|Decided by olga")
    )


def test_a_refused_or_failed_request_says_so_by_the_form_and_keeps_the_text(
    signed_in, dashboard_server
) -> None:
    tid = dashboard_server.start_refund("refund order 6174 of 3 EUR")
    page = signed_in("olga")
    page.goto(f"/ui/threads/{tid}/")
    wait_live(page)
    reason = page.locator("#actions input[name=reason]")
    form = page.locator("#actions form.decision")

    # 422: a reason over 2,000 characters is refused; the panel says why, keeps it.
    long_reason = "not this one, " * 150
    reason.fill(long_reason)
    page.click("#actions button[name=reject]")
    expect(page.locator('#actions [data-field="reason"]')).to_contain_text("too long")
    expect(page.locator("#actions input[name=reason]")).to_have_value(long_reason)

    # 413: larger than the server takes (CRIOGEN_MAX_BODY_BYTES, 1 MiB).
    huge = "x" * (1024 * 1024 + 10)
    reason.fill(huge)
    page.click("#actions button[name=reject]")
    expect(page.locator(ERROR)).to_contain_text("Too large (413)")
    expect(page.locator(ERROR)).to_have_attribute("role", "alert")
    assert reason.input_value() == huge

    # Server unreachable: the request cannot be sent.
    reason.fill("duplicate")
    page.context.set_offline(True)
    page.click("#actions button[name=reject]")
    expect(page.locator(ERROR)).to_contain_text("could not be reached")
    expect(reason).to_have_value("duplicate")
    page.context.set_offline(False)

    # 500: the server fails (a proxy's or the app's): said, and the text stays.
    page.route(re.compile(r".*/act/$"), lambda route: route.fulfill(status=500, body="boom"))
    page.click("#actions button[name=reject]")
    expect(page.locator(ERROR)).to_contain_text("The server failed (500)")
    expect(reason).to_have_value("duplicate")
    page.unroute(re.compile(r".*/act/$"))
    # The message sits right before the form that failed, and one at a time.
    assert form.evaluate("f => f.previousElementSibling.hasAttribute('data-request-error')")
    expect(page.locator(ERROR)).to_have_count(1)

    # 403: her permission to act is withdrawn while the page is open.
    dashboard_server.manage(
        "shell",
        "-c",
        "from django.contrib.auth.models import Permission, User; "
        "User.objects.get(username='olga').user_permissions.remove("
        "Permission.objects.get(codename='operate', content_type__app_label='criogen'))",
    )
    try:
        page.click("#actions button[name=reject]")
        expect(page.locator(ERROR)).to_contain_text("Refused (403)")
        expect(reason).to_have_value("duplicate")
    finally:
        dashboard_server.manage(
            "shell",
            "-c",
            "from django.contrib.auth.models import Permission, User; "
            "User.objects.get(username='olga').user_permissions.add("
            "Permission.objects.get(codename='operate', content_type__app_label='criogen'))",
        )
    # Sent again and accepted: the message goes.
    page.click("#actions button[name=reject]")
    # (The run may finish first: the panel then says who decided.)
    expect(page.locator("#actions [role=status]")).to_contain_text(
        re.compile("Rejected|Decided by olga")
    )
    expect(page.locator(ERROR)).to_have_count(0)


def test_an_inbox_card_keeps_a_refused_reason_and_says_why_next_to_it(
    signed_in, dashboard_server
) -> None:
    tid = dashboard_server.start_refund("refund order 8128 of 4 EUR")
    page = signed_in("olga")
    wait_live(page)
    long_reason = "no " * 700
    card(page, tid).locator("input[name=reason]").fill(long_reason)
    card(page, tid).locator("button[name=reject]").click()
    expect(card(page, tid).locator(ERROR)).to_contain_text("The reason is too long")
    expect(card(page, tid).locator("input[name=reason]")).to_have_value(long_reason)


def test_a_bulk_decision_with_nothing_ticked_says_so(signed_in, dashboard_server) -> None:
    dashboard_server.start_refund("refund order 9 of 1 EUR")
    page = signed_in("olga")
    wait_live(page)
    page.click("#bulk-form button[name=approve]")
    expect(page.locator("#bulk-results [role=alert]")).to_contain_text("Nothing is selected")


def test_ages_tick_turn_late_after_an_hour_and_the_title_counts_live(
    signed_in, dashboard_server
) -> None:
    tid = dashboard_server.start_refund("refund order 496 of 6 EUR")
    page = signed_in("olga")
    # The page's clock, so that an hour can pass in the test (it also runs by itself).
    page.clock.install()
    page.goto("/ui/inbox/")
    wait_live(page)
    age = card(page, tid).locator("time.age")
    expect(age).to_have_text(re.compile(r"^\d+s$"))
    first = age.inner_text()
    expect(age).not_to_have_text(first, timeout=5_000)  # it ticks in real time
    # A fresh wait is not in the warning colour...
    expect(age).not_to_have_class(re.compile(r"\blate\b"))
    colour = age.evaluate("el => getComputedStyle(el).color")
    # ... an hour later it is.
    page.clock.fast_forward("01:00:00")
    expect(age).to_have_text(re.compile(r"^1h 0\dm$"))
    expect(age).to_have_class(re.compile(r"\blate\b"))
    assert age.evaluate("el => getComputedStyle(el).color") != colour

    # The title's count follows the live list.
    count = int(page.locator("#inbox-list").get_attribute("data-total") or 0)
    expect(page).to_have_title(f"Inbox ({count}) · Criogen")
    new = dashboard_server.start_refund("refund order 8 of 2 EUR")
    expect(card(page, new)).to_be_visible()
    expect(page).to_have_title(f"Inbox ({count + 1}) · Criogen")


@pytest.mark.parametrize("where", ["inbox", "threads", "thread"])
def test_the_pages_fit_a_390_px_wide_screen(signed_in, dashboard_server, where: str) -> None:
    tid = dashboard_server.start_refund("refund order 3 of 390 EUR")
    page = signed_in("olga", viewport={"width": 390, "height": 844})
    url = {"inbox": "/ui/inbox/", "threads": "/ui/threads/", "thread": f"/ui/threads/{tid}/"}
    page.goto(url[where])
    wait_live(page)
    if where == "thread":
        page.locator("#panel .transcript").wait_for()
    if where == "inbox":
        # The bulk results table, too.
        card(page, tid).locator("input[type=checkbox]").check()
        page.click("#bulk-form button[name=approve]")
        expect(page.locator("#bulk-results table")).to_be_visible()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"{where} is {width} px wide"
    # Wide tables scroll inside their own box.
    boxes: Any = page.evaluate(
        "[...document.querySelectorAll('table')].map(t => t.parentElement.className)"
    )
    assert all(b == "table-scroll" for b in boxes), boxes
