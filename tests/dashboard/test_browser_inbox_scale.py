"""The inbox at scale in Chromium: the second page, a date range, a content search, all
kept in the URL (and in the live socket's address)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.dashboard.test_browser import card, wait_live

pytestmark = pytest.mark.browser


@pytest.fixture
def many_waiting(dashboard_server: Any) -> Iterator[dict[str, Any]]:
    """55 waiting agent threads and one workflow of olga's (ids share a new prefix),
    written in the server's database (see ``inbox_scale_checks.make_rows``), and removed
    afterwards: they wait since March, so on the shared server they would fill the
    first inbox page of every later test."""
    prefix = f"pages-{uuid.uuid4().hex[:8]}"
    code = f"""
import json
from django.contrib.auth import get_user_model
from tests.dashboard import inbox_scale_checks as checks
olga = get_user_model().objects.get(username="olga")
print("OUT=" + json.dumps(checks.make_rows({prefix!r}, olga, n=55)))
"""
    import json

    rows = json.loads(dashboard_server.manage("shell", "-c", code).split("OUT=", 1)[1])
    yield {"prefix": prefix, **rows}
    dashboard_server.manage(
        "shell",
        "-c",
        "from criogen.storage.models import Thread\n"
        f"Thread.objects.filter(id__startswith={prefix!r}).delete()",
    )


def test_an_operator_pages_filters_by_date_and_searches_the_content(
    signed_in: Any, many_waiting: dict[str, Any]
) -> None:
    prefix, agents, workflow = (
        many_waiting["prefix"],
        many_waiting["agents"],
        many_waiting["workflow"],
    )
    order = [workflow, *sorted(agents[:5]), *sorted(agents[5:])]
    olga = signed_in("olga")
    olga.goto(f"/ui/inbox/?q={prefix}")
    wait_live(olga)
    cards = olga.locator("#inbox-list article.card.waiting")
    expect(cards).to_have_count(50)
    expect(olga.locator("#inbox-list .count")).to_contain_text("56 waiting")
    expect(cards.first).to_have_attribute("data-thread", workflow)

    # The second page: the six after the fiftieth, oldest first, still live.
    olga.locator("[data-next-page]").click()
    expect(olga).to_have_url(re.compile(r"after="))
    wait_live(olga)
    expect(cards).to_have_count(6)
    expect(cards.first).to_have_attribute("data-thread", order[50])
    expect(olga.locator("[data-next-page]")).to_have_count(0)
    expect(olga.locator("#live")).to_have_attribute("ws-connect", re.compile(r"after="))

    # A date range (the day most of them suspended) from the filter form: back to page 1.
    olga.locator("input[name=waiting_from]").fill("2026-03-02")
    olga.locator("input[name=waiting_to]").fill("2026-03-02")
    olga.locator("button[name=filter]").click()
    expect(olga).to_have_url(re.compile(r"waiting_from=2026-03-02&waiting_to=2026-03-02"))
    wait_live(olga)
    expect(cards).to_have_count(5)
    for tid in agents[:5]:
        expect(card(olga, tid)).to_be_visible()

    # A search in the tools' arguments, on top of the range: one card; the URL keeps all.
    olga.locator("input[name=text]").fill("ord-003")
    olga.locator("button[name=filter]").click()
    expect(olga).to_have_url(re.compile(r"waiting_from=2026-03-02.*text=ord-003"))
    wait_live(olga)
    expect(cards).to_have_count(1)
    expect(card(olga, agents[3])).to_be_visible()
    expect(olga.locator("#live")).to_have_attribute("ws-connect", re.compile(r"text=ord-003"))

    # A workflow's payload is searched too (the range cleared).
    olga.goto(f"/ui/inbox/?q={prefix}&text=9000+dollars")
    wait_live(olga)
    expect(cards).to_have_count(1)
    expect(card(olga, workflow)).to_be_visible()
