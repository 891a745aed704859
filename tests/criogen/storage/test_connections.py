"""criogen.storage.connections: a thread's connection between its jobs (the API's
database threads, the in-process runner's) is checked only when it may be stale.

With ``CONN_HEALTH_CHECKS`` Django checks a reused connection (a ``SELECT 1`` round
trip) before its first statement after ``close_old_connections``; one that answered
less than ``FRESH_SECONDS`` ago and whose socket is quiet is taken as healthy. These
use a real PostgreSQL connection (the check reads its socket).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from criogen.storage import connections as reuse

pytestmark = pytest.mark.postgres


@pytest.fixture
def connection(postgres_url: str, django_db_blocker: Any) -> Iterator[Any]:
    """A live connection to the session's PostgreSQL database, with health checks."""
    from django.db import connections

    from criogen.storage.setup import database_alias

    with django_db_blocker.unblock():
        conn = connections[database_alias(postgres_url)]
        conn.settings_dict["CONN_HEALTH_CHECKS"] = True
        conn.ensure_connection()
        conn.close_at = time.monotonic() + 60
        yield conn
        conn.close()


def _use(connection: Any) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 2")


def test_a_connection_that_just_answered_is_not_checked_again(connection: Any) -> None:
    _use(connection)
    reuse.mark_used()
    reuse.close_old_connections()
    assert connection.health_check_done


def test_a_connection_idle_for_longer_is_checked(
    connection: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(connection)
    reuse.mark_used()
    monkeypatch.setattr(reuse, "FRESH_SECONDS", 0.0)
    reuse.close_old_connections()
    assert not connection.health_check_done


def test_a_connection_the_server_closed_is_checked_and_replaced(
    connection: Any, postgres_url: str
) -> None:
    _use(connection)
    pid = connection.connection.info.backend_pid
    with psycopg.connect(
        postgres_url.replace("postgres://", "postgresql://"), autocommit=True
    ) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
    time.sleep(0.2)  # the server's goodbye reaches the socket
    reuse.mark_used()
    reuse.close_old_connections()
    assert not connection.health_check_done
    _use(connection)  # the health check found it dead: a new connection answers
    assert connection.connection.info.backend_pid != pid
