"""Shared fixtures: the services, the databases, and the one cast of personas.

The cast (:data:`CAST`), shared by the API, dashboard and reliability suites: the same
people in the test database (the fixtures below) and on every live server
(``tests.servers`` creates them all, with :data:`PASSWORD` and an API token each).

==========  ==========  ==============================================================
name        role        what they may do
==========  ==========  ==============================================================
alice       owner       a regular user: sees and answers only her own threads
bob         owner       another regular user: must never see alice's threads
olga        operator    ``criogen.operate`` (not staff): sees and acts on every thread
oscar       operator    a second operator (races with olga)
vera        viewer      signed in to the dashboard; looks at her own threads, cannot act
sam         stranger    another plain user; must never see vera's threads
ada         admin       staff and superuser: the Django admin, and an operator too
==========  ==========  ==============================================================

Services: PostgreSQL on 127.0.0.1:5432 (database ``test``, user ``postgres``) and
Redis on 127.0.0.1:6379. Outside CI a test that needs a missing service is skipped
with the command that starts it; with ``CI=true`` it fails.
"""

from __future__ import annotations

import atexit
import os
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from criogen import Storage

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
RELIABILITY_FULL = os.environ.get("CRIOGEN_RELIABILITY_FULL", "") == "1"
"""``make reliability``: the long tests run too."""
RELIABILITY_DIR = Path(__file__).parent / "reliability"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test outside tests/reliability marked ``reliability`` repeats, longer or under
    other settings, what a faster test of ``make test`` already shows: it runs under
    ``make reliability`` (``CRIOGEN_RELIABILITY_FULL=1``) only. (Inside tests/reliability
    the marker is on every test, and a fast subset of each runs in ``make test``.)

    ``@pytest.mark.reliability_variants("postgres")`` marks only those parametrized
    variants of a test (an id part equal to one of the names) as such repeats: the
    server-level behaviour is shown by the variant that stays, and the database's own
    code by the storage suites that run on both."""
    for item in items:
        variants = item.get_closest_marker("reliability_variants")
        callspec = getattr(item, "callspec", None)
        chosen = variants is not None and callspec is not None
        if chosen and set(variants.args) & set(callspec.id.split("-")):
            item.add_marker(pytest.mark.reliability)
    if RELIABILITY_FULL:
        return
    skip = pytest.mark.skip(reason="a longer repeat: make reliability runs it")
    for item in items:
        if item.get_closest_marker("reliability") is None:
            continue
        if RELIABILITY_DIR in Path(str(item.fspath)).parents:
            continue
        item.add_marker(skip)


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

WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
"""This test process's number among pytest-xdist's workers (0 when it runs alone)."""

_REDIS_DATABASES = {"streams": 0, "dashboard": 4, "presence": 8, "celery": 12}


def redis_url(purpose: str) -> str:
    """The shared Redis (6379) database that this test process uses for ``purpose``
    (``streams``, ``dashboard``, ``presence`` or ``celery``): each purpose and each
    pytest-xdist worker its own, so that two workers' servers never meet in one
    channel group or queue. Redis has 16 databases: four workers at most."""
    if WORKER >= 4:
        raise RuntimeError("the suite runs on at most 4 pytest-xdist workers (-n 4)")
    return f"redis://127.0.0.1:6379/{_REDIS_DATABASES[purpose] + WORKER}"


@pytest.fixture(autouse=True, scope="session")
def _fast_password_hashing() -> Iterator[None]:
    """In-process tests hash passwords with a fast hasher: each persona, user and login
    of a test would otherwise spend a PBKDF2 (hundreds of ms, seconds on a loaded
    machine) on what no test measures. Live servers keep the project's hashers."""
    from django.conf import settings
    from django.contrib.auth import hashers

    saved = settings.PASSWORD_HASHERS
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher", *saved]
    hashers.get_hashers.cache_clear()
    hashers.get_hashers_by_algorithm.cache_clear()
    yield
    settings.PASSWORD_HASHERS = saved
    hashers.get_hashers.cache_clear()
    hashers.get_hashers_by_algorithm.cache_clear()


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


_doomed: list[str] = []
"""PostgreSQL databases the tests are done with, dropped when the session ends."""


def drop_database_later(name: str) -> None:
    """Drop the PostgreSQL database ``name`` when this process ends rather than now.

    Each ``DROP DATABASE`` makes the server take an immediate checkpoint, which flushes
    every other database's writes too: about 2 s on these machines in the middle of the
    suite, waited for by the teardown that dropped it (135 drops a session). At the end
    the first drop flushes and the rest find little to do. Callers close their own
    Django connections to it first; ``FORCE`` ends any other."""
    if not _doomed:
        atexit.register(_drop_doomed)
    _doomed.append(name)


def _drop_doomed() -> None:
    import psycopg

    names, _doomed[:] = list(_doomed), []
    try:
        with psycopg.connect(f"host={PG_HOST} user=postgres dbname=test", autocommit=True) as c:
            for name in names:
                c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    except psycopg.Error as exc:  # the server is gone: nothing left to clean from here
        print(f"could not drop the test databases {names}: {exc}", file=sys.stderr)


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
    drop_database_later(name)


@contextmanager
def fresh_postgres_database(prefix: str = "criogen_own") -> Iterator[str]:
    """A PostgreSQL database of its own (its URL), dropped afterwards with the Django
    connections to it closed. For tests that migrate backwards, kill connections, or
    must not meet other servers' rows or keys."""
    need_service("PostgreSQL", postgres_available(), START_POSTGRES)
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(f"host={PG_HOST} user=postgres dbname=test", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgres://postgres@{PG_HOST}:5432/{name}"
    finally:
        from django.db import connections

        for alias in list(connections.settings):
            if connections.settings[alias].get("NAME") == name:
                connections[alias].close()
        drop_database_later(name)


@contextmanager
def own_database_url(backend: str, tmp_path: Path, prefix: str = "criogen_own") -> Iterator[str]:
    """A database of the caller's own on ``backend`` (``sqlite``: a new file under
    ``tmp_path``; ``postgres``: :func:`fresh_postgres_database`)."""
    if backend == "sqlite":
        yield f"sqlite://{tmp_path / 'own.db'}"
        return
    with fresh_postgres_database(prefix) as url:
        yield url


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


# -- the cast of personas ------------------------------------------------------------------

PASSWORD = "correct horse battery staple"  # noqa: S105 - the test personas' one password


@dataclass(frozen=True)
class Persona:
    """One person of the cast: a user name and a role."""

    name: str
    role: str
    operator: bool = False
    """Holds ``criogen.operate``: sees and acts on every thread."""
    staff: bool = False
    superuser: bool = False


CAST: tuple[Persona, ...] = (
    Persona("alice", "owner"),
    Persona("bob", "owner"),
    Persona("olga", "operator", operator=True),
    Persona("oscar", "operator", operator=True),
    Persona("vera", "viewer"),
    Persona("sam", "stranger"),
    Persona("ada", "admin", staff=True, superuser=True),
)
"""Everyone the suites act as (see the table at the top of this module)."""

PERSONAS: dict[str, Persona] = {p.name: p for p in CAST}


def make_persona(name: str) -> Any:
    """The user ``name`` of the cast in the current test database (created, or set
    back to its role if a test changed it), with :data:`PASSWORD`."""
    from django.contrib.auth.models import Permission, User

    persona = PERSONAS[name]
    user, _ = User.objects.get_or_create(username=name)
    user.is_staff, user.is_superuser, user.is_active = persona.staff, persona.superuser, True
    user.set_password(PASSWORD)
    user.save()
    if persona.operator:
        user.user_permissions.add(
            Permission.objects.get(codename="operate", content_type__app_label="criogen")
        )
    return user


@pytest.fixture
def persona(db: None) -> Any:
    """``persona("olga")``: that person of the cast, in the test database."""
    return make_persona


@pytest.fixture
def operator(persona: Any) -> Any:
    """Olga, an operator: acts on every thread."""
    return persona("olga")


@pytest.fixture
def operator2(persona: Any) -> Any:
    """Oscar, a second operator (races with Olga)."""
    return persona("oscar")


@pytest.fixture
def viewer(persona: Any) -> Any:
    """Vera: signed in, looks at her own threads, cannot act."""
    return persona("vera")


@pytest.fixture
def stranger(persona: Any) -> Any:
    """Sam: another plain user; must never see Vera's threads."""
    return persona("sam")


@pytest.fixture
def owner(persona: Any) -> Any:
    """Alice: a regular user who owns threads (and answers their suspensions)."""
    return persona("alice")


@pytest.fixture
def other_owner(persona: Any) -> Any:
    """Bob: another regular user; must never see Alice's threads."""
    return persona("bob")


@pytest.fixture
def site_admin(persona: Any) -> Any:
    """Ada: staff and superuser."""
    return persona("ada")


def client_for(user: Any, *, csrf_checks: bool = False) -> Any:
    """A Django test client signed in as ``user``."""
    from django.test import Client

    client = Client(enforce_csrf_checks=csrf_checks)
    client.force_login(user)
    return client


@pytest.fixture
def as_operator(operator: Any) -> Any:
    """A test client signed in as olga."""
    return client_for(operator)


@pytest.fixture
def as_viewer(viewer: Any) -> Any:
    """A test client signed in as vera."""
    return client_for(viewer)
