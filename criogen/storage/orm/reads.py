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
from criogen.engine.store import AuditRecord
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


class Chains:
    """What :meth:`OrmReads._chain` remembers of the append chains of one page of states."""

    __slots__ = ("seen", "shared")

    def __init__(self, checkpoints: Sequence[Checkpoint]) -> None:
        self.shared: dict[str, set[int]] = {}
        """By key, the versions states of the page point at: remembered when walked (none
        for a page of one state)."""
        if len(checkpoints) > 1:
            for cp in checkpoints:
                for key, version in cp.value_versions.items():
                    self.shared.setdefault(key, set()).add(version)
        self.seen: dict[tuple[str, int], tuple[str | None, list[str], int]] = {}
        """``(key, version)``: the chain's base, its items' list, how many are the row's."""


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
        values = {(row[1], row[2]): row for row in self._value_rows(bare)}
        chains = Chains(bare)
        for cp in bare:
            # The state dict is this checkpoint's own (made empty by _bare): filled in
            # place rather than through dataclasses.replace, which copies every field
            # (a tenth of a 50-state history page's CPU).
            self._fill(cp, values, chains)
        return bare

    def _value_rows(self, checkpoints: Sequence[Checkpoint]) -> list[Any]:
        """The value rows the checkpoints' states are built from, of every thread, in one
        query: ``(thread_id, state_key, version, kind, data, prev)``, ``data`` as stored.

        Each key of each thread is one index range scan on ``(thread, key, version)``:
        from the start of the rows that build its value (``value_bases``) to its tip. A
        range may also hold rows of another line of the thread (a fork); :meth:`_fill`
        follows the ``prev`` pointers and skips them.
        """
        ranges: dict[tuple[str, str], tuple[int, int]] = {}
        for cp in checkpoints:
            bases = cp.value_bases
            for key, version in cp.value_versions.items():
                base = bases.get(key, 0)
                known = ranges.get((cp.thread_id, key))
                if known is not None:
                    base, version = min(known[0], base), max(known[1], version)
                ranges[(cp.thread_id, key)] = (base, version)
        if not ranges:
            return []
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
        return self._fetch(sql, params)

    def _fill(
        self, cp: Checkpoint, rows: dict[tuple[str, int], Sequence[Any]], chains: Chains
    ) -> None:
        """Build ``cp``'s state into ``cp.state``, as :func:`build_state` builds it, from
        its thread's value rows (by ``(key, version)``, as :meth:`_value_rows` fetched
        them).

        An appended list is its chain's items, decoded once as one array. ``chains``
        remembers each append row already walked (:meth:`_chain`): the states of a
        history page share their chains, so each row is opened once, not once per state.
        Values are decoded for each state: no two states share a list.
        """
        state = cp.state
        for key, version in cp.value_versions.items():
            row = rows[(key, version)]
            if row[3] != "a":
                state[key] = _loads(self._open(row[4]))
                continue
            base, items = self._chain(key, version, rows, chains)
            value: list[Any] = []
            if base is not None:
                decoded = _loads(base)
                if decoded is not None:
                    value = list(decoded)
            if items:
                value.extend(_loads("[" + ",".join(items) + "]"))
            state[key] = value

    def _chain(
        self,
        key: str,
        version: int,
        rows: dict[tuple[str, int], Sequence[Any]],
        chains: Chains,
    ) -> tuple[str | None, list[str]]:
        """For the append row ``(key, version)``: the opened text of the whole value its
        chain starts from (None when the chain's first row is an append) and the items of
        its appends, oldest first, each without its brackets (empty appends left out).

        ``chains`` holds, for the rows other states of the page point at (its
        ``shared`` versions of ``key``), their chain's base, a list of items and how many
        of them are the row's: rows of one line share one list, so a chain is walked and
        its rows opened once for all the states of a page, and each state's items are a
        slice of it (a long thread's list stays linear, not quadratic).
        """
        keep = chains.shared.get(key, ())
        plain = self.cipher is None
        walked: list[str] = []  # newest first
        marks: list[tuple[int, int]] = []  # (version, index in walked) of rows to remember
        at = version
        while True:
            if at in keep:
                known = chains.seen.get((key, at))
                if known is not None:
                    base, items, count = known
                    if not walked:
                        return base, items[:count]
                    if count < len(items):  # another line (a fork) goes on from this row
                        items = items[:count]
                    break
                marks.append((at, len(walked)))
            row = rows[(key, at)]
            data = row[4]
            # Without a key, text that starts as JSON does (a list does) is not sealed:
            # _open would return it as it is.
            if not plain or not data.startswith("["):
                data = self._open(data)
            if row[3] != "a":
                base, items = data, []
                break
            walked.append(data)
            if row[5] is None:
                base, items = None, []
                break
            at = row[5]
        for index in range(len(walked) - 1, -1, -1):
            data = walked[index]
            if data != "[]":
                items.append(data[1:-1])
            while marks and marks[-1][1] == index:
                chains.seen[(key, marks.pop()[0])] = (base, items, len(items))
        return base, items

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
            by_thread: dict[str, dict[tuple[str, int], Sequence[Any]]] = {}
            for row in self._value_rows(bare):
                by_thread.setdefault(row[0], {})[(row[1], row[2])] = row
            for cp in bare:
                self._fill(cp, by_thread.get(cp.thread_id, {}), Chains(()))
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
