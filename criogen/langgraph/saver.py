"""CriogenSaver: LangGraph's checkpointer interface on Criogen's database.

LangGraph graphs compiled with ``checkpointer=CriogenSaver(...)`` keep their
checkpoints, channel values and pending writes in the tables of
:mod:`criogen.storage.models.langgraph`, on SQLite or PostgreSQL, through the Django
connection of a Criogen :class:`~criogen.Storage`. With an encryption key (the
storage's: ``CRIOGEN_ENCRYPTION_KEY`` or ``encryption_key=``) every payload is sealed
before it reaches the database, as Criogen's own checkpoints are.

LangGraph calls a checkpointer from threads of its own that come and go (its
background writes, its sync nodes); a Django connection belongs to the thread that
opened it, so opened there it would be left open when the thread ends. The saver
therefore never uses the caller's connection:

- ``get_tuple``, ``put`` and ``put_writes`` called off an event loop run on the
  caller's thread, on a connection the saver owns (a few per database, shared by the
  savers of the process, each used by one call at a time), with no thread hop;
- every other call, and every ``a*`` method (without blocking the event loop), runs on
  the saver's database threads (a small pool per database), each opening its
  connection once and reusing it.

:func:`close_database_threads` closes both. The saver's writes are not part of a
transaction the caller has open.
"""

from __future__ import annotations

import asyncio
import functools
import random
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Q
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from criogen.engine.crypto import Cipher, open_without_key
from criogen.engine.store import Storage
from criogen.storage.orm.base import hot_statement, run_hot

__all__ = ["CriogenSaver", "close_database_threads"]

_PAGE = 100
"""Checkpoints read per query when listing (a filter is applied after decoding)."""
_EMPTY = "empty"
"""The type of a channel blob that has no value (the channel was cleared; rows of
this type are no longer written, but older databases hold some)."""
_INLINE = frozenset({str, int, float, bool, type(None)})
"""The types of channel values kept in the checkpoint's own body rather than in a blob
(as LangGraph's PostgreSQL saver does): a put whose new values are all of them writes
one row. Exact types: a subclass may serialise to more than its base."""
_PACKED_BYTES = 2048
"""A channel value of any other type whose serialised form is at most this long is
kept in the checkpoint's body too, serialised (under ``"packed"``), in every checkpoint
that holds it, as LangGraph's SQLite saver keeps every value: a put whose larger values
are all unchanged writes one row. Half a page of SQLite, so that a row with a few of
them still fits in one; a larger value keeps one blob per version."""
_BLOB_VERSION = object()
"""In :attr:`CriogenSaver._kept`: the version's value is in a blob."""
_KEPT = 4096
"""Channel versions whose place :attr:`CriogenSaver._kept` remembers (cleared when full)."""
_THREADS = {"sqlite": 1, "postgresql": 4}
"""Database threads, and owned connections, per database: SQLite has one writer at a
time anyway."""

_CHECKPOINT = "criogen_lg_checkpoint"
_BLOB = "criogen_lg_blob"
_WRITE = "criogen_lg_write"
_FIELDS = (
    "thread_id",
    "checkpoint_ns",
    "checkpoint_id",
    "parent_checkpoint_id",
    "type",
    "checkpoint",
    "sealed",
)
"""A checkpoint row as :meth:`CriogenSaver._tuple` reads it."""
_COLUMNS = ", ".join(_FIELDS)
_SELECT_NEWEST = (
    f"SELECT {_COLUMNS} FROM {_CHECKPOINT} WHERE thread_id = %s AND checkpoint_ns = %s "  # noqa: S608 - constant names, values as parameters
    "ORDER BY checkpoint_id DESC LIMIT 1"
)
_SELECT_ONE = (
    f"SELECT {_COLUMNS} FROM {_CHECKPOINT} WHERE thread_id = %s AND checkpoint_ns = %s "  # noqa: S608 - constant names, values as parameters
    "AND checkpoint_id = %s"
)
_NOW = {"sqlite": "strftime('%Y-%m-%d %H:%M:%f', 'now')", "postgresql": "CURRENT_TIMESTAMP"}
"""``created_at`` as the database's clock gives it (UTC text on SQLite, as Django
stores datetimes there), so that no datetime is built and adapted per put."""


@functools.cache
def _upsert_checkpoint(vendor: str) -> str:
    return (
        f"INSERT INTO {_CHECKPOINT} (thread_id, checkpoint_ns, checkpoint_id, "  # noqa: S608 - constant names, values as parameters
        "parent_checkpoint_id, run_id, type, checkpoint, sealed, created_at) "
        f"VALUES (%s, %s, %s, %s, %s, %s, %s, %s, {_NOW.get(vendor, 'CURRENT_TIMESTAMP')}) "
        "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET "
        "parent_checkpoint_id = EXCLUDED.parent_checkpoint_id, run_id = EXCLUDED.run_id, "
        "type = EXCLUDED.type, checkpoint = EXCLUDED.checkpoint, sealed = EXCLUDED.sealed"
    )


@functools.cache
def _insert_blobs(count: int) -> str:
    values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s)"] * count)
    return (
        f"INSERT INTO {_BLOB} (thread_id, checkpoint_ns, channel, version, type, blob, "  # noqa: S608 - constant names, values as parameters
        f"sealed) VALUES {values} "
        "ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING"
    )


@functools.cache
def _with_blobs(count: int) -> str:
    """PostgreSQL: the blobs and the checkpoint in one statement (atomic by itself: one
    round trip, no BEGIN/COMMIT)."""
    return f"WITH blobs AS ({_insert_blobs(count)}) {_upsert_checkpoint('postgresql')}"


@functools.cache
def _insert_writes(count: int, *, replace: bool) -> str:
    values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"] * count)
    conflict = (
        "DO UPDATE SET task_path = EXCLUDED.task_path, channel = EXCLUDED.channel, "
        "type = EXCLUDED.type, blob = EXCLUDED.blob, sealed = EXCLUDED.sealed"
        if replace
        else "DO NOTHING"
    )
    return (
        f"INSERT INTO {_WRITE} (thread_id, checkpoint_ns, checkpoint_id, task_id, "  # noqa: S608 - constant names, values as parameters
        f"task_path, idx, channel, type, blob, sealed) VALUES {values} "
        f"ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) {conflict}"
    )


@functools.cache
def _qmark(sql: str) -> str:
    """``sql`` with SQLite's ``?`` placeholders (the SQL here has no other ``%s``)."""
    return sql.replace("%s", "?")


def _fetch(cursor: Any, fetch: str | None) -> list[Any]:
    if fetch == "all":
        return list(cursor.fetchall())
    if fetch == "one":
        row = cursor.fetchone()
        return [] if row is None else [row]
    return []


T = TypeVar("T")
_pools: dict[str, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


class _Local(threading.local):
    database_thread = False
    """Set on the saver's database threads."""
    lent: BaseDatabaseWrapper | None = None
    """The owned connection lent to this thread's call."""


_local = _Local()


def _pool(alias: str) -> ThreadPoolExecutor:
    with _pools_lock:
        pool = _pools.get(alias)
        if pool is None:
            workers = _THREADS.get(connections[alias].vendor, 2)
            pool = _pools[alias] = ThreadPoolExecutor(
                max_workers=workers,
                thread_name_prefix=f"criogen-langgraph-{alias}",
                initializer=_mark_database_thread,
            )
        return pool


class _Owned:
    """The connections of one database that the savers own for the calls they run on
    the caller's thread: at most ``size``, each lent to one call at a time.

    Taking an idle one is a ``list.pop`` (atomic, no lock); the lock is taken to open
    one, to wait for one, and to give one back."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.size = _THREADS.get(connections[alias].vendor, 2)
        self.lock = threading.Lock()
        self.returned = threading.Condition(self.lock)
        self.idle: list[BaseDatabaseWrapper] = []
        self.opened: list[BaseDatabaseWrapper] = []
        self.waiting = 0

    def take(self) -> BaseDatabaseWrapper:
        """An idle connection (opened when there is none and fewer than ``size`` are),
        until :meth:`give`."""
        try:
            connection = self.idle.pop()
        except IndexError:
            connection = self._wait()
        try:
            _check(connection)
        except BaseException:
            self.give(connection)
            raise
        return connection

    def _wait(self) -> BaseDatabaseWrapper:
        with self.lock:
            while True:
                if self.idle:
                    return self.idle.pop()
                if len(self.opened) < self.size:
                    connection = connections.create_connection(self.alias)
                    connection.inc_thread_sharing()  # one thread at a time, any thread
                    self.opened.append(connection)
                    return connection
                self.waiting += 1
                try:
                    self.returned.wait()
                finally:
                    self.waiting -= 1

    def give(self, connection: BaseDatabaseWrapper) -> None:
        with self.lock:
            self.idle.append(connection)
            if self.waiting:
                self.returned.notify()

    def close(self) -> None:
        with self.lock:
            opened = list(self.opened)
        for connection in opened:
            connection.close()


_owned: dict[str, _Owned] = {}


def _owned_connections(alias: str) -> _Owned:
    owned = _owned.get(alias)
    if owned is None:
        with _pools_lock:
            owned = _owned.setdefault(alias, _Owned(alias))
    return owned


def _off_event_loop() -> bool:
    return asyncio._get_running_loop() is None


def close_database_threads() -> None:
    """Close the savers' database connections and end their threads (at shutdown, or
    before a test database is dropped); the next call to a saver starts new ones."""
    with _pools_lock:
        pools = list(_pools.items())
        _pools.clear()
        owned = list(_owned.values())
        _owned.clear()
    for lent in owned:
        lent.close()
    for alias, pool in pools:
        workers = pool._max_workers
        # One task per thread: each closes its own connection, then waits for the
        # others, so that no thread takes two.
        barrier = threading.Barrier(workers)

        def close(alias: str = alias, barrier: threading.Barrier = barrier) -> None:
            connections[alias].close()
            barrier.wait(timeout=30)

        for future in [pool.submit(close) for _ in range(workers)]:
            future.result()
        pool.shutdown(wait=True)


def _mark_database_thread() -> None:
    _local.database_thread = True


def _check(connection: BaseDatabaseWrapper) -> None:
    # No request cycle closes a broken connection here: after a database error, a
    # connection that no longer answers is dropped, and the next statement opens one.
    if connection.errors_occurred:
        if connection.is_usable():
            connection.errors_occurred = False
        else:
            connection.close()


def _on_database_thread(alias: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    _check(connections[alias])
    return fn(*args, **kwargs)


class CriogenSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer storing in Criogen's database (SQLite or PostgreSQL).

    Args:
        storage: the Criogen storage whose database (and encryption key) to use: a
            :class:`~criogen.Storage` on the Django ORM, or a ``sqlite://`` /
            ``postgres://`` URL; default the project's ``default`` database
            (``Storage.default()``).
        serde: LangGraph's serializer (default: its ``JsonPlusSerializer``).

    Raises:
        TypeError: ``storage`` keeps no database (the in-memory ``Storage()``).
    """

    def __init__(
        self, storage: Storage | str | None = None, *, serde: SerializerProtocol | None = None
    ) -> None:
        super().__init__(serde=serde)
        if storage is None:
            storage = Storage.default()
        elif isinstance(storage, str):
            storage = Storage(storage)
        alias = getattr(storage, "alias", None)
        if alias is None:
            raise TypeError(
                "CriogenSaver needs a storage with a database (sqlite:// or postgres://), "
                f"not {type(storage).__name__}; for memory use LangGraph's InMemorySaver."
            )
        self.storage = storage
        self.alias: str = alias
        # Imported once the storage has set Django up (a plain script has no project).
        from criogen.storage.models import langgraph as tables

        self._tables = tables
        self.cipher: Cipher | None = storage.cipher
        self._kept: dict[tuple[str, str, str, str], Any] = {}
        """Where this process last put or read a channel version that is not of a simple
        type: its packed ``[type, bytes]``, or :data:`_BLOB_VERSION`. A checkpoint that
        holds a version it did not change stores it where it was put, without
        serialising it again (a packed one again in its body); a version not known here
        is serialised and, when large, its blob is put again (``DO NOTHING`` when it is
        there)."""

    # -- payloads: LangGraph's serializer, then sealed ----------------------------------

    def _dump(self, value: Any) -> tuple[str, bytes, bool]:
        kind, data = self.serde.dumps_typed(value)
        return self._seal(kind, data)

    def _seal(self, kind: str, data: bytes) -> tuple[str, bytes, bool]:
        if self.cipher is None:
            return kind, data, False
        # Fernet seals text: latin-1 maps each byte to one character and back, so any
        # bytes (msgpack, pickle) go through unchanged.
        return kind, self.cipher.seal(data.decode("latin-1")).encode("ascii"), True

    def _load(self, kind: str, data: Any, sealed: bool) -> Any:
        raw = bytes(data)  # PostgreSQL gives a memoryview
        if sealed:
            token = raw.decode("ascii")
            text = self.cipher.open(token) if self.cipher else open_without_key(token)
            raw = text.encode("latin-1")
        return self.serde.loads_typed((kind, raw))

    # -- reading -----------------------------------------------------------------------

    def _checkpoints(self) -> Any:
        return self._tables.LangGraphCheckpoint.objects.using(self.alias)

    def _tuple(self, row: Sequence[Any], *, remember: bool = False) -> CheckpointTuple:
        """A checkpoint row (:data:`_COLUMNS`) with its channel values and pending
        writes, read in one statement; ``remember``: note in :attr:`_kept` where its
        versions are (the puts that follow a ``get_tuple`` hold most of them)."""
        thread_id, ns, checkpoint_id, parent_id, kind, data, sealed = row[:7]
        body = self._load(kind, data, sealed)
        checkpoint: Checkpoint = body["checkpoint"]
        # The inline values (older rows have none: every value is in a blob).
        values: dict[str, Any] = checkpoint.get("channel_values") or {}
        held = checkpoint.get("channel_versions") or {}
        kept = self._kept if remember else None
        packed = body.get("packed")
        if packed:
            for channel, (p_kind, p_data) in packed.items():
                values[channel] = self.serde.loads_typed((p_kind, p_data))
                if kept is not None:
                    kept[(thread_id, ns, channel, str(held.get(channel)))] = [p_kind, p_data]
        versions = {channel: version for channel, version in held.items() if channel not in values}
        pending = []
        for source, channel, key, b_kind, blob, b_sealed in self._related(
            thread_id, ns, checkpoint_id, versions
        ):
            if source == "b":
                if b_kind != _EMPTY and str(versions.get(channel)) == key:
                    values[channel] = self._load(b_kind, blob, b_sealed)
                    if kept is not None:
                        kept[(thread_id, ns, channel, key)] = _BLOB_VERSION
            else:
                pending.append((key, channel, self._load(b_kind, blob, b_sealed)))
        checkpoint["channel_values"] = values
        parent = _config(thread_id, ns, parent_id) if parent_id else None
        return CheckpointTuple(
            config=_config(thread_id, ns, checkpoint_id),
            checkpoint=checkpoint,
            metadata=body["metadata"],
            parent_config=parent,
            pending_writes=pending,
        )

    def _related(
        self, thread_id: str, ns: str, checkpoint_id: str, versions: ChannelVersions
    ) -> list[tuple[Any, ...]]:
        """The blobs of ``versions`` and the checkpoint's pending writes, in one
        statement: rows ``("b", channel, version, type, blob, sealed)`` and ``("w",
        channel, task_id, type, blob, sealed)``, writes in the order LangGraph replays
        them (``writes_sort_key``: task path, task id, index)."""
        params: list[Any] = []
        parts = []
        if versions:
            pairs = " OR ".join("(channel = %s AND version = %s)" for _ in versions)
            parts.append(
                "SELECT 'b', channel, version, type, blob, sealed, '', '', 0 "  # noqa: S608 - constant names, values as parameters
                f"FROM {_BLOB} WHERE thread_id = %s AND checkpoint_ns = %s AND ({pairs})"
            )
            params += [thread_id, ns]
            for channel, version in versions.items():
                params += [channel, str(version)]
        parts.append(
            "SELECT 'w', channel, task_id, type, blob, sealed, task_path, task_id, idx "  # noqa: S608 - constant names, values as parameters
            f"FROM {_WRITE} WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s"
        )
        params += [thread_id, ns, checkpoint_id]
        sql = " UNION ALL ".join(parts) + " ORDER BY 1, 7, 8, 9"
        return [row[:6] for row in self._statements([(sql, params)], fetch="all")]

    def _get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id:
            statement = (
                _SELECT_ONE,
                (conf["thread_id"], conf.get("checkpoint_ns") or "", checkpoint_id),
            )
        else:
            statement = (_SELECT_NEWEST, (conf["thread_id"], conf.get("checkpoint_ns") or ""))
        found = self._statements([statement], fetch="one")
        return None if not found else self._tuple(found[0], remember=True)

    def _list_page(
        self,
        config: RunnableConfig | None,
        wanted: dict[str, Any] | None,
        before: RunnableConfig | None,
        cursor: tuple[str, int] | None,
        left: int | None,
    ) -> tuple[list[CheckpointTuple], tuple[str, int] | None]:
        """One page of :meth:`list`, and where the next starts (None: no more)."""
        rows = self._checkpoints()
        if config is not None:
            conf = config["configurable"]
            if conf.get("thread_id"):
                rows = rows.filter(thread_id=conf["thread_id"])
            if conf.get("checkpoint_ns") is not None:
                rows = rows.filter(checkpoint_ns=conf["checkpoint_ns"])
            if conf.get("checkpoint_id"):
                rows = rows.filter(checkpoint_id=conf["checkpoint_id"])
        if before is not None and get_checkpoint_id(before):
            rows = rows.filter(checkpoint_id__lt=get_checkpoint_id(before))
        if cursor is not None:
            # Keyset pages: ids are unique per namespace, so the row id breaks ties.
            last_id, last_pk = cursor
            rows = rows.filter(
                Q(checkpoint_id__lt=last_id) | Q(checkpoint_id=last_id, pk__lt=last_pk)
            )
        size = _PAGE if wanted or left is None else min(left, _PAGE)
        batch = list(rows.order_by("-checkpoint_id", "-pk").values_list(*_FIELDS, "pk")[:size])
        out = []
        for row in batch:
            item = self._tuple(row)
            if wanted and any(
                key not in item.metadata or item.metadata[key] != value
                for key, value in wanted.items()
            ):
                continue
            out.append(item)
        more = len(batch) == size
        return out, ((batch[-1][2], batch[-1][7]) if more else None)

    # -- writing -----------------------------------------------------------------------

    def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = config["configurable"]
        thread_id = conf["thread_id"]
        ns = conf.get("checkpoint_ns") or ""
        values = checkpoint.get("channel_values") or {}
        held = checkpoint.get("channel_versions") or {}
        inline: dict[str, Any] = {}
        packed: dict[str, list[Any]] = {}
        kept = self._kept
        # A cleared channel's new version needs no row: a version without a blob reads
        # as no value. A value is put once per version: in the body when it is simple
        # or small (again in each checkpoint that holds it), else in a blob.
        blobs: list[Any] = []
        count = 0
        for channel, value in values.items():
            if type(value) in _INLINE:
                inline[channel] = value
                continue
            version = held.get(channel)
            if version is None:  # no version to find a blob by: in the body
                inline[channel] = value
                continue
            key = (thread_id, ns, channel, str(version))
            place: Any = kept.get(key)
            if place is _BLOB_VERSION and channel not in new_versions:
                continue
            if place is None or place is _BLOB_VERSION:
                p_kind, p_data = self.serde.dumps_typed(value)
                if len(p_data) > _PACKED_BYTES:
                    b_kind, b_data, b_sealed = self._seal(p_kind, p_data)
                    blobs += [thread_id, ns, channel, key[3], b_kind, b_data, b_sealed]
                    count += 1
                    place = _BLOB_VERSION
                else:
                    place = [p_kind, p_data]
                if len(kept) >= _KEPT:
                    kept.clear()
                kept[key] = place
                if place is _BLOB_VERSION:
                    continue
            packed[channel] = place
        body = dict(checkpoint)
        body["channel_values"] = inline
        meta = get_serializable_checkpoint_metadata(config, metadata)
        stored: dict[str, Any] = {"checkpoint": body, "metadata": meta}
        if packed:
            stored["packed"] = packed
        kind, data, sealed = self._dump(stored)
        connection = self._connection()
        row = [
            thread_id,
            ns,
            checkpoint["id"],
            conf.get("checkpoint_id") or "",
            str(meta.get("run_id") or ""),
            kind,
            data,
            sealed,
        ]
        # A version names one value: a blob already stored is the same one. The same
        # checkpoint put again (a retried step) replaces the first.
        vendor = connection.vendor
        if not blobs:
            self._statements([(_upsert_checkpoint(vendor), row)])
        elif vendor == "postgresql":
            self._statements([(_with_blobs(count), blobs + row)])
        else:
            self._statements([(_insert_blobs(count), blobs), (_upsert_checkpoint(vendor), row)])
        return _config(thread_id, ns, checkpoint["id"])

    def _put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if not writes:
            return
        conf = config["configurable"]
        thread_id, ns = conf["thread_id"], conf.get("checkpoint_ns") or ""
        params: list[Any] = []
        for index, (channel, value) in enumerate(writes):
            kind, data, sealed = self._dump(value)
            params += [
                thread_id,
                ns,
                conf["checkpoint_id"],
                task_id,
                task_path,
                WRITES_IDX_MAP.get(channel, index),
                channel,
                kind,
                data,
                sealed,
            ]
        replace = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        # One statement: one commit (SQLite syncs its log once per write call).
        self._statements([(_insert_writes(len(writes), replace=replace), params)])

    def _connection(self) -> BaseDatabaseWrapper:
        """The connection of this call: the one lent to it, else this database
        thread's."""
        lent = _local.lent
        return lent if lent is not None else connections[self.alias]

    def _statements(
        self, statements: Sequence[tuple[str, Sequence[Any]]], *, fetch: str | None = None
    ) -> list[Any]:
        """Run ``statements`` (SQL with ``%s`` placeholders) in one transaction, and the
        last one's rows when ``fetch`` is ``"one"`` or ``"all"``.

        On SQLite they go to the ``sqlite3`` connection itself, with its ``?``
        placeholders and its cache of prepared statements: Django's cursor rewrites
        the placeholders with a regular expression at every call, and its atomic block
        costs more than the statements here. The connection serves only the saver, in
        autocommit: a transaction is a plain ``BEGIN`` … ``COMMIT``, and one statement is
        a transaction of its own."""
        connection = self._connection()
        several = len(statements) > 1
        if connection.vendor != "sqlite":
            if not several and not connection.queries_logged and not connection.execute_wrappers:
                # One statement (every put and read here): prepared, straight
                # through libpq (see criogen.storage.orm.base.pg_run).
                if connection.connection is None:
                    connection.ensure_connection()
                hot = hot_statement(connection, statements[0][0])
                connection.validate_no_broken_transaction()
                with connection.wrap_database_errors:
                    found = run_hot(connection.connection, hot, statements[0][1], fetch is not None)
                return found[:1] if fetch == "one" else found if fetch == "all" else []
            with connection.cursor() as cursor:
                if several:
                    cursor.execute("BEGIN")
                try:
                    for sql, params in statements:
                        cursor.execute(sql, params)
                    found = _fetch(cursor, fetch)
                    if several:
                        cursor.execute("COMMIT")
                except BaseException:
                    if several:
                        cursor.execute("ROLLBACK")
                    raise
                return found
        raw = connection.connection
        if raw is None:
            connection.ensure_connection()
            raw = connection.connection
        if several:
            raw.execute("BEGIN IMMEDIATE")
        try:
            for sql, params in statements:
                cursor = raw.execute(_qmark(sql), params)
            found = _fetch(cursor, fetch)
            if several:
                raw.execute("COMMIT")
        except BaseException:
            if several:
                raw.execute("ROLLBACK")
            raise
        return found

    # -- deleting, copying, pruning ----------------------------------------------------

    def _delete_thread(self, thread_id: str) -> None:
        t = self._tables
        with transaction.atomic(using=self.alias):
            for model in (t.LangGraphWrite, t.LangGraphBlob, t.LangGraphCheckpoint):
                model.objects.using(self.alias).filter(thread_id=thread_id).delete()

    def _delete_for_runs(self, run_ids: Sequence[str]) -> None:
        run_ids = [str(r) for r in run_ids]
        if not run_ids:
            return
        with transaction.atomic(using=self.alias):
            rows = self._checkpoints().filter(run_id__in=run_ids)
            if "" not in run_ids:
                # The run index holds only checkpoints with a run id: say so, so that
                # SQLite uses it (PostgreSQL would see it alone).
                rows = rows.exclude(run_id="")
            keys = list(rows.values_list("thread_id", "checkpoint_ns", "checkpoint_id"))
            self._delete_writes(keys)
            rows.delete()

    def _delete_writes(self, keys: Sequence[tuple[str, str, str]]) -> None:
        for start in range(0, len(keys), _PAGE):
            match = Q()
            for thread_id, ns, checkpoint_id in keys[start : start + _PAGE]:
                match |= Q(thread_id=thread_id, checkpoint_ns=ns, checkpoint_id=checkpoint_id)
            self._tables.LangGraphWrite.objects.using(self.alias).filter(match).delete()

    def _copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        t = self._tables
        with transaction.atomic(using=self.alias):
            for model in (t.LangGraphBlob, t.LangGraphCheckpoint, t.LangGraphWrite):
                manager = model.objects.using(self.alias)
                rows = list(manager.filter(thread_id=source_thread_id).order_by("pk"))
                for row in rows:
                    row.pk = None
                    row.thread_id = target_thread_id
                manager.bulk_create(rows, ignore_conflicts=True, batch_size=_PAGE)

    def _prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy == "delete":
            for thread_id in thread_ids:
                self._delete_thread(thread_id)
            return
        if strategy != "keep_latest":
            raise ValueError(f"prune strategy {strategy!r} is not 'keep_latest' or 'delete'.")
        for thread_id in thread_ids:
            with transaction.atomic(using=self.alias):
                self._keep_latest(thread_id)

    def _keep_latest(self, thread_id: str) -> None:
        rows = self._checkpoints().filter(thread_id=thread_id)
        namespaces = set(rows.values_list("checkpoint_ns", flat=True))
        for ns in namespaces:
            in_ns = rows.filter(checkpoint_ns=ns)
            latest = in_ns.order_by("-checkpoint_id").first()
            if latest is None:
                continue
            body = self._load(latest.type, latest.checkpoint, latest.sealed)
            held = (body["checkpoint"].get("channel_versions") or {}).items()
            keep_blobs = Q()
            for channel, version in held:
                keep_blobs |= Q(channel=channel, version=str(version))
            blobs = self._tables.LangGraphBlob.objects.using(self.alias).filter(
                thread_id=thread_id, checkpoint_ns=ns
            )
            (blobs.exclude(keep_blobs) if held else blobs).delete()
            self._tables.LangGraphWrite.objects.using(self.alias).filter(
                thread_id=thread_id, checkpoint_ns=ns
            ).exclude(checkpoint_id=latest.checkpoint_id).delete()
            in_ns.exclude(pk=latest.pk).delete()

    # -- versions ----------------------------------------------------------------------

    def get_next_version(self, current: str | None, channel: None = None) -> str:  # type: ignore[override]
        """The version after ``current``: a zero-padded counter, so versions sort as
        text, and a random part, so that two forks of one checkpoint never name two
        different values with one version (a blob is stored once per version)."""
        if current is None:
            number = 0
        elif isinstance(current, int | float):
            number = int(current)
        else:
            number = int(str(current).split(".", 1)[0])
        return f"{number + 1:032}.{random.getrandbits(48):015d}"

    # -- the interface: each call runs on an owned connection or a database thread -----

    def _here(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn`` (statements through :meth:`_statements` only) on this thread, on an
        owned connection; on a database thread when called on an event loop (Django
        refuses a connection there) or from a database thread."""
        if _local.database_thread or not _off_event_loop():
            return self._call(fn, *args)
        owned = _owned_connections(self.alias)
        _local.lent = connection = owned.take()
        try:
            return fn(*args)
        finally:
            _local.lent = None
            owned.give(connection)

    def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if _local.database_thread:
            return _on_database_thread(self.alias, fn, *args, **kwargs)
        future = _pool(self.alias).submit(_on_database_thread, self.alias, fn, *args, **kwargs)
        return future.result()

    async def _acall(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        future = _pool(self.alias).submit(_on_database_thread, self.alias, fn, *args, **kwargs)
        return await asyncio.wrap_future(future)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (``checkpoint_id``), else its namespace's
        newest; None when there is none."""
        return self._here(self._get_tuple, config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of ``config``'s thread (and namespace, and
        checkpoint, when it names them; every thread when None), older than ``before``,
        whose metadata holds every key-value pair of ``filter``, at most ``limit``."""
        cursor: tuple[str, int] | None = None
        left = limit
        while left is None or left > 0:
            page, cursor = self._call(self._list_page, config, filter, before, cursor, left)
            for item in page:
                if left is not None:
                    if left <= 0:
                        return
                    left -= 1
                yield item
            if cursor is None:
                return

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store ``checkpoint`` (child of ``config``'s checkpoint), with a blob for each
        channel in ``new_versions`` whose value is large (the others are in its row);
        the config that names it."""
        return self._here(self._put, config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes after ``config``'s checkpoint. Writing the same task's
        write again keeps the first, except LangGraph's special writes (error,
        interrupt, resume, scheduled), which replace theirs."""
        self._here(self._put_writes, config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, blob and write of ``thread_id`` (all namespaces)."""
        self._call(self._delete_thread, thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints the runs ``run_ids`` wrote, and their writes. Blobs
        stay (another checkpoint may hold the same version)."""
        self._call(self._delete_for_runs, run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, blob and write of one thread to another (same ids)."""
        self._call(self._copy_thread, source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's newest checkpoint, its writes and the
        blobs it holds; ``delete``: delete the threads.

        Raises:
            ValueError: another strategy.
        """
        self._call(self._prune, thread_ids, strategy=strategy)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._acall(self._get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        cursor: tuple[str, int] | None = None
        left = limit
        while left is None or left > 0:
            page, cursor = await self._acall(self._list_page, config, filter, before, cursor, left)
            for item in page:
                if left is not None:
                    if left <= 0:
                        return
                    left -= 1
                yield item
            if cursor is None:
                return

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self._acall(self._put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self._acall(self._put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await self._acall(self._delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._acall(self._delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._acall(self._copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._acall(self._prune, thread_ids, strategy=strategy)


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }
