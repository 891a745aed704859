"""Storage on the Django ORM's tables: SQLite and PostgreSQL.

The models (:mod:`criogen.storage.models`) own the schema; this module reads and
writes checkpoints with raw SQL through Django's own connection, because that path
runs once per step and the ORM's per-row cost would dominate it. Each checkpoint
write is one transaction: on PostgreSQL one statement (the head update and both
inserts in data-modifying CTEs, so one round trip and one commit); on SQLite a short
``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from django.db import DatabaseError, IntegrityError, connections, transaction

from criogen.engine.checkpoints import (
    Checkpoint,
    CheckpointId,
    CheckpointWrite,
    RunId,
    ThreadId,
)
from criogen.engine.errors import CheckpointNotFound, LeaseLost, StorageError
from criogen.storage.base import Storage, ThreadInfo, ValueRow, build_state, encode, value_rows_for
from criogen.storage.setup import database_alias, redact

__all__ = ["OrmStorage"]

_CHECKPOINT_COLUMNS = "id, version, run_id, source, status, parent_id, created_at, body"


class OrmStorage(Storage):
    """Threads and checkpoints in the Django database ``alias`` (SQLite or PostgreSQL)."""

    supports_background_writes = True

    def __init__(self, url: str | None = None, **options: Any) -> None:
        url = url or "django://default"
        self.alias = database_alias(url)
        self.url = redact(url)
        self.vendor = connections[self.alias].vendor

    # -- helpers -----------------------------------------------------------------------

    def _cursor(self) -> Any:
        return connections[self.alias].cursor()

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
        now = time.time()
        stamp = self._db_time(datetime.now(UTC))
        # One statement: create the thread, or take it if no live lease holds it.
        with self._cursor() as cur:
            cur.execute(
                "INSERT INTO criogen_thread (id, created_at, updated_at, metadata, head_version,"
                " head_id, head_status, lease_id, lease_expires)"
                " VALUES (%s, %s, %s, '{}', 0, '', '', %s, %s)"
                " ON CONFLICT (id) DO UPDATE SET lease_id = excluded.lease_id,"
                " lease_expires = excluded.lease_expires"
                " WHERE criogen_thread.lease_id IS NULL OR criogen_thread.lease_id = %s"
                " OR criogen_thread.lease_expires < %s",
                [thread_id, stamp, stamp, lease_id, now + seconds, lease_id, now],
            )
            return cur.rowcount == 1

    def renew(self, thread_id: str, lease_id: str, *, seconds: float) -> bool:
        with self._cursor() as cur:
            cur.execute(
                "UPDATE criogen_thread SET lease_expires = %s WHERE id = %s AND lease_id = %s",
                [time.time() + seconds, thread_id, lease_id],
            )
            return cur.rowcount == 1

    def release(self, thread_id: str, lease_id: str) -> None:
        with self._cursor() as cur:
            cur.execute(
                "UPDATE criogen_thread SET lease_id = NULL, lease_expires = 0"
                " WHERE id = %s AND lease_id = %s",
                [thread_id, lease_id],
            )

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
        if not writes:
            return
        by_thread: dict[str, list[CheckpointWrite]] = {}
        for w in writes:
            by_thread.setdefault(w.checkpoint.thread_id, []).append(w)
        try:
            if self.vendor == "postgresql" and len(by_thread) == 1:
                ((thread_id, group),) = by_thread.items()
                if not self._write_pg(thread_id, group, lease_id):
                    self._refused(thread_id, group[0].after, lease_id)
                return
            with transaction.atomic(using=self.alias):
                for thread_id, group in by_thread.items():
                    if not self._write_sql(thread_id, group, lease_id):
                        self._refused(thread_id, group[0].after, lease_id)
        except IntegrityError as exc:
            thread_id = writes[0].checkpoint.thread_id
            raise StorageError(
                f"thread {thread_id!r} already has a checkpoint with that version: "
                "another write got there first.",
                thread_id=thread_id,
            ) from exc
        except DatabaseError as exc:
            connections[self.alias].close_if_unusable_or_obsolete()
            raise StorageError(
                f"the database refused the checkpoint write ({exc}); nothing was written.",
                thread_id=writes[0].checkpoint.thread_id,
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
        self, thread_id: str, group: Sequence[CheckpointWrite], lease_id: str | None
    ) -> bool:
        with self._cursor() as cur:
            cur.execute(
                "UPDATE criogen_thread SET head_version = %s, head_id = %s, head_status = %s,"
                " updated_at = %s WHERE id = %s AND head_version = %s"
                " AND (lease_id = %s OR %s IS NULL)",
                [*self._head_params(group), thread_id, group[0].after, lease_id, lease_id],
            )
            if cur.rowcount != 1:
                return False
            cur.executemany(
                "INSERT INTO criogen_checkpoint (id, thread_id, version, run_id, source, status,"
                " parent_id, created_at, body) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                self._checkpoint_rows(group),
            )
            values = self._value_rows(group)
            if values:
                cur.executemany(
                    "INSERT INTO criogen_value (thread_id, state_key, version, kind, prev, data)"
                    " VALUES (%s, %s, %s, %s, %s, %s)",
                    values,
                )
        return True

    def _write_pg(
        self, thread_id: str, group: Sequence[CheckpointWrite], lease_id: str | None
    ) -> bool:
        # One statement, so one round trip and (in autocommit) one commit. The inserts
        # read from the UPDATE's RETURNING: when the head moved or the lease was lost
        # the UPDATE matches nothing and nothing is inserted.
        cps = list(zip(*self._checkpoint_rows(group), strict=True))
        values = self._value_rows(group)
        vals = list(zip(*values, strict=True)) if values else [[]] * 6
        with self._cursor() as cur:
            cur.execute(
                "WITH head AS ("
                " UPDATE criogen_thread SET head_version = %s, head_id = %s, head_status = %s,"
                " updated_at = %s WHERE id = %s AND head_version = %s"
                " AND (lease_id = %s OR %s::varchar IS NULL) RETURNING id),"
                " cps AS (INSERT INTO criogen_checkpoint (id, thread_id, version, run_id, source,"
                " status, parent_id, created_at, body)"
                " SELECT c.* FROM head, unnest(%s::varchar[], %s::varchar[], %s::int[],"
                " %s::varchar[], %s::varchar[], %s::varchar[], %s::varchar[],"
                " %s::timestamptz[], %s::text[]) AS c),"
                " vals AS (INSERT INTO criogen_value (thread_id, state_key, version, kind, prev,"
                " data) SELECT v.* FROM head, unnest(%s::varchar[], %s::varchar[], %s::int[],"
                " %s::varchar[], %s::int[], %s::text[]) AS v)"
                " SELECT count(*) FROM head",
                [
                    *self._head_params(group),
                    thread_id,
                    group[0].after,
                    lease_id,
                    lease_id,
                    *(list(col) for col in cps),
                    *(list(col) for col in vals),
                ],
            )
            return bool(cur.fetchone()[0])

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
        head = row[0] if row else 0
        raise StorageError(
            f"thread {thread_id!r} is at version {head}, not {after}: another write got "
            "there first.",
            thread_id=thread_id,
        )

    # -- encoding (encryption at rest hooks in here) -------------------------------------

    def _seal(self, text: str) -> str:
        return text

    def _open(self, text: str) -> str:
        return text

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
                }
            )
        )

    # -- reads -------------------------------------------------------------------------

    def _checkpoints(self, thread_id: str, rows: Iterable[Sequence[Any]]) -> list[Checkpoint]:
        bare: list[Checkpoint] = []
        for cid, version, run_id, source, status, parent_id, created_at, body in rows:
            data = json.loads(self._open(body))
            bare.append(
                Checkpoint(
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
                )
            )
        if not bare:
            return bare
        seeds = {(key, v) for cp in bare for key, v in cp.value_versions.items()}
        values = self._values(thread_id, seeds)
        return [replace(cp, state=build_state(cp.value_versions, values)) for cp in bare]

    def _values(
        self, thread_id: str, seeds: set[tuple[str, int]]
    ) -> dict[tuple[str, int], ValueRow]:
        if not seeds:
            return {}
        # Follow each appended key's chain back to its start in one recursive query.
        pairs = sorted(seeds)
        placeholders = ", ".join(["(%s, %s)"] * len(pairs))
        # Only placeholders are interpolated into the SQL text.
        sql = (
            f"WITH RECURSIVE seed(k, v) AS (VALUES {placeholders}),"  # noqa: S608
            " chain(k, v) AS (SELECT k, v FROM seed UNION"
            " SELECT x.state_key, x.prev FROM criogen_value x JOIN chain c"
            " ON x.thread_id = %s AND x.state_key = c.k AND x.version = c.v"
            " WHERE x.prev IS NOT NULL)"
            " SELECT x.state_key, x.version, x.kind, x.data, x.prev FROM criogen_value x"
            " JOIN chain c ON x.thread_id = %s AND x.state_key = c.k AND x.version = c.v"
        )
        params: list[Any] = [p for pair in pairs for p in pair]
        with self._cursor() as cur:
            cur.execute(sql, [*params, thread_id, thread_id])
            return {
                (key, version): ValueRow(kind, self._open(data), prev)
                for key, version, kind, data, prev in cur.fetchall()
            }

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

    def delete_thread(self, thread_id: str) -> bool:
        from criogen.storage.models import Thread

        deleted, _ = Thread.objects.using(self.alias).filter(id=thread_id).delete()
        return deleted > 0

    def thread_ids(self, *, limit: int = 100, offset: int = 0) -> list[str]:
        from criogen.storage.models import Thread

        qs = Thread.objects.using(self.alias).order_by("-updated_at", "id")
        return list(qs.values_list("id", flat=True)[offset : offset + limit])

    def close(self) -> None:
        connections[self.alias].close()
