"""The real server for the API tests: Daphne serving ``criogen.asgi`` in a subprocess.

Each server gets a fresh database (a new SQLite file, or the session's fresh PostgreSQL
database), is migrated, and has the one cast of personas (tests/conftest.py) with API
tokens; the API tests mostly act as:

- ``alice``: a regular user — sees only her own threads;
- ``bob``: another regular user — must never see alice's threads;
- ``olga``: an operator — sees every thread.

Tests drive it with the official ``langgraph_sdk`` client (async and sync). The server
itself is ``tests.servers``'; the names below are kept for the tests that import them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import servers
from tests.servers import (
    ASGI_SERVERS,
    ROOT,
    UVICORN_OPTIONS,
    Server,
    server_argv,
)
from tests.servers import free_port as _free_port
from tests.servers import manage as _manage
from tests.servers import stop as stop_server

__all__ = [
    "ASGI_SERVERS",
    "ROOT",
    "UVICORN_OPTIONS",
    "Server",
    "_free_port",
    "_manage",
    "server_argv",
    "start_server",
    "stop_server",
]


def start_server(
    database_url: str, tmp: Path, *, asgi_server: str = "daphne", **settings: str
) -> Server:
    """Migrate ``database_url``, create the personas and start ``asgi_server`` (Daphne
    or uvicorn) on a free port, with the API tests' settings (``tests.servers.API_ENV``)
    and ``settings`` on top."""
    return servers.start_api(database_url, tmp, asgi_server=asgi_server, **settings)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The API server on a fresh SQLite database, auth on."""
    tmp = tmp_path_factory.mktemp("api")
    srv = start_server(f"sqlite://{tmp / 'api.db'}", tmp)
    yield srv
    stop_server(srv)


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory, postgres_url: str) -> Iterator[Server]:
    """The API server on the session's fresh PostgreSQL database, auth on."""
    tmp = tmp_path_factory.mktemp("api-pg")
    srv = start_server(postgres_url, tmp)
    yield srv
    stop_server(srv)


@pytest.fixture(scope="session")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with ``CRIOGEN_AUTH_ENABLED=false`` (local development mode) and a
    default thread TTL of 60 minutes, strategy keep_latest."""
    tmp = tmp_path_factory.mktemp("api-open")
    srv = start_server(
        f"sqlite://{tmp / 'open.db'}",
        tmp,
        CRIOGEN_AUTH_ENABLED="false",
        CRIOGEN_THREAD_TTL="60",
        CRIOGEN_THREAD_TTL_STRATEGY="keep_latest",
    )
    yield srv
    stop_server(srv)


@pytest.fixture
async def clients(server: Server) -> AsyncIterator[Callable[[str], Any]]:
    """``clients("bob")``: an async SDK client per persona, closed after the test."""
    made: dict[str, Any] = {}

    def make(who: str) -> Any:
        if who not in made:
            made[who] = server.client(who)
        return made[who]

    yield make
    for c in made.values():
        await c.aclose()


@pytest.fixture
async def client(clients: Callable[[str], Any]) -> Any:
    """alice's async SDK client."""
    return clients("alice")


@pytest.fixture
def sync_client(server: Server) -> Iterator[Any]:
    """alice's sync SDK client."""
    c = server.sync_client("alice")
    yield c
    c.close()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Headless Debian Chromium, one per module (``live_server.headless_chromium``)."""
    from tests.dashboard import live_server

    yield from live_server.headless_chromium()


@pytest.fixture(params=["sqlite", "postgres"])
def any_server(request: pytest.FixtureRequest) -> Server:
    """The session's server on SQLite, then the one on PostgreSQL (marked ``postgres``)."""
    if request.param == "postgres":
        request.applymarker(pytest.mark.postgres)
    name = "server" if request.param == "sqlite" else "pg_server"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


@pytest.fixture
def alice(any_server: Server) -> Iterator[Any]:
    """alice's sync SDK client on :func:`any_server`."""
    client = any_server.sync_client("alice")
    yield client
    client.close()
