"""The inbox at scale: keyset pages past the first 50 (stable with ties), a date range
of waiting, search in tool arguments and interrupt payloads (refused, and disabled in
the page, with encryption on), and every filter in the URL, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client

from criogen.engine.crypto import generate_key
from criogen.engine.errors import InvalidArgument
from criogen.selectors import suspended_threads, viewer
from tests.dashboard import inbox_scale_checks as checks


def test_pages_date_range_and_content_search_on_sqlite(operator: Any) -> None:
    prefix = f"scale-{uuid.uuid4().hex[:8]}"
    rows = checks.make_rows(prefix, operator)
    assert checks.check(prefix, operator) == checks.expected(rows)


@pytest.mark.postgres
def test_pages_date_range_and_content_search_on_postgresql(pg_dashboard_server: Any) -> None:
    prefix = f"scale-{uuid.uuid4().hex[:8]}"
    code = f"""
import json
from django.contrib.auth import get_user_model
from tests.dashboard import inbox_scale_checks as checks
olga = get_user_model().objects.get(username="olga")
rows = checks.make_rows({prefix!r}, olga)
print("OUT=" + json.dumps({{"got": checks.check({prefix!r}, olga), "want": checks.expected(rows)}}))
# The server is shared: threads waiting since March would head every later inbox.
from criogen.storage.models import Thread
Thread.objects.filter(id__startswith={prefix!r}).delete()
"""
    out = json.loads(pg_dashboard_server.manage("shell", "-c", code).split("OUT=", 1)[1])
    assert out["got"] == out["want"]


def test_content_search_is_refused_and_disabled_with_encryption_on(
    settings: Any, operator: Any, as_operator: Client
) -> None:
    prefix = f"sealed-{uuid.uuid4().hex[:8]}"
    checks.make_rows(prefix, operator, n=2)
    settings.CRIOGEN_ENCRYPTION_KEY = generate_key()
    with pytest.raises(InvalidArgument) as refused:
        list(suspended_threads(viewer(operator), text="ORD-001"))
    assert refused.value.details["field"] == "text"
    # The other filters still work.
    assert len(suspended_threads(viewer(operator), q=prefix)) == 3

    page = as_operator.get("/ui/inbox/", {"q": prefix})
    html = page.content.decode()
    assert page.status_code == 200
    assert re.search(r'<input type="search" name="text" value="" disabled[^>]*>', html)
    assert "Content search is off: checkpoints are encrypted at rest." in html
    # A bookmarked content search says why it shows nothing.
    page = as_operator.get("/ui/inbox/", {"q": prefix, "text": "ORD-001"})
    assert page.status_code == 422
    assert 'data-field="text"' in page.content.decode()


def test_every_filter_is_in_the_url_the_pager_and_the_live_socket(
    operator: Any, as_operator: Client
) -> None:
    from dashboard.data import INBOX_LIMIT

    prefix = f"url-{uuid.uuid4().hex[:8]}"
    rows = checks.make_rows(prefix, operator, n=INBOX_LIMIT + 5)
    query = {
        "q": prefix,
        "claim": "unclaimed",
        "assistant": "refunds",
        "waiting_from": "2026-02-01",
        "waiting_to": "2026-03-03",
        "text": "issue_refund",
    }
    html = as_operator.get("/ui/inbox/", query).content.decode()
    assert html.count('class="card waiting"') == INBOX_LIMIT
    assert f"<strong>{INBOX_LIMIT + 5}</strong> waiting" in html
    # The filter form shows them back; the socket and the next page keep them.
    assert 'name="waiting_from" value="2026-02-01"' in html
    assert 'name="waiting_to" value="2026-03-03' in html
    assert 'name="text" value="issue_refund"' in html
    socket = re.search(r'ws-connect="([^"]+)"', html).group(1)
    for part in (
        "claim=unclaimed",
        "waiting_from=2026-02-01",
        "waiting_to=2026-03-03",
        "text=issue_refund",
    ):
        assert part in socket
    next_url = re.search(r'href="\?([^"]+)" rel="next"', html).group(1).replace("&amp;", "&")
    for part in ("claim=unclaimed", "assistant=refunds", "text=issue_refund", f"q={prefix}"):
        assert part in next_url

    second = as_operator.get("/ui/inbox/?" + next_url).content.decode()
    shown = re.findall(r'data-thread="([^"]+)"', second)
    order = [*sorted(rows["agents"][:5]), *sorted(rows["agents"][5:])]
    assert shown == order[INBOX_LIMIT:]  # the workflow does not call issue_refund
    assert 'rel="next"' not in second and "First page" in second
    assert "after=" in re.search(r'ws-connect="([^"]+)"', second).group(1)
    # Bad dates are ignored (no filter), a bad cursor is named.
    assert as_operator.get("/ui/inbox/", {"waiting_from": "soon"}).status_code == 200
    bad = as_operator.get("/ui/inbox/", {"after": "nope"})
    assert bad.status_code == 422 and 'data-field="after"' in bad.content.decode()


def test_a_date_range_covers_whole_days(operator: Any, as_operator: Client) -> None:
    prefix = f"days-{uuid.uuid4().hex[:8]}"
    rows = checks.make_rows(prefix, operator, n=6)
    day = checks.WHEN.date()

    def shown(**query: str) -> set[str]:
        html = as_operator.get("/ui/inbox/", {"q": prefix, **query}).content.decode()
        return set(re.findall(r'data-thread="([^"]+)"', html))

    assert shown(waiting_from=day.isoformat(), waiting_to=day.isoformat()) == set(
        rows["agents"][:5]
    )
    later = (day + timedelta(days=1)).isoformat()
    assert shown(waiting_from=later) == {rows["agents"][5]}
    assert shown(waiting_to=(day - timedelta(days=1)).isoformat()) == {rows["workflow"]}


@pytest.mark.django_db(transaction=True)
async def test_the_live_socket_keeps_the_page_the_range_and_the_search(operator: Any) -> None:
    from urllib.parse import urlencode

    from channels.db import database_sync_to_async

    from tests.dashboard.test_consumers import card_ids, connect

    prefix = f"live-{uuid.uuid4().hex[:8]}"
    rows = await database_sync_to_async(checks.make_rows)(prefix, operator, n=7)
    order = [rows["workflow"], *sorted(rows["agents"][:5]), *sorted(rows["agents"][5:])]
    # Page two of pages of 50 is reached with the cursor of the third card here.
    third = await database_sync_to_async(
        lambda: list(suspended_threads(viewer(operator), q=prefix)[2:3])
    )()
    after = f"{third[0].updated_at.isoformat()}|{third[0].id}"
    query = urlencode({"q": prefix, "after": after, "waiting_from": "2026-03-02"})
    ws = await connect(f"/ws/ui/inbox/?{query}", operator)
    html = await ws.receive_from(timeout=5)
    assert sorted(card_ids(html)) == sorted(order[3:])
    await ws.disconnect()

    query = urlencode({"q": prefix, "text": "ord-002", "waiting_to": "2026-03-02"})
    ws = await connect(f"/ws/ui/inbox/?{query}", operator)
    html = await ws.receive_from(timeout=5)
    assert card_ids(html) == {rows["agents"][2]}
    await ws.disconnect()
