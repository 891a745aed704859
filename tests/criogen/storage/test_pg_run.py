"""pg_run: a hot statement on psycopg's cursor itself, past Django's CursorWrapper.

The fast path must answer as the general one does (Django's cursor, taken when
``execute_wrappers`` are installed or queries are logged) and keep what the wrapper
gave: Django's exceptions, and the statements an execute wrapper sees.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from django.db import (
    DatabaseError,
    IntegrityError,
    OperationalError,
    ProgrammingError,
    connections,
    transaction,
)
from django.test.utils import CaptureQueriesContext

from criogen import Storage
from criogen.storage.orm.base import pg_run

pytestmark = pytest.mark.postgres

_SQL = "SELECT %s::int + 1, %s::text"


@pytest.fixture
def alias(postgres_url: str, django_db_blocker: Any) -> Any:
    """The alias of the session's PostgreSQL database."""
    with django_db_blocker.unblock():
        yield Storage(postgres_url).alias


def test_the_fast_path_answers_as_djangos_cursor_does(alias: str) -> None:
    fast = pg_run(alias, _SQL, [1, "a"], fetch=True)
    seen: list[str] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    connection = connections[alias]
    with connection.execute_wrapper(wrapper):
        wrapped = pg_run(alias, _SQL, [1, "a"], fetch=True)
    with CaptureQueriesContext(connection) as logged:
        general = pg_run(alias, _SQL, [1, "a"], fetch=True)
    assert [tuple(r) for r in fast] == [tuple(r) for r in wrapped] == [tuple(r) for r in general]
    assert fast == [(2, "a")]
    assert seen == [_SQL]
    assert len(logged.captured_queries) == 1
    assert pg_run(alias, "SELECT 1 WHERE false", [], fetch=False) == 0


def test_the_fast_path_raises_djangos_exceptions(alias: str) -> None:
    connection = connections[alias]
    pg_run(
        alias, "CREATE TEMP TABLE IF NOT EXISTS pg_run_probe (id int PRIMARY KEY)", [], fetch=False
    )
    pg_run(alias, "INSERT INTO pg_run_probe VALUES (%s)", [1], fetch=False)
    with pytest.raises(IntegrityError):
        pg_run(alias, "INSERT INTO pg_run_probe VALUES (%s)", [1], fetch=False)
    # The connection goes on serving (autocommit: the failed statement rolled back).
    assert connection.get_autocommit()
    assert pg_run(alias, "SELECT count(*) FROM pg_run_probe", [], fetch=True) == [(1,)]
    pg_run(alias, "DROP TABLE pg_run_probe", [], fetch=False)


def _through_the_cursor(alias: str, sql: str, params: list[Any], *, fetch: bool) -> Any:
    """The statement on psycopg's preparing cursor, as before libpq was called directly
    (an execute wrapper sends pg_run there)."""

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        return execute(sql, params, many, context)

    with connections[alias].execute_wrapper(wrapper):
        return pg_run(alias, sql, params, fetch=fetch)


def _prepared(alias: str, sql_start: str) -> int:
    """How many statements the server holds prepared whose text starts so."""
    rows = _through_the_cursor(
        alias,
        "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
        [sql_start + "%"],
        fetch=True,
    )
    return int(rows[0][0])


_TYPES = (
    "SELECT %s::int, %s::bigint, %s::text, %s::bool, %s::float8, %s::numeric,"
    " %s::timestamptz, %s::jsonb, %s::bytea, %s::text, %s::uuid, %s::int[], %s, %s"
)


def test_the_fast_path_dumps_and_loads_as_the_cursor_does(alias: str) -> None:
    params = [
        7,
        2**40,
        "é'\\x",
        True,
        0.1,
        "1.50",
        datetime(2026, 12, 2, 11, 0, 0, 123456, tzinfo=UTC),
        '{"a": [1, 2.5, null]}',
        b"\x00\xff",
        None,
        "2b1d4f3e-8a7c-4c1e-9f0a-1234567890ab",
        [1, 2],
        "plain",
        42,
    ]
    fast = pg_run(alias, _TYPES, params, fetch=True)
    before = _through_the_cursor(alias, _TYPES, params, fetch=True)
    assert fast == before
    assert [type(v) for v in fast[0]] == [type(v) for v in before[0]]
    assert fast[0][0] == 7 and fast[0][6] == params[6] and fast[0][9] is None


def test_a_statement_is_prepared_again_after_deallocate_all(alias: str) -> None:
    connection = connections[alias]
    sql = "SELECT %s::int * 3"
    assert pg_run(alias, sql, [2], fetch=True) == [(6,)]
    assert _prepared(alias, "SELECT $1::int * 3") == 1
    # Behind psycopg's back (its cache still names the statement): the server answers
    # 26000, and outside a transaction the statement is prepared again and run.
    connection.connection.pgconn.exec_(b"DEALLOCATE ALL")
    assert pg_run(alias, sql, [3], fetch=True) == [(9,)]
    assert _prepared(alias, "SELECT $1::int * 3") == 1
    # Inside a transaction the statement cannot run again (the transaction is
    # aborted): it raises, and the next transaction prepares again.
    connection.connection.pgconn.exec_(b"DEALLOCATE ALL")
    with pytest.raises(ProgrammingError), transaction.atomic(using=alias):
        pg_run(alias, "SELECT 1", [], fetch=True)  # opens the transaction
        pg_run(alias, sql, [4], fetch=True)
    with transaction.atomic(using=alias):
        pg_run(alias, "SELECT 1", [], fetch=True)
        assert pg_run(alias, sql, [5], fetch=True) == [(15,)]
    # Seen by psycopg (a DEALLOCATE ALL through a cursor): nothing fails at all.
    with connection.cursor() as cur:
        cur.execute("DEALLOCATE ALL")
    with transaction.atomic(using=alias):
        pg_run(alias, "SELECT 1", [], fetch=True)
        assert pg_run(alias, sql, [6], fetch=True) == [(18,)]


def test_an_integrity_error_inside_and_outside_atomic(alias: str) -> None:
    create = "CREATE TEMP TABLE IF NOT EXISTS pg_run_unique (id int PRIMARY KEY)"
    pg_run(alias, create, [], fetch=False)
    insert = "INSERT INTO pg_run_unique VALUES (%s)"
    count = "SELECT count(*) FROM pg_run_unique"
    assert pg_run(alias, insert, [1], fetch=False) == 1
    with pytest.raises(IntegrityError):
        pg_run(alias, insert, [1], fetch=False)
    with transaction.atomic(using=alias):
        pg_run(alias, insert, [2], fetch=False)
        with pytest.raises(IntegrityError), transaction.atomic(using=alias):
            pg_run(alias, insert, [1], fetch=False)
        # The savepoint rolled back; the transaction goes on.
        assert pg_run(alias, count, [], fetch=True) == [(2,)]
    kinds = []
    for run in (pg_run, _through_the_cursor):
        with pytest.raises(IntegrityError), transaction.atomic(using=alias):
            pg_run(alias, insert, [3], fetch=False)
            with pytest.raises(IntegrityError):
                run(alias, insert, [1], fetch=False)
            # The server refuses the aborted transaction's next statement, as before.
            with pytest.raises(DatabaseError) as after:
                run(alias, count, [], fetch=True)
            kinds.append(type(after.value))
            raise IntegrityError("roll back")
    assert kinds[0] is kinds[1]
    assert connections[alias].get_autocommit()
    assert pg_run(alias, count, [], fetch=True) == [(2,)]
    pg_run(alias, "DROP TABLE pg_run_unique", [], fetch=False)


def test_a_terminated_backend_surfaces_as_before(alias: str) -> None:
    connection = connections[alias]
    for run in (pg_run, _through_the_cursor):
        run(alias, "SELECT %s::int", [1], fetch=True)
        pid = connection.connection.info.backend_pid
        with psycopg.connect(connection.connection.info.dsn, autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", [pid])
        with pytest.raises(OperationalError) as failed:
            run(alias, "SELECT %s::int", [1], fetch=True)
        # psycopg's cursor raises AdminShutdown when the server's farewell is read
        # before the socket fails; both are its OperationalError, Django's above.
        assert isinstance(failed.value.__cause__, psycopg.OperationalError)
        assert connection.errors_occurred
        assert not connection.is_usable()
        connection.close_if_unusable_or_obsolete()  # what Django does after a request
        assert run(alias, "SELECT %s::int", [2], fetch=True) == [(2,)]


def test_a_psycopg_without_the_internals_runs_on_the_cursor(
    alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from criogen.storage.orm import base

    connection = connections[alias]
    # Closed, as a test before may leave it (it failed so once): the statement opens it.
    connection.close()
    connection.__dict__.pop("_criogen_cursors", None)  # statements made again below
    monkeypatch.setattr(base, "_psycopg_modules", lambda: None)
    sql = "SELECT %s::int * 5, %s::text"
    assert base.hot_statement(connection, sql).pg_text is None
    assert pg_run(alias, sql, [2, "x"], fetch=True) == [(10, "x")]
    assert _prepared(alias, "SELECT $1::int * 5") == 1  # still prepared, by the cursor
    with pytest.raises(ProgrammingError):
        pg_run(alias, "SELECT %s::int / 0 FROM no_such_table", [1], fetch=True)
    connection.__dict__.pop("_criogen_cursors", None)
