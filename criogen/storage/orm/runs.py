"""A run's row on its hot path, one prepared statement each on PostgreSQL: created on
its thread (:func:`insert_run`), and ended (:func:`end_run`).

Built by the ORM, creating a run was a locked read of its thread, the run's ``INSERT``
and the thread's ``UPDATE`` (plus ``BEGIN`` and ``COMMIT``), and ending one an
``UPDATE``: each statement compiled anew, on every run (bench/NOTES.md, "A run's row in one statement"). Here each is one
prepared statement, written once per database from the models' tables and columns.
Elsewhere (SQLite, a ``pre_save``/``post_save`` receiver on runs) both functions answer
None and the caller takes the ORM's path, which does the same in several statements.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from django.db import connections
from django.db.models import Field, Model, signals

from criogen.storage.models import Run, Thread
from criogen.storage.orm.base import pg_run

__all__ = ["end_run", "insert_run"]


def _field(model: type[Model], name: str) -> Field[Any, Any]:
    field = model._meta.get_field(name)
    assert isinstance(field, Field)  # a column, not a relation's reverse side
    return field


def _fast(alias: str) -> bool:
    return connections[alias].vendor == "postgresql" and not (
        signals.pre_save.has_listeners(Run) or signals.post_save.has_listeners(Run)
    )


@functools.cache
def _insert_sql(alias: str) -> str:
    connection = connections[alias]
    qn = connection.ops.quote_name
    run, thread = Run._meta, Thread._meta
    fields = run.local_concrete_fields
    names = ", ".join(qn(f.column) for f in fields)
    # Cast: in INSERT … SELECT the server would take an untyped parameter (a str, a
    # None) for text, which does not go into a uuid or timestamp column.
    marks = ", ".join(f"%s::{f.db_type(connection)}" for f in fields)
    tid, meta = qn(thread.pk.column), qn(_field(Thread, "metadata").column)
    # The thread's row is locked first (FOR UPDATE), as the ORM's path does, so runs
    # created at once on one thread are inserted one after the other; no row (no such
    # thread, or deleted meanwhile): nothing is inserted or updated. The metadata merge
    # is the ORM path's {**metadata, "assistant_id": …, "graph_id": …} (jsonb ||).
    # Identifiers come from the models' metadata, quoted; every value is a parameter.
    return (
        f"WITH locked AS (SELECT {tid} FROM {qn(thread.db_table)} WHERE {tid} = %s FOR UPDATE),"  # noqa: S608
        f" born AS (INSERT INTO {qn(run.db_table)} ({names}) SELECT {marks} FROM locked"
        f" RETURNING 1)"
        f" UPDATE {qn(thread.db_table)} SET {meta} = COALESCE({meta}, '{{}}'::jsonb) || %s::jsonb,"
        f" {qn(_field(Thread, 'updated_at').column)} = %s"
        f" WHERE {tid} = (SELECT {tid} FROM locked) AND EXISTS (SELECT 1 FROM born)"
    )


def insert_run(run: Run, *, metadata: dict[str, Any], updated_at: datetime) -> bool | None:
    """Insert the new ``run`` (its ``thread_id`` set) and merge ``metadata`` into its
    thread's, setting the thread's ``updated_at``, in one statement that first locks
    the thread's row (in the caller's transaction, if any; else its own).

    Returns True when written (``run`` is then saved, as ``Run.objects.create`` leaves
    it), False when the thread does not exist (nothing written), None where this path
    does not apply (see the module's docstring): the caller writes through the ORM.
    """
    alias = Run.objects.db
    if not _fast(alias):
        return None
    connection = connections[alias]
    values = [
        f.get_db_prep_save(f.pre_save(run, True), connection)
        for f in Run._meta.local_concrete_fields
    ]
    meta = _field(Thread, "metadata")
    params = [
        run.thread_id,
        *values,
        meta.get_db_prep_save(metadata, connection),
        _field(Thread, "updated_at").get_db_prep_save(updated_at, connection),
    ]
    if pg_run(alias, _insert_sql(alias), params, fetch=False) != 1:
        return False
    run._state.adding = False
    run._state.db = alias
    return True


@functools.cache
def _end_sql(alias: str) -> str:
    qn = connections[alias].ops.quote_name
    table = qn(Run._meta.db_table)

    def col(name: str) -> str:
        return qn(_field(Run, name).column)

    # The run ends only if this attempt still holds it (running, same attempts): the
    # row count says whether it did. The thread's next run is read by the caller after
    # this commits, never in the same statement: a run queued meanwhile whose claim saw
    # this one still running would be in neither this statement's snapshot nor anyone's
    # hand-over, and would wait for the reaper.
    return (
        f"UPDATE {table} SET {col('status')} = %s, {col('error')} = %s,"  # noqa: S608
        f" {col('ended_at')} = %s, {col('updated_at')} = %s, {col('lease_expires')} = 0,"
        f" {col('cancelled_by')} = CASE WHEN %s THEN COALESCE({col('cancelled_by')}, 'system')"
        f" ELSE {col('cancelled_by')} END"
        f" WHERE {col('run_id')} = %s AND {col('status')} = 'running' AND {col('attempts')} = %s"
    )


def end_run(
    run_id: str,
    *,
    attempts: int,
    status: str,
    error: Any,
    ended_at: datetime,
    cancelled: bool,
) -> bool | None:
    """End the run ``run_id`` with ``status`` and ``error`` if attempt ``attempts``
    still holds it (``running``), its ``cancelled_by`` defaulting to ``"system"`` when
    ``cancelled``, as one prepared statement.

    Returns whether the run was ended, or None where this path does not apply (see the
    module's docstring).
    """
    alias = Run.objects.db
    if not _fast(alias):
        return None
    connection = connections[alias]

    def field(name: str) -> Field[Any, Any]:
        return _field(Run, name)

    params = [
        status,
        field("error").get_db_prep_save(error, connection),
        field("ended_at").get_db_prep_save(ended_at, connection),
        field("updated_at").get_db_prep_save(ended_at, connection),
        cancelled,
        field("run_id").get_db_prep_save(run_id, connection),
        attempts,
    ]
    return bool(pg_run(alias, _end_sql(alias), params, fetch=False) == 1)
