"""The REST thread search: ``POST /threads/search`` and ``/threads/count``."""

from __future__ import annotations

import functools
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict, Unpack

from django.conf import settings
from django.db import connections, router
from django.db.models import F, QuerySet
from django.db.models.fields.json import KeyTransform

from criogen.engine.checkpoints import Checkpoint
from criogen.engine.errors import InvalidArgument
from criogen.selectors.status import THREAD_STATUSES, filter_status, thread_heads, with_status
from criogen.selectors.visibility import EVERY_OWNER, Who, owner_seen_by, visible_threads
from criogen.storage.models import Run, Thread
from criogen.storage.models.runs import ACTIVE_RUN_STATUSES
from criogen.storage.orm.reads import _loads as loads_json

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
    _check_status(status)
    # filter_status annotates rest_status too, on the same instant.
    qs = with_status(qs) if status is None else filter_status(qs, status)
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
) -> tuple[list[tuple[Thread | ThreadRow, Checkpoint | None]], int]:
    """:func:`search_threads`' page, and a search's ``X-Pagination-Total``, as
    LangGraph's server gives it: when more threads follow the page, ``offset + limit +
    1`` (the next page's offset plus one: at least that many match); on the last page,
    ``offset`` + its rows, the exact total. The page is read with one row more than the
    limit to tell which, so no search counts its matches (:func:`count_threads` does,
    for ``POST /threads/count``), except one past the end of the list: an empty page
    at an offset counts them, where LangGraph's server answers the offset. On
    PostgreSQL the rows of most shapes are :class:`ThreadRow` objects (one prepared
    statement, below)."""
    fast = _fast_page(who, **search)
    if fast is not None:
        return fast
    found, qs, limit = _search(who, peek=True, **search)
    offset = search.get("offset", 0)
    if len(found) > limit:
        return found[:limit], offset + limit + 1
    if found or not offset:
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


def _checked(
    limit: int | None, offset: int, sort_by: str | None, sort_order: str | None
) -> tuple[int, str, bool]:
    """The limit, the sort column and whether it descends; InvalidArgument naming the
    first field that is wrong."""
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
    return limit, field, (sort_order or "desc") == "desc"


def _check_status(status: str | None) -> None:
    if status is not None and status not in THREAD_STATUSES:
        raise InvalidArgument(
            f"status is {status!r}; use idle, busy, interrupted or error.", field="status"
        )


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
    peek: bool = False,
) -> tuple[list[tuple[Thread, Checkpoint | None]], QuerySet[Thread], int]:
    """The page, the filtered threads it came from, and the limit applied; with
    ``peek``, the page has one row more when one follows it (:func:`search_page`)."""
    limit, field, descending = _checked(limit, offset, sort_by, sort_order)
    wanted = limit + peek
    # Ties (threads created in one transaction share created_at) go by id, in the same
    # direction: then an index on (field, id) gives the page in order and the database
    # stops after it, where a mixed order would sort every matching thread first.
    order = [F(f).desc() if descending else F(f).asc() for f in (field, "id")]
    listed = _filtered(who, metadata=None, status=status, ids=ids).order_by(*order)
    qs = filter_metadata(listed, metadata or {})
    store = _storage()
    if not values:
        rows = None
        if metadata:
            rows = _page_from_window(listed, metadata, field, descending, offset, wanted)
        if rows is None and field != "rest_status":
            rows = _with_status(qs[offset : offset + wanted], field, descending)
        if rows is None:
            rows = list(qs[offset : offset + wanted])
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
        if len(out) >= wanted:
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
    if not values:
        _check_status(status)
        fast = _pg_count(who, metadata=metadata, status=status, ids=ids)
        if fast is not None:
            return fast
    qs = _filtered(who, metadata=metadata, status=status, ids=ids)
    if not values:
        return qs.count()
    store = _storage()
    return sum(
        1
        for row in qs.exclude(head_version=0).iterator(chunk_size=200)
        if _values_match(getattr(store.head(row.id), "state", None), values)
    )


# -- PostgreSQL: a search page in one prepared statement ---------------------------------
# Built by the ORM, a search was the status rule's CASE and conditions, visibility and
# metadata filters resolved and compiled on every request, then model instances: most of
# the request's CPU. On PostgreSQL the common shapes (no state-values filter, no sort by
# status, string metadata keys) are one hand-written statement per shape instead, written
# once per process and prepared on the connection (criogen.storage.orm.base.pg_run): the
# page's rows and the row after them, each one's status, and the X-Pagination-Total of
# search_page (a count only past the end), in one round trip. The conditions are those
# the ORM path compiles, clause for clause (the status rule of criogen.selectors.status,
# the metadata filters of filter_metadata, the owner rule of
# criogen.selectors.visibility); the count takes two equivalent shortcuts (_where's
# ``count``, _count). Tests compare both paths' answers on every shape.


class ThreadRow:
    """A thread of a search page, as the PostgreSQL statement returns it: the columns a
    search answers with, and ``rest_status``, under the names a :class:`Thread` row has
    (so a page's consumer reads either the same way); and ``json_times``, its
    ``created_at`` and ``updated_at`` as the API's JSON writes them (or None)."""

    __slots__ = (
        "created_at",
        "expires_at",
        "head_version",
        "id",
        "json_times",
        "metadata",
        "rest_status",
        "ttl_minutes",
        "ttl_strategy",
        "updated_at",
    )

    def __init__(self, values: tuple[Any, ...], *, utc: bool) -> None:
        (
            self.id,
            created,
            updated,
            created_text,
            updated_text,
            metadata,
            self.head_version,
            self.ttl_minutes,
            self.ttl_strategy,
            self.expires_at,
            self.rest_status,
        ) = values[:11]
        # The times come as microseconds since the epoch (exact: EXTRACT gives a
        # numeric), an addition where Django's timestamptz loader parsed text (~6 µs a
        # value); their JSON text (DjangoJSONEncoder's) comes written by the database.
        self.created_at = _EPOCH + timedelta(microseconds=created)
        self.updated_at = _EPOCH + timedelta(microseconds=updated)
        self.json_times = (created_text, updated_text) if utc else None
        # Django's psycopg connection reads jsonb as text; JSONField.from_db_value decodes.
        self.metadata = loads_json(metadata) if isinstance(metadata, str) else metadata

    @property
    def pk(self) -> str:
        return str(self.id)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_PAGE_COLUMNS = (
    "id",
    "created_at",
    "updated_at",
    "metadata",
    "head_version",
    "ttl_minutes",
    "ttl_strategy",
    "expires_at",
    "head_status",
    "lease_id",
    "lease_expires",
)
"""What the page's rows are read with (the status needs the last three)."""


def _micros(column: str) -> str:
    return f"(EXTRACT(EPOCH FROM {column}) * 1000000)::bigint"


def _json_time(column: str) -> str:
    """``column`` (a timestamptz) as DjangoJSONEncoder writes a UTC datetime: ISO 8601,
    the microseconds cut to milliseconds (none when they are zero), ``Z``: one
    ``to_char`` a value (the page's time columns are 4-8 % of its statement's time)."""
    utc = f"({column} AT TIME ZONE 'UTC')"
    return (
        f"CASE WHEN mod(EXTRACT(MICROSECONDS FROM {utc}), 1000000) = 0"
        f' THEN to_char({utc}, \'YYYY-MM-DD"T"HH24:MI:SS"Z"\')'
        f' ELSE to_char({utc}, \'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"\') END'
    )


def _row_select(table: str) -> str:
    """What the statement answers per row (:class:`ThreadRow`), before the status."""
    created, updated = f'{table}."created_at"', f'{table}."updated_at"'
    rest = ", ".join(
        f'{table}."{c}"'
        for c in ("metadata", "head_version", "ttl_minutes", "ttl_strategy", "expires_at")
    )
    return (
        f'{table}."id", {_micros(created)}, {_micros(updated)},'
        f" {_json_time(created)}, {_json_time(updated)}, {rest}"
    )


_ACTIVE_SQL = ", ".join(f"'{s}'" for s in ACTIVE_RUN_STATUSES)
_T = Thread._meta.db_table
_RUN = Run._meta.db_table


def _active_run(table: str) -> str:
    """A run of ``table``'s thread is pending or running (the run index, per thread)."""
    return (
        f'SELECT 1 FROM "{_RUN}" r WHERE r."status" IN ({_ACTIVE_SQL})'  # noqa: S608
        f' AND r."thread_id" = {table}."id"'
    )


def _leased(table: str) -> str:
    return f'({table}."lease_expires" > %s AND {table}."lease_id" IS NOT NULL)'


def _status_case(table: str) -> str:
    """with_status's CASE: busy, interrupted, error, idle (one ``now`` parameter)."""
    return (
        f"CASE WHEN (({_active_run(table)} LIMIT 1) IS NOT NULL OR {_leased(table)})"
        f" THEN 'busy' WHEN {table}.\"head_status\" = 'suspended' THEN 'interrupted'"
        f" WHEN {table}.\"head_status\" = 'failed' THEN 'error' ELSE 'idle' END"
    )


def _status_where(status: str, table: str) -> str:
    """filter_status's conditions for ``status`` (one ``now`` parameter)."""
    if status == "busy":
        return f"(EXISTS({_active_run(table)}) OR {_leased(table)})"
    idle = f"NOT EXISTS({_active_run(table)}) AND NOT {_leased(table)}"
    if status == "interrupted":
        return f"{table}.\"head_status\" = 'suspended' AND {idle}"
    if status == "error":
        return f"{table}.\"head_status\" = 'failed' AND {idle}"
    return f"NOT ({table}.\"head_status\" IN ('suspended', 'failed')) AND {idle}"


@dataclass(frozen=True)
class _Shape:
    """What a search statement's text depends on (its parameters aside)."""

    owner: bool
    status: str | None
    ids: bool
    metadata: tuple[bool, ...]
    """Per metadata key, whether its value is a JSON scalar (see :func:`_where`)."""
    field: str
    descending: bool
    window: bool


def _where(
    shape: _Shape, table: str, *, metadata: bool = True, count: bool = False
) -> tuple[str, list[str]]:
    """The conditions of ``shape`` on ``table``, and the names of their parameters in
    order: ``owner``, ``now``, ``ids``, ``key<n>``/``value<n>``/``contains<n>``.

    ``count``: for a count, a metadata key whose value is a JSON scalar is the
    containment alone. ``{key: v} <@ metadata`` for a scalar ``v`` holds exactly when
    ``metadata -> key = v`` (jsonb matches an array to a scalar at the top level only),
    and the count reads every matching thread: the second test was a third of its
    time. Pages keep filter_metadata's two conditions, which the planner's estimates
    (the metadata index for a rare value) are made for.
    """
    parts: list[str] = []
    names: list[str] = []
    if shape.owner:
        parts.append(f'{table}."owner_id" = %s')
        names.append("owner")
    if shape.status is not None:
        parts.append(_status_where(shape.status, table))
        names.append("now")
    if shape.ids:
        parts.append(f'{table}."id" = ANY(%s::varchar[])')
        names.append("ids")
    if metadata:
        for n, scalar in enumerate(shape.metadata):
            if not (count and scalar):
                parts.append(f'({table}."metadata" -> %s::text) = %s::jsonb')
                names += [f"key{n}", f"value{n}"]
            parts.append(f'{table}."metadata" @> %s::jsonb')
            names.append(f"contains{n}")
    return " AND ".join(parts) or "TRUE", names


DEEP_OFFSET = 1000
"""From this offset on, a page without a metadata window walks the list for the ids of
its rows only, and reads the rows themselves by id afterwards (:func:`_page_sql`).

Measured on 10,000 threads of one owner (bench/NOTES.md, 2026-12-02): the twenty
lookups by id cost ~0.02 ms, which the walk for ids saves from ~500 rows on with the
visibility map set (an index-only scan: 0.26 against 0.57 ms at offset 5,000) and from
~2,000 rows on without it (each row's visibility read from the table either way)."""


_MORE = -1
"""What a page's statement answers as its total when more threads follow the page
(:func:`search_page` makes it ``offset + limit + 1``): the sum is not written in the
SQL, where PostgreSQL folds it at planning, in any branch, and an offset near the
largest it takes would overflow."""


@functools.cache
def _page_sql(shape: _Shape, deep: bool) -> tuple[str, list[str]]:
    """The statement of a search page of ``shape``, and its parameters' names.

    Its rows: the page's threads in order (``fetch``: one more than the limit, to tell
    whether more follow), each with its status, then the X-Pagination-Total of
    :func:`search_page`: :data:`_MORE` when more follow, ``offset`` + the rows
    on the last page, every matching thread counted on an empty page past the end (the
    count is not evaluated otherwise). An empty page still answers one row (all NULL but
    the total). With ``window`` (metadata filters, :func:`_page_from_window`), the page
    comes from the first ``window`` rows of the unfiltered list, and the total is NULL
    when those did not hold the page and the row after it (the caller then asks without
    the window).

    ``deep`` (from :data:`DEEP_OFFSET` on, no window): the list is walked for ids only
    (an index-only scan of the owner's list index where the visibility map allows), and
    only the page's rows are read whole, where the rows skipped were read whole too,
    their metadata and all.
    """
    direction = "DESC" if shape.descending else "ASC"
    order = f'"{shape.field}" {direction}, "id" {direction}'
    cols = ", ".join(f'"{c}"' for c in _PAGE_COLUMNS)
    where, names = _where(shape, "t")
    if shape.window:
        inner, inner_names = _where(shape, "t", metadata=False)
        meta, meta_names = _where(
            _Shape(False, None, False, shape.metadata, shape.field, shape.descending, False), "w"
        )
        page = (
            f'SELECT w.* FROM (SELECT {cols} FROM "{_T}" t WHERE {inner}'  # noqa: S608
            f" ORDER BY {order} LIMIT %s) w WHERE {meta} ORDER BY {order} LIMIT %s OFFSET %s"
        )
        page_names = [*inner_names, "window", *meta_names, "fetch", "offset"]
        # No row after the page: the window may have ended before the matches did.
        total = f"CASE WHEN n.n > %s THEN {_MORE} END"
        total_names: list[str] = ["limit"]
    else:
        if deep:
            keys = ", ".join(dict.fromkeys((f't."{shape.field}"', 't."id"')))
            whole = ", ".join(f'd."{c}"' for c in _PAGE_COLUMNS)
            page = (
                f'SELECT {whole} FROM (SELECT {keys} FROM "{_T}" t WHERE {where}'  # noqa: S608
                f' ORDER BY {order} LIMIT %s OFFSET %s) k JOIN "{_T}" d ON d."id" = k."id"'
            )
        else:
            page = (
                f'SELECT {cols} FROM "{_T}" t WHERE {where}'  # noqa: S608
                f" ORDER BY {order} LIMIT %s OFFSET %s"
            )
        page_names = [*names, "fetch", "offset"]
        # More follow; else the page ends the list, unless it is empty past the end.
        counted, count_names = _count(shape)
        total = (
            f"CASE WHEN n.n > %s THEN {_MORE}"
            f" WHEN n.n > 0 OR %s = 0 THEN %s + n.n ELSE {counted} END"
        )
        total_names = ["limit", "offset", "offset", *count_names]
    sql = (
        f"WITH page AS ({page}), n AS (SELECT count(*) AS n FROM page)"  # noqa: S608
        f" SELECT {_row_select('p')},"
        f" {_status_case('p')},"
        f" {total}"
        f" FROM n LEFT JOIN page p ON TRUE ORDER BY p.{order.replace(', ', ', p.')}"
    )
    return sql, [*page_names, "now", *total_names]


_WRITTEN_IN = ("owner", "limit", "fetch", "offset")
"""The parameters :func:`_written_in` writes into a statement's text."""


@functools.lru_cache(maxsize=256)
def _written_in(
    shape: _Shape, deep: bool, owner: int | None, limit: int, offset: int
) -> tuple[str, list[str]]:
    """:func:`_page_sql` with the owner, the limit and the offset written into its text
    rather than bound, and the names of the parameters left to bind: for the shapes
    without a metadata or ids filter (:func:`_generic`).

    Bound, a LIMIT and OFFSET make PostgreSQL plan each execution anew: its estimate for
    an unknown limit makes the generic plan look dearer than the custom ones, so every
    search paid its planning (0.15-0.5 ms on 10,000 threads). Written in, the statement
    keeps a generic plan after five executions. The owner is written in too, so that
    the plan kept is the plan for that owner's number of threads: with it bound, one
    plan would serve a user with five threads and one with 200,000. Only for searches
    asked again and again (:func:`_repeated`): the texts are per owner and page.
    """
    sql, names = _page_sql(shape, deep)
    values = {"owner": owner, "limit": limit, "fetch": limit + 1, "offset": offset}
    parts = sql.split("%s")
    out, kept = [parts[0]], []
    for name, part in zip(names, parts[1:], strict=True):
        value = values.get(name)
        if name in _WRITTEN_IN and value is not None:
            out.append(str(int(value)))
        else:
            out.append("%s")
            kept.append(name)
        out.append(part)
    return "".join(out), kept


def _generic(shape: _Shape) -> bool:
    """Whether the statement of ``shape`` may keep a generic plan (:func:`_written_in`).

    Not with a metadata filter: a generic plan cannot see how common the value is,
    where a custom one estimates it from the column's statistics; on 200,000 threads
    of one owner half of which carry the value, the generic plan read them all through
    the metadata index and sorted them (94 ms against 66). Nor with ids (how many)."""
    return not shape.metadata and not shape.ids


REPEATS_WRITTEN_IN = 3
"""How many times a process must be asked the same search (shape, owner, limit and
offset) among its last :data:`SEARCHES_COUNTED` before its statement is written in."""
SEARCHES_COUNTED = 32

_asked: OrderedDict[tuple[Any, ...], int] = OrderedDict()
_asked_lock = threading.Lock()


def _repeated(key: tuple[Any, ...]) -> bool:
    """Whether the search ``key`` was asked :data:`REPEATS_WRITTEN_IN` times among the
    last :data:`SEARCHES_COUNTED` different searches, counting this one.

    A written-in statement is a text of its own on every connection, and the
    connection's caches are shared with every other hot statement (the run path's
    among them: 64 cursors, 100 prepared statements): a text per owner and page for
    every search would push those out on a server with many users paging. Only a
    search asked again and again (a page polled, a list reloaded) gets its own text
    and keeps its plan, at most :data:`SEARCHES_COUNTED` of them; any other takes the
    one bound text of its shape and a plan per execution, as before.
    """
    with _asked_lock:
        count = _asked.pop(key, 0) + 1
        _asked[key] = count
        if len(_asked) > SEARCHES_COUNTED:
            _asked.popitem(last=False)
    return count >= REPEATS_WRITTEN_IN


_NOT_IDLE = (
    f'SELECT "id" FROM "{_T}" WHERE "head_status" IN (\'suspended\', \'failed\')'  # noqa: S608
    f' UNION SELECT "id" FROM "{_T}" WHERE "lease_expires" > %s AND "lease_id" IS NOT NULL'
    f' UNION SELECT "thread_id" FROM "{_RUN}" WHERE "status" IN ({_ACTIVE_SQL})'
)
"""The threads that are not idle (a waiting or failed head, a live lease, an active
run), each set read from its own index; one ``now`` parameter."""


def _count(shape: _Shape) -> tuple[str, list[str]]:
    """How many threads match ``shape``, as a scalar subquery, and its parameters.

    Idle threads are counted as every match less the matches that are not idle: the
    status rule's conditions, tested on every thread the caller sees, were as much
    of the count's time as reading the threads, where the threads that are not idle
    are few and each kind of them has an index (the status and lease indexes, the
    runs' status index)."""
    if shape.status != "idle":
        where, names = _where(shape, "t", count=True)
        return f'(SELECT count(*) FROM "{_T}" t WHERE {where})', names  # noqa: S608
    where, names = _where(replace(shape, status=None), "t", count=True)
    every = f'SELECT count(*) FROM "{_T}" t WHERE {where}'  # noqa: S608
    return f'(({every}) - ({every} AND t."id" IN ({_NOT_IDLE})))', [*names, *names, "now"]


@functools.cache
def _count_sql(shape: _Shape) -> tuple[str, list[str]]:
    counted, names = _count(shape)
    return f"SELECT {counted}", names


def _pg_shape(
    who: Who,
    db: str,
    *,
    metadata: dict[str, Any] | None,
    status: str | None,
    ids: list[str] | None,
    field: str = "created_at",
    descending: bool = True,
    window: bool = False,
) -> tuple[_Shape, dict[str, Any]] | None:
    """The statement shape of a search and its parameters, or None when the ORM's path
    answers (not PostgreSQL; a signed-out caller; a metadata key the ORM reads as an
    array index; the sort by status)."""
    if connections[db].vendor != "postgresql" or field == "rest_status":
        return None
    params: dict[str, Any] = {"now": time.time()}
    seen = owner_seen_by(who)
    if seen is None:
        return None
    if seen is not EVERY_OWNER:
        params["owner"] = seen
    metadata = metadata or {}
    for n, (key, value) in enumerate(metadata.items()):
        try:
            int(key)
        except ValueError:
            pass
        else:  # KeyTransform reads an integer-like key as an array index (-> 0)
            return None
        params[f"key{n}"] = key
        params[f"value{n}"] = json.dumps(value)
        params[f"contains{n}"] = json.dumps({key: value})
    if ids:
        params["ids"] = [str(i) for i in ids]
    shape = _Shape(
        owner=seen is not EVERY_OWNER,
        status=status,
        ids=bool(ids),
        metadata=tuple(not isinstance(v, dict | list) for v in metadata.values()),
        field=field,
        descending=descending,
        window=window,
    )
    return shape, params


def _pg_search_page(
    who: Who,
    *,
    metadata: dict[str, Any] | None,
    status: str | None,
    ids: list[str] | None,
    limit: int,
    offset: int,
    field: str,
    descending: bool,
) -> tuple[list[ThreadRow], int] | None:
    """A search page and its total in one prepared statement (see above), or None when
    the ORM's path answers."""
    from criogen.storage.orm.base import pg_run

    db = router.db_for_read(Thread)
    window = bool(metadata) and (offset + limit + 1) * WINDOW_PER_ROW <= WINDOW_MAX
    found = _pg_shape(
        who,
        db,
        metadata=metadata,
        status=status,
        ids=ids,
        field=field,
        descending=descending,
        window=window,
    )
    if found is None:
        return None
    shape, params = found
    # The JSON text of the times is DjangoJSONEncoder's for UTC datetimes: what the
    # connection's times are with USE_TZ and the database's TIME_ZONE left as UTC.
    utc = bool(settings.USE_TZ) and connections[db].timezone_name == "UTC"
    params.update(
        limit=limit, fetch=limit + 1, offset=offset, window=(offset + limit + 1) * WINDOW_PER_ROW
    )
    while True:
        deep = not shape.window and offset >= DEEP_OFFSET
        # An integer key is written in; any other (a custom user model's) is bound.
        owner = params.get("owner")
        owner = owner if type(owner) is int else None
        if _generic(shape) and _repeated((shape, deep, owner, limit, offset)):
            sql, names = _written_in(shape, deep, owner, limit, offset)
        else:
            sql, names = _page_sql(shape, deep)
        rows = pg_run(db, sql, [params[name] for name in names], fetch=True)
        total = rows[0][-1]
        if total == _MORE:  # offset + limit + 1, made here: past 64 bits at the far end
            total = offset + limit + 1
        if total is not None:
            break
        # The window did not hold the page and the row after it: ask the metadata index.
        shape = replace(shape, window=False)
    page = [ThreadRow(row, utc=utc) for row in rows[:limit] if row[0] is not None]
    return page, int(total)


def _pg_count(
    who: Who, *, metadata: dict[str, Any] | None, status: str | None, ids: list[str] | None
) -> int | None:
    """count_threads as one prepared statement, or None when the ORM's path answers."""
    from criogen.storage.orm.base import pg_run

    db = router.db_for_read(Thread)
    found = _pg_shape(who, db, metadata=metadata, status=status, ids=ids)
    if found is None:
        return None
    shape, params = found
    sql, names = _count_sql(shape)
    return int(pg_run(db, sql, [params[name] for name in names], fetch=True)[0][0])


def _fast_page(
    who: Who, **search: Unpack[ThreadSearch]
) -> tuple[list[tuple[Thread | ThreadRow, Checkpoint | None]], int] | None:
    """:func:`search_page` through :func:`_pg_search_page`, or None when the ORM's
    path answers (a state-values filter among them)."""
    if search.get("values"):
        return None
    offset = search.get("offset", 0)
    limit, field, descending = _checked(
        search.get("limit"), offset, search.get("sort_by"), search.get("sort_order")
    )
    status = search.get("status")
    _check_status(status)
    found = _pg_search_page(
        who,
        metadata=search.get("metadata"),
        status=status,
        ids=search.get("ids"),
        limit=limit,
        offset=offset,
        field=field,
        descending=descending,
    )
    if found is None:
        return None
    rows, total = found
    heads = _storage().heads([row.id for row in rows if row.head_version]) if rows else {}
    return [(row, heads.get(row.id)) for row in rows], total
