"""A thread's REST status, derived LangGraph-style, and its head checkpoint.

- ``busy``: a run on it is ``pending`` or ``running``, or a live lease holds it;
- ``interrupted``: its head is ``suspended`` (waiting for a person);
- ``error``: its head is ``failed``;
- ``idle``: anything else (no checkpoint yet, completed, or stopped mid-run by a cancel).

The rule lives in :func:`with_status` (an annotation, computed in SQL so that lists can
filter and sort by it) and :func:`filter_status` (the same rule as plain conditions).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Literal

from django.db.models import Case, Exists, OuterRef, Q, QuerySet, Subquery, Value, When
from django.db.models.lookups import IsNull

from criogen.engine.checkpoints import Checkpoint
from criogen.storage.models import Run, Thread
from criogen.storage.models.runs import ACTIVE_RUN_STATUSES

__all__ = [
    "THREAD_STATUSES",
    "ThreadStatus",
    "filter_status",
    "thread_heads",
    "thread_status",
    "thread_statuses",
    "with_status",
]

ThreadStatus = Literal["idle", "busy", "interrupted", "error"]
THREAD_STATUSES = ("idle", "busy", "interrupted", "error")


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


def with_status(
    qs: QuerySet[Thread] | None = None, *, now: float | None = None
) -> QuerySet[Thread]:
    """Threads annotated with ``rest_status`` (idle / busy / interrupted / error),
    computed in SQL so that lists can filter and sort by it. The one place the rule
    lives: busy when a run is pending or running or a live lease holds the thread;
    interrupted when the head is suspended; error when it failed; else idle.
    ``now``: the instant leases are judged at (default: this one)."""
    qs = Thread.objects.all() if qs is None else qs
    return qs.annotate(rest_status=_status(time.time() if now is None else now))


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
