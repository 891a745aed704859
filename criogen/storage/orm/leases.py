"""Leases on the ``criogen_thread`` row: one run per thread.

Lease statements (take, renew, give back) commit without waiting for the disk
(``synchronous_commit = off`` for their transaction on PostgreSQL, ``synchronous =
NORMAL`` on SQLite in WAL mode): other connections see them at once, and the next
durable commit flushes them with its own. A crash of the database server may forget a
lease taken in its last moments; that is safe, because every checkpoint write checks
the lease in the same statement that moves the head, so a run whose lease was
forgotten gets ``LeaseLost`` instead of writing. Only checkpoints, decisions and
effects pay a flush.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import connections

from criogen.engine.checkpoints import (
    Checkpoint,
)
from criogen.engine.store import (
    ThreadInfo,
)
from criogen.storage.orm.base import (
    OrmBase,
    _qmark,
    sqlite_autocommit,
    sqlite_connection,
    sqlite_hot,
)

__all__ = ["OrmLeases"]

_ACQUIRE_SQL = (
    "INSERT INTO criogen_thread (id, created_at, updated_at, metadata, head_version,"
    " head_id, head_status, lease_id, lease_expires)"
    " VALUES (%s, %s, %s, '{}', 0, '', '', %s, %s)"
    " ON CONFLICT (id) DO UPDATE SET lease_id = excluded.lease_id,"
    " lease_expires = excluded.lease_expires"
    " WHERE criogen_thread.lease_id IS NULL OR criogen_thread.lease_id = %s"
    " OR criogen_thread.lease_expires < %s"
    " RETURNING head_version"
)

_RENEW_SQL = (
    "UPDATE criogen_thread SET lease_expires = %s WHERE id = %s AND lease_id = %s RETURNING 1"
)
_RELEASE_SQL = (
    "UPDATE criogen_thread SET lease_id = NULL, lease_expires = 0"
    " WHERE id = %s AND lease_id = %s RETURNING 1"
)


@functools.lru_cache(maxsize=16)
def _relaxed_pg(sql: str) -> str:
    """``sql`` (a statement with RETURNING) whose implicit transaction commits without
    waiting for the WAL flush: ``set_config(…, true)`` lasts until that commit."""
    return (
        "WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true) AS off),"  # noqa: S608
        f" done AS ({sql}) SELECT done.* FROM done, relaxed"
    )


_RESTORE_SYNCHRONOUS = {level: f"PRAGMA synchronous = {level}" for level in (2, 3)}


class OrmLeases(OrmBase):
    """One run per thread: take, renew and give back a thread's lease."""

    def acquire(self, thread_id: str, lease_id: str, *, seconds: float) -> bool:
        return self._acquire(thread_id, lease_id, seconds) is not None

    def _acquire(self, thread_id: str, lease_id: str, seconds: float) -> int | None:
        """Take the lease in one statement; the thread's head version, or None if busy."""
        now = time.time()
        stamp = self._db_time(datetime.now(UTC))
        # One statement: create the thread, or take it if no live lease holds it. The
        # head version comes back with it, so a fresh thread needs no head read.
        rows = self._lease(
            _ACQUIRE_SQL, [thread_id, stamp, stamp, lease_id, now + seconds, lease_id, now]
        )
        return rows[0][0] if rows else None

    def acquire_head(
        self, thread_id: str, lease_id: str, *, seconds: float
    ) -> tuple[bool, Checkpoint | None]:
        version = self._acquire(thread_id, lease_id, seconds)
        if version is None:
            return False, None
        if not version:
            return True, None
        try:
            return True, self.head(thread_id)
        except BaseException:
            self.release(thread_id, lease_id)
            raise

    def renew(self, thread_id: str, lease_id: str, *, seconds: float) -> bool:
        return bool(self._lease(_RENEW_SQL, [time.time() + seconds, thread_id, lease_id]))

    def release(self, thread_id: str, lease_id: str) -> None:
        self._lease(_RELEASE_SQL, [thread_id, lease_id])

    def _lease(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """Run a lease statement (``sql`` has RETURNING); its rows.

        In autocommit its transaction commits without waiting for the disk (see the
        module's docstring). Inside a caller's transaction it is just a statement of
        that transaction, which commits as the caller's does.
        """
        if self.vendor == "postgresql":
            connection = connections[self.alias]
            relaxed = connection.get_autocommit() and not connection.in_atomic_block
            return self._pg_run(_relaxed_pg(sql) if relaxed else sql, params, fetch=True)
        connection = sqlite_connection(self.alias)
        hot = (
            sqlite_hot(connection)
            if not connection.in_atomic_block and sqlite_autocommit(connection)
            else None
        )
        if hot is None:
            # In a transaction, or query logging on (Django's cursor logs).
            with self._cursor() as cur:
                cur.execute(sql, params)
                # fetchall: SQLite finishes (and commits) the statement only when every
                # row has been read.
                return cur.fetchall()
        _, cur, level = hot
        try:
            if level > 1:  # FULL or EXTRA: in WAL mode NORMAL skips this commit's fsync
                cur.execute("PRAGMA synchronous = NORMAL")
            try:
                return cur.execute(_qmark(sql), params).fetchall()
            finally:
                if level > 1:
                    cur.execute(_RESTORE_SYNCHRONOUS[level])
        except Exception:
            # Django's error translation, entered only when there is an error to
            # translate (around every statement it was two calls more per lease).
            with connection.wrap_database_errors:
                raise

    def thread_info(self, thread_id: str) -> ThreadInfo | None:
        with self._cursor() as cur:
            cur.execute(
                "SELECT head_version, head_status, lease_id, lease_expires"
                " FROM criogen_thread WHERE id = %s",
                [thread_id],
            )
            row = cur.fetchone()
        if row is None:
            return None
        version, status, lease_id, expires = row
        alive = lease_id is not None and expires > time.time()
        return ThreadInfo(thread_id, version, status or None, lease_id if alive else None)
