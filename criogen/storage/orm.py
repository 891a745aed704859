"""Storage on the Django ORM's tables: SQLite and PostgreSQL.

The models (:mod:`criogen.storage.models`) own the schema; this module reads and
writes checkpoints with raw SQL through Django's own connection, because that path
runs once per step and the ORM's per-row cost would dominate it. Each checkpoint
write is one transaction: on PostgreSQL one statement (the head update and both
inserts in data-modifying CTEs, so one round trip and one commit, prepared); on SQLite
a short ``BEGIN IMMEDIATE`` transaction. A run's last write also gives its lease back,
and taking a lease tells the head's version (see ``acquire_head``).

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

import contextlib
import functools
import json
import re
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, NoReturn

from django.db import DatabaseError, IntegrityError, connections, transaction

from criogen.engine.checkpoints import (
    Checkpoint,
    CheckpointId,
    CheckpointWrite,
    RunId,
    ThreadId,
)
from criogen.engine.crypto import open_without_key
from criogen.engine.errors import AlreadyDecided, CheckpointNotFound, LeaseLost, StorageError
from criogen.engine.store import (
    AuditRecord,
    DecisionRecord,
    DocumentRecord,
    EffectRecord,
    FactRecord,
    Storage,
    ThreadInfo,
    ValueRow,
    build_state,
    encode,
    value_rows_for,
)
from criogen.storage.setup import database_alias, redact

__all__ = ["OrmStorage"]

_CHECKPOINT_COLUMNS = "id, version, run_id, source, status, parent_id, created_at, body"

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
_RELEASE = ", lease_id = NULL, lease_expires = 0"
"""Added to a run's last head update: the write gives the lease back itself."""
_CP_INSERT = (
    " cps AS (INSERT INTO criogen_checkpoint (id, thread_id, version, run_id, source, status,"
    " parent_id, created_at, body)"
)
_VALUE_INSERT = "INSERT INTO criogen_value (thread_id, state_key, version, kind, prev, data)"
_CP_ROW = (
    "%s::varchar, %s::varchar, %s::int, %s::varchar, %s::varchar, %s::varchar, %s::varchar,"
    " %s::timestamptz, %s::text"
)
_VALUE_ROW = "(%s::varchar, %s::varchar, %s::int, %s::varchar, %s::int, %s::text)"
_SCALAR_VALUE_ROWS = 8
"""Up to this many value rows, a one-checkpoint write binds scalars instead of arrays."""


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


@functools.lru_cache(maxsize=512)
def _qmark(sql: str) -> str:
    """The project's ``%s`` placeholders as sqlite3's ``?`` (our SQL has no literal %)."""
    return sql.replace("%s", "?")


class _SqliteCursor:
    """sqlite3's own cursor on Django's connection, taking ``%s`` placeholders.

    Django's SQLite cursor rewrites every statement's placeholders with a regex and
    wraps each call; on the checkpoint path that was more Python than the statements
    themselves. Errors still go through Django's translation (the caller holds
    ``wrap_database_errors``).
    """

    __slots__ = ("_cur",)

    def __init__(self, cur: Any) -> None:
        self._cur = cur

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._cur.execute(_qmark(sql), params)

    @property
    def rowcount(self) -> int:
        return int(self._cur.rowcount)

    def fetchall(self) -> list[Any]:
        return self._cur.fetchall()  # type: ignore[no-any-return]

    def fetchone(self) -> Any:
        return self._cur.fetchone()

    def __enter__(self) -> _SqliteCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._cur.close()


class OrmStorage(Storage):
    """Threads and checkpoints in the Django database ``alias`` (SQLite or PostgreSQL)."""

    supports_background_writes = True

    def __init__(self, url: str | None = None, **options: Any) -> None:
        url = url or "django://default"
        self.alias = database_alias(url)
        self.url = redact(url)
        self.vendor = connections[self.alias].vendor
        from django.conf import settings

        # Options win; then, for the project's own databases (Storage.default()), the
        # Django settings; then the environment (in _init_options). A Storage(url) of
        # another database made inside the project keeps the plain-script defaults.
        agent_options = dict(options)
        if url.startswith("django://"):
            for option, setting in (
                ("encryption_key", "CRIOGEN_ENCRYPTION_KEY"),
                ("audit", "CRIOGEN_AUDIT"),
                ("max_state_bytes", "CRIOGEN_MAX_STATE_BYTES"),
            ):
                if agent_options.get(option) is None:
                    agent_options[option] = getattr(settings, setting, None) or None
        self._init_options(agent_options)

    # -- helpers -----------------------------------------------------------------------

    def _cursor(self) -> Any:
        return connections[self.alias].cursor()

    def _pg_run(self, sql: str, params: Sequence[Any], *, fetch: bool) -> Any:
        """Run one hot statement on PostgreSQL, prepared; its rows (``fetch``) or row count.

        Django's psycopg backend binds parameters client-side and never prepares; on the
        checkpoint path, quoting parameters and planning the statement were most of the
        client's and much of the server's time. This runs the statement on Django's own
        connection (its transactions, thread checks, error translation and query
        logging still apply) through a server-binding psycopg cursor that prepares:
        psycopg prepares each statement text once per connection, then sends only the
        parameters. ``OPTIONS={"prepare_threshold": None}`` set explicitly on the
        database (e.g. behind a pooler that cannot keep prepared statements) turns the
        preparing off; so does query logging (``DEBUG``), which needs the SQL text.
        """
        connection = connections[self.alias]
        if connection.queries_logged:
            # DEBUG or a query capture: Django logs a server-bound statement's SQL as
            # None, so take its own cursor (client-side binding) and log the full text.
            cursor = connection.cursor()
        else:
            connection.ensure_connection()
            with connection.wrap_database_errors:
                raw = _server_cursor(connection)
            cursor = connection._prepare_cursor(raw)
        with cursor as cur:
            cur.execute(sql, params)
            return cur.fetchall() if fetch else cur.rowcount

    def _time(self, value: Any) -> datetime:
        if isinstance(value, datetime):
            return value if value.tzinfo else value.replace(tzinfo=UTC)
        return datetime.fromisoformat(value).replace(tzinfo=UTC)

    def _db_time(self, value: datetime) -> Any:
        if self.vendor == "sqlite":
            return value.astimezone(UTC).replace(tzinfo=None).isoformat(" ")
        return value

    # -- leases ------------------------------------------------------------------------

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
        connection = connections[self.alias]
        relaxed = connection.get_autocommit() and not connection.in_atomic_block
        if self.vendor == "postgresql":
            return self._pg_run(_relaxed_pg(sql) if relaxed else sql, params, fetch=True)  # type: ignore[no-any-return]
        raw = self._raw_sqlite()
        if raw is None or not relaxed:
            with self._cursor() as cur:
                cur.execute(sql, params)
                # fetchall: SQLite finishes (and commits) the statement only when every
                # row has been read.
                return cur.fetchall()  # type: ignore[no-any-return]
        with connection.wrap_database_errors:
            (level,) = raw.execute("PRAGMA synchronous").fetchone()
            if level > 1:  # FULL or EXTRA: in WAL mode NORMAL skips this commit's fsync
                raw.execute("PRAGMA synchronous = NORMAL")
            try:
                return raw.execute(_qmark(sql), params).fetchall()  # type: ignore[no-any-return]
            finally:
                if level > 1:
                    raw.execute(f"PRAGMA synchronous = {int(level)}")

    def _raw_sqlite(self) -> Any:
        """Django's sqlite3 connection for the hot path, or None when Django must see
        the statements (query logging: ``DEBUG`` or a query capture)."""
        connection = connections[self.alias]
        if connection.queries_logged:
            return None
        connection.ensure_connection()
        return connection.connection

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

    # -- writes ------------------------------------------------------------------------

    def write(self, writes: Sequence[CheckpointWrite], *, lease_id: str | None) -> None:
        self._write(writes, lease_id, release=False)

    def write_and_release(self, writes: Sequence[CheckpointWrite], *, lease_id: str) -> None:
        # The lease is cleared by the same UPDATE that moves the head: no separate
        # statement, no separate commit. (A run writes one thread; a batch over several
        # takes the generic path.)
        if len({w.checkpoint.thread_id for w in writes}) != 1:
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
        audits = [w.audit for w in writes if w.audit is not None]
        with self._write_errors(writes, "checkpoint write"):
            if audits:
                # A person's action: its audit event commits with its checkpoint.
                with transaction.atomic(using=self.alias):
                    self._write_groups(by_thread, lease_id, release)
                    self._insert_audit(audits)
                return
            if self.vendor == "postgresql" and len(by_thread) == 1:
                ((thread_id, group),) = by_thread.items()
                if not self._write_pg(thread_id, group, lease_id, release):
                    self._refused(thread_id, group[0].after, lease_id)
                return
            connection = connections[self.alias]
            if (
                self.vendor == "sqlite"
                and not connection.in_atomic_block
                and connection.get_autocommit()
            ):
                self._write_sqlite(by_thread, lease_id, release)
                return
            with transaction.atomic(using=self.alias):
                self._write_groups(by_thread, lease_id, release)

    def _write_sqlite(
        self,
        by_thread: dict[str, list[CheckpointWrite]],
        lease_id: str | None,
        release: bool,
    ) -> None:
        """One ``BEGIN IMMEDIATE … COMMIT`` on Django's SQLite connection (autocommit).

        Django's ``atomic()`` costs more Python per write than the statements do (it
        switches autocommit off and on and keeps savepoint state); outside an atomic
        block the connection is in autocommit, so an explicit transaction on the same
        cursor is all the write needs. ``IMMEDIATE`` takes the write lock up front, so
        two writers queue on the busy timeout instead of failing at the first write.
        """
        refused: tuple[str, int] | None = None
        connection = connections[self.alias]
        raw = self._raw_sqlite()
        with (
            connection.wrap_database_errors,
            _SqliteCursor(raw.cursor()) if raw is not None else self._cursor() as cur,
        ):
            cur.execute("BEGIN IMMEDIATE")
            try:
                for thread_id, group in by_thread.items():
                    if not self._write_sql(thread_id, group, lease_id, release, cur):
                        refused = (thread_id, group[0].after)
                        break
            except BaseException:
                # SQLite rolls some failures back by itself: only end a live transaction.
                if connection.connection.in_transaction:
                    cur.execute("ROLLBACK")
                raise
            cur.execute("ROLLBACK" if refused else "COMMIT")
        if refused is not None:
            self._refused(*refused, lease_id)

    def _write_groups(
        self,
        by_thread: dict[str, list[CheckpointWrite]],
        lease_id: str | None,
        release: bool = False,
    ) -> None:
        for thread_id, group in by_thread.items():
            if not self._write_sql(thread_id, group, lease_id, release):
                self._refused(thread_id, group[0].after, lease_id)

    @contextmanager
    def _write_errors(self, writes: Sequence[CheckpointWrite], what: str) -> Iterator[None]:
        """Turn the database's refusals of a write into StorageError (nothing written)."""
        thread_id = writes[0].checkpoint.thread_id if writes else None
        try:
            yield
        except IntegrityError as exc:
            raise StorageError(
                f"thread {thread_id!r} already has a checkpoint with that version: "
                "another write got there first.",
                thread_id=thread_id,
            ) from exc
        except DatabaseError as exc:
            connections[self.alias].close_if_unusable_or_obsolete()
            raise StorageError(
                f"the database refused the {what} ({exc}); nothing was written.",
                thread_id=thread_id,
            ) from exc

    def _head_params(self, group: Sequence[CheckpointWrite]) -> list[Any]:
        last = group[-1].checkpoint
        return [
            last.version,
            last.id,
            last.status,
            self._db_time(last.created_at),
        ]

    def _checkpoint_rows(self, group: Sequence[CheckpointWrite]) -> list[list[Any]]:
        return [
            [
                w.checkpoint.id,
                w.checkpoint.thread_id,
                w.checkpoint.version,
                w.checkpoint.run_id,
                w.checkpoint.source,
                w.checkpoint.status,
                w.checkpoint.parent_id,
                self._db_time(w.checkpoint.created_at),
                self._encode_body(w.checkpoint),
            ]
            for w in group
        ]

    def _value_rows(self, group: Sequence[CheckpointWrite]) -> list[list[Any]]:
        return [
            [w.checkpoint.thread_id, key, version, kind, prev, self._seal(data)]
            for w in group
            for key, version, kind, data, prev in value_rows_for(w)
        ]

    def _write_sql(
        self,
        thread_id: str,
        group: Sequence[CheckpointWrite],
        lease_id: str | None,
        release: bool = False,
        cursor: Any = None,
    ) -> bool:
        with contextlib.nullcontext(cursor) if cursor is not None else self._cursor() as cur:
            cur.execute(
                "UPDATE criogen_thread SET head_version = %s, head_id = %s, head_status = %s,"  # noqa: S608
                f" updated_at = %s{_RELEASE if release else ''} WHERE id = %s"
                " AND head_version = %s AND (lease_id = %s OR %s IS NULL)",
                [*self._head_params(group), thread_id, group[0].after, lease_id, lease_id],
            )
            if cur.rowcount != 1:
                return False
            # One multi-row INSERT per table: executemany's per-row round trips through
            # Django's wrapper cost more than building the VALUES list.
            _insert_rows(
                cur,
                "INSERT INTO criogen_checkpoint (id, thread_id, version, run_id, source, status,"
                " parent_id, created_at, body) VALUES ",
                self._checkpoint_rows(group),
            )
            _insert_rows(
                cur,
                "INSERT INTO criogen_value (thread_id, state_key, version, kind, prev, data)"
                " VALUES ",
                self._value_rows(group),
            )
        return True

    def _write_pg(
        self,
        thread_id: str,
        group: Sequence[CheckpointWrite],
        lease_id: str | None,
        release: bool = False,
    ) -> bool:
        # One statement, so one round trip and (in autocommit) one commit. The inserts
        # read from the UPDATE's RETURNING: when the head moved or the lease was lost
        # the UPDATE matches nothing and nothing is inserted. Prepared (see _pg_run):
        # the SQL text depends only on the batch's shape, so a run's statements reuse
        # a handful of plans.
        checkpoints = self._checkpoint_rows(group)
        values = self._value_rows(group)
        head = (
            "WITH head AS (UPDATE criogen_thread SET head_version = %s, head_id = %s,"  # noqa: S608
            f" head_status = %s, updated_at = %s{_RELEASE if release else ''}"
            " WHERE id = %s AND head_version = %s"
            " AND (lease_id = %s OR %s::varchar IS NULL) RETURNING id),"
        )
        params: list[Any] = [
            *self._head_params(group),
            thread_id,
            group[0].after,
            lease_id,
            lease_id,
        ]
        if len(checkpoints) == 1 and len(values) <= _SCALAR_VALUE_ROWS:
            # The usual single checkpoint: scalar parameters. Turning them into 15
            # arrays cost more client CPU than the statement's execution.
            sql = head + _CP_INSERT + f" SELECT {_CP_ROW} FROM head)"  # noqa: S608
            params += checkpoints[0]
            if values:
                rows = ", ".join([_VALUE_ROW] * len(values))
                sql += f", vals AS ({_VALUE_INSERT} SELECT v.* FROM head, (VALUES {rows}) AS v)"  # noqa: S608
                for row in values:
                    params += row
        else:
            cps = list(zip(*checkpoints, strict=True))
            vals = list(zip(*values, strict=True)) if values else [[]] * 6
            sql = (
                head + _CP_INSERT + " SELECT c.* FROM head, unnest(%s::varchar[],"  # noqa: S608
                " %s::varchar[], %s::int[], %s::varchar[], %s::varchar[], %s::varchar[],"
                " %s::varchar[], %s::timestamptz[], %s::text[]) AS c),"
                f" vals AS ({_VALUE_INSERT} SELECT v.* FROM head, unnest(%s::varchar[],"
                " %s::varchar[], %s::int[], %s::varchar[], %s::int[], %s::text[]) AS v)"
            )
            params += [list(col) for col in cps]
            params += [list(col) for col in vals]
        rows = self._pg_run(sql + " SELECT count(*) FROM head", params, fetch=True)  # noqa: S608
        return bool(rows[0][0])

    def _refused(self, thread_id: str, after: int, lease_id: str | None) -> None:
        """Raise the error that explains why a write matched no thread row."""
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

    # -- encoding (encryption at rest hooks in here) -------------------------------------

    def _seal(self, text: str) -> str:
        return self.cipher.seal(text) if self.cipher is not None else text

    def _open(self, text: str) -> str:
        return self.cipher.open(text) if self.cipher is not None else open_without_key(text)

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

    # -- reads -------------------------------------------------------------------------

    def _bare(self, thread_id: str, row: Sequence[Any]) -> Checkpoint:
        """A checkpoint row (``_CHECKPOINT_COLUMNS``) without its state."""
        cid, version, run_id, source, status, parent_id, created_at, body = row
        data = json.loads(self._open(body))
        return Checkpoint(
            id=CheckpointId(cid),
            thread_id=ThreadId(thread_id),
            run_id=RunId(run_id) if run_id else None,
            version=version,
            source=source,
            status=status,
            state={},
            next=tuple(data["next"]),
            interrupts=tuple(data["interrupts"]),
            tasks=data["tasks"],
            error=data["error"],
            parent_id=CheckpointId(parent_id) if parent_id else None,
            created_at=self._time(created_at),
            metadata=data["metadata"],
            value_versions=data["values"],
            value_bases=data.get("bases", {}),
        )

    def _checkpoints(self, thread_id: str, rows: Iterable[Sequence[Any]]) -> list[Checkpoint]:
        bare = [self._bare(thread_id, row) for row in rows]
        if not bare:
            return bare
        values = self._values(bare).get(thread_id, {})
        return [replace(cp, state=build_state(cp.value_versions, values)) for cp in bare]

    def _values(
        self, checkpoints: Sequence[Checkpoint]
    ) -> dict[str, dict[tuple[str, int], ValueRow]]:
        """The value rows the checkpoints' states are built from, by thread, in one query.

        Each key of each thread is one index range scan on ``(thread, key, version)``:
        from the start of the rows that build its value (``value_bases``) to its tip. A
        range may also hold rows of another line of the thread (a fork); ``build_state``
        follows the ``prev`` pointers and skips them.
        """
        ranges: dict[tuple[str, str], tuple[int, int]] = {}
        for cp in checkpoints:
            for key, version in cp.value_versions.items():
                base = cp.value_bases.get(key, 0)
                low, high = ranges.get((cp.thread_id, key), (base, version))
                ranges[(cp.thread_id, key)] = (min(low, base), max(high, version))
        if not ranges:
            return {}
        # Only placeholders are interpolated into the SQL text. The thread id is in each
        # term so that every term is an index range of its own (SQLite's OR optimisation
        # and PostgreSQL's BitmapOr both need that).
        term = "(thread_id = %s AND state_key = %s AND version BETWEEN %s AND %s)"
        sql = (
            "SELECT thread_id, state_key, version, kind, data, prev FROM criogen_value"  # noqa: S608
            " WHERE " + " OR ".join([term] * len(ranges))
        )
        params: list[Any] = []
        for (thread_id, key), (low, high) in sorted(ranges.items()):
            params += [thread_id, key, low, high]
        out: dict[str, dict[tuple[str, int], ValueRow]] = {}
        with self._cursor() as cur:
            cur.execute(sql, params)
            for thread_id, key, version, kind, data, prev in cur.fetchall():
                out.setdefault(thread_id, {})[(key, version)] = ValueRow(
                    kind, self._open(data), prev
                )
        return out

    def heads(self, thread_ids: Sequence[str]) -> dict[str, Checkpoint]:
        # Two queries per 100 threads (the head rows through the thread row's
        # head_version, then every head's value rows), not two per thread: a page of
        # search results needs twenty heads.
        found: dict[str, Checkpoint] = {}
        columns = ", ".join(f"c.{c}" for c in _CHECKPOINT_COLUMNS.split(", "))
        for start in range(0, len(thread_ids), _HEADS_CHUNK):
            chunk = list(thread_ids[start : start + _HEADS_CHUNK])
            marks = ", ".join(["%s"] * len(chunk))
            with self._cursor() as cur:
                cur.execute(
                    f"SELECT c.thread_id, {columns} FROM criogen_thread t"  # noqa: S608
                    " JOIN criogen_checkpoint c ON c.thread_id = t.id"
                    f" AND c.version = t.head_version WHERE t.id IN ({marks})",
                    chunk,
                )
                bare = [self._bare(row[0], row[1:]) for row in cur.fetchall()]
            values = self._values(bare)
            for cp in bare:
                state = build_state(cp.value_versions, values.get(cp.thread_id, {}))
                found[cp.thread_id] = replace(cp, state=state)
        return found

    def head(self, thread_id: str) -> Checkpoint | None:
        with self._cursor() as cur:
            cur.execute(
                f"SELECT {_CHECKPOINT_COLUMNS} FROM criogen_checkpoint WHERE thread_id = %s"  # noqa: S608
                " ORDER BY version DESC LIMIT 1",
                [thread_id],
            )
            rows = cur.fetchall()
        found = self._checkpoints(thread_id, rows)
        return found[0] if found else None

    def get_checkpoint(self, thread_id: str, checkpoint_id: str) -> Checkpoint:
        with self._cursor() as cur:
            cur.execute(
                f"SELECT {_CHECKPOINT_COLUMNS} FROM criogen_checkpoint"  # noqa: S608
                " WHERE thread_id = %s AND id = %s",
                [thread_id, str(checkpoint_id)],
            )
            rows = cur.fetchall()
        found = self._checkpoints(thread_id, rows)
        if not found:
            raise CheckpointNotFound(
                f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}; "
                "list them with history().",
                thread_id=thread_id,
                checkpoint_id=str(checkpoint_id),
            )
        return found[0]

    def history(
        self, thread_id: str, *, limit: int | None = None, before: int | None = None
    ) -> list[Checkpoint]:
        sql = f"SELECT {_CHECKPOINT_COLUMNS} FROM criogen_checkpoint WHERE thread_id = %s"  # noqa: S608
        params: list[Any] = [thread_id]
        if before is not None:
            sql += " AND version < %s"
            params.append(before)
        sql += " ORDER BY version DESC"
        if limit is not None:
            sql += " LIMIT %s"
            params.append(limit)
        with self._cursor() as cur:
            cur.execute(sql, params)
            rows = cur.fetchall()
        return self._checkpoints(thread_id, rows)

    def delete_thread(self, thread_id: str, *, audit: AuditRecord | None = None) -> bool:
        from criogen.storage.models import Thread

        with transaction.atomic(using=self.alias):
            deleted, _ = Thread.objects.using(self.alias).filter(id=thread_id).delete()
            if deleted and audit is not None:
                self._insert_audit([audit])
        return deleted > 0

    def thread_ids(self, *, limit: int = 100, offset: int = 0) -> list[str]:
        from criogen.storage.models import Thread

        qs = Thread.objects.using(self.alias).order_by("-updated_at", "id")
        return list(qs.values_list("id", flat=True)[offset : offset + limit])

    def close(self) -> None:
        connections[self.alias].close()

    # -- agents: decisions, effect ledger, memory, documents, audit ----------------------
    # Not the hot path: the ORM is fine here. User data goes through _seal/_open.

    def _json_in(self, value: Any) -> str:
        return self._seal(encode(value))

    def _json_out(self, text: str | None) -> Any:
        return None if text in (None, "") else json.loads(self._open(text))  # type: ignore[arg-type]

    def write_decisions(
        self,
        writes: Sequence[CheckpointWrite],
        decisions: Sequence[DecisionRecord],
        *,
        lease_id: str | None,
    ) -> None:
        from criogen.storage.models import Decision

        rows = [
            Decision(
                thread_id=d.thread_id,
                version=d.version,
                checkpoint_id=d.checkpoint_id,
                call_id=d.call_id,
                tool=d.tool,
                digest=d.digest,
                decision=d.decision,
                args="" if d.args is None else self._json_in(d.args),
                message="" if d.message is None else self._seal(d.message),
                actor=d.actor,
                decided_at=d.decided_at,
            )
            for d in decisions
        ]
        # One transaction for the decisions and the checkpoint that resumes the run
        # (also on PostgreSQL, where write() would use its single-statement path).
        with self._write_errors(writes, "decision write"), transaction.atomic(using=self.alias):
            try:
                with transaction.atomic(using=self.alias):
                    Decision.objects.using(self.alias).bulk_create(rows)
            except IntegrityError as exc:
                # (thread, version, call id) is unique: another decision got there first.
                self._already_decided(decisions, exc)
            self._write_groups(_by_thread(writes), lease_id)
            self._insert_audit([w.audit for w in writes if w.audit is not None])

    def _already_decided(self, decisions: Sequence[DecisionRecord], exc: Exception) -> NoReturn:
        first = decisions[0]
        found = self.decisions(first.thread_id, version=first.version)
        actor = found[0].actor if found else None
        when = found[0].decided_at.isoformat() if found else None
        raise AlreadyDecided(
            f"the suspension v{first.version} of thread {first.thread_id!r} was already "
            f"decided by {actor or 'someone'} at {when}.",
            thread_id=first.thread_id,
            decided_by=actor,
            decided_at=when,
        ) from exc

    def decisions(self, thread_id: str, *, version: int | None = None) -> list[DecisionRecord]:
        from criogen.storage.models import Decision

        qs = Decision.objects.using(self.alias).filter(thread_id=thread_id)
        if version is not None:
            qs = qs.filter(version=version)
        return [
            DecisionRecord(
                thread_id=d.thread_id,
                version=d.version,
                checkpoint_id=d.checkpoint_id,
                call_id=d.call_id,
                tool=d.tool,
                digest=d.digest,
                decision=d.decision,
                args=self._json_out(d.args),
                message=self._open(d.message) if d.message else None,
                actor=d.actor,
                decided_at=d.decided_at,
            )
            for d in qs.order_by("-decided_at", "-version", "-id")
        ]

    def _effect(self, e: Any) -> EffectRecord:
        return EffectRecord(
            key=e.key,
            thread_id=e.thread_id,
            checkpoint_id=e.checkpoint_id,
            call_id=e.call_id,
            tool=e.tool,
            args=self._json_out(e.args),
            status=e.status,
            result=self._open(e.result) if e.result is not None else None,
            attempts=e.attempts,
            created_at=e.created_at,
            finished_at=e.finished_at,
        )

    def begin_effect(self, effect: EffectRecord) -> EffectRecord | None:
        from criogen.storage.models import Effect

        try:
            with transaction.atomic(using=self.alias):
                Effect.objects.using(self.alias).create(
                    key=effect.key,
                    thread_id=effect.thread_id,
                    checkpoint_id=effect.checkpoint_id,
                    call_id=effect.call_id,
                    tool=effect.tool,
                    args=self._json_in(effect.args),
                    status=effect.status,
                    attempts=effect.attempts,
                    created_at=effect.created_at,
                )
        except IntegrityError:
            return self.get_effect(effect.key)
        return None

    def retry_effect(self, key: str) -> None:
        from django.db.models import F

        from criogen.storage.models import Effect

        Effect.objects.using(self.alias).filter(key=key).update(attempts=F("attempts") + 1)

    def finish_effect(self, key: str, *, status: str, result: str) -> None:
        from django.utils import timezone

        from criogen.storage.models import Effect

        Effect.objects.using(self.alias).filter(key=key).update(
            status=status, result=self._seal(result), finished_at=timezone.now()
        )

    def get_effect(self, key: str) -> EffectRecord | None:
        from criogen.storage.models import Effect

        found = Effect.objects.using(self.alias).filter(key=key).first()
        return self._effect(found) if found else None

    def effects(self, thread_id: str) -> list[EffectRecord]:
        from criogen.storage.models import Effect

        qs = Effect.objects.using(self.alias).filter(thread_id=thread_id)
        return [self._effect(e) for e in qs.order_by("created_at", "key")]

    # A fact's subject (a person's id) is sealed like its text and looked up through
    # subject_digest, an HMAC under keys derived from the encryption keys; see
    # MemoryFact and criogen.engine.crypto.lookup_keys.

    def _fact(self, f: Any) -> FactRecord:
        return FactRecord(
            f.id,
            f.namespace,
            self._open(f.subject),
            self._open(f.text),
            f.created_at,
            f.updated_at,
        )

    def _subject_keys(self) -> tuple[Any, ...]:
        from criogen.engine.crypto import lookup_keys
        from criogen.storage.models.agents import SUBJECT_DIGEST_PURPOSE

        return lookup_keys(self.cipher, SUBJECT_DIGEST_PURPOSE)

    def add_fact(self, namespace: str, subject: str, text: str) -> FactRecord:
        from criogen.storage.models import MemoryFact

        row = MemoryFact.objects.using(self.alias).create(
            id=str(uuid.uuid4()),
            namespace=namespace,
            subject=self._seal(subject),
            subject_digest=self._subject_keys()[0].digest(subject),
            text=self._seal(text),
        )
        return FactRecord(row.id, namespace, subject, text, row.created_at, row.updated_at)

    def facts(self, namespace: str, subject: str) -> list[FactRecord]:
        from criogen.storage.models import MemoryFact

        # Digests under every configured key (and the no-key one) find rows written
        # before a rotation or before encryption was on; rows under a key we lack come
        # back too and fail to open (EncryptionKeyInvalid) instead of going missing.
        qs = MemoryFact.objects.using(self.alias).filter(
            MemoryFact.about(namespace, subject, self._subject_keys())
        )
        return [self._fact(f) for f in qs.order_by("created_at", "id")]

    def get_fact(self, fact_id: str) -> FactRecord | None:
        from criogen.storage.models import MemoryFact

        found = MemoryFact.objects.using(self.alias).filter(id=fact_id).first()
        return self._fact(found) if found else None

    def update_fact(self, fact_id: str, text: str) -> FactRecord | None:
        from django.utils import timezone

        from criogen.storage.models import MemoryFact

        with transaction.atomic(using=self.alias):
            row = (
                MemoryFact.objects.using(self.alias).select_for_update().filter(id=fact_id).first()
            )
            if row is None:
                return None
            # Opened first: a wrong key raises before anything is written. The subject
            # is sealed and digested again under the first key, so an edited fact no
            # longer needs the old key of a rotation.
            subject = self._open(row.subject)
            row.subject = self._seal(subject)
            row.subject_digest = self._subject_keys()[0].digest(subject)
            row.text = self._seal(text)
            row.updated_at = timezone.now()
            row.save(update_fields=["subject", "subject_digest", "text", "updated_at"])
        return FactRecord(row.id, row.namespace, subject, text, row.created_at, row.updated_at)

    def delete_fact(self, fact_id: str) -> bool:
        from criogen.storage.models import MemoryFact

        deleted, _ = MemoryFact.objects.using(self.alias).filter(id=fact_id).delete()
        return deleted > 0

    def _document(self, d: Any, score: float | None = None) -> DocumentRecord:
        return DocumentRecord(
            d.collection,
            d.doc_id,
            self._open(d.text),
            self._json_out(d.metadata) or {},
            d.created_at,
            score,
        )

    def put_document(
        self, collection: str, doc_id: str, text: str, metadata: Mapping[str, Any]
    ) -> DocumentRecord:
        from criogen.storage.models import Document

        row, _ = Document.objects.using(self.alias).update_or_create(
            collection=collection,
            doc_id=doc_id,
            defaults={"text": self._seal(text), "metadata": self._json_in(dict(metadata))},
        )
        return DocumentRecord(collection, doc_id, text, dict(metadata), row.created_at)

    def get_document(self, collection: str, doc_id: str) -> DocumentRecord | None:
        from criogen.storage.models import Document

        found = Document.objects.using(self.alias).filter(collection=collection, doc_id=doc_id)
        row = found.first()
        return self._document(row) if row else None

    def delete_document(self, collection: str, doc_id: str) -> bool:
        from criogen.storage.models import Document

        qs = Document.objects.using(self.alias).filter(collection=collection, doc_id=doc_id)
        deleted, _ = qs.delete()
        return deleted > 0

    def documents(
        self, collection: str, *, limit: int = 100, offset: int = 0
    ) -> list[DocumentRecord]:
        from criogen.storage.models import Document

        qs = Document.objects.using(self.alias).filter(collection=collection)
        return [self._document(d) for d in qs.order_by("created_at", "id")[offset : offset + limit]]

    def search_documents(
        self, collection: str, query: str, *, limit: int = 5
    ) -> list[DocumentRecord]:
        from criogen.engine.memory_store import rank_by_words

        if self.cipher is not None:
            # The database cannot index ciphertext: decrypt and rank here.
            return rank_by_words(self.documents(collection, limit=1_000_000), query, limit)
        words = re.findall(r"\w+", query)
        if not words:
            return []
        if self.vendor == "sqlite":
            # Each word quoted: FTS5 query syntax (AND, NEAR, *, ^) in user input is text.
            match = " ".join('"' + w.replace('"', "") + '"' for w in words)
            sql = (
                "SELECT d.collection, d.doc_id, d.text, d.metadata, d.created_at,"
                " bm25(criogen_document_fts) FROM criogen_document_fts"
                " JOIN criogen_document d ON d.id = criogen_document_fts.rowid"
                " WHERE criogen_document_fts MATCH %s AND d.collection = %s"
                " ORDER BY bm25(criogen_document_fts), d.id LIMIT %s"
            )
            params: list[Any] = [match, collection, limit]
        else:
            sql = (
                "SELECT collection, doc_id, text, metadata, created_at,"
                " ts_rank(to_tsvector('english', text), q)"
                " FROM criogen_document, websearch_to_tsquery('english', %s) q"
                " WHERE collection = %s AND to_tsvector('english', text) @@ q"
                " ORDER BY 6 DESC, id LIMIT %s"
            )
            params = [" ".join(words), collection, limit]
        with self._cursor() as cur:
            cur.execute(sql, params)
            rows = cur.fetchall()
        return [
            DocumentRecord(
                c,
                doc_id,
                self._open(text),
                self._json_out(meta) or {},
                self._time(created),
                # bm25 is lower-is-better and negative; flip it so higher is better.
                -float(rank) if self.vendor == "sqlite" else float(rank),
            )
            for c, doc_id, text, meta, created, rank in rows
        ]

    def record_audit(
        self,
        action: str,
        *,
        thread_id: str | None = None,
        actor: str | None = None,
        details: Mapping[str, Any] | None = None,
        door: str = "",
        before: str | None = None,
        after: str | None = None,
    ) -> None:
        self._insert_audit(
            [
                AuditRecord(
                    action,
                    thread_id,
                    actor,
                    dict(details or {}),
                    door=door,
                    before=before,
                    after=after,
                )
            ]
        )

    def _insert_audit(self, events: Sequence[AuditRecord]) -> None:
        """Insert audit events (inside the caller's transaction, when it has one)."""
        if not self.audit_enabled or not events:
            return
        from criogen.storage.models import AuditEvent

        AuditEvent.objects.using(self.alias).bulk_create(
            [
                AuditEvent(
                    created_at=e.created_at,
                    action=e.action,
                    thread_id=e.thread_id or "",
                    actor=e.actor,
                    door=e.door,
                    before=e.before or "",
                    after=e.after or "",
                    details=self._json_in(dict(e.details)),
                )
                for e in events
            ]
        )

    def audit_events(self, *, thread_id: str | None = None, limit: int = 100) -> list[AuditRecord]:
        from criogen.storage.models import AuditEvent

        qs = AuditEvent.objects.using(self.alias).all()
        if thread_id is not None:
            qs = qs.filter(thread_id=thread_id)
        return [
            AuditRecord(
                e.action,
                e.thread_id or None,
                e.actor,
                self._json_out(e.details) or {},
                e.created_at,
                door=e.door,
                before=e.before or None,
                after=e.after or None,
            )
            for e in qs.order_by("-created_at", "-id")[:limit]
        ]


_HEADS_CHUNK = 100
"""Threads per query in ``heads``: bound parameters stay well under SQLite's limit."""
_INSERT_CHUNK = 500
"""Rows per multi-row INSERT: well under SQLite's 32,766 bound parameters."""


def _insert_rows(cur: Any, head: str, rows: Sequence[Sequence[Any]]) -> None:
    """``head`` followed by one ``VALUES`` tuple per row, in chunks of bounded size."""
    for start in range(0, len(rows), _INSERT_CHUNK):
        chunk = rows[start : start + _INSERT_CHUNK]
        row = "(" + ", ".join(["%s"] * len(chunk[0])) + ")"
        # Only placeholders are added to the SQL text.
        cur.execute(head + ", ".join([row] * len(chunk)), [p for r in chunk for p in r])


_cursor_classes: dict[bool, Any] = {}
_PREPARE_ONLY_WHEN_ASKED = 2**31 - 1


def _server_cursor(connection: Any) -> Any:
    """A server-binding psycopg cursor on Django's connection, preparing by default."""
    options = connection.settings_dict.get("OPTIONS") or {}
    prepare = not ("prepare_threshold" in options and options["prepare_threshold"] is None)
    cls = _cursor_classes.get(prepare)
    if cls is None:
        import psycopg

        class PreparingCursor(psycopg.Cursor):  # type: ignore[type-arg]
            def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
                kwargs.setdefault("prepare", prepare)
                return super().execute(query, params, **kwargs)

        cls = _cursor_classes[prepare] = PreparingCursor
    raw = connection.connection
    if prepare and raw.prepare_threshold is None:
        # Django turns psycopg's preparing off (prepare_threshold None), and then even
        # prepare=True does nothing. A threshold no statement reaches prepares only
        # what asks for it: these statements (Django's own cursors bind client-side
        # and never prepare).
        raw.prepare_threshold = _PREPARE_ONLY_WHEN_ASKED
    return cls(raw)


def _by_thread(writes: Sequence[CheckpointWrite]) -> dict[str, list[CheckpointWrite]]:
    """The writes grouped by thread, each group checked to follow on without a gap."""
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
