"""A thread's birth and death over HTTP: the row and its audit event in one round trip.

``POST /threads`` and ``DELETE /threads/{id}`` are the writes a client makes most after
runs. Through the ORM a creation was ``BEGIN``, two ``INSERT``s and ``COMMIT`` (four
round trips), and a deletion twenty statements: the collector reads the thread and its
runs, then deletes from every table that refers to the thread, one by one. Here:

- on PostgreSQL each is one prepared statement (data-modifying CTEs, the audit event
  read from the first one's ``RETURNING``: no row written, no event);
- on SQLite a short ``BEGIN IMMEDIATE`` transaction (or the caller's atomic block).

The deletion's statements are derived once from the models' own relations (every
``CASCADE`` to the thread, and what cascades or is set null from those rows), so a new
table that refers to threads is deleted with them; a relation the plan cannot express
(another ``on_delete``, deeper chains, many-to-many fields) or a delete signal's
receiver sends the deletion back to the ORM's collector. The API's deletion also checks
in the same statement that the caller may see the thread (:meth:`OrmLifecycle.
delete_idle_thread_for`): its request makes one statement after the token's.
"""

from __future__ import annotations

import functools
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from django.db import IntegrityError, connections, transaction
from django.db.models import signals

from criogen.engine.store import AuditRecord
from criogen.storage.orm.base import _SqliteCursor
from criogen.storage.orm.writes import _AUDIT_INSERT, _AUDIT_ROW, OrmWrites

__all__ = ["OrmLifecycle"]

_SQLITE_RETURNING = sqlite3.sqlite_version_info >= (3, 35)
_AUDIT_GONE = (
    "%s::timestamptz, %s::varchar, %s::varchar, %s::varchar, %s::varchar, gone.head_id,"
    " %s::varchar, %s::text"
)
"""An audit row whose ``before`` is the deleted thread's head (``_AUDIT_ROW`` less one)."""
_AUDIT_VALUES = _AUDIT_INSERT + " VALUES (" + ", ".join(["%s"] * 8) + ")"


@dataclass(frozen=True)
class _DeletePlan:
    """What deleting one thread touches, as SQL with one ``%s`` for the thread's id.

    ``guard``: the condition under which the thread row may go (its id, then the time
    now: no live lease, no pending or running run); ``then``: the statements for the rows that go with it, in order
    (the ``SET NULL`` updates before the deletes that could remove the same rows)."""

    guard: str
    then: tuple[tuple[str, int], ...]
    """Each statement with its number of ``%s`` (each the thread's id)."""
    models: tuple[Any, ...]
    """The models whose rows it deletes or changes: a delete signal connected to any
    of them (checked at each deletion) needs the collector."""
    owned: str
    """What narrows ``guard`` (and the check that the thread exists) to one owner's
    thread: `` AND <owner column> = %s``."""

    @functools.cached_property
    def pg_statements(self) -> dict[tuple[bool, bool], str]:
        """The PostgreSQL statement by (narrowed to an owner, with an audit event): made
        once, as the statement is the same for every thread (it is prepared)."""
        return {
            (owned, audited): _pg_statement(self, owned=owned, audited=audited)
            for owned in (False, True)
            for audited in (False, True)
        }


def _has_delete_receivers(model: Any) -> bool:
    return signals.pre_delete.has_listeners(model) or signals.post_delete.has_listeners(model)


_heard: tuple[tuple[Any, ...], bool] | None = None
"""The delete signals' receivers when the plan's models were last checked, and whether
any of them listens to one of those models."""


def _needs_collector(plan: _DeletePlan) -> bool:
    """Whether a delete signal's receiver listens to one of ``plan.models`` (then the
    collector deletes, and sends the signals).

    Asking each model of each signal is ~150 Python calls, a third of a deletion's own
    (bench/NOTES.md, 2026-12-02): the answer is kept for as long as the receivers are
    the same. ``connect`` and ``disconnect`` change the lists; a receiver that dies
    afterwards leaves its entry there and keeps the answer True (the collector then
    sends the signal to no one: slower, never wrong)."""
    global _heard
    now = (*signals.pre_delete.receivers, None, *signals.post_delete.receivers)
    heard = _heard
    if heard is None or heard[0] != now:
        heard = (now, any(_has_delete_receivers(model) for model in plan.models))
        _heard = heard
    return heard[1]


@functools.cache
def _delete_plan() -> _DeletePlan | None:
    """The statements of a thread's deletion, from the models' relations; None when a
    relation needs Django's collector (see the module's docstring)."""
    from django.db import models

    from criogen.storage.models import Run, Thread
    from criogen.storage.models.runs import ACTIVE_RUN_STATUSES

    touched: list[Any] = [Thread]

    def plain(model: Any) -> bool:
        touched.append(model)
        return not model._meta.many_to_many

    cascades: dict[Any, str] = {
        rel.related_model: rel.field.column
        for rel in Thread._meta.related_objects
        if rel.on_delete is models.CASCADE
    }
    updates: list[tuple[str, int]] = []
    deletes: list[tuple[str, int]] = []
    for rel in Thread._meta.related_objects:
        child: Any = rel.related_model
        column = rel.field.column
        if rel.on_delete is not models.CASCADE or not plain(child):
            return None
        table = child._meta.db_table
        for sub in child._meta.related_objects:
            grandchild: Any = sub.related_model
            if not plain(grandchild):
                return None
            key, link = sub.field.target_field.column, sub.field.column
            rows = f"{link} IN (SELECT {key} FROM {table} WHERE {column} = %s)"  # noqa: S608
            if sub.on_delete is models.SET_NULL:
                # Rows of the thread itself are deleted below: leave them alone (one
                # PostgreSQL statement may not both update and delete a row).
                own = cascades.get(grandchild)
                updates.append(
                    (
                        f"UPDATE {grandchild._meta.db_table} SET {sub.field.column} = NULL"  # noqa: S608
                        f" WHERE {rows}" + (f" AND ({own} IS NULL OR {own} <> %s)" if own else ""),
                        2 if own else 1,
                    )
                )
            elif sub.on_delete is models.CASCADE and not grandchild._meta.related_objects:
                deletes.append((f"DELETE FROM {grandchild._meta.db_table} WHERE {rows}", 1))  # noqa: S608
            elif sub.on_delete is not models.DO_NOTHING:
                return None
        deletes.append((f"DELETE FROM {table} WHERE {column} = %s", 1))  # noqa: S608
    if not plain(Thread):
        return None
    run_table, run_thread = Run._meta.db_table, Run._meta.get_field("thread").column
    statuses = ", ".join(f"'{s}'" for s in ACTIVE_RUN_STATUSES)
    guard = (
        "id = %s AND (lease_id IS NULL OR lease_expires <= %s) AND NOT EXISTS (SELECT 1 FROM"  # noqa: S608
        f" {run_table} WHERE {run_table}.{run_thread} = criogen_thread.id"
        f" AND {run_table}.status IN ({statuses}))"
    )
    owned = f" AND {Thread._meta.get_field('owner').column} = %s"
    return _DeletePlan(guard, (*updates, *deletes), tuple(dict.fromkeys(touched)), owned)


def _pg_statement(plan: _DeletePlan, *, owned: bool, audited: bool) -> str:
    """The one statement of an idle thread's deletion on PostgreSQL; its parameters are
    the thread's id, the time now, the owner (when ``owned``), the thread's id once per
    ``%s`` of ``plan.then``, the audit row less its ``before`` (when ``audited``), then
    the thread's id and the owner (when ``owned``) again.

    Every part sees the same snapshot, so the rows of the thread's tables go only if the
    guarded DELETE of its row matched (EXISTS on ``gone``); a row both set null and
    deleted would be changed twice, which PostgreSQL does not allow in one statement, so
    a SET NULL skips the rows the thread's own deletes take (those of the thread: its
    relation's column is the thread id). It answers how many thread rows went (0 or 1)
    and whether the thread (the owner's) is still there: busy."""
    owner = plan.owned if owned else ""
    parts = [
        f"gone AS (DELETE FROM criogen_thread WHERE {plan.guard}{owner} RETURNING head_id)"  # noqa: S608
    ]
    parts += [
        f"t{i} AS ({sql} AND EXISTS (SELECT 1 FROM gone))"  # noqa: S608
        for i, (sql, _) in enumerate(plan.then)
    ]
    if audited:
        # ``before``: the head that was deleted, from the row itself.
        parts.append(f"aud AS ({_AUDIT_INSERT} SELECT {_AUDIT_GONE} FROM gone)")  # noqa: S608
    return (
        "WITH " + ", ".join(parts) + " SELECT (SELECT count(*) FROM gone),"  # noqa: S608
        f" EXISTS (SELECT 1 FROM criogen_thread WHERE id = %s{owner})"
    )


class OrmLifecycle(OrmWrites):
    """Creating a thread's row and deleting an idle thread, each with its audit event."""

    # -- creating -------------------------------------------------------------------------

    def insert_audited(self, row: Any, audit: AuditRecord | None) -> None:
        """Insert the model instance ``row`` (its primary key set) as
        ``row.save(force_insert=True)`` would, with ``audit``'s event in the same
        transaction. Raises IntegrityError when the row exists (nothing written). With
        a ``pre_save`` or ``post_save`` receiver for its model, through ``save()``."""
        from django.db.models import signals

        connection = connections[self.alias]
        meta = row._meta
        event = audit if self.audit_enabled else None
        if signals.pre_save.has_listeners(type(row)) or signals.post_save.has_listeners(type(row)):
            with transaction.atomic(using=self.alias):
                row.save(force_insert=True, using=self.alias)
                self._insert_audit([event] if event is not None else [])
            return
        fields = meta.local_concrete_fields
        columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
        values = [f.get_db_prep_save(f.pre_save(row, True), connection) for f in fields]
        insert = (
            f"INSERT INTO {meta.db_table} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})"  # noqa: S608
        )
        if self.vendor == "postgresql":
            if event is None:
                self._pg_run(insert, values, fetch=False)
            else:
                # The event from the insert's RETURNING: one statement, one round trip.
                sql = (
                    f"WITH born AS ({insert} RETURNING 1)"  # noqa: S608
                    f" {_AUDIT_INSERT} SELECT {_AUDIT_ROW} FROM born"
                )
                self._pg_run(sql, [*values, *self._audit_row(event)], fetch=False)
        else:
            with self._sqlite_transaction() as cur:
                cur.execute(insert, values)
                if event is not None:
                    cur.execute(_AUDIT_VALUES, self._audit_row(event))
        row._state.adding = False
        row._state.db = self.alias

    # -- deleting -------------------------------------------------------------------------

    def delete_idle_thread(
        self, thread_id: str, *, audit: AuditRecord | None = None
    ) -> bool | None:
        return self.delete_idle_thread_for(thread_id, owner=None, audit=audit)

    def delete_idle_thread_for(
        self, thread_id: str, *, owner: Any, audit: AuditRecord | None = None
    ) -> bool | None:
        """:meth:`delete_idle_thread`, and only a thread of ``owner``'s (the primary key
        of a user; None: anyone's), checked in the same statement: another owner's
        thread is left alone and answered False, as a missing one."""
        plan = _delete_plan()
        if (
            plan is None
            or (self.vendor == "sqlite" and not _SQLITE_RETURNING)
            or _needs_collector(plan)
        ):
            # The collector's path: the checks of the plan's guard, read first.
            row = self._owner_and_busy(thread_id)
            if row is None or (owner is not None and row[0] != owner):
                return False
            if row[1]:
                return None
            return super().delete_idle_thread(thread_id, audit=audit)
        event = audit if self.audit_enabled else None
        if self.vendor == "postgresql":
            return self._delete_idle_pg(plan, thread_id, owner, event)
        owned, narrow = (plan.owned, [owner]) if owner is not None else ("", [])
        with self._sqlite_transaction() as cur:
            cur.execute(
                f"DELETE FROM criogen_thread WHERE {plan.guard}{owned} RETURNING head_id",  # noqa: S608
                [thread_id, time.time(), *narrow],
            )
            gone = cur.fetchall()
            if not gone:
                cur.execute(
                    f"SELECT 1 FROM criogen_thread WHERE id = %s{owned}",  # noqa: S608
                    [thread_id, *narrow],
                )
                return None if cur.fetchone() else False
            for sql, n in plan.then:
                cur.execute(sql, [thread_id] * n)
            if event is not None:
                event = replace(event, before=gone[0][0] or None)
                cur.execute(_AUDIT_VALUES, self._audit_row(event))
        return True

    def _owner_and_busy(self, thread_id: str) -> tuple[Any, bool] | None:
        """The thread's owner, and whether one of its runs is pending or running; None
        when there is no such thread."""
        from criogen.storage.models.runs import ACTIVE_RUN_STATUSES

        statuses = ", ".join(["%s"] * len(ACTIVE_RUN_STATUSES))
        with self._cursor() as cur:
            cur.execute(
                "SELECT owner_id, EXISTS (SELECT 1 FROM criogen_run WHERE thread_id = %s"  # noqa: S608
                f" AND status IN ({statuses})) FROM criogen_thread WHERE id = %s",
                [thread_id, *ACTIVE_RUN_STATUSES, thread_id],
            )
            row = cur.fetchone()
        return None if row is None else (row[0], bool(row[1]))

    def _delete_idle_pg(
        self, plan: _DeletePlan, thread_id: str, owner: Any, event: AuditRecord | None
    ) -> bool | None:
        # One statement (see _pg_statement).
        narrow = [owner] if owner is not None else []
        params: list[Any] = [thread_id, time.time(), *narrow]
        for _, n in plan.then:
            params += [thread_id] * n
        if event is not None:
            row = self._audit_row(event)
            params += row[:5] + row[6:]
        params += [thread_id, *narrow]
        sql = plan.pg_statements[(owner is not None, event is not None)]
        connection = connections[self.alias]
        if connection.in_atomic_block:
            ((deleted, existed),) = self._pg_run(sql, params, fetch=True)
        else:
            try:
                ((deleted, existed),) = self._pg_run(sql, params, fetch=True)
            except IntegrityError:
                # A run was inserted on the thread while this statement waited for the
                # thread's row (its snapshot does not see it): nothing was deleted, and
                # the thread is busy after all.
                return None
        if deleted:
            return True
        return None if existed else False

    # -- SQLite's transaction ---------------------------------------------------------------

    @contextmanager
    def _sqlite_transaction(self) -> Iterator[Any]:
        """A cursor in one SQLite transaction: ``BEGIN IMMEDIATE … COMMIT`` on Django's
        connection in autocommit (as the checkpoint writes do), else the caller's atomic
        block (a savepoint). An exception rolls it back."""
        connection = connections[self.alias]
        if connection.in_atomic_block or not connection.get_autocommit():
            with transaction.atomic(using=self.alias), self._cursor() as cur:
                yield cur
            return
        raw = self._raw_sqlite()
        with (
            connection.wrap_database_errors,
            _SqliteCursor(raw.cursor()) if raw is not None else self._cursor() as cur,
        ):
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
            except BaseException:
                # SQLite rolls some failures back by itself: only end a live transaction.
                if connection.connection.in_transaction:
                    cur.execute("ROLLBACK")
                raise
            cur.execute("COMMIT")
