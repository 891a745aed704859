"""Checks of the inbox at scale (paging, date range, content search), run in-process on
the test's SQLite database and in ``manage.py shell`` against a PostgreSQL server's
database: the same code, so both backends answer the same questions.

The rows are written directly (threads whose head is a suspended checkpoint), so the
checks control the waiting moments exactly, ties included.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

WHEN = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
"""The moment most rows suspended (shared: the ties the pages must break by id)."""


def make_rows(prefix: str, owner: Any, *, n: int = 7) -> dict[str, Any]:
    """``n`` suspended agent threads (5 tied at :data:`WHEN`, the rest a day later),
    one workflow waiting since 10 days before, ids starting with ``prefix``."""
    from criogen.storage.models import Checkpoint, Thread

    ids: list[str] = []
    for i in range(n):
        when = WHEN if i < 5 else WHEN + timedelta(days=1)
        payload = {
            "action_requests": [
                {
                    "name": "issue_refund",
                    "args": {"order": f"ORD-{i:03d}", "note": f'say "hello {i}" to Zoë'},
                }
            ],
            "review_configs": [{"action_name": "issue_refund"}],
        }
        interrupts = [{"reason": "approval", "payload": payload, "calls": [{"id": f"c{i}"}]}]
        # Reverse order of creation: the id, not the insert order, breaks the ties.
        ids.append(_suspended(f"{prefix}-a{n - i:02d}", when, owner, interrupts))
    old = _suspended(
        f"{prefix}-wf",
        WHEN - timedelta(days=10),
        owner,
        [{"reason": "budget", "payload": {"question": "raise the budget to 9000 dollars?"}}],
        values={"secret_word": "marmalade"},
    )
    assert Thread.objects.filter(id__startswith=prefix).count() == n + 1
    assert Checkpoint.objects.filter(thread__id__startswith=prefix).count() == n + 1
    return {"agents": ids, "workflow": old}


def _suspended(
    thread_id: str,
    when: datetime,
    owner: Any,
    interrupts: list[dict[str, Any]],
    values: dict[str, Any] | None = None,
) -> str:
    from criogen.storage.models import Checkpoint, Thread

    head = str(uuid.uuid4())
    body = {"next": ["review"], "interrupts": interrupts, "values": values or {}}
    Thread.objects.create(
        id=thread_id,
        created_at=when,
        updated_at=when,
        owner=owner,
        metadata={"graph_id": "refunds"},
        head_version=1,
        head_id=head,
        head_status="suspended",
    )
    Checkpoint.objects.create(
        id=head,
        thread_id=thread_id,
        version=1,
        source="loop",
        status="suspended",
        created_at=when,
        body=json.dumps(body, separators=(",", ":"), ensure_ascii=False),
    )
    return thread_id


def check(prefix: str, user: Any) -> dict[str, Any]:
    """Pages of 3 over the rows of :func:`make_rows`, a date range, content searches."""
    from criogen.engine.errors import InvalidArgument
    from criogen.selectors import inbox_page, suspended_threads, viewer

    who = viewer(user)
    pages: list[list[str]] = []
    after, totals = "", set()
    while True:
        threads, heads, total, after = inbox_page(who, limit=3, after=after, q=prefix)
        pages.append([t.id for t in threads])
        totals.add(total)
        assert all(t.head_id in heads for t in threads)
        if not after:
            break

    def ids(**filters: Any) -> list[str]:
        return [t.id for t in suspended_threads(who, q=prefix, **filters)]

    try:
        inbox_page(who, limit=3, after="yesterday", q=prefix)
        bad_cursor = None
    except InvalidArgument as exc:
        bad_cursor = exc.details.get("field")
    return {
        "pages": pages,
        "totals": sorted(totals),
        "range": ids(waiting_from=WHEN, waiting_to=WHEN + timedelta(hours=1)),
        "from_only": ids(waiting_from=WHEN + timedelta(hours=1)),
        "to_only": ids(waiting_to=WHEN),
        "arg": ids(text="ord-004"),
        "quoted_arg": ids(text='"hello 6"'),
        "unicode_arg": ids(text="Zoë"),
        "payload": ids(text="9000 DOLLARS"),
        "tool": len(ids(text="issue_refund")),
        "not_in_state": ids(text="marmalade"),
        "nothing": ids(text="no such words"),
        "bad_cursor": bad_cursor,
    }


def expected(rows: dict[str, Any]) -> dict[str, Any]:
    """What :func:`check` must answer for ``rows``."""
    agents, wf = rows["agents"], rows["workflow"]
    tied = sorted(agents[:5])
    order = [wf, *tied, *sorted(agents[5:])]
    return {
        "pages": [order[0:3], order[3:6], order[6:8]],
        "totals": [8],
        "range": tied,
        "from_only": sorted(agents[5:]),
        "to_only": [wf],
        "arg": [agents[4]],
        "quoted_arg": [agents[6]],
        "unicode_arg": order[1:],
        "payload": [wf],
        "tool": 7,
        "not_in_state": [],
        "nothing": [],
        "bad_cursor": "after",
    }
