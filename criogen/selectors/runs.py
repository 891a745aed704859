"""Runs: by id, of a thread, the active ones."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from typing import Any

from django.db import connections, router
from django.db.models import QuerySet

from criogen.engine.errors import RunNotFound
from criogen.selectors.visibility import Who, visible_runs
from criogen.storage.models import Run, Thread
from criogen.storage.models.runs import ACTIVE_RUN_STATUSES
from criogen.storage.rows import Columns, columns, fetch_rows

__all__ = [
    "RunNotFound",
    "active_runs",
    "active_runs_for",
    "find_run",
    "get_run",
    "refresh_run",
    "run_status",
    "run_stream_mode",
    "runs_for_thread",
    "streams_from_langgraph",
    "thread_graph_id",
]


def get_run(
    *, run_id: str, thread_id: str | None = None, fields: Sequence[str] | None = None
) -> Run:
    """The run ``run_id`` (on ``thread_id`` when given). Raises RunNotFound (also for
    an id that is not a UUID). ``fields``: only these columns (and its id and thread's),
    read in one hand-written statement (see :func:`refresh_run`); else every field,
    with its thread and assistant."""
    try:
        key = uuid.UUID(str(run_id))
    except ValueError:
        raise RunNotFound(f"no run has the id {run_id!r}.", run_id=str(run_id)) from None
    if fields is not None:
        found = _read_run(key, ("run_id", "thread", *fields), thread_id)
    else:
        runs = Run.objects.select_related("thread", "assistant")
        if thread_id is not None:
            runs = runs.filter(thread_id=thread_id)
        found = runs.filter(run_id=key).first()
    if found is None:
        where = f" on thread {thread_id!r}" if thread_id is not None else ""
        raise RunNotFound(f"no run {run_id}{where}.", run_id=str(run_id))
    return found


def refresh_run(run: Run, fields: Sequence[str]) -> None:
    """``run.refresh_from_db(fields=fields)`` for columns that are not relations, in
    one hand-written statement: a waiting request re-reads its run's status each time
    it is woken, and the ORM compiled that query anew every time (bench/NOTES.md, "A
    run's row in one statement"). Raises Run.DoesNotExist when the row is gone."""
    fresh = _read_run(run.pk, fields, None, alias=run._state.db)
    if fresh is None:
        raise Run.DoesNotExist(f"run {run.pk} does not exist.")
    for name in fields:
        attname = Run._meta.get_field(name).attname  # type: ignore[union-attr]
        setattr(run, attname, getattr(fresh, attname))


def _read_run(
    run_id: Any, fields: Sequence[str], thread_id: str | None, *, alias: str | None = None
) -> Run | None:
    """The run's ``fields`` (a deferred instance), on ``thread_id`` when given."""
    alias = alias or router.db_for_read(Run)
    sql, cols = _run_statement(alias, tuple(sorted(set(fields))), thread_id is not None)
    params = [cols.param("run_id", run_id)]
    if thread_id is not None:
        params.append(str(thread_id))
    rows = fetch_rows(alias, sql, params)
    return cols.instance(rows[0]) if rows else None


@functools.cache
def _run_statement(alias: str, fields: tuple[str, ...], on_thread: bool) -> tuple[str, Columns]:
    cols = columns(Run, alias, fields)
    qn = connections[alias].ops.quote_name
    meta = Run._meta
    sql = (
        f"SELECT {cols.select()} FROM {qn(meta.db_table)}"  # noqa: S608 - identifiers from the model
        f" WHERE {qn(meta.get_field('run_id').column)} = %s"
    )
    if on_thread:
        sql += f" AND {qn(meta.get_field('thread').column)} = %s"
    return sql, cols


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


def thread_graph_id(thread_id: str) -> str | None:
    """The graph the thread runs: its newest run's, else the ``graph_id`` of its
    metadata; None for a thread that names none."""
    found = (
        Run.objects.filter(thread_id=thread_id)
        .order_by("-created_at")
        .values_list("graph_id", flat=True)
        .first()
    )
    if found:
        return str(found)
    metadata = Thread.objects.filter(pk=thread_id).values_list("metadata", flat=True).first()
    named = metadata.get("graph_id") if isinstance(metadata, dict) else None
    return named if isinstance(named, str) and named else None


def active_runs(*, thread_id: str) -> QuerySet[Run]:
    """The thread's pending and running runs, oldest first (execution order)."""
    return Run.objects.filter(thread_id=thread_id, status__in=ACTIVE_RUN_STATUSES).order_by(
        "created_at"
    )


def streams_from_langgraph(run_id: Any) -> bool:
    """Whether the run ``run_id`` runs a bridged LangGraph graph, which streams its own
    chunks (:mod:`criogen.langgraph.streams`) instead of having its stream events made
    from checkpoints. False for an unknown run or a graph that does not load; no query
    when no LangGraph graph is registered."""
    from criogen.registry import get_graph, serves_langgraph

    if not serves_langgraph():
        return False
    graph_id = Run.objects.filter(pk=run_id).values_list("graph_id", flat=True).first()
    if graph_id is None:
        return False

    try:
        graph = get_graph(graph_id)
    except Exception:  # noqa: BLE001 - a graph that does not load streams nothing
        return False
    return getattr(graph, "kind", None) == "langgraph"
