"""The REST thread search: ``POST /threads/search`` and ``/threads/count``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict, Unpack

from django.conf import settings
from django.db import connections
from django.db.models import F, QuerySet
from django.db.models.fields.json import KeyTransform

from criogen.engine.checkpoints import Checkpoint
from criogen.engine.errors import InvalidArgument
from criogen.selectors.status import THREAD_STATUSES, filter_status, thread_heads, with_status
from criogen.selectors.visibility import Who, visible_threads
from criogen.storage.models import Thread

__all__ = [
    "SORT_FIELDS",
    "ThreadSearch",
    "count_threads",
    "filter_metadata",
    "search_limit",
    "search_page",
    "search_threads",
]

SORT_FIELDS = {
    "thread_id": "id",
    "status": "rest_status",
    "created_at": "created_at",
    "updated_at": "updated_at",
    "state_updated_at": "updated_at",
}
"""The sort keys of a thread search, and the column (or annotation) each sorts by."""


def _storage() -> Any:
    """The process's shared storage (the one the runner and events use)."""
    from criogen.registry import storage

    return storage()


def filter_metadata(qs: QuerySet[Thread], metadata: Mapping[str, Any]) -> QuerySet[Thread]:
    """``qs`` narrowed to threads whose metadata has each key of ``metadata`` with exactly
    that value (any key text, even with ``__`` in it).

    On PostgreSQL each key also adds the containment ``metadata @> {key: value}``, which
    the GIN index on ``metadata`` answers; equality implies containment, so the result is
    the same, but a rare value no longer means reading every thread.
    """
    postgres = _vendor(qs.db) == "postgresql"
    for n, (key, value) in enumerate(metadata.items()):
        # One alias per key: KeyTransform takes any key text, even with "__" in it.
        name = f"_meta{n}"
        qs = qs.alias(**{name: KeyTransform(key, "metadata")}).filter(**{name: value})
        if postgres:
            qs = qs.filter(metadata__contains={key: value})
    return qs


def _vendor(alias: str) -> str:
    return str(connections[alias].vendor)


def search_limit(limit: int | None) -> int:
    """``limit`` checked against ``CRIOGEN_MAX_SEARCH_LIMIT`` (omitted: min(20, cap))."""
    cap = int(getattr(settings, "CRIOGEN_MAX_SEARCH_LIMIT", 1000))
    if limit is None:
        return min(20, cap)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1 or limit > cap:
        raise InvalidArgument(
            f"limit is {limit!r}; use 1 to {cap} (CRIOGEN_MAX_SEARCH_LIMIT).", field="limit"
        )
    return limit


def _filtered(
    who: Who,
    *,
    metadata: dict[str, Any] | None,
    status: str | None,
    ids: list[str] | None,
) -> QuerySet[Thread]:
    qs = visible_threads(who)
    if status is None:
        qs = with_status(qs)
    else:
        if status not in THREAD_STATUSES:
            raise InvalidArgument(
                f"status is {status!r}; use idle, busy, interrupted or error.", field="status"
            )
        qs = filter_status(qs, status)  # annotates rest_status too, on the same instant
    if ids:
        qs = qs.filter(pk__in=list(ids))
    return filter_metadata(qs, metadata or {})


def _values_match(state: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> bool:
    if state is None:
        return False
    return all(k in state and state[k] == v for k, v in wanted.items())


class ThreadSearch(TypedDict, total=False):
    """The filters, order and window of a thread search (``POST /threads/search``), all
    optional: :func:`search_threads` and :func:`search_page` take them as keywords."""

    metadata: dict[str, Any] | None
    """Each key with exactly this value in the thread's metadata."""
    values: dict[str, Any] | None
    """Each key with exactly this value in the state of the thread's head."""
    status: str | None
    """``idle``, ``busy``, ``interrupted`` or ``error``."""
    ids: list[str] | None
    """Only these threads."""
    limit: int | None
    """The page's size (omitted: 20, at most ``CRIOGEN_MAX_SEARCH_LIMIT``)."""
    offset: int
    """How many matching threads come before the page (omitted: 0)."""
    sort_by: str | None
    """A key of :data:`SORT_FIELDS` (omitted: ``created_at``)."""
    sort_order: str | None
    """``asc`` or ``desc`` (omitted: ``desc``)."""


def search_threads(
    who: Who, **search: Unpack[ThreadSearch]
) -> list[tuple[Thread, Checkpoint | None]]:
    """Threads matching every filter, with their heads; newest first by default."""
    return _search(who, **search)[0]


def search_page(
    who: Who, **search: Unpack[ThreadSearch]
) -> tuple[list[tuple[Thread, Checkpoint | None]], int]:
    """:func:`search_threads`' page, and how many threads match (a search's
    ``X-Pagination-Total``). A page shorter than the limit ends the list, so it tells
    the total; a full page (or an empty one past the end) needs a count, which counts
    the queryset the page came from instead of building it again."""
    found, qs, limit = _search(who, **search)
    offset = search.get("offset", 0)
    if len(found) < limit and (found or not offset):
        return found, offset + len(found)
    if search.get("values"):
        return found, count_threads(
            who,
            metadata=search.get("metadata"),
            values=search.get("values"),
            status=search.get("status"),
            ids=search.get("ids"),
        )
    return found, qs.count()


def _search(
    who: Who,
    *,
    metadata: dict[str, Any] | None = None,
    values: dict[str, Any] | None = None,
    status: str | None = None,
    ids: list[str] | None = None,
    limit: int | None = None,
    offset: int = 0,
    sort_by: str | None = None,
    sort_order: str | None = None,
) -> tuple[list[tuple[Thread, Checkpoint | None]], QuerySet[Thread], int]:
    """The page, the filtered threads it came from, and the limit applied."""
    limit = search_limit(limit)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidArgument(f"offset is {offset!r}; use 0 or more.", field="offset")
    field = SORT_FIELDS.get(sort_by or "created_at")
    if field is None:
        raise InvalidArgument(
            f"sort_by is {sort_by!r}; use one of {', '.join(SORT_FIELDS)}.", field="sort_by"
        )
    if (sort_order or "desc") not in ("asc", "desc"):
        raise InvalidArgument(f"sort_order is {sort_order!r}; use asc or desc.", field="sort_order")
    # Ties (threads created in one transaction share created_at) go by id, in the same
    # direction: then an index on (field, id) gives the page in order and the database
    # stops after it, where a mixed order would sort every matching thread first.
    descending = (sort_order or "desc") == "desc"
    order = [F(f).desc() if descending else F(f).asc() for f in (field, "id")]
    listed = _filtered(who, metadata=None, status=status, ids=ids).order_by(*order)
    qs = filter_metadata(listed, metadata or {})
    store = _storage()
    if not values:
        rows = None
        if metadata:
            rows = _page_from_window(listed, metadata, field, descending, offset, limit)
        if rows is None and field != "rest_status":
            rows = _with_status(qs[offset : offset + limit], field, descending)
        if rows is None:
            rows = list(qs[offset : offset + limit])
        heads = thread_heads(rows)
        return [(row, heads.get(row.id)) for row in rows], qs, limit
    # State values live in checkpoints, not in the thread row: filter the candidates by
    # their head state, in pages, until the window is full.
    out: list[tuple[Thread, Checkpoint | None]] = []
    skipped = 0
    for row in qs.exclude(head_version=0).iterator(chunk_size=200):
        head = store.head(row.id)
        if not _values_match(head.state if head else None, values):
            continue
        if skipped < offset:
            skipped += 1
            continue
        out.append((row, head))
        if len(out) >= limit:
            break
    return out, qs, limit


WINDOW_PER_ROW = 20
"""How many of the newest threads a metadata search reads per row it returns before
it falls back to the metadata index (:func:`_page_from_window`)."""
WINDOW_MAX = 2000


def _page_from_window(
    unfiltered: QuerySet[Thread],
    metadata: Mapping[str, Any],
    field: str,
    descending: bool,
    offset: int,
    limit: int,
) -> list[Thread] | None:
    """The page of a metadata search read from the first threads of ``unfiltered`` in
    page order (every other filter applied), in one statement; None when those do not
    hold the whole page, or the database is not PostgreSQL.

    A value many threads carry is where the metadata index is slowest: it yields every
    thread with the value, all of which the database sorts for a page of twenty; and the
    planner, which cannot tell how common a JSON value is, may not walk the list index
    instead. Read as a derived table, the window is that walk, bounded: the first
    ``WINDOW_PER_ROW`` rows per row wanted, in page order. As the window is a prefix of
    the list in its own order, the first matches in it are the first matches overall;
    when it holds fewer than the page needs, the caller asks the index. The status is
    computed for the page's rows only, with the window's own instant.
    """
    need = offset + limit
    size = need * WINDOW_PER_ROW
    db = unfiltered.db
    if size > WINDOW_MAX or field == "rest_status" or connections[db].vendor != "postgresql":
        return None
    # The metadata conditions, as filter_metadata writes them for the whole table.
    probe = filter_metadata(Thread.objects.using(db), metadata).query
    probe.get_initial_alias()
    where = probe.get_compiler(using=db).compile(probe.where)
    rows = _with_status(
        unfiltered[:size], field, descending, where=where, limit=limit, offset=offset
    )
    return rows if len(rows) == limit else None


def _with_status(
    page: QuerySet[Thread],
    field: str,
    descending: bool,
    *,
    where: tuple[str, list[Any]] | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> list[Thread]:
    """The rows of ``page`` (sliced, in page order, ``rest_status`` annotated), with
    their status computed in an outer statement for the rows it returns only, where
    ``where`` (SQL and parameters) holds, ``limit`` and ``offset`` applied there.

    The database computes a select list's subqueries for every row it reads, skipped
    ones included: a page at offset 5,000 probed the run index 5,020 times for the
    status of 20 threads (bench/NOTES.md, 2026-12-01).
    """
    db = page.db
    query = page.query
    status_sql, status_params = query.get_compiler(using=db).compile(
        query.annotations["rest_status"]
    )
    query.set_annotation_mask(())  # the inner query carries the rows, the outer their status
    inner_sql, inner_params = query.get_compiler(using=db).as_sql()
    direction = "DESC" if descending else "ASC"
    table = Thread._meta.db_table
    sql = f'SELECT "{table}".*, {status_sql} AS "rest_status" FROM ({inner_sql}) AS "{table}"'  # noqa: S608
    params: list[Any] = [*status_params, *inner_params]
    if where is not None:
        sql += f" WHERE {where[0]}"
        params.extend(where[1])
    sql += f' ORDER BY "{table}"."{field}" {direction}, "{table}"."id" {direction}'
    if limit is not None:
        sql += " LIMIT %s OFFSET %s"
        params.extend([limit, offset])
    return list(Thread.objects.raw(sql, params, using=db))


def count_threads(
    who: Who,
    *,
    metadata: dict[str, Any] | None = None,
    values: dict[str, Any] | None = None,
    status: str | None = None,
    ids: list[str] | None = None,
) -> int:
    """How many threads match (POST /threads/count; a search's ``X-Pagination-Total``)."""
    qs = _filtered(who, metadata=metadata, status=status, ids=ids)
    if not values:
        return qs.count()
    store = _storage()
    return sum(
        1
        for row in qs.exclude(head_version=0).iterator(chunk_size=200)
        if _values_match(getattr(store.head(row.id), "state", None), values)
    )
