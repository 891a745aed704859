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

__all__ = ["HotStatement", "OrmBase", "hot_cursor", "hot_statement", "pg_run", "run_hot"]


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
        storage = local.__dict__.get("_storage")  # a threading.local in this asgiref
        connection = getattr(storage, "__dict__", {}).get(alias)
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
    translation still apply), prepared: each statement text once per connection, then
    only its parameters. ``OPTIONS={"prepare_threshold": None}`` set explicitly on
    the database (e.g. behind a pooler that cannot keep prepared statements) turns the
    preparing off; so does query logging (``DEBUG``), which needs the SQL text.

    The statement goes to libpq itself (:func:`run_hot`): psycopg's cursor drives
    every execute through generators and its prepared-statement bookkeeping, which
    cost a quarter of a checkpoint run's client instructions. With
    ``execute_wrappers`` installed (``connection.execute_wrapper()``, e.g. a
    statement counter), the wrapper runs them as for any other statement, on the
    preparing psycopg cursor kept for the text (:func:`hot_cursor`).
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
    hot = hot_statement(connection, sql)
    if connection.execute_wrappers:
        wrapped = connection.make_cursor(hot.cursor)  # Django's CursorWrapper (no query log here)
        wrapped.execute(hot.sql, params)
        return wrapped.fetchall() if fetch else wrapped.rowcount
    # What Django's CursorWrapper does around a statement.
    if connection.needs_rollback:
        connection.validate_no_broken_transaction()  # raises
    with connection.wrap_database_errors:
        return run_hot(connection.connection, hot, params, fetch)


_HOT_CURSORS = 64
"""Statement texts whose cursors a connection keeps (a few per statement shape)."""


class HotStatement:
    """One hot statement text as kept on a connection: its preparing psycopg cursor,
    and what :func:`run_hot` needs to run it on libpq directly."""

    __slots__ = ("cursor", "formats", "make_row", "nparams", "pg_text", "query", "sql", "tx")

    cursor: Any
    """The server-binding psycopg cursor kept for the text (see :func:`hot_cursor`)."""
    sql: str
    """The text as first stored (psycopg keeps its dumpers while it sees it again)."""
    query: bytes
    """The text encoded as the connection's client encoding, placeholders ``%s``."""
    pg_text: bytes | None
    """The text with PostgreSQL's ``$n`` placeholders, as psycopg prepares it; None
    when :func:`run_hot` leaves the statement to the cursor (preparing off, or
    placeholders by name)."""
    nparams: int
    """How many parameters the text takes."""
    formats: list[Any]
    """psycopg's wanted format for each parameter (``PyFormat``: AUTO for ``%s``)."""
    tx: Any
    """psycopg's transformer on the cursor's adapters: it dumps the parameters and
    loads the rows exactly as the cursor would (same dumpers, same loaders)."""
    make_row: Any
    """The cursor's row maker (``tuple`` with psycopg's default row factory)."""


def hot_cursor(connection: Any, sql: str) -> tuple[Any, str, bytes]:
    """The cursor kept for ``sql`` on ``connection`` (a preparing psycopg cursor), the
    text as first stored, and that text encoded as the connection's client encoding.

    psycopg keeps a cursor's parameter dumpers while it runs the identical text
    object again, hence the stored text. The cursors belong to the connection they
    were made on: when Django replaces its connection, they are dropped with it.
    """
    hot = hot_statement(connection, sql)
    return hot.cursor, hot.sql, hot.query


def hot_statement(connection: Any, sql: str) -> HotStatement:
    """What ``connection`` keeps for the statement text ``sql`` (:class:`HotStatement`),
    made on first use: the cursor, the encoded and converted texts, the transformer.
    Opens the connection if Django has closed it."""
    raw = connection.connection
    if raw is None:
        connection.ensure_connection()
        raw = connection.connection
    kept = connection.__dict__.get("_criogen_cursors")
    if kept is None or kept[0] is not raw:
        kept = connection.__dict__["_criogen_cursors"] = (raw, {})
    statements: dict[str, HotStatement] = kept[1]
    hot = statements.get(sql)
    if hot is not None and not hot.cursor.closed:
        return hot
    with connection.wrap_database_errors:
        cursor, prepare = _server_cursor(connection)
    if len(statements) >= _HOT_CURSORS:
        for old in statements.values():
            old.cursor.close()
        statements.clear()
    hot = HotStatement()
    hot.cursor, hot.sql = cursor, sql
    # The bytes psycopg would encode the text to on every execute (and hash, for its
    # statement caches); once here, its hash is kept with it.
    hot.query = sql.encode(raw.info.encoding)
    hot.pg_text, hot.nparams, hot.formats = None, 0, []
    query2pg = _psycopg_internals(raw) if prepare else None
    if query2pg is not None:
        # psycopg's own conversion of the text (its cached one): the same $n text
        # and so the same prepared statement as its cursor would make, and the format
        # of each parameter (%s: as its dumper prefers, %b: binary, %t: text).
        pg_text, formats, order, _ = query2pg(hot.query, raw.info.encoding)
        if order is None:  # placeholders by position, not by name
            hot.pg_text, hot.nparams, hot.formats = pg_text, len(formats), formats
    if hot.pg_text is not None:
        from psycopg import adapt

        hot.tx = adapt.Transformer(cursor)
    else:
        hot.tx = None
    hot.make_row = cursor.row_factory(cursor)
    statements[sql] = hot
    return hot


def run_hot(raw: Any, hot: HotStatement, params: Sequence[Any], fetch: bool) -> Any:
    """Run ``hot`` on psycopg connection ``raw`` through libpq; its rows or row count.

    What psycopg's cursor does for a prepared statement, without its generators:
    the parameters dumped by psycopg's transformer, the statement prepared once per
    connection under a name of psycopg's own prepared-statement cache (so a
    ``ROLLBACK`` or ``DISCARD ALL`` that psycopg sees forgets it, and psycopg's cache
    size and maintenance apply), then ``PQexecPrepared``, which releases the GIL while
    it waits, under the connection's lock; the rows loaded by the transformer, and a
    failed result raised as the exception psycopg builds from it
    (``psycopg.errors.error_from_result``). The caller holds Django's
    ``wrap_database_errors``. The first statement of a transaction (autocommit off
    and no transaction open: psycopg sends its ``BEGIN``), a statement psycopg would
    not prepare and a wrong parameter count go through the cursor instead.

    A server that lost the statement (SQLSTATE 26000: a ``DEALLOCATE ALL`` psycopg
    did not see) makes psycopg forget its statements; outside a transaction the
    statement is prepared again and run once more, inside one it raises (the
    transaction is aborted) and the next transaction prepares again.
    """
    pgconn = raw.pgconn
    if (
        hot.pg_text is None
        or len(params) != hot.nparams
        or (not raw.autocommit and pgconn.transaction_status == _IDLE)
    ):
        cur = hot.cursor
        cur.execute(hot.query, params)
        return cur.fetchall() if fetch else cur.rowcount
    tx = hot.tx
    with raw.lock:
        values = tx.dump_sequence(params, hot.formats)
        result = _exec_prepared(raw, pgconn, hot.pg_text, tx.types or (), values, tx.formats)
        if result.status == _FATAL_ERROR and result.error_field(_SQLSTATE) == b"26000":
            raw._prepared.clear()
            if pgconn.transaction_status != _IDLE:
                raise _error(result, tx, pgconn)
            raw.wait(raw._prepared.maintain_gen(raw))
            result = _exec_prepared(raw, pgconn, hot.pg_text, tx.types or (), values, tx.formats)
        status = result.status
        if status == _TUPLES_OK:
            if not fetch:
                return result.ntuples
            tx.set_pgresult(result)  # the transformer is the statement's: under the lock
            return tx.load_rows(0, result.ntuples, hot.make_row)
        if status == _COMMAND_OK and not fetch:
            count = result.command_tuples
            return count if count is not None else -1
    if status == _FATAL_ERROR:
        raise _error(result, tx, pgconn)
    raise _unexpected(result)


def _exec_prepared(
    raw: Any, pgconn: Any, text: bytes, types: tuple[int, ...], values: Any, formats: Any
) -> Any:
    """``PQexecPrepared`` of ``text`` with these parameter types, prepared first if
    psycopg's prepared-statement cache of ``raw`` does not hold it (its bookkeeping
    as its cursor does it); the result, failed or not. Called under ``raw.lock``."""
    manager = raw._prepared
    key = (text, types)
    name = manager._names.get(key)
    if name is not None:
        result = pgconn.exec_prepared(name, values, formats)
        manager._names.move_to_end(key)  # psycopg's cache is least-recently-used
    else:
        from psycopg._preparing import Prepare

        if manager._to_flush:  # a DEALLOCATE pending: before a new statement, not after
            raw.wait(manager.maintain_gen(raw))
        query = _Query(text, types)
        prep, name = manager.get(query, True)
        if prep is Prepare.NO:  # preparing turned off on the connection since
            return pgconn.exec_params(text, values, types, formats)
        if prep is Prepare.SHOULD:
            prepared = pgconn.prepare(name, text, types)
            if prepared.status == _FATAL_ERROR:
                return prepared
        result = pgconn.exec_prepared(name, values, formats)
        added = manager.maybe_add_to_cache(query, prep, name)
        if added is not None:
            manager.validate(added, prep, name, (result,))
        if manager._to_flush:  # psycopg's cache rotated: deallocate the oldest
            raw.wait(manager.maintain_gen(raw))
    # What psycopg does after every result: hand LISTEN notifications to the handler.
    while notify := pgconn.notifies():
        if pgconn.notify_handler:
            pgconn.notify_handler(notify)
    return result


_PREPARED_FIELDS = ("_names", "_to_flush", "maintain_gen", "get", "maybe_add_to_cache", "validate")
"""What :func:`_exec_prepared` uses of psycopg's prepared-statement cache."""


@functools.cache
def _psycopg_modules() -> Any:
    """psycopg's private ``_query2pg`` (its conversion of a query to ``$n`` placeholders
    and parameter formats), or None when this psycopg has other private modules."""
    try:
        from psycopg._preparing import Prepare
        from psycopg._queries import _query2pg
    except ImportError:
        return None
    if not {"NO", "SHOULD"} <= set(Prepare.__members__):
        return None
    return _query2pg


def _psycopg_internals(raw: Any) -> Any:
    """What :func:`run_hot` needs of psycopg's internals (:func:`_psycopg_modules`),
    or None when this psycopg or this connection lacks any of it: the statements then
    run on the cursor, as with preparing off. The pieces are private, so the project
    allows the psycopg releases its tests ran on (``pyproject.toml``), and this check
    keeps another one working, on the slower path."""
    query2pg = _psycopg_modules()
    manager = getattr(raw, "_prepared", None)
    if query2pg is None or not all(hasattr(manager, name) for name in _PREPARED_FIELDS):
        return None
    return query2pg


class _Query:
    """The two fields psycopg's prepared-statement cache reads of a query."""

    __slots__ = ("query", "types")

    def __init__(self, query: bytes, types: tuple[int, ...]) -> None:
        self.query = query
        self.types = types


def _error(result: Any, tx: Any, pgconn: Any) -> Exception:
    """The psycopg exception of a failed result, as its cursor raises it.

    A connection lost while the statement was sent or awaited gives a result without
    SQLSTATE (libpq's own message) that psycopg would make a bare ``DatabaseError``;
    its cursor, reading the socket itself, raises ``OperationalError`` (or
    ``AdminShutdown`` when the server's last message came first), as this does.
    """
    import psycopg
    from psycopg.errors import error_from_result

    if result.error_field(_SQLSTATE) is None and pgconn.status == _BAD:
        message = (result.error_message or b"").decode(tx.encoding, "replace").strip()
        return psycopg.OperationalError(f"consuming input failed: {message}")
    return error_from_result(result, encoding=tx.encoding)


def _unexpected(result: Any) -> Exception:
    """What psycopg's cursor raises for a result that is neither rows, nor a command's
    count, nor an error: rows asked of a command (``fetchall``), or another status."""
    import psycopg
    from psycopg import pq

    if result.status == _COMMAND_OK:
        status = (result.command_status or b"").decode()
        return psycopg.ProgrammingError(
            f"the last operation didn't produce records (command status: {status})"
        )
    return psycopg.InternalError(
        f"unexpected result status from query: {pq.ExecStatus(result.status).name}"
    )


_IDLE = 0  # psycopg.pq.TransactionStatus.IDLE
_BAD = 1  # psycopg.pq.ConnStatus.BAD
_COMMAND_OK = 1  # psycopg.pq.ExecStatus
_TUPLES_OK = 2
_FATAL_ERROR = 7
_SQLSTATE = ord("C")  # psycopg.pq.DiagnosticField.SQLSTATE
_cursor_classes: dict[bool, Any] = {}
_PREPARE_ONLY_WHEN_ASKED = 2**31 - 1


def _server_cursor(connection: Any) -> tuple[Any, bool]:
    """A server-binding psycopg cursor on Django's connection, preparing by default,
    and whether it prepares."""
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
    return cls(raw), prepare
