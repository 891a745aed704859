"""Read-side queries for the API and the dashboard: who may see which thread, runs,
and derived thread status.

Nothing here writes. Who may see or act on a thread is decided here, once, for every
door: operators (staff, or holders of ``criogen.operate``) see every thread; anyone
else only the threads they own, and another user's thread is not found, exactly as if
it did not exist. :func:`thread_for` loads one thread that way, :func:`visible_threads`
narrows a list.

A thread's REST status is derived, LangGraph-style:

- ``busy``: a run on it is ``pending`` or ``running``, or a live lease holds it;
- ``interrupted``: its head is ``suspended`` (waiting for a person);
- ``error``: its head is ``failed``;
- ``idle``: anything else (no checkpoint yet, completed, or stopped mid-run by a cancel).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

from django.conf import settings
from django.db import connections
from django.db.models import Case, Exists, F, OuterRef, Q, QuerySet, Subquery, Value, When
from django.db.models.fields.json import KeyTransform
from django.db.models.lookups import IsNull

from criogen.engine.checkpoints import Checkpoint
from criogen.engine.errors import InvalidArgument, RunNotFound, ThreadNotFound
from criogen.storage.models import Assistant, AuditEvent, Decision, Document, Run, Thread
from criogen.storage.models import Checkpoint as CheckpointRow
from criogen.storage.models.runs import ACTIVE_RUN_STATUSES, open_sealed

__all__ = [
    "HEAD_STATUSES",
    "RunNotFound",
    "ThreadStatus",
    "TimelineEntry",
    "Viewer",
    "Who",
    "active_runs",
    "active_runs_for",
    "audit_events",
    "checkpoint_body",
    "checkpoint_row",
    "can_operate",
    "check_thread_for",
    "count_assistants",
    "checkpoint_version",
    "count_threads",
    "expired_threads",
    "find_run",
    "first_run_version",
    "inbox_assistants",
    "inbox_page",
    "open_json",
    "filter_metadata",
    "filter_status",
    "get_run",
    "run_checkpoint_ids",
    "run_status",
    "run_stream_mode",
    "runs_for_thread",
    "search_assistants",
    "search_limit",
    "search_threads",
    "status_counts",
    "store_collection",
    "store_item",
    "store_items",
    "store_namespaces",
    "suspended_threads",
    "thread_exists_for",
    "thread_for",
    "thread_heads",
    "thread_status",
    "thread_statuses",
    "threads_page",
    "timeline",
    "viewer",
    "visible_runs",
    "visible_threads",
    "who_decided",
    "with_status",
]

ThreadStatus = Literal["idle", "busy", "interrupted", "error"]
THREAD_STATUSES = ("idle", "busy", "interrupted", "error")
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


# -- who may see or act on a thread -------------------------------------------------------


class Who(Protocol):
    """Whoever asks: the REST API's ``Principal``, or a dashboard user as a
    :class:`Viewer`."""

    @property
    def user(self) -> Any:
        """The user (None only for the anonymous operator of a server with auth off)."""

    @property
    def is_operator(self) -> bool:
        """Staff, or a holder of ``criogen.operate``: sees and acts on every thread."""


@dataclass(frozen=True)
class Viewer:
    """A signed-in user as a :class:`Who` (see :func:`viewer`)."""

    user: Any
    is_operator: bool


def can_operate(user: Any) -> bool:
    """Whether ``user`` is an operator: staff, or the ``criogen.operate`` permission."""
    if user is None or not user.is_authenticated:
        return False
    return bool(user.is_staff or user.has_perm("criogen.operate"))


def viewer(user: Any) -> Viewer:
    """``user`` (a dashboard request's) as a :class:`Who`."""
    return Viewer(user=user, is_operator=can_operate(user))


def _narrowed(who: Who, qs: QuerySet[Any], owner: str) -> QuerySet[Any]:
    if who.is_operator:
        return qs
    user = who.user
    if user is None or not getattr(user, "is_authenticated", True):
        return qs.none()
    return qs.filter(**{owner: user})


def _may_see(who: Who, owner_id: Any) -> bool:
    """The rule of :func:`visible_threads`, for a thread whose owner is known."""
    if who.is_operator:
        return True
    user = who.user
    return user is not None and owner_id is not None and owner_id == user.pk


def visible_threads(who: Who, qs: QuerySet[Thread] | None = None) -> QuerySet[Thread]:
    """``qs`` (default: every thread) narrowed to the threads ``who`` may see: all of
    them for operators, else the ones ``who`` owns."""
    return _narrowed(who, Thread.objects.all() if qs is None else qs, "owner")


def visible_runs(who: Who, qs: QuerySet[Run] | None = None) -> QuerySet[Run]:
    """``qs`` (default: every run) narrowed to the runs of threads ``who`` may see."""
    return _narrowed(who, Run.objects.all() if qs is None else qs, "thread__owner")


def _not_found(thread_id: str) -> ThreadNotFound:
    return ThreadNotFound(f"thread {thread_id!r} not found.", thread_id=thread_id)


def thread_for(
    who: Who,
    thread_id: str,
    *,
    write: bool = False,
    status: bool = False,
    owner: bool = False,
) -> Thread:
    """The thread ``thread_id`` if ``who`` may see and act on it; else ThreadNotFound
    (a 404: another user's thread looks exactly like one that does not exist).

    ``write``: the caller is about to change the row: it is locked
    (``SELECT … FOR UPDATE``) until the caller's transaction ends, so that two
    concurrent writers take turns. ``status``: the row carries ``rest_status``
    (:func:`with_status`), computed in the same statement. ``owner``: its owner comes
    along in the same statement.
    """
    qs = visible_threads(who, with_status() if status else None)
    if owner:
        qs = qs.select_related("owner")
    if write:
        qs = qs.select_for_update()
    row = qs.filter(pk=thread_id).first()
    if row is None:
        raise _not_found(thread_id)
    return row


def check_thread_for(who: Who, thread_id: str) -> None:
    """What :func:`thread_for` checks, without loading the row: one probe of the
    primary key index, for reads that need the permission only (state, history)."""
    if not visible_threads(who, Thread.objects.filter(pk=thread_id)).exists():
        raise _not_found(thread_id)


def thread_exists_for(who: Who, thread_id: str) -> bool:
    """Whether the thread exists (False: there is none yet, so the caller may create it
    under this id); ThreadNotFound when it exists and is another user's."""
    owners = list(Thread.objects.filter(pk=thread_id).values_list("owner_id", flat=True)[:1])
    if not owners:
        return False
    if not _may_see(who, owners[0]):
        raise _not_found(thread_id)
    return True


def get_run(*, run_id: str, thread_id: str | None = None) -> Run:
    """The run ``run_id`` (on ``thread_id`` when given). Raises RunNotFound (also for
    an id that is not a UUID)."""
    try:
        key = uuid.UUID(str(run_id))
    except ValueError:
        raise RunNotFound(f"no run has the id {run_id!r}.", run_id=str(run_id)) from None
    runs = Run.objects.select_related("thread", "assistant")
    if thread_id is not None:
        runs = runs.filter(thread_id=thread_id)
    run = runs.filter(run_id=key).first()
    if run is None:
        where = f" on thread {thread_id!r}" if thread_id is not None else ""
        raise RunNotFound(f"no run {run_id}{where}.", run_id=str(run_id))
    return run


def find_run(run_id: Any) -> Run | None:
    """The run with primary key ``run_id`` (a UUID the server made), or None."""
    return Run.objects.filter(pk=run_id).first()


def run_status(run_id: Any) -> str | None:
    """The status of the run ``run_id`` (None: no such run), reading nothing else."""
    return Run.objects.filter(pk=run_id).values_list("status", flat=True).first()


def run_stream_mode(run_id: Any) -> Any:
    """The ``stream_mode`` the run ``run_id`` was created with (None: none, or no run)."""
    run = Run.objects.filter(pk=run_id).only("kwargs").first()
    return (run.kwargs or {}).get("stream_mode") if run else None


def active_runs_for(
    who: Who,
    *,
    thread_id: str | None = None,
    run_ids: list[str] | None = None,
    status: str | None = None,
) -> QuerySet[Run]:
    """The pending and running runs ``who`` may see (on ``thread_id``, among
    ``run_ids``, with ``status`` pending or running, when given)."""
    qs = Run.objects.filter(status__in=("pending", "running"))
    if thread_id:
        qs = qs.filter(thread_id=thread_id)
    if run_ids:
        qs = qs.filter(run_id__in=run_ids)
    if status:
        qs = qs.filter(status=status)
    return visible_runs(who, qs)


def runs_for_thread(
    *, thread_id: str, status: str | None = None, limit: int = 10, offset: int = 0
) -> list[Run]:
    """The thread's runs, newest first, optionally with one status."""
    runs = Run.objects.filter(thread_id=thread_id).order_by("-created_at")
    if status is not None:
        runs = runs.filter(status=status)
    return list(runs[offset : offset + limit])


def active_runs(*, thread_id: str) -> QuerySet[Run]:
    """The thread's pending and running runs, oldest first (execution order)."""
    return Run.objects.filter(thread_id=thread_id, status__in=ACTIVE_RUN_STATUSES).order_by(
        "created_at"
    )


def _busy(now: float) -> Q:
    # "Has an active run" as a scalar subquery (IS NOT NULL), not EXISTS: PostgreSQL may
    # run an EXISTS as one hashed scan of every active run in the database, which costs
    # more than probing the run index of the twenty threads a page shows.
    active = Run.objects.filter(thread=OuterRef("pk"), status__in=ACTIVE_RUN_STATUSES)
    has_active = IsNull(Subquery(active.order_by().values("pk")[:1]), False)
    return Q(has_active) | Q(lease_id__isnull=False, lease_expires__gt=now)


def _status(now: float) -> Case:
    return Case(
        When(_busy(now), then=Value("busy")),
        When(head_status="suspended", then=Value("interrupted")),
        When(head_status="failed", then=Value("error")),
        default=Value("idle"),
    )


def with_status(qs: QuerySet[Thread] | None = None) -> QuerySet[Thread]:
    """Threads annotated with ``rest_status`` (idle / busy / interrupted / error),
    computed in SQL so that lists can filter and sort by it. The one place the rule
    lives: busy when a run is pending or running or a live lease holds the thread;
    interrupted when the head is suspended; error when it failed; else idle."""
    qs = Thread.objects.all() if qs is None else qs
    return qs.annotate(rest_status=_status(time.time()))


def filter_status(qs: QuerySet[Thread], status: str) -> QuerySet[Thread]:
    """``qs`` narrowed to threads whose ``rest_status`` is ``status``, and annotated
    with it as :func:`with_status` does (so pass it a plain queryset: annotating twice
    costs a second resolution of the ``CASE``).

    A filter on the ``CASE`` makes the database compute it for every thread the caller
    may see and guess how many match; the same rule spelled out as plain conditions
    (on the same instant, so the result is exactly the annotation's) lets it start from
    an index and stop after a page: a thread's own head status (a small partial index
    holds the suspended and failed ones), whether it has an active run (the run index).
    """
    now = time.time()
    qs = qs.annotate(rest_status=_status(now))
    waiting = {"interrupted": "suspended", "error": "failed"}
    active = Run.objects.filter(thread=OuterRef("pk"), status__in=ACTIVE_RUN_STATUSES)
    leased = Q(lease_id__isnull=False, lease_expires__gt=now)
    if status == "busy":
        # EXISTS here runs as one hashed set of the threads with an active run, built
        # once, that the threads are probed against in page order until it is full.
        return qs.filter(Exists(active) | leased)
    # "No active run" as NOT EXISTS, which the database runs as an anti-join: walking
    # the threads in page order and probing the run index of each until the page is full.
    idle = ~Exists(active) & ~leased
    if status in waiting:
        return qs.filter(Q(head_status=waiting[status]) & idle)
    return qs.filter(~Q(head_status__in=list(waiting.values())) & idle)


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


def thread_status(thread: Thread) -> ThreadStatus:
    """The REST status of one thread (one query)."""
    return thread_statuses([thread]).get(thread.pk, "idle")


def thread_statuses(threads: Iterable[Thread]) -> dict[str, ThreadStatus]:
    """The REST status of many threads: thread id -> status, in one query."""
    ids = [t.pk for t in threads]
    rows = with_status(Thread.objects.filter(pk__in=ids)).values_list("pk", "rest_status")
    return dict(rows)  # type: ignore[arg-type]


def thread_heads(threads: Iterable[Thread]) -> dict[str, Checkpoint]:
    """The head checkpoint, with its state, of each of ``threads`` that has one: exactly
    what ``storage().head(thread_id)`` returns, by thread id.

    A page of search results needs twenty heads; read one by one that is forty queries
    (the checkpoint, then its values), and their round trips were most of the page's
    time. The ORM storage reads them in two (:meth:`~criogen.engine.store.Storage.heads`).
    """
    from criogen.registry import storage

    return storage().heads([t.pk for t in threads if t.head_version])


# -- thread search (POST /threads/search, /threads/count) -------------------------------------------------------------------------------


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


def search_threads(
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
) -> list[tuple[Thread, Checkpoint | None]]:
    """Threads matching every filter, with their heads; newest first by default."""
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
        if rows is None:
            rows = list(qs[offset : offset + limit])
        heads = thread_heads(rows)
        return [(row, heads.get(row.id)) for row in rows]
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
    return out


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
    window = unfiltered[:size].query
    status_sql, status_params = window.get_compiler(using=db).compile(
        window.annotations["rest_status"]
    )
    window.set_annotation_mask(())  # the window carries the rows, the page their status
    inner_sql, inner_params = window.get_compiler(using=db).as_sql()
    # The metadata conditions, as filter_metadata writes them for the whole table.
    probe = filter_metadata(Thread.objects.using(db), metadata).query
    probe.get_initial_alias()
    where_sql, where_params = probe.get_compiler(using=db).compile(probe.where)
    direction = "DESC" if descending else "ASC"
    table = Thread._meta.db_table
    sql = (
        f'SELECT "{table}".*, {status_sql} AS "rest_status"'  # noqa: S608
        f' FROM ({inner_sql}) AS "{table}" WHERE {where_sql}'
        f' ORDER BY "{table}"."{field}" {direction}, "{table}"."id" {direction}'
        " LIMIT %s OFFSET %s"
    )
    params = [*status_params, *inner_params, *where_params, limit, offset]
    rows = list(Thread.objects.raw(sql, params, using=db))
    return rows if len(rows) == limit else None


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


def expired_threads(who: Who) -> QuerySet[Thread]:
    """The threads ``who`` may see whose time to live has passed."""
    from django.utils import timezone

    now = timezone.now()
    return visible_threads(
        who, Thread.objects.filter(expires_at__isnull=False, expires_at__lte=now)
    )


# -- checkpoints --------------------------------------------------------------------------


def checkpoint_version(*, thread_id: str, checkpoint_id: str) -> int | None:
    """The version of the thread's checkpoint ``checkpoint_id`` (None: it has none)."""
    version = (
        CheckpointRow.objects.filter(thread_id=thread_id, id=checkpoint_id)
        .values_list("version", flat=True)
        .first()
    )
    return None if version is None else int(version)


def run_checkpoint_ids(*, thread_id: str, run_id: str, after: int) -> list[str]:
    """Ids of the checkpoints the run wrote on the thread after version ``after``, in
    version order (what a stream has not sent yet)."""
    return list(
        CheckpointRow.objects.filter(thread_id=thread_id, run_id=run_id, version__gt=after)
        .order_by("version")
        .values_list("id", flat=True)
    )


def first_run_version(*, thread_id: str, run_id: str) -> int | None:
    """The version of the first checkpoint the run wrote on the thread (None: none yet)."""
    first = (
        CheckpointRow.objects.filter(thread_id=thread_id, run_id=run_id)
        .order_by("version")
        .values_list("version", flat=True)
        .first()
    )
    return None if first is None else int(first)


# -- assistants ----------------------------------------------------------------------------


def _assistants(
    metadata: Mapping[str, Any] | None, graph_id: str | None, name: str | None
) -> QuerySet[Assistant]:
    from criogen.registry import graph_ids  # settings' graphs and langgraph.json's

    qs = Assistant.objects.filter(graph_id__in=graph_ids())
    if graph_id:
        qs = qs.filter(graph_id=graph_id)
    if name:
        qs = qs.filter(name__icontains=name)
    for n, (key, value) in enumerate((metadata or {}).items()):
        qs = qs.alias(**{f"_m{n}": KeyTransform(key, "metadata")}).filter(**{f"_m{n}": value})
    return qs


def search_assistants(
    *,
    metadata: Mapping[str, Any] | None = None,
    graph_id: str | None = None,
    name: str | None = None,
    sort_by: str | None = None,
    sort_order: str | None = None,
    limit: int = 10,
    offset: int = 0,
) -> list[Assistant]:
    """Assistants of the registered graphs with every ``metadata`` key equal, of
    ``graph_id``, whose name contains ``name``; sorted by ``sort_by`` (default
    ``created_at``, newest first), then by id. Default assistants are not made here:
    :func:`criogen.services.assistants.ensure_default_assistants` does that."""
    field = sort_by or "created_at"
    descending = (sort_order or "desc") == "desc"
    qs = _assistants(metadata, graph_id, name).order_by(
        F(field).desc() if descending else F(field).asc(), "assistant_id"
    )
    return list(qs[offset : offset + limit])


def count_assistants(
    *,
    metadata: Mapping[str, Any] | None = None,
    graph_id: str | None = None,
    name: str | None = None,
) -> int:
    """How many assistants :func:`search_assistants` would find in all."""
    return int(_assistants(metadata, graph_id, name).count())


# -- the REST store (LangGraph's key-value items) -------------------------------------------


def _store_owner(who: Who) -> str:
    user = who.user
    return str(user.pk) if user is not None else "local"


def _check_namespace(namespace: list[str], field: str = "namespace") -> list[str]:
    for label in namespace:
        if not isinstance(label, str) or not label or "." in label:
            raise InvalidArgument(
                f"namespace label {label!r} must be a non-empty string without '.'.", field=field
            )
    return namespace


def store_collection(who: Who, namespace: list[str]) -> str:
    """The document collection of ``who``'s store ``namespace``:
    ``store:<user id>:<label.label…>`` (``local`` for the operator of a server with auth
    off). Raises InvalidArgument for an empty namespace, a label that is empty or has a
    ``.``, or a name past 255 characters."""
    name = f"store:{_store_owner(who)}:" + ".".join(_check_namespace(namespace))
    if len(name) > 255 or not namespace:
        raise InvalidArgument(
            "namespace must have 1 or more labels and fit 255 characters.", field="namespace"
        )
    return name


def _item(record: Any, namespace: list[str]) -> dict[str, Any]:
    meta = record.metadata or {}
    return {
        "namespace": namespace,
        "key": record.doc_id,
        "value": meta.get("value", {}),
        "created_at": meta.get("created_at") or record.created_at,
        "updated_at": meta.get("updated_at") or record.created_at,
        "score": getattr(record, "score", None),
    }


def _namespace_of(collection: str) -> list[str]:
    return collection.split(":", 2)[2].split(".")


def store_item(who: Who, namespace: list[str], key: str) -> dict[str, Any] | None:
    """``who``'s item ``key`` in ``namespace`` as ``{"namespace", "key", "value",
    "created_at", "updated_at", "score"}``, or None."""
    record = _storage().get_document(store_collection(who, namespace), key)
    return None if record is None else _item(record, namespace)


def _store_collections(who: Who, prefix: list[str]) -> list[str]:
    base = f"store:{_store_owner(who)}:"
    start = base + ".".join(_check_namespace(prefix, "namespace_prefix"))
    names = (
        Document.objects.filter(collection__startswith=start)
        .values_list("collection", flat=True)
        .distinct()
        .order_by("collection")
    )
    # "a.b" is under prefix ["a"], "ab" is not.
    return [n for n in names if not prefix or n == start or n.startswith(start + ".")]


def store_items(
    who: Who,
    *,
    namespace_prefix: list[str],
    filter: Mapping[str, Any] | None = None,
    query: str | None = None,
    limit: int = 10,
    offset: int = 0,
) -> list[dict[str, Any]]:
    """``who``'s items under ``namespace_prefix`` whose value has every ``filter`` key
    equal, as :func:`store_item` shapes them; with ``query``, ranked by full-text search
    (best first, with ``score``), else newest update first."""
    store = _storage()
    found: list[dict[str, Any]] = []
    wanted = filter or {}
    for name in _store_collections(who, namespace_prefix):
        labels = _namespace_of(name)
        if query:
            records = store.search_documents(name, query, limit=10_000)
        else:
            records = store.documents(name, limit=1_000_000)
        for record in records:
            item = _item(record, labels)
            if all(item["value"].get(k) == v for k, v in wanted.items()):
                found.append(item)
    if query:
        found.sort(key=lambda i: -(i["score"] or 0.0))
    else:
        found.sort(key=lambda i: str(i["updated_at"]), reverse=True)
    return found[offset : offset + limit]


def store_namespaces(
    who: Who,
    *,
    prefix: list[str] | None = None,
    suffix: list[str] | None = None,
    max_depth: int | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[list[str]]:
    """``who``'s namespaces (each a list of labels): under ``prefix``, ending with
    ``suffix``, cut to ``max_depth`` labels, without repeats."""
    out: list[list[str]] = []
    for name in _store_collections(who, prefix or []):
        labels = _namespace_of(name)
        if suffix and labels[-len(suffix) :] != suffix:
            continue
        if max_depth is not None:
            labels = labels[:max_depth]
        if labels not in out:
            out.append(labels)
    return out[offset : offset + limit]


# -- stored JSON ----------------------------------------------------------------------------


def open_json(text: str | None) -> Any:
    """Decode a JSON column the engine wrote (a checkpoint body, an audit event's
    details), opening it first if it is encrypted at rest; None when the text cannot be
    read (no key, the wrong key, or not JSON)."""
    if not text:
        return None
    try:
        return json.loads(open_sealed(text))
    except Exception:  # noqa: BLE001 - unreadable (wrong key): shown as missing, not a crash
        return None


def checkpoint_body(row: CheckpointRow | None) -> dict[str, Any]:
    """The decoded body of a checkpoint row: interrupts, error, metadata… ({} when
    absent or unreadable)."""
    if row is None:
        return {}
    data = open_json(row.body)
    return data if isinstance(data, dict) else {}


def checkpoint_row(*, thread_id: str, checkpoint_id: str) -> CheckpointRow | None:
    """The thread's checkpoint row ``checkpoint_id`` (body undecoded), or None."""
    if not checkpoint_id:
        return None
    return CheckpointRow.objects.filter(thread_id=thread_id, pk=checkpoint_id).first()


# -- the operator console: inbox, threads list, timeline, audit log ------------------------

HEAD_STATUSES = ("in_progress", "suspended", "completed", "failed")
"""The head statuses the threads list filters and counts by."""


def suspended_threads(
    who: Who,
    *,
    assistant: str = "",
    tool: str = "",
    older_than: int | None = None,
    q: str = "",
) -> QuerySet[Thread]:
    """Suspended threads ``who`` may see, oldest waiting first: of ``assistant`` (its
    graph or assistant id), waiting on a call to ``tool``, waiting at least
    ``older_than`` minutes, whose id or owner's name contains ``q``."""
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
    return qs.order_by("updated_at", "id")


def inbox_page(
    who: Who, *, limit: int, **filters: Any
) -> tuple[list[Thread], dict[str, CheckpointRow], int]:
    """The first ``limit`` of :func:`suspended_threads` (``filters`` as it takes them),
    with their owners; their head checkpoint rows by id; and how many match in all.

    Three queries whatever the number of rows: the count, the threads (with owners), and
    their head checkpoints.
    """
    qs = suspended_threads(who, **filters)
    total = qs.count()
    threads = list(qs.select_related("owner")[:limit])
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


def threads_page(
    who: Who,
    *,
    q: str = "",
    status: str = "",
    assistant: str = "",
    metadata: str = "",
    after: str = "",
    size: int = 50,
) -> tuple[list[Thread], str]:
    """One page of the threads ``who`` may see, newest update first, and the cursor of
    the next page ('' at the end): ids containing ``q``, head ``status``, of
    ``assistant``, with ``metadata`` ``key=value``, after the cursor ``after``.

    Keyset pagination on ``(updated_at, id)`` (indexed), so page 2,000 costs what page 1
    does and no COUNT over 100,000 rows is run.

    Raises:
        InvalidArgument: an unknown ``status``, a malformed ``metadata`` search or
            cursor (``field`` names which).
    """
    qs = visible_threads(who)
    if q:
        qs = qs.filter(id__icontains=q)
    if status and status not in HEAD_STATUSES:
        raise InvalidArgument(
            f"{status!r} is not a status: use one of {', '.join(HEAD_STATUSES)}.",
            field="status",
        )
    if status:
        qs = qs.filter(head_status=status)
    if assistant:
        qs = qs.filter(Q(metadata__graph_id=assistant) | Q(metadata__assistant_id=assistant))
    if metadata:
        key, sep, value = metadata.partition("=")
        key = key.strip()
        if not sep or not key or not key.replace("_", "").replace("-", "").isalnum():
            raise InvalidArgument(
                "metadata search must look like key=value (letters, digits, _ or -).",
                field="metadata",
            )
        qs = qs.filter(**{f"metadata__{key}": _metadata_value(value.strip())})
    if after:
        stamp, sep, last_id = after.partition("|")
        try:
            when = datetime.fromisoformat(stamp)
        except ValueError:
            raise InvalidArgument(
                "the page cursor is malformed; start again.", field="after"
            ) from None
        if not sep:
            raise InvalidArgument("the page cursor is malformed; start again.", field="after")
        qs = qs.filter(Q(updated_at__lt=when) | Q(updated_at=when, id__lt=last_id))
    rows = list(qs.select_related("owner").order_by("-updated_at", "-id")[: size + 1])
    more = len(rows) > size
    rows = rows[:size]
    return rows, (_cursor(rows[-1]) if more and rows else "")


def _cursor(thread: Thread) -> str:
    """The keyset cursor after ``thread`` in the list (``updated_at|id``)."""
    return f"{thread.updated_at.isoformat()}|{thread.id}"


def _metadata_value(text: str) -> Any:
    """A metadata search value: JSON when it parses (numbers, true, null), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def status_counts(who: Who) -> dict[str, int]:
    """The threads ``who`` may see, per head status (one grouped query)."""
    from django.db.models import Count

    counts = dict.fromkeys(HEAD_STATUSES, 0)
    for row in visible_threads(who).values("head_status").annotate(n=Count("id")):
        if row["head_status"] in counts:
            counts[row["head_status"]] = row["n"]
    return counts


@dataclass
class TimelineEntry:
    """One checkpoint as a row of the timeline (no state: that is loaded on demand)."""

    id: str
    version: int
    source: str
    status: str
    created_at: datetime
    run_id: str | None
    parent_id: str | None
    forked_from: int | None = None


def timeline(thread_id: str, *, before: int | None = None, size: int = 100) -> list[TimelineEntry]:
    """Checkpoints of the thread, newest first (older than version ``before``), without
    their bodies (one query)."""
    qs = CheckpointRow.objects.filter(thread_id=thread_id)
    if before is not None:
        qs = qs.filter(version__lt=before)
    rows = qs.order_by("-version").values_list(
        "id", "version", "source", "status", "created_at", "run_id", "parent_id"
    )[:size]
    versions: dict[str, int] = {}
    entries = []
    for cid, version, source, status, created_at, run_id, parent_id in rows:
        versions[cid] = version
        entries.append(TimelineEntry(cid, version, source, status, created_at, run_id, parent_id))
    for entry in entries:
        if entry.source == "fork" and entry.parent_id:
            entry.forked_from = versions.get(entry.parent_id)
    return entries


def who_decided(thread: Thread, checkpoint_id: str) -> tuple[str, datetime | None]:
    """Who answered the suspension ``checkpoint_id`` and when, as far as the records tell.

    An agent's approval leaves ``Decision`` rows (contract 4); a workflow's resume leaves
    the run that resumed it (its ``cancelled_by``/metadata actor) and an audit event. When
    nothing names a person, the time of the checkpoint that followed is still known.
    """
    decision = (
        Decision.objects.filter(thread_id=thread.pk, checkpoint_id=checkpoint_id)
        .order_by("decided_at")
        .first()
    )
    if decision is not None and decision.actor:
        return str(decision.actor), decision.decided_at
    suspended_at = (
        CheckpointRow.objects.filter(pk=checkpoint_id).values_list("created_at", flat=True).first()
    )
    if suspended_at is not None:
        # A run resuming it records who asked for it (the runner may not pass it on to
        # the Decision row, so look here too).
        run = (
            Run.objects.filter(
                thread_id=thread.pk, command__isnull=False, created_at__gte=suspended_at
            )
            .order_by("created_at")
            .first()
        )
        if run is not None and isinstance(run.metadata, dict) and run.metadata.get("resumed_by"):
            at = decision.decided_at if decision is not None else run.created_at
            return str(run.metadata["resumed_by"]), at
    later = (
        CheckpointRow.objects.filter(thread_id=thread.pk, parent_id=checkpoint_id)
        .order_by("version")
        .first()
    )
    at = later.created_at if later is not None else thread.updated_at
    suspended = CheckpointRow.objects.filter(pk=checkpoint_id).values_list("created_at", flat=True)
    since = suspended.first() or at
    # The first person to act on the thread after it suspended is who answered it.
    event = (
        AuditEvent.objects.filter(thread_id=thread.pk, created_at__gte=since)
        .exclude(actor=None)
        .exclude(actor="")
        .order_by("created_at")
        .first()
    )
    if event is not None:
        return str(event.actor), event.created_at
    if later is not None:
        meta = checkpoint_body(later).get("metadata") or {}
        by = meta.get("actor") or meta.get("decided_by") or meta.get("by") or ""
        return str(by), later.created_at
    return "", at


def audit_events(
    who: Who,
    *,
    actor: str = "",
    action: str = "",
    thread: str = "",
    before: int | None = None,
    limit: int = 100,
) -> list[AuditEvent]:
    """Audit events, newest first, at most ``limit``: of the threads ``who`` may see,
    written since each was created (every event for operators), whose actor, action and thread id contain ``actor``,
    ``action`` and ``thread``, older than the event ``before``. Each carries its
    decoded details as ``details_json`` (:func:`open_json`)."""
    qs = AuditEvent.objects.all()
    if not who.is_operator:
        # A thread is its id *and* its life: events written before the visible
        # thread was created belong to an earlier thread of the same id (deleted,
        # perhaps another user's) and are never shown to the id's next owner.
        current = visible_threads(who).filter(
            pk=OuterRef("thread_id"), created_at__lte=OuterRef("created_at")
        )
        qs = qs.filter(Exists(current))
    if actor:
        qs = qs.filter(actor__icontains=actor)
    if action:
        qs = qs.filter(action__icontains=action)
    if thread:
        qs = qs.filter(thread_id__icontains=thread)
    if before is not None:
        qs = qs.filter(pk__lt=before)
    events = list(qs.order_by("-pk")[:limit])
    for event in events:
        # Details are JSON text, encrypted at rest when a key is set.
        event.details_json = open_json(event.details)  # type: ignore[attr-defined]
    return events
