"""The operator console's inbox: the suspended threads waiting for a person."""

from __future__ import annotations

import functools
import json
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connections, router
from django.db.models import Exists, F, Func, OuterRef, Q, QuerySet, TextField
from django.db.models.fields.json import KeyTransform

from criogen.engine.errors import InvalidArgument
from criogen.selectors.claims import filter_claimed
from criogen.selectors.visibility import EVERY_OWNER, Who, owner_seen_by, visible_threads
from criogen.storage.models import Checkpoint as CheckpointRow
from criogen.storage.models import Thread

__all__ = [
    "content_search_available",
    "inbox_assistants",
    "inbox_page",
    "suspended_threads",
]


def content_search_available() -> bool:
    """Whether the inbox may search checkpoint contents: not when an encryption key is
    configured (bodies are sealed at rest, and the database cannot read them)."""
    from criogen.storage.models.runs import sealing

    return not sealing()


class _Interrupts(Func):
    """The ``interrupts`` of a checkpoint body (JSON text), as text the database can
    search; NULL for a body that is not JSON (a sealed one)."""

    output_field = TextField()

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> Any:  # noqa: D102
        if connection.vendor == "postgresql":
            template = (
                "(CASE WHEN left(%(expressions)s, 1) = '{' "
                "THEN ((%(expressions)s)::jsonb -> 'interrupts')::text END)"
            )
        else:
            template = (
                "(CASE WHEN json_valid(%(expressions)s) "
                "THEN json_extract(%(expressions)s, '$.interrupts') END)"
            )
        return super().as_sql(compiler, connection, template=template, **extra)


def suspended_threads(
    who: Who,
    *,
    assistant: str = "",
    tool: str = "",
    older_than: int | None = None,
    q: str = "",
    claim: str = "",
    claimer: Any = None,
    waiting_from: datetime | None = None,
    waiting_to: datetime | None = None,
    text: str = "",
) -> QuerySet[Thread]:
    """Suspended threads ``who`` may see, oldest waiting first: of ``assistant`` (its
    graph or assistant id), waiting on a call to ``tool``, waiting at least
    ``older_than`` minutes, whose id or owner's name contains ``q``, held by the user
    ``claimer`` (``claim="mine"``) or by nobody (``claim="unclaimed"``), waiting since
    ``waiting_from`` or later and before ``waiting_to``, whose pending interrupts (tool
    names and arguments, workflow payloads) contain ``text`` (any case).

    Raises:
        InvalidArgument: ``text`` while an encryption key is configured (``field="text"``):
            the contents are sealed, so they cannot be searched.
    """
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
    if waiting_from is not None:
        qs = qs.filter(updated_at__gte=waiting_from)
    if waiting_to is not None:
        qs = qs.filter(updated_at__lt=waiting_to)
    if text:
        if not content_search_available():
            raise InvalidArgument(
                "content search is off: checkpoints are encrypted at rest.", field="text"
            )
        # Only the head's pending interrupts are searched (not the whole state): what the
        # card shows. JSON text escapes quotes and backslashes, so the needle is escaped
        # the same way (without its surrounding quotes).
        needle = json.dumps(text, ensure_ascii=False)[1:-1]
        heads = CheckpointRow.objects.filter(id=OuterRef("head_id")).annotate(
            pending=_Interrupts(F("body"))
        )
        qs = qs.filter(Exists(heads.filter(pending__icontains=needle)))
    return qs.order_by("updated_at", "id")


def inbox_page(
    who: Who, *, limit: int, after: str = "", **filters: Any
) -> tuple[list[Thread], dict[str, CheckpointRow], int, str]:
    """One page of :func:`suspended_threads` (``filters`` as it takes them): at most
    ``limit`` threads after the cursor ``after``, with their owners and claim rows (see
    :func:`~criogen.selectors.claims.claims_of`); their head checkpoint rows by id; how
    many match in all (every page); and the cursor of the next page ('' at the end).

    Keyset pagination on ``(updated_at, id)``, oldest first: ties on the moment are
    broken by id, so no thread is shown twice or skipped between pages. Three queries
    whatever the number of rows: the count, the threads (with owners), and their heads.

    Raises:
        InvalidArgument: a malformed cursor (``field="after"``), or see
            :func:`suspended_threads`.
    """
    qs = suspended_threads(who, **filters)
    if after:
        stamp, sep, last_id = after.partition("|")
        try:
            when: datetime | None = datetime.fromisoformat(stamp)
        except ValueError:
            when = None
        if when is None or not sep or not last_id:
            raise InvalidArgument("the page cursor is malformed; start again.", field="after")
    total = qs.count()
    if after:
        qs = qs.filter(Q(updated_at__gt=when) | Q(updated_at=when, id__gt=last_id))
    # Their claims come in the same query (a thread has at most one claim row). Only the
    # columns a card shows are read: each time stamp the driver reads costs ~10 us of
    # Python, and the users' rows are wide (bench/NOTES.md, "The inbox among 1,000,000
    # threads").
    threads = list(qs.select_related("owner", "claim__user").only(*_card_fields())[: limit + 1])
    more = len(threads) > limit
    threads = threads[:limit]
    heads = {
        row.id: row
        for row in CheckpointRow.objects.filter(
            id__in=[t.head_id for t in threads if t.head_id]
        ).only("id", "thread_id", "created_at", "body")
    }
    cursor = f"{threads[-1].updated_at.isoformat()}|{threads[-1].id}" if more and threads else ""
    return threads, heads, total, cursor


@functools.cache
def _card_fields() -> tuple[str, ...]:
    """What an inbox card and its claim strip read of a thread, its owner and its claim
    (a user's name is its model's ``USERNAME_FIELD``)."""
    name = get_user_model().USERNAME_FIELD
    return (
        *("id", "updated_at", "metadata", "owner_id", "head_id", "head_version"),
        *("owner__id", f"owner__{name}"),
        *("claim__thread_id", "claim__user_id", "claim__version", "claim__since"),
        *("claim__user__id", f"claim__user__{name}"),
    )


def inbox_assistants(who: Who) -> list[str]:
    """Assistants seen among the suspended threads ``who`` may see, sorted: a thread's
    ``graph_id``, or its ``assistant_id`` when it has no ``graph_id`` (or an empty one).

    For an operator on PostgreSQL, the names of every suspended thread, read as a walk
    of the distinct values of an index on that name (migration 0022): one probe per
    name. Otherwise the names among the 1,000 oldest suspended threads ``who`` may see,
    which bounds the scan.
    """
    alias = router.db_for_read(Thread)
    if connections[alias].vendor == "postgresql" and owner_seen_by(who) is EVERY_OWNER:
        with connections[alias].cursor() as cur:
            cur.execute(_PG_NAMES)
            found = [_json_value(name) for (name,) in cur.fetchall()]
    else:
        # The distinct pairs of the two keys, computed by the database: fetching and
        # decoding 1,000 metadata documents to find a handful of names was most of the
        # page's queries' time. The values are JSON text (as the ORM reads a JSON
        # column), decoded here.
        rows = suspended_threads(who).values_list(
            KeyTransform("graph_id", "metadata"), KeyTransform("assistant_id", "metadata")
        )[:1000]
        sql, params = rows.query.sql_with_params()
        with connections[rows.db].cursor() as cur:
            cur.execute(f"SELECT DISTINCT * FROM ({sql}) AS seen", params)  # noqa: S608
            found = [_json_value(graph) or _json_value(assistant) for graph, assistant in cur]
    return sorted({str(name) for name in found if name})


_PG_NAME = (
    "(CASE WHEN metadata -> 'graph_id' IS NULL"
    " OR metadata -> 'graph_id' IN ('null', '\"\"', 'false', '0', '[]', '{}')"
    " THEN metadata -> 'assistant_id' ELSE metadata -> 'graph_id' END)"
)
"""A thread's assistant name as ``jsonb``: its ``graph_id`` unless that is absent or a
JSON value Python reads as false, else its ``assistant_id``. The expression of the
partial index ``criogen_thread_wait_name_idx`` (migration 0022), character for
character, so that PostgreSQL uses it."""

_PG_NAMES = (
    "WITH RECURSIVE seen(name) AS ("  # noqa: S608 - constants only
    f" (SELECT {_PG_NAME} FROM criogen_thread WHERE head_status = 'suspended'"
    f" AND {_PG_NAME} IS NOT NULL ORDER BY 1 LIMIT 1)"
    f" UNION ALL SELECT (SELECT {_PG_NAME} FROM criogen_thread"
    f" WHERE head_status = 'suspended' AND {_PG_NAME} > seen.name ORDER BY 1 LIMIT 1)"
    " FROM seen WHERE seen.name IS NOT NULL"
    ") SELECT name FROM seen WHERE name IS NOT NULL"
)
"""The distinct names of the suspended threads: each step takes the next name after the
one before from the index, so it costs one probe per name, not a row per thread."""


def _json_value(value: Any) -> Any:
    """A JSON value as a raw cursor returns it: text to decode (None for SQL NULL)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
