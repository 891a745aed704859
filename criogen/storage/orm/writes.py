"""Checkpoint writes: the hot path, in raw SQL on Django's own connection.

Each checkpoint write is one transaction: on PostgreSQL one statement (the head update
and both inserts in data-modifying CTEs, so one round trip and one commit, prepared);
on SQLite a short ``BEGIN IMMEDIATE`` transaction. A run's last write also gives its
lease back (``write_and_release``). A write that carries a person's audit event commits
the event with it.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.db import DatabaseError, IntegrityError, connections, transaction

from criogen.engine.checkpoints import (
    Checkpoint,
    CheckpointWrite,
)
from criogen.engine.errors import LeaseLost, StorageError
from criogen.engine.store import (
    AuditRecord,
    encode,
    value_rows_for,
)
from criogen.storage.orm.audit import OrmAudit
from criogen.storage.orm.base import _qmark, sqlite_autocommit, sqlite_connection, sqlite_hot

__all__ = ["OrmWrites"]

_RELEASE = ", lease_id = NULL, lease_expires = 0"
"""Added to a run's last head update: the write gives the lease back itself."""
_CP_INSERT = (
    " cps AS (INSERT INTO criogen_checkpoint (id, thread_id, version, run_id, source, status,"
    " parent_id, created_at, body)"
)
_VALUE_INSERT = "INSERT INTO criogen_value (thread_id, state_key, version, kind, prev, data)"
_AUDIT_INSERT = (
    'INSERT INTO criogen_audit_event (created_at, actor, action, door, thread_id, "before",'
    ' "after", details)'
)
_AUDIT_ROW = (
    "%s::timestamptz, %s::varchar, %s::varchar, %s::varchar, %s::varchar, %s::varchar,"
    " %s::varchar, %s::text"
)
_CP_ROW = (
    "%s::varchar, %s::varchar, %s::int, %s::varchar, %s::varchar, %s::varchar, %s::varchar,"
    " %s::timestamptz, %s::text"
)
_VALUE_ROW = "(%s::varchar, %s::varchar, %s::int, %s::varchar, %s::int, %s::text)"
_SCALAR_VALUE_ROWS = 8
"""Up to this many value rows, a one-checkpoint write binds scalars instead of arrays."""
_TOUCH = ", updated_at = %s"
"""In every head update but a run's mid-run steps (``CheckpointWrite.touch``): without
it, the update changes no column of the thread's list indexes, and SQLite writes no
index page for it (PostgreSQL makes it a heap-only update)."""
_THREAD_INSERT = (
    "INSERT INTO criogen_thread (id, created_at, updated_at, metadata, head_version, head_id,"
    " head_status, lease_id, lease_expires) VALUES (%s, %s, %s, '{}', %s, %s, %s, %s, %s)"
    " ON CONFLICT (id) DO NOTHING"
)
"""A run's first write on a thread it creates (``CheckpointWrite.new_thread``): the row
with its head and the run's lease, instead of a lease statement before the run and a
head update at its first write. Inserts nothing when the thread exists."""


def _head_sql(move: str, lease_cast: str = "") -> str:
    """The statement that moves a thread's head (see :meth:`OrmWrites._head_move`);
    ``lease_cast`` types the lease parameter where the database cannot infer it."""
    if move == "create":
        return _THREAD_INSERT
    touch = "" if move == "step" else _TOUCH
    release = _RELEASE if move == "release" else ""
    return (
        "UPDATE criogen_thread SET head_version = %s, head_id = %s, head_status = %s"  # noqa: S608
        f"{touch}{release} WHERE id = %s"
        f" AND head_version = %s AND (lease_id = %s OR %s{lease_cast} IS NULL)"
    )


_HEAD_SQL = {move: _head_sql(move) for move in ("create", "release", "touch", "step")}
_CHECKPOINT_INSERT = (
    "INSERT INTO criogen_checkpoint (id, thread_id, version, run_id, source, status,"
    " parent_id, created_at, body) VALUES "
)


@functools.lru_cache(maxsize=64)
def _pg_write_sql(move: str, values: int, audit: bool) -> str:
    """The one statement of a PostgreSQL checkpoint write: the head's ``move``
    (:meth:`OrmWrites._head_move`), then ``values`` scalar value rows of one
    checkpoint, or (``-1``) any number of checkpoints and rows as arrays, and with
    ``audit`` one event. Built once per shape, so the prepared statement's text is the
    same object."""
    head = f"WITH head AS ({_head_sql(move, '::varchar')} RETURNING id),"  # noqa: S608
    if values >= 0:
        sql = head + _CP_INSERT + f" SELECT {_CP_ROW} FROM head)"  # noqa: S608
        if values:
            rows = ", ".join([_VALUE_ROW] * values)
            sql += f", vals AS ({_VALUE_INSERT} SELECT v.* FROM head, (VALUES {rows}) AS v)"  # noqa: S608
    else:
        # The arrays go in binary (%b): psycopg writes a list as text by quoting each
        # element with a regular expression, 12 % of an `async` run's instructions.
        sql = (
            head + _CP_INSERT + " SELECT c.* FROM head, unnest(%b::varchar[],"  # noqa: S608
            " %b::varchar[], %b::int[], %b::varchar[], %b::varchar[], %b::varchar[],"
            " %b::varchar[], %b::timestamptz[], %b::text[]) AS c),"
            f" vals AS ({_VALUE_INSERT} SELECT v.* FROM head, unnest(%b::varchar[],"
            " %b::varchar[], %b::int[], %b::varchar[], %b::int[], %b::text[]) AS v)"
        )
    if audit:
        sql += f", aud AS ({_AUDIT_INSERT} SELECT {_AUDIT_ROW} FROM head)"  # noqa: S608
    return sql + " SELECT count(*) FROM head"  # noqa: S608


class OrmWrites(OrmAudit):
    """Appending checkpoints and their value rows, and moving the head."""

    def write(self, writes: Sequence[CheckpointWrite], *, lease_id: str | None) -> None:
        self._write(writes, lease_id, release=False)

    def write_and_release(self, writes: Sequence[CheckpointWrite], *, lease_id: str) -> None:
        # The lease is cleared by the same UPDATE that moves the head: no separate
        # statement, no separate commit. (A run writes one thread; a batch over several
        # takes the generic path.)
        if len(writes) != 1 and len({w.checkpoint.thread_id for w in writes}) != 1:
            super().write_and_release(writes, lease_id=lease_id)
            return
        self._write(writes, lease_id, release=True)

    def _write(
        self, writes: Sequence[CheckpointWrite], lease_id: str | None, *, release: bool
    ) -> None:
        if not writes:
            return
        by_thread = _by_thread(writes)
        release = release and lease_id is not None
        audits = [w.audit for w in writes if w.audit is not None] if self.audit_enabled else []
        try:
            # A person's action: its audit event commits with its checkpoint. One event
            # (an agent's turn, an answer) rides in the fast paths' one transaction.
            audit = audits[0] if len(audits) == 1 else None
            if len(audits) <= 1 and self.vendor == "postgresql" and len(by_thread) == 1:
                ((thread_id, group),) = by_thread.items()
                if not self._write_pg(thread_id, group, lease_id, release, audit=audit):
                    self._refused(thread_id, group[0], lease_id)
                return
            connection = sqlite_connection(self.alias)
            if (
                len(audits) <= 1
                and self.vendor == "sqlite"
                and not connection.in_atomic_block
                and sqlite_autocommit(connection)
            ):
                self._write_sqlite(connection, by_thread, lease_id, release, audit=audit)
                return
            with transaction.atomic(using=self.alias):
                self._write_groups(by_thread, lease_id, release)
                self._insert_audit(audits)
        except DatabaseError as exc:
            raise self._write_error(writes, "checkpoint write", exc) from exc

    def _write_sqlite(
        self,
        connection: Any,
        by_thread: dict[str, list[CheckpointWrite]],
        lease_id: str | None,
        release: bool,
        *,
        audit: AuditRecord | None = None,
    ) -> None:
        """One ``BEGIN IMMEDIATE … COMMIT`` on Django's SQLite connection (autocommit),
        with ``audit``'s event when given.

        Django's ``atomic()`` costs more Python per write than the statements do (it
        switches autocommit off and on and keeps savepoint state); outside an atomic
        block the connection is in autocommit, so an explicit transaction on the same
        cursor is all the write needs. ``IMMEDIATE`` takes the write lock up front, so
        two writers queue on the busy timeout instead of failing at the first write.
        """
        refused: tuple[str, CheckpointWrite] | None = None
        hot = sqlite_hot(connection)
        if hot is not None:
            self._write_sqlite_raw(connection, hot, by_thread, lease_id, release, audit)
            return
        # Query logging on (DEBUG, a query capture): Django's cursor, which logs.
        with connection.wrap_database_errors, self._cursor() as cur:
            cur.execute("BEGIN IMMEDIATE")
            try:
                for thread_id, group in by_thread.items():
                    if not self._write_sql(thread_id, group, lease_id, release, cur):
                        refused = (thread_id, group[0])
                        break
                if audit is not None and refused is None:
                    _insert_rows(cur, _AUDIT_INSERT + " VALUES ", [self._audit_row(audit)])
            except BaseException:
                # SQLite rolls some failures back by itself: only end a live transaction.
                if connection.connection.in_transaction:
                    cur.execute("ROLLBACK")
                raise
            cur.execute("ROLLBACK" if refused else "COMMIT")
        if refused is not None:
            self._refused(*refused, lease_id)

    def _write_sqlite_raw(
        self,
        connection: Any,
        hot: tuple[Any, Any, int],
        by_thread: dict[str, list[CheckpointWrite]],
        lease_id: str | None,
        release: bool,
        audit: AuditRecord | None,
    ) -> None:
        """:meth:`_write_sqlite` on sqlite3's own cursor (:func:`sqlite_hot`): the same
        statements, their ``?`` texts built once per shape (no placeholder rewriting
        per statement)."""
        refused: tuple[str, CheckpointWrite] | None = None
        raw, cur, _ = hot
        try:
            cur.execute("BEGIN IMMEDIATE")
            try:
                for thread_id, group in by_thread.items():
                    if not self._write_rows_sqlite(cur, thread_id, group, lease_id, release):
                        refused = (thread_id, group[0])
                        break
                if audit is not None and refused is None:
                    row = self._audit_row(audit)
                    cur.execute(_sqlite_values_sql(_AUDIT_INSERT + " VALUES ", 8, 1), row)
            except BaseException:
                # SQLite rolls some failures back by itself: only end a live one.
                if raw.in_transaction:
                    cur.execute("ROLLBACK")
                raise
            cur.execute("ROLLBACK" if refused else "COMMIT")
        except Exception:
            # Django's error translation, entered only when there is an error to
            # translate (around every write it was two calls more).
            with connection.wrap_database_errors:
                raise
        if refused is not None:
            self._refused(*refused, lease_id)

    def _write_rows_sqlite(
        self,
        cur: Any,
        thread_id: str,
        group: Sequence[CheckpointWrite],
        lease_id: str | None,
        release: bool,
    ) -> bool:
        """:meth:`_write_sql` on a raw sqlite3 cursor (``?`` placeholders)."""
        db_time = self._db_time
        last = group[-1].checkpoint
        if len(group) == 1:
            created = db_time(last.created_at)
            checkpoints = self._checkpoint_row(last, created)
        else:
            created = ""
            checkpoints = []
            for w in group:
                created = db_time(w.checkpoint.created_at)
                checkpoints += self._checkpoint_row(w.checkpoint, created)
        move, params = self._head_move(thread_id, group, created, lease_id, release)
        cur.execute(_SQLITE_HEAD_SQL[move], params)
        if cur.rowcount != 1:
            return False
        values = self._value_params(group)
        if len(group) == 1 and len(values) <= _INSERT_CHUNK * 6:
            # The usual write (one checkpoint, a few value rows): one INSERT each.
            cur.execute(_sqlite_values_sql(_CHECKPOINT_INSERT, 9, 1), checkpoints)
            if values:
                cur.execute(_sqlite_values_sql(_SQLITE_VALUE_HEAD, 6, len(values) // 6), values)
            return True
        _insert_flat_sqlite(cur, _CHECKPOINT_INSERT, 9, checkpoints)
        _insert_flat_sqlite(cur, _SQLITE_VALUE_HEAD, 6, values)
        return True

    def _write_groups(
        self,
        by_thread: dict[str, list[CheckpointWrite]],
        lease_id: str | None,
        release: bool = False,
    ) -> None:
        for thread_id, group in by_thread.items():
            if not self._write_sql(thread_id, group, lease_id, release):
                self._refused(thread_id, group[0], lease_id)

    @contextmanager
    def _write_errors(self, writes: Sequence[CheckpointWrite], what: str) -> Iterator[None]:
        """Turn the database's refusals of a write into StorageError (nothing written)."""
        try:
            yield
        except DatabaseError as exc:
            raise self._write_error(writes, what, exc) from exc

    def _write_error(
        self, writes: Sequence[CheckpointWrite], what: str, exc: DatabaseError
    ) -> StorageError:
        """The StorageError that says why the database refused a write."""
        thread_id = writes[0].checkpoint.thread_id if writes else None
        if isinstance(exc, IntegrityError):
            return StorageError(
                f"thread {thread_id!r} already has a checkpoint with that version: "
                "another write got there first.",
                thread_id=thread_id,
            )
        connections[self.alias].close_if_unusable_or_obsolete()
        return StorageError(
            f"the database refused the {what} ({exc}); nothing was written.",
            thread_id=thread_id,
        )

    def _checkpoint_row(self, cp: Checkpoint, created_at: Any) -> list[Any]:
        """``cp`` as the parameters of one ``criogen_checkpoint`` row."""
        return [
            cp.id,
            cp.thread_id,
            cp.version,
            cp.run_id,
            cp.source,
            cp.status,
            cp.parent_id,
            created_at,
            self._encode_body(cp),
        ]

    def _value_params(self, group: Sequence[CheckpointWrite]) -> list[Any]:
        """The value rows of ``group``, flat: six parameters a row."""
        params: list[Any] = []
        seal = self._seal if self.cipher is not None else None
        for w in group:
            thread_id = w.checkpoint.thread_id
            for key, version, kind, data, prev in value_rows_for(w):
                params += (thread_id, key, version, kind, prev, seal(data) if seal else data)
        return params

    def _write_sql(
        self,
        thread_id: str,
        group: Sequence[CheckpointWrite],
        lease_id: str | None,
        release: bool = False,
        cursor: Any = None,
    ) -> bool:
        # Each checkpoint's time, as the database takes it, once.
        times = [self._db_time(w.checkpoint.created_at) for w in group]
        move, params = self._head_move(thread_id, group, times[-1], lease_id, release)
        with contextlib.nullcontext(cursor) if cursor is not None else self._cursor() as cur:
            cur.execute(_HEAD_SQL[move], params)
            if cur.rowcount != 1:
                return False
            # One multi-row INSERT per table: executemany's per-row round trips through
            # Django's wrapper cost more than building the VALUES list.
            checkpoints: list[Any] = []
            for w, created_at in zip(group, times, strict=True):
                checkpoints += self._checkpoint_row(w.checkpoint, created_at)
            _insert_flat(cur, _CHECKPOINT_INSERT, 9, checkpoints)
            _insert_flat(cur, _VALUE_INSERT + " VALUES ", 6, self._value_params(group))
        return True

    def _write_pg(
        self,
        thread_id: str,
        group: Sequence[CheckpointWrite],
        lease_id: str | None,
        release: bool = False,
        *,
        audit: AuditRecord | None = None,
    ) -> bool:
        # One statement, so one round trip and (in autocommit) one commit. The inserts
        # read from the UPDATE's RETURNING: when the head moved or the lease was lost
        # the UPDATE matches nothing and nothing is inserted. Prepared (see _pg_run):
        # the SQL text depends only on the batch's shape, so a run's statements reuse
        # a handful of plans.
        last = group[-1].checkpoint
        move, params = self._head_move(thread_id, group, last.created_at, lease_id, release)
        values = self._value_params(group)
        rows = len(values) // 6
        if len(group) == 1 and rows <= _SCALAR_VALUE_ROWS:
            # The usual single checkpoint: scalar parameters. Turning them into 15
            # arrays cost more client CPU than the statement's execution.
            params += self._checkpoint_row(last, last.created_at)
            params += values
            sql = _pg_write_sql(move, rows, audit is not None)
        else:
            cps = zip(
                *(self._checkpoint_row(w.checkpoint, w.checkpoint.created_at) for w in group),
                strict=True,
            )
            params += [list(col) for col in cps]
            params += [values[i::6] for i in range(6)]
            sql = _pg_write_sql(move, -1, audit is not None)
        if audit is not None:
            # The event too, from the same RETURNING: no head moved, no event.
            params += self._audit_row(audit)
        found = self._pg_run(sql, params, fetch=True)
        return bool(found[0][0])

    def _audit_row(self, e: AuditRecord) -> list[Any]:
        """``e`` as the parameters of one ``criogen_audit_event`` row (see
        :meth:`OrmAudit._insert_audit`, which writes the same columns)."""
        return [
            self._db_time(e.created_at),
            e.actor,
            e.action,
            e.door,
            e.thread_id or "",
            e.before or "",
            e.after or "",
            self._json_in(dict(e.details)),
        ]

    def _head_move(
        self,
        thread_id: str,
        group: Sequence[CheckpointWrite],
        when: Any,
        lease_id: str | None,
        release: bool,
    ) -> tuple[str, list[Any]]:
        """How writing ``group`` moves its thread's head, and the parameters of that
        statement (:func:`_head_sql`): ``create`` inserts the thread (a run's first write
        on a thread it creates: created and updated at ``when``, held by the run's lease
        unless the write gives it back), ``release`` moves the head and gives the lease
        back (a run's last write), ``touch`` moves it and ``updated_at``, ``step`` only
        the head (a run's mid-run step: ``CheckpointWrite.touch``). ``when`` is the last
        checkpoint's time as the database takes it."""
        first, last = group[0], group[-1].checkpoint
        if first.new_thread is not None:
            held = None if release else lease_id
            expires = time.time() + first.new_thread if held is not None else 0.0
            return "create", [
                thread_id,
                when,
                when,
                last.version,
                last.id,
                last.status,
                held,
                expires,
            ]
        move = "release" if release else "touch" if _touches(group) else "step"
        params: list[Any] = [last.version, last.id, last.status]
        if move != "step":
            params.append(when)
        params += (thread_id, first.after, lease_id, lease_id)
        return move, params

    def _refused(self, thread_id: str, first: CheckpointWrite, lease_id: str | None) -> None:
        """Raise the error that explains why a write matched no thread row."""
        if first.new_thread is not None:
            raise LeaseLost(
                f"thread {thread_id!r} was created by someone else while run {lease_id} "
                "started on it; nothing was written.",
                thread_id=thread_id,
            )
        after = first.after
        with self._cursor() as cur:
            cur.execute(
                "SELECT head_version, lease_id FROM criogen_thread WHERE id = %s", [thread_id]
            )
            row = cur.fetchone()
        if lease_id is not None and (row is None or row[1] != lease_id):
            raise LeaseLost(
                f"run {lease_id} no longer holds thread {thread_id!r}; another run took it over.",
                thread_id=thread_id,
            )
        if row is None:
            raise StorageError(
                f"thread {thread_id!r} does not exist: take its lease (acquire) before "
                "writing to it.",
                thread_id=thread_id,
            )
        head = row[0]
        raise StorageError(
            f"thread {thread_id!r} is at version {head}, not {after}: another write got "
            "there first.",
            thread_id=thread_id,
        )

    def _encode_body(self, cp: Checkpoint) -> str:
        return self._seal(
            encode(
                {
                    "next": list(cp.next),
                    "interrupts": list(cp.interrupts),
                    "tasks": cp.tasks,
                    "error": cp.error,
                    "metadata": cp.metadata,
                    "values": cp.value_versions,
                    "bases": cp.value_bases,
                }
            )
        )


_INSERT_CHUNK = 500
"""Rows per multi-row INSERT: well under SQLite's 32,766 bound parameters."""


def _insert_rows(cur: Any, head: str, rows: Sequence[Sequence[Any]]) -> None:
    """``head`` followed by one ``VALUES`` tuple per row, in chunks of bounded size."""
    if rows:
        _insert_flat(cur, head, len(rows[0]), [p for r in rows for p in r])


def _insert_flat(cur: Any, head: str, width: int, params: Sequence[Any]) -> None:
    """:func:`_insert_rows` of rows given flat: ``width`` parameters a row."""
    step = _INSERT_CHUNK * width
    for start in range(0, len(params), step):
        chunk = params[start : start + step]
        cur.execute(_values_sql(head, width, len(chunk) // width), chunk)


@functools.lru_cache(maxsize=256)
def _values_sql(head: str, width: int, rows: int) -> str:
    """``head`` and ``rows`` ``VALUES`` tuples of ``width`` placeholders (only
    placeholders are added to the SQL text)."""
    row = "(" + ", ".join(["%s"] * width) + ")"
    return head + ", ".join([row] * rows)


_SQLITE_VALUE_HEAD = _VALUE_INSERT + " VALUES "
_SQLITE_HEAD_SQL = {move: _qmark(sql) for move, sql in _HEAD_SQL.items()}


def _touches(group: Sequence[CheckpointWrite]) -> bool:
    """Whether writing ``group`` moves the thread's ``updated_at`` (one of its writes
    does: ``CheckpointWrite.touch``)."""
    if len(group) == 1:
        return group[0].touch
    return any(w.touch for w in group)


def _insert_flat_sqlite(cur: Any, head: str, width: int, params: Sequence[Any]) -> None:
    """:func:`_insert_flat` on a raw sqlite3 cursor."""
    if len(params) <= _INSERT_CHUNK * width:
        if params:
            cur.execute(_sqlite_values_sql(head, width, len(params) // width), params)
        return
    step = _INSERT_CHUNK * width
    for start in range(0, len(params), step):
        chunk = params[start : start + step]
        cur.execute(_sqlite_values_sql(head, width, len(chunk) // width), chunk)


@functools.lru_cache(maxsize=256)
def _sqlite_values_sql(head: str, width: int, rows: int) -> str:
    """:func:`_values_sql` with sqlite3's ``?`` placeholders."""
    return _qmark(_values_sql(head, width, rows))


def _by_thread(writes: Sequence[CheckpointWrite]) -> dict[str, list[CheckpointWrite]]:
    """The writes grouped by thread, each group checked to follow on without a gap."""
    if len(writes) == 1 and writes[0].checkpoint.version > writes[0].after:
        return {writes[0].checkpoint.thread_id: [writes[0]]}  # a run's usual write
    by_thread: dict[str, list[CheckpointWrite]] = {}
    for w in writes:
        group = by_thread.setdefault(w.checkpoint.thread_id, [])
        # The SQL checks only the first write of a thread against its head; the
        # rest must each follow the one before, or the head would skip versions.
        expected = group[-1].checkpoint.version if group else w.after
        if w.after != expected or w.checkpoint.version <= w.after:
            raise StorageError(
                f"thread {w.checkpoint.thread_id!r}: a write of version "
                f"{w.checkpoint.version} expects version {w.after}, not {expected}; "
                "nothing was written.",
                thread_id=w.checkpoint.thread_id,
            )
        group.append(w)
    return by_thread
