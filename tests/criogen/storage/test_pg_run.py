"""pg_run: a hot statement on psycopg's cursor itself, past Django's CursorWrapper.

The fast path must answer as the general one does (Django's cursor, taken when
``execute_wrappers`` are installed or queries are logged) and keep what the wrapper
gave: Django's exceptions, and the statements an execute wrapper sees.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, connections
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
