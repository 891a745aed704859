"""Read-side queries for the API and the dashboard: runs and derived thread status.

Nothing here writes. A thread's REST status is derived, LangGraph-style:

- ``busy``: a run on it is ``pending`` or ``running``, or a live lease holds it;
- ``interrupted``: its head is ``suspended`` (waiting for a person);
- ``error``: its head is ``failed``;
- ``idle``: anything else (no checkpoint yet, completed, or stopped mid-run by a cancel).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from django.db import connections
from django.db.models import Case, Exists, OuterRef, Q, QuerySet, Subquery, Value, When
from django.db.models.fields.json import KeyTransform
from django.db.models.lookups import IsNull

from criogen.engine.checkpoints import Checkpoint
from criogen.engine.errors import RunNotFound
from criogen.storage.models import Run, Thread
from criogen.storage.models.runs import ACTIVE_RUN_STATUSES

__all__ = [
    "RunNotFound",
    "ThreadStatus",
    "active_runs",
    "filter_metadata",
    "filter_status",
    "get_run",
    "runs_for_thread",
    "thread_heads",
    "thread_status",
    "thread_statuses",
    "with_status",
]

ThreadStatus = Literal["idle", "busy", "interrupted", "error"]


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
