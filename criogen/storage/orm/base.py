"""The base of :class:`~criogen.storage.orm.OrmStorage`: the connection, cursors that
skip Django's per-statement overhead on the hot path, times, and sealing.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from _thread import get_ident
from asyncio import _get_running_loop
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from asgiref import local as asgiref_local
from django.db import connections

from criogen.engine.crypto import open_without_key
from criogen.engine.store import (
    Storage,
    encode,
)
from criogen.storage.setup import database_alias, redact

__all__ = ["OrmBase", "hot_cursor", "pg_run"]


@functools.lru_cache(maxsize=512)
def _qmark(sql: str) -> str:
    """The project's ``%s`` placeholders as sqlite3's ``?`` (our SQL has no literal %)."""
    return sql.replace("%s", "?")


def _bind_none(value: None) -> None:
    """sqlite3's adapter for None: None, which it binds as NULL (as without one)."""
    return value


# sqlite3 skips its adapter lookup only for str, int, float and bytearray parameters;
# for None the lookup's two failed attribute reads (each formatting an AttributeError
# message) cost more than the binding. A checkpoint write binds a few (a set value's
# ``prev``, a first checkpoint's parent). Kept if something already adapts None.
if (type(None), sqlite3.PrepareProtocol) not in sqlite3.adapters:
    sqlite3.register_adapter(type(None), _bind_none)


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
        return self._cur.fetchall()

    def fetchone(self) -> Any:
        return self._cur.fetchone()

    def __enter__(self) -> _SqliteCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._cur.close()


_THREAD_LOCAL = getattr(asgiref_local, "_ThreadCriticalLocal", None)
"""asgiref's thread-critical ``Local``, which keeps Django's connections (None if a
version of asgiref names it otherwise: :func:`sqlite_connection` then always asks
Django)."""


def sqlite_connection(alias: str) -> Any:
    """``connections[alias]``: this thread's Django connection wrapper.

    Django keeps the wrappers in asgiref's thread-critical ``Local``; in a thread
    without a running event loop that is a ``threading.local``, and asking for a
    wrapper there raised and caught two exceptions on the way (a missed attribute,
    then "no running event loop"): about 10,000 instructions, several times a run.
    Where a wrapper already exists in this thread's storage it is read from there; in
    an event loop's thread (a context's own connections), for the first use in a
    thread, or with another asgiref, Django's own lookup runs.
    """
    local = connections._connections  # type: ignore[attr-defined]
    if type(local) is _THREAD_LOCAL and _get_running_loop() is None:
        connection = local._storage.__dict__.get(alias)
        if connection is not None:
            return connection
    return connections[alias]


def sqlite_autocommit(connection: Any) -> bool:
    """``connection.get_autocommit()`` of Django's SQLite connection, connecting first.

    Django's method and the ``ensure_connection`` it calls each look for a running
    event loop on every call; on the hot path, as in :func:`pg_run`, that guard runs
    only when there is a connection to open.
    """
    if connection.connection is None:
        connection.ensure_connection()
    return bool(connection.autocommit)


def sqlite_hot(connection: Any) -> tuple[Any, Any, int] | None:
    """What the SQLite hot path runs on: Django's sqlite3 connection, a cursor kept on
    it and its ``synchronous`` level; None when Django must see the statements (query
    logging: ``DEBUG`` or a query capture).

    Kept per sqlite3 connection: a new cursor per write was registered with its
    connection and closed again, and the level is read once (only the connection's
    ``init_command`` sets it; a lease puts it back as it found it). The callers fetch
    every row they ask for, so the cursor leaves no statement open between calls.
    """
    if connection.queries_logged:
        return None
    raw = connection.connection
    if raw is None:
        connection.ensure_connection()
        raw = connection.connection
    kept = connection.__dict__.get("_criogen_sqlite")
    if kept is None or kept[0] is not raw:
        with connection.wrap_database_errors:
            (level,) = raw.execute("PRAGMA synchronous").fetchall()[0]
            kept = connection.__dict__["_criogen_sqlite"] = (raw, raw.cursor(), int(level))
    return kept


class OrmBase(Storage):
    """What every part of :class:`OrmStorage` uses: the database alias, its vendor,
    cursors, time conversions and the sealing of user data (encryption at rest)."""

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
        """Run one hot statement on PostgreSQL, prepared (:func:`pg_run`)."""
        return pg_run(self.alias, sql, params, fetch=fetch)

    def _time(self, value: Any) -> datetime:
        if isinstance(value, datetime):
            return value if value.tzinfo else value.replace(tzinfo=UTC)
        return datetime.fromisoformat(value).replace(tzinfo=UTC)

    def _db_time(self, value: datetime) -> Any:
        if self.vendor == "sqlite":
            if value.tzinfo is not UTC:  # the engine's times are UTC already
                value = value.astimezone(UTC)
            # The naive time's text: the aware one's without its "+00:00" (no new
            # datetime to make).
            return value.isoformat(" ")[:-6]
        return value

    def _raw_sqlite(self) -> Any:
        """Django's sqlite3 connection for the hot path, or None when Django must see
        the statements (query logging: ``DEBUG`` or a query capture)."""
        connection = connections[self.alias]
        if connection.queries_logged:
            return None
        connection.ensure_connection()
        return connection.connection

    # -- encoding (encryption at rest hooks in here) -------------------------------------

    def _seal(self, text: str) -> str:
        return self.cipher.seal(text) if self.cipher is not None else text

    def _open(self, text: str) -> str:
        return self.cipher.open(text) if self.cipher is not None else open_without_key(text)

    def _json_in(self, value: Any) -> str:
        return self._seal(encode(value))

    def _json_out(self, text: str | None) -> Any:
        return None if text in (None, "") else json.loads(self._open(text))

    def close(self) -> None:
        connections[self.alias].close()


def pg_run(alias: str, sql: str, params: Sequence[Any], *, fetch: bool) -> Any:
    """Run one hot statement on PostgreSQL, prepared; its rows (``fetch``) or row count.

    Django's psycopg backend binds parameters client-side and never prepares; on the
    checkpoint path, quoting parameters and planning the statement were most of the
    client's and much of the server's time. This runs the statement on Django's own
    connection (its transactions, thread check, broken-transaction check and error
    translation still apply) through a server-binding psycopg cursor that prepares:
    psycopg prepares each statement text once per connection, then sends only the
    parameters. ``OPTIONS={"prepare_threshold": None}`` set explicitly on the
    database (e.g. behind a pooler that cannot keep prepared statements) turns the
    preparing off; so does query logging (``DEBUG``), which needs the SQL text.

    Each statement text keeps its cursor on the connection (:func:`hot_cursor`), so
    a run's few statements do not build a cursor and its adapters every time, and
    psycopg reuses the parameter dumpers it picked for that text. The statement runs
    on that psycopg cursor itself: Django's ``CursorWrapper`` around it (a call
    chain and a closure per ``fetchall``) cost as much client CPU as psycopg's own
    work. With ``execute_wrappers`` installed (``connection.execute_wrapper()``,
    e.g. a statement counter), the wrapper runs them as for any other statement.
    Otherwise the statement goes to psycopg as the bytes it was first encoded to, so
    psycopg neither encodes nor hashes the text again for its caches.
    """
    connection = connections[alias]
    if connection.queries_logged:
        # DEBUG or a query capture: Django logs a server-bound statement's SQL as
        # None, so take its own cursor (client-side binding) and log the full text.
        with connection.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if fetch else cur.rowcount
    if connection.connection is None:
        connection.ensure_connection()
    # What Django checks whenever it makes a cursor: this thread may use the connection
    # (its own check, called only when the thread is not the connection's).
    if connection._thread_ident != get_ident():  # type: ignore[attr-defined]
        connection.validate_thread_sharing()
    cur, sql, query = hot_cursor(connection, sql)
    if connection.execute_wrappers:
        wrapped = connection.make_cursor(cur)  # Django's CursorWrapper (no query log here)
        wrapped.execute(sql, params)
        return wrapped.fetchall() if fetch else wrapped.rowcount
    # What Django's CursorWrapper does around a statement.
    if connection.needs_rollback:
        connection.validate_no_broken_transaction()  # raises
    with connection.wrap_database_errors:
        cur.execute(query, params)
        return cur.fetchall() if fetch else cur.rowcount


_HOT_CURSORS = 64
"""Statement texts whose cursors a connection keeps (a few per statement shape)."""


def hot_cursor(connection: Any, sql: str) -> tuple[Any, str, bytes]:
    """The cursor kept for ``sql`` on ``connection`` (a preparing psycopg cursor), the
    text as first stored, and that text encoded as the connection's client encoding.

    psycopg keeps a cursor's parameter dumpers while it runs the identical text
    object again, hence the stored text. The cursors belong to the connection they
    were made on: when Django replaces its connection, they are dropped with it.
    """
    raw = connection.connection
    kept = connection.__dict__.get("_criogen_cursors")
    if kept is None or kept[0] is not raw:
        kept = connection.__dict__["_criogen_cursors"] = (raw, {})
    cursors: dict[str, tuple[Any, str, bytes]] = kept[1]
    hit = cursors.get(sql)
    if hit is not None and not hit[0].closed:
        return hit
    with connection.wrap_database_errors:
        cursor = _server_cursor(connection)
    if len(cursors) >= _HOT_CURSORS:
        for old, _, _ in cursors.values():
            old.close()
        cursors.clear()
    # The bytes psycopg would encode the text to on every execute (and hash, for its
    # statement caches); once here, its hash is kept with it.
    cursors[sql] = hit = (cursor, sql, sql.encode(raw.info.encoding))
    return hit


_cursor_classes: dict[bool, Any] = {}
_PREPARE_ONLY_WHEN_ASKED = 2**31 - 1


def _server_cursor(connection: Any) -> Any:
    """A server-binding psycopg cursor on Django's connection, preparing by default."""
    options = connection.settings_dict.get("OPTIONS") or {}
    prepare = not ("prepare_threshold" in options and options["prepare_threshold"] is None)
    cls = _cursor_classes.get(prepare)
    if cls is None:
        import psycopg

        class PreparingCursor(psycopg.Cursor):
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
