"""Checkpoint reads: a checkpoint's row, then its state built from the value rows it
points at (one index range scan per key), in raw SQL; listing and deleting threads.

The reads the REST API makes on every state and history request (a thread's newest
checkpoints, then their value rows) are prepared on PostgreSQL (:func:`pg_run`), and
:meth:`OrmReads.history_for` checks in the same statement that the caller may see the
thread (bench/NOTES.md, "The read path in one statement").
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import orjson
from django.db import transaction

from criogen.engine.checkpoints import (
    Checkpoint,
    CheckpointId,
    RunId,
    ThreadId,
)
from criogen.engine.errors import CheckpointNotFound
from criogen.engine.store import (
    AuditRecord,
    ValueRow,
    build_state,
)
from criogen.storage.orm.audit import OrmAudit

__all__ = ["OrmReads"]

_CHECKPOINT_COLUMNS = "id, version, run_id, source, status, parent_id, created_at, body"

_DIGITS_ONLY = bytes(0x39 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
"""A ``bytes.translate`` table: every digit becomes ``9``, every other byte a space."""
_LONG_NUMBER = b"9" * 19


def _loads(text: str) -> Any:
    """``json.loads(text)``, parsed by orjson where it gives the same value.

    A history page decodes every state's values and every checkpoint's body: with
    Python's parser that was a fifth of the page's CPU. orjson refuses what Python
    accepts beyond JSON (``NaN``, ``Infinity``, lone surrogates), and reads integers
    past 64 bits as floats: text with a run of 19 digits (found by a byte translation,
    several times faster than a regular expression), and anything orjson refuses, goes
    to Python's parser, so every value is the one ``json.loads`` gives.
    """
    try:
        data = text.encode()
    except UnicodeEncodeError:  # a lone surrogate
        return json.loads(text)
    if _LONG_NUMBER not in data.translate(_DIGITS_ONLY):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


_HEADS_CHUNK = 100
"""Threads per query in ``heads``: bound parameters stay well under SQLite's limit."""


class OrmReads(OrmAudit):
    """Reading checkpoints with their states, listing and deleting threads."""

    def _bare(self, thread_id: str, row: Sequence[Any]) -> Checkpoint:
        """A checkpoint row (``_CHECKPOINT_COLUMNS``) without its state."""
        cid, version, run_id, source, status, parent_id, created_at, body = row
        data = _loads(self._open(body))
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

    def _fetch(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """The rows of a read on the API's hot path: prepared on PostgreSQL."""
        if self.vendor == "postgresql":
            return list(self._pg_run(sql, params, fetch=True))
        with self._cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall())

    def _checkpoints(self, thread_id: str, rows: Iterable[Sequence[Any]]) -> list[Checkpoint]:
        bare = [self._bare(thread_id, row) for row in rows]
        if not bare:
            return bare
        values = self._values(bare).get(thread_id, {})
        for cp in bare:
            # The state dict is this checkpoint's own (made empty by _bare): filled in
            # place rather than through dataclasses.replace, which copies every field
            # (a tenth of a 50-state history page's CPU).
            cp.state.update(build_state(cp.value_versions, values, _loads))
        return bare

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
        for thread_id, key, version, kind, data, prev in self._fetch(sql, params):
            out.setdefault(thread_id, {})[(key, version)] = ValueRow(kind, self._open(data), prev)
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
                cp.state.update(
                    build_state(cp.value_versions, values.get(cp.thread_id, {}), _loads)
                )
                found[cp.thread_id] = cp
        return found

    def head(self, thread_id: str) -> Checkpoint | None:
        found = self.history(thread_id, limit=1)
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
        return self.history_for(thread_id, owner=None, limit=limit, before=before)

    def history_for(
        self,
        thread_id: str,
        *,
        owner: Any,
        limit: int | None = None,
        before: int | None = None,
    ) -> list[Checkpoint]:
        """:meth:`history`, and nothing unless the thread is ``owner``'s (the primary
        key of a user; None: anyone's), checked in the same statement.

        An empty answer does not say why (no such thread, another owner's, or no
        checkpoints in the range): the caller that needs to know asks the thread's row.
        """
        sql = f"SELECT {_CHECKPOINT_COLUMNS} FROM criogen_checkpoint WHERE thread_id = %s"  # noqa: S608
        params: list[Any] = [thread_id]
        if owner is not None:
            # Uncorrelated: PostgreSQL and SQLite evaluate it once, a probe of the
            # thread's primary key, before the checkpoint index's backward scan.
            sql += " AND EXISTS (SELECT 1 FROM criogen_thread WHERE id = %s AND owner_id = %s)"
            params += [thread_id, owner]
        if before is not None:
            sql += " AND version < %s"
            params.append(before)
        sql += " ORDER BY version DESC"
        if limit is not None:
            sql += " LIMIT %s"
            params.append(limit)
        return self._checkpoints(thread_id, self._fetch(sql, params))

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
