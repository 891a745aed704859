"""The operator console's inbox: the suspended threads waiting for a person."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.db import connections
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.db.models.fields.json import KeyTransform

from criogen.selectors.claims import filter_claimed
from criogen.selectors.visibility import Who, visible_threads
from criogen.storage.models import Checkpoint as CheckpointRow
from criogen.storage.models import Thread

__all__ = ["inbox_assistants", "inbox_page", "suspended_threads"]


def suspended_threads(
    who: Who,
    *,
    assistant: str = "",
    tool: str = "",
    older_than: int | None = None,
    q: str = "",
    claim: str = "",
    claimer: Any = None,
) -> QuerySet[Thread]:
    """Suspended threads ``who`` may see, oldest waiting first: of ``assistant`` (its
    graph or assistant id), waiting on a call to ``tool``, waiting at least
    ``older_than`` minutes, whose id or owner's name contains ``q``, held by the user
    ``claimer`` (``claim="mine"``) or by nobody (``claim="unclaimed"``)."""
    # Thread.updated_at moves with the head, so for a suspended thread it is the moment it
    # suspended; (head_status, updated_at) is indexed for exactly this query.
    qs = visible_threads(who).filter(head_status="suspended")
    if assistant:
        qs = qs.filter(Q(metadata__graph_id=assistant) | Q(metadata__assistant_id=assistant))
    if tool:
        # The body is JSON text written compactly by the engine, so a call to the tool
        # appears as "name":"<tool>" in the head checkpoint's body.
        needle = '"name":' + json.dumps(tool, ensure_ascii=False)
        qs = qs.filter(
            Exists(CheckpointRow.objects.filter(id=OuterRef("head_id"), body__contains=needle))
        )
    if older_than is not None:
        from django.utils import timezone

        qs = qs.filter(updated_at__lte=timezone.now() - timedelta(minutes=older_than))
    if q:
        qs = qs.filter(Q(id__icontains=q) | Q(owner__username__icontains=q))
    if claim:
        qs = filter_claimed(qs, claim, claimer)
    return qs.order_by("updated_at", "id")


def inbox_page(
    who: Who, *, limit: int, **filters: Any
) -> tuple[list[Thread], dict[str, CheckpointRow], int]:
    """The first ``limit`` of :func:`suspended_threads` (``filters`` as it takes them),
    with their owners and claim rows (see :func:`~criogen.selectors.claims.claims_of`);
    their head checkpoint rows by id; and how many match in all.

    Three queries whatever the number of rows: the count, the threads (with owners), and
    their head checkpoints.
    """
    qs = suspended_threads(who, **filters)
    total = qs.count()
    # Their claims come in the same query (a thread has at most one claim row).
    threads = list(qs.select_related("owner", "claim__user")[:limit])
    heads = {
        row.id: row
        for row in CheckpointRow.objects.filter(id__in=[t.head_id for t in threads if t.head_id])
    }
    return threads, heads, total


def inbox_assistants(who: Who) -> list[str]:
    """Assistants seen among the suspended threads ``who`` may see, sorted."""
    # The distinct pairs of the two keys, computed by the database: fetching and decoding
    # 1,000 metadata documents to find a handful of names was most of the page's queries'
    # time. The values are JSON text (as the ORM reads a JSON column), decoded here.
    rows = suspended_threads(who).values_list(
        KeyTransform("graph_id", "metadata"), KeyTransform("assistant_id", "metadata")
    )[:1000]
    sql, params = rows.query.sql_with_params()
    with connections[rows.db].cursor() as cur:
        cur.execute(f"SELECT DISTINCT * FROM ({sql}) AS seen", params)  # noqa: S608
        pairs = cur.fetchall()
    names = set()
    for graph, assistant in pairs:
        name = _json_value(graph) or _json_value(assistant)
        if name:
            names.add(str(name))
    return sorted(names)


def _json_value(value: Any) -> Any:
    """A JSON value as a raw cursor returns it: text to decode (None for SQL NULL)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
