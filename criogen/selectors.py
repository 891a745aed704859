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
from collections.abc import Iterable
from typing import Literal

from django.db.models import Case, Exists, OuterRef, Q, QuerySet, Value, When

from criogen.engine.errors import CriogenError
from criogen.storage.models import Run, Thread
from criogen.storage.models.runs import ACTIVE_RUN_STATUSES

__all__ = [
    "RunNotFound",
    "ThreadStatus",
    "active_runs",
    "get_run",
    "runs_for_thread",
    "thread_status",
    "thread_statuses",
    "with_status",
]

ThreadStatus = Literal["idle", "busy", "interrupted", "error"]


class RunNotFound(CriogenError):
    """No run with this id (on this thread)."""

    code = "run_not_found"


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


def with_status(qs: QuerySet[Thread] | None = None) -> QuerySet[Thread]:
    """Threads annotated with ``rest_status`` (idle / busy / interrupted / error),
    computed in SQL so that lists can filter and sort by it. The one place the rule
    lives: busy when a run is pending or running or a live lease holds the thread;
    interrupted when the head is suspended; error when it failed; else idle."""
    qs = Thread.objects.all() if qs is None else qs
    active = Run.objects.filter(thread=OuterRef("pk"), status__in=ACTIVE_RUN_STATUSES)
    leased = Q(lease_id__isnull=False, lease_expires__gt=time.time())
    return qs.annotate(
        rest_status=Case(
            When(Exists(active) | leased, then=Value("busy")),
            When(head_status="suspended", then=Value("interrupted")),
            When(head_status="failed", then=Value("error")),
            default=Value("idle"),
        )
    )


def thread_status(thread: Thread) -> ThreadStatus:
    """The REST status of one thread (one query)."""
    return thread_statuses([thread]).get(thread.pk, "idle")


def thread_statuses(threads: Iterable[Thread]) -> dict[str, ThreadStatus]:
    """The REST status of many threads: thread id -> status, in one query."""
    ids = [t.pk for t in threads]
    rows = with_status(Thread.objects.filter(pk__in=ids)).values_list("pk", "rest_status")
    return dict(rows)  # type: ignore[arg-type]
