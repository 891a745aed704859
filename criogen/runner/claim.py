"""Claiming a run: one conditional ``UPDATE`` moves it to ``running`` if it is this
caller's to run (``pending`` and due, or ``running`` with a dead worker) and no earlier
run on its thread is still to end; ``rows != 1`` means someone else has it or it is not
its turn (a delayed run before its ``not_before``, a run queued behind another)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.db import connections
from django.db.models import Exists, F, OuterRef, Q
from django.db.models import Value as V
from django.db.models.functions import Coalesce
from django.db.models.query import QuerySet
from django.utils import timezone

from criogen.runner.base import _lease_seconds, _worker_name
from criogen.storage.models import Run
from criogen.storage.rows import Columns, columns

__all__: list[str] = []


def _blockers() -> QuerySet[Run]:
    """Runs that must end before the outer run may start: running on its thread, or
    queued on it earlier."""
    return (
        Run.objects.filter(thread_id=OuterRef("thread_id"))
        .exclude(pk=OuterRef("pk"))
        .filter(Q(status="running") | Q(status="pending", created_at__lt=OuterRef("created_at")))
    )


def _claim(run_id: str) -> Run | None:
    """Move the run to ``running`` and return it, if it is this caller's to run: the
    conditional UPDATE is the lock (pending, or running with a dead worker), and only
    when no earlier run on its thread is still to end."""
    now = time.time()
    alias = Run.objects.db
    statement = _claim_statement(alias)
    if statement is None:
        return _claim_orm(run_id, now)
    run = statement.run
    params = [
        _worker_name(),
        now + _lease_seconds(),
        run.param("started_at", timezone.now()),
        run.param("updated_at", timezone.now()),
        run.param("run_id", run_id),
        now,
        run.param("not_before", timezone.now()),
    ]
    with connections[alias].cursor() as cursor:
        cursor.execute(statement.sql, params)
        row = cursor.fetchone()
    return None if row is None else run.instance(row)


@dataclass(frozen=True)
class _ClaimStatement:
    sql: str
    run: Columns


_claim_statements: dict[str, _ClaimStatement | None] = {}


def _claim_statement(alias: str) -> _ClaimStatement | None:
    """The claim as one ``UPDATE … RETURNING`` for ``alias`` (None where the database
    cannot return rows from an UPDATE: SQLite before 3.35, other vendors).

    Built by the ORM, the claim was an UPDATE with an ``Exists`` subquery and then a
    ``get`` of the row: two round trips and ~2 ms of compiling, half of the runner's own
    CPU per run (bench/NOTES.md, "The runner's claim")."""
    if alias in _claim_statements:
        return _claim_statements[alias]
    connection = connections[alias]
    returning = connection.vendor == "postgresql" or (
        connection.vendor == "sqlite" and connection.Database.sqlite_version_info >= (3, 35)
    )
    if not returning:
        _claim_statements[alias] = None
        return None
    qn = connection.ops.quote_name
    meta = Run._meta
    table = qn(meta.db_table)

    def col(name: str) -> str:
        return qn(meta.get_field(name).column)

    status, lease = col("status"), col("lease_expires")
    # Identifiers come from the model's metadata, quoted; every value is a parameter.
    blockers = (
        f"SELECT 1 FROM {table} b WHERE b.{col('thread')} = {table}.{col('thread')}"  # noqa: S608
        f" AND b.{col('run_id')} <> {table}.{col('run_id')}"
        f" AND (b.{status} = 'running'"
        f" OR (b.{status} = 'pending' AND b.{col('created_at')} < {table}.{col('created_at')}))"
    )
    run = columns(Run, alias)
    sql = (
        f"UPDATE {table} SET {status} = 'running', {col('attempts')} = {col('attempts')} + 1,"  # noqa: S608
        f" {col('worker')} = %s, {lease} = %s,"
        f" {col('started_at')} = COALESCE({col('started_at')}, %s), {col('updated_at')} = %s"
        f" WHERE {col('run_id')} = %s"
        f" AND ({status} = 'pending' OR ({status} = 'running' AND {lease} < %s))"
        f" AND ({col('not_before')} IS NULL OR {col('not_before')} <= %s)"
        f" AND NOT EXISTS ({blockers})"
        f" RETURNING {run.select()}"
    )
    statement = _claim_statements[alias] = _ClaimStatement(sql, run)
    return statement


def _claim_orm(run_id: str, now: float) -> Run | None:
    """:func:`_claim` through the ORM, for databases without ``UPDATE … RETURNING``."""
    rows = (
        Run.objects.filter(pk=run_id)
        .filter(Q(status="pending") | Q(status="running", lease_expires__lt=now))
        .filter(Q(not_before__isnull=True) | Q(not_before__lte=timezone.now()))
        .filter(~Exists(_blockers()))
        .update(
            status="running",
            attempts=F("attempts") + 1,
            worker=_worker_name(),
            lease_expires=now + _lease_seconds(),
            started_at=Coalesce(F("started_at"), V(timezone.now())),
            updated_at=timezone.now(),
        )
    )
    if rows != 1:
        return None
    return Run.objects.get(pk=run_id)
