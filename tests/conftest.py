"""Shared fixtures.

Services: PostgreSQL on 127.0.0.1:5432 (database ``test``, user ``postgres``) and
Redis on 127.0.0.1:6379. Outside CI a test that needs a missing service is skipped
with the command that starts it; with ``CI=true`` it fails.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from criogen import Storage

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

try:
    from playwright.sync_api import expect as _expect
except ImportError:  # pragma: no cover - playwright is a dev dependency
    pass
else:
    # Browser assertions wait for what they expect; 5 s (Playwright's default) is too
    # short on a loaded 2-core machine running servers, Chromium and the suite at once.
    _expect.set_options(timeout=15_000)
PG_HOST = os.environ.get("CRIOGEN_TEST_PG_HOST", "127.0.0.1")
PG_ADMIN_URL = f"postgres://postgres@{PG_HOST}:5432/test"
START_POSTGRES = "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"
START_REDIS = (
    'redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" '
    "--appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log"
)


def need_service(name: str, available: bool, start: str) -> None:
    """Fail (in CI) or skip (elsewhere) when a service the test needs is down."""
    if available:
        return
    message = f"{name} is not running on 127.0.0.1; start it with: {start}"
    if IN_CI:
        pytest.fail(f"CI=true and {message}")
    pytest.skip(message)


def postgres_available() -> bool:
    import psycopg

    try:
        with psycopg.connect(f"host={PG_HOST} user=postgres dbname=test", connect_timeout=3):
            return True
    except psycopg.OperationalError:
        return False


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, dropped at the end."""
    need_service("PostgreSQL", postgres_available(), START_POSTGRES)
    import psycopg

    name = f"criogen_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(f"host={PG_HOST} user=postgres dbname=test", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield f"postgres://postgres@{PG_HOST}:5432/{name}"
    from django.db import connections

    for alias in list(connections.settings):
        if connections.settings[alias].get("NAME") == name:
            connections[alias].close()
    with psycopg.connect(f"host={PG_HOST} user=postgres dbname=test", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite file for the session (tests keep apart by using their own thread ids)."""
    path: Path = tmp_path_factory.mktemp("sqlite") / "criogen.db"
    return f"sqlite://{path}"


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def storage_url(request: pytest.FixtureRequest) -> str:
    """Each storage backend in turn, as a URL (``memory://`` for memory)."""
    if request.param == "memory":
        return "memory://"
    return str(request.getfixturevalue(f"{request.param}_url"))


@pytest.fixture
def storage(storage_url: str, django_db_blocker: object) -> Iterator[Storage]:
    """The storage contract's subject: a Storage on each backend in turn."""
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        yield Storage(storage_url)


@pytest.fixture
def thread_id() -> str:
    """A thread id no other test uses."""
    return f"t-{uuid.uuid4()}"


@pytest.fixture
def inprocess_runner(settings: object) -> Iterator[object]:
    """The in-process runner with 2 s leases and no background timer; at the end it
    waits for the runs the test started and their outbound calls (they use the test's
    database)."""
    from criogen import outbound, registry, runner

    settings.CRIOGEN_RUNNER = "inprocess"  # type: ignore[attr-defined]
    settings.CRIOGEN_SWEEP_SECONDS = 0  # type: ignore[attr-defined]
    settings.CRIOGEN_LEASE_SECONDS = 2  # type: ignore[attr-defined]
    registry.reset()
    yield runner
    assert runner.drain(timeout=60), "runs were still executing after 60 s"
    assert outbound.drain(timeout=60), "outbound calls were still being sent after 60 s"
    registry.reset()


def celery_worker_argv(
    queue: str, name: str, *, concurrency: int = 2, loglevel: str = "info"
) -> list[str]:
    """The command line of a real ``celery worker`` on ``queue``, as the tests run it:
    this venv's celery, the threads pool, no gossip, mingle or heartbeat (each test's
    workers are alone on their queue)."""
    return [
        str(Path(sys.executable).parent / "celery"),
        *("-A", "criogen", "worker", "--pool", "threads", "--concurrency", str(concurrency)),
        *("-Q", queue, "-n", f"{name}@%h", "--loglevel", loglevel),
        *("--without-heartbeat", "--without-mingle", "--without-gossip"),
    ]
