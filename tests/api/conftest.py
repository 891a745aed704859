"""The real server for the API tests: Daphne serving ``criogen.asgi`` in a subprocess.

Each server gets a fresh database (a new SQLite file, or the session's fresh PostgreSQL
database), is migrated, and has three users with API tokens (the personas):

- ``alice``: a regular user — sees only her own threads;
- ``bob``: another regular user — must never see alice's threads;
- ``olga``: an operator (staff) — sees every thread.

Tests drive it with the official ``langgraph_sdk`` client (async and sync).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client, get_sync_client

ROOT = Path(__file__).resolve().parents[2]

_SETUP = """
import json
from django.core.management import call_command
from django.contrib.auth import get_user_model
from criogen.storage.models import ApiToken
call_command("migrate", interactive=False, verbosity=0, skip_checks=True)
User = get_user_model()
tokens = {}
for name, staff in (("alice", False), ("bob", False), ("olga", True)):
    # The session's PostgreSQL database is shared with other test servers: reuse a persona.
    user, _ = User.objects.get_or_create(username=name, defaults={"is_staff": staff})
    tokens[name] = ApiToken.issue(user, name="tests")[1]
print("TOKENS=" + json.dumps(tokens))
"""


@dataclass
class Server:
    """A running API server and its personas' tokens."""

    url: str
    tokens: dict[str, str]
    database_url: str
    process: subprocess.Popen[bytes]
    log: Path
    env: dict[str, str] = field(default_factory=dict)

    def client(self, who: str = "alice") -> Any:
        """An async ``langgraph_sdk`` client for ``who`` (None: no token)."""
        return get_client(url=self.url, api_key=self.tokens[who] if who else None)

    def sync_client(self, who: str = "alice") -> Any:
        """A sync ``langgraph_sdk`` client for ``who``."""
        return get_sync_client(url=self.url, api_key=self.tokens[who] if who else None)

    def http(self, who: str | None = "alice") -> httpx.Client:
        """A plain HTTP client (for bodies the SDK cannot send)."""
        headers = {"x-api-key": self.tokens[who]} if who else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


ASGI_SERVERS = ("daphne", "uvicorn")
"""The ASGI servers Criogen is tested under (docs/deployment.md)."""

UVICORN_OPTIONS = ("--no-proxy-headers", "--no-access-log")
"""The options docs/deployment.md gives uvicorn (tests/docs checks they are there)."""


def server_argv(asgi_server: str, port: int) -> list[str]:
    """The command line that serves ``criogen.asgi`` on 127.0.0.1:``port``."""
    app = "criogen.asgi:application"
    if asgi_server == "daphne":
        return [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), app]
    if asgi_server == "uvicorn":
        options = ["--host", "127.0.0.1", "--port", str(port), "--lifespan", "on"]
        # As docs/deployment.md runs it: the peer is never rewritten from X-Forwarded-For
        # (CRIOGEN_TRUSTED_PROXIES decides whom to believe).
        return [sys.executable, "-m", "uvicorn", *options, *UVICORN_OPTIONS, app]
    raise ValueError(f"unknown ASGI server {asgi_server!r}; expected one of {ASGI_SERVERS}")


def start_server(
    database_url: str, tmp: Path, *, asgi_server: str = "daphne", **settings: str
) -> Server:
    """Migrate ``database_url``, create the personas and start ``asgi_server`` (Daphne
    or uvicorn) on a free port."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "criogen.settings",
        "DATABASE_URL": database_url,
        "CRIOGEN_AUTH_ENABLED": "true",
        "CONN_MAX_AGE": "0",
        "LOG_LEVEL": "WARNING",
        "CRIOGEN_CRON_TICK_SECONDS": "1",
        # The personas answer their own threads' suspensions in most tests, as a chat
        # front end's user does; test_deciders.py checks the operators-only rule with
        # assistants whose metadata says so.
        "CRIOGEN_DECIDERS": '{"*": ["owners"]}',
        "PYTHONDONTWRITEBYTECODE": "1",
        **settings,
    }
    if "REDIS_URL" not in settings:
        env.pop("REDIS_URL", None)
    # One process migrates and creates the personas (each Django start-up costs).
    out = _manage(env, "shell", "-c", _SETUP)
    tokens = json.loads(out.split("TOKENS=", 1)[1].strip())
    port = _free_port()
    log = tmp / f"server-{port}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
            server_argv(asgi_server, port),
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60  # a shared, busy machine can take this long
    while True:
        try:
            if httpx.get(url + "/ok", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise RuntimeError(f"the API server did not start:\n{log.read_text()[-4000:]}")
        time.sleep(0.1)
    return Server(url, tokens, database_url, process, log, env)


def stop_server(server: Server) -> None:
    """Stop the server started by :func:`start_server`."""
    server.process.terminate()
    try:
        server.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


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
