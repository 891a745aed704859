"""Real servers for the tests: one way to start a Criogen process on a free port.

:func:`start` migrates a database, creates the cast of personas (``tests.conftest.CAST``:
each with the shared password, its role's permissions and an API token), starts an ASGI
server serving ``criogen.asgi`` on 127.0.0.1 and a free port, and returns once the server
answers. The kinds of server:

- ``daphne`` / ``uvicorn``: the ASGI server alone, as docs/deployment.md runs it;
- ``runserver``: Daphne's ``manage.py runserver --noreload`` (the same ASGI application,
  plus ``/static/`` under DEBUG), which the dashboard's browser tests use.

Two presets of settings: :data:`API_ENV` (the API tests: auth on, the project's
settings, crons every second) and :data:`DASHBOARD_ENV` (the dashboard's browser tests:
the test graphs, the in-process runner, audit on). ``tests.api.conftest`` and
``tests.dashboard.live_server`` re-export what they used to define.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import CAST, PASSWORD

ROOT = Path(__file__).resolve().parents[1]

ASGI_SERVERS = ("daphne", "uvicorn")
"""The ASGI servers Criogen is tested under (docs/deployment.md)."""

UVICORN_OPTIONS = ("--no-proxy-headers", "--no-access-log")
"""The options docs/deployment.md gives uvicorn (tests/docs checks they are there)."""

API_ENV: dict[str, str] = {
    "DJANGO_SETTINGS_MODULE": "criogen.settings",
    "CRIOGEN_AUTH_ENABLED": "true",
    "CRIOGEN_CRON_TICK_SECONDS": "1",
    # The personas answer their own threads' suspensions in most tests, as a chat
    # front end's user does; test_deciders.py checks the operators-only rule with
    # assistants whose metadata says so.
    "CRIOGEN_DECIDERS": '{"*": ["owners"]}',
}
"""The API tests' server: the project's settings, auth on."""

DASHBOARD_ENV: dict[str, str] = {
    # The project's settings plus the test graphs (refunds agent, flaky workflow).
    "DJANGO_SETTINGS_MODULE": "tests.dashboard.settings",
    "CRIOGEN_RUNNER": "inprocess",
    "CRIOGEN_AUDIT": "true",
}
"""The dashboard's browser tests' server: runs execute in the server process, and their
checkpoints reach the open pages through its channel layer, as in production."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def manage(env: Mapping[str, str], *args: str, timeout: float = 180) -> str:
    """``manage.py ARGS`` in a subprocess with ``env``; its stdout (RuntimeError with
    the output when it fails)."""
    done = subprocess.run(  # noqa: S603 - our own interpreter and arguments
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def setup_script(*, migrate: bool = True, collectstatic: bool = False) -> str:
    """The ``manage.py shell -c`` code that (migrates and) creates the cast, printing
    ``TOKENS={name: token}``: one process, as each Django start-up costs."""
    cast = [[p.name, p.operator, p.staff, p.superuser] for p in CAST]
    return (
        "import json\n"
        "from django.core.management import call_command\n"
        + (
            'call_command("migrate", interactive=False, verbosity=0, skip_checks=True)\n'
            if migrate
            else ""
        )
        + (
            'call_command("collectstatic", interactive=False, verbosity=0)\n'
            if collectstatic
            else ""
        )
        + "from django.contrib.auth import get_user_model\n"
        "from django.contrib.auth.hashers import make_password\n"
        "from django.contrib.auth.models import Permission\n"
        "from criogen.storage.models import ApiToken\n"
        'operate = Permission.objects.get(codename="operate", content_type__app_label="criogen")\n'
        "tokens = {}\n"
        # One hash for the whole cast (one password): each costs a PBKDF2.
        f"hashed = make_password({PASSWORD!r})\n"
        f"for name, operator, staff, superuser in {cast!r}:\n"
        # The session's PostgreSQL database is shared by several servers: each sets the
        # same persona the same way (one cast, one password).
        "    user, _ = get_user_model().objects.get_or_create(username=name)\n"
        "    user.is_staff, user.is_superuser = staff, superuser\n"
        "    user.password = hashed\n"
        "    user.save()\n"
        "    if operator:\n"
        "        user.user_permissions.add(operate)\n"
        '    tokens[name] = ApiToken.issue(user, name="tests")[1]\n'
        'print("TOKENS=" + json.dumps(tokens))\n'
    )


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
    if asgi_server == "runserver":
        return [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"]
    raise ValueError(
        f"unknown ASGI server {asgi_server!r}; expected one of {(*ASGI_SERVERS, 'runserver')}"
    )


def server_env(database_url: str, preset: Mapping[str, str], **settings: str) -> dict[str, str]:
    """The server's environment: this one's, ``preset``, then ``settings``. The shared
    Redis is left out unless ``settings`` names one (``REDIS_URL``)."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "CONN_MAX_AGE": "0",
        "LOG_LEVEL": "WARNING",
        "PYTHONDONTWRITEBYTECODE": "1",
        **preset,
        **settings,
    }
    if "REDIS_URL" not in settings:
        env.pop("REDIS_URL", None)
    return env


@dataclass
class LiveServer:
    """A running server, its personas' API tokens, its process, log and environment."""

    url: str
    tokens: dict[str, str]
    database_url: str
    process: subprocess.Popen[bytes]
    log: Path
    env: dict[str, str] = field(default_factory=dict)

    def sync_client(self, who: str = "alice") -> Any:
        """A sync ``langgraph_sdk`` client for ``who`` (use it in ``with``)."""
        from langgraph_sdk import get_sync_client

        return get_sync_client(url=self.url, api_key=self.tokens[who] if who else None)

    def http(self, who: str | None = "alice") -> httpx.Client:
        """A plain HTTP client (for bodies the SDK cannot send); None: no token."""
        headers = {"x-api-key": self.tokens[who]} if who else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def manage(self, *args: str) -> str:
        """``manage.py ARGS`` against this server's database and settings."""
        return manage(self.env, *args)


def launch(
    env: dict[str, str],
    tmp: Path,
    *,
    asgi_server: str = "daphne",
    ready: str = "/ok",
    timeout: float = 60,
) -> tuple[subprocess.Popen[bytes], str, Path]:
    """Start ``asgi_server`` with ``env`` on a free port; wait until ``GET ready``
    answers 200 (RuntimeError with the log's end if it dies or ``timeout`` passes).
    Returns the process, its URL and its log file."""
    port = free_port()
    log = tmp / f"{asgi_server}-{port}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
            server_argv(asgi_server, port),
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout  # a shared, busy machine can take this long
    while True:
        try:
            if httpx.get(url + ready, timeout=2).status_code == 200:
                return process, url, log
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            stop_process(process)
            raise RuntimeError(f"{asgi_server} did not start:\n{log.read_text()[-4000:]}")
        time.sleep(0.1)


_template: dict[str, Any] = {}
"""The session's migrated SQLite database with the cast: ``path`` and ``tokens``."""


def _sqlite_path(database_url: str) -> Path | None:
    """The file of a ``sqlite://`` URL, or None for another database."""
    if not database_url.startswith("sqlite://"):
        return None
    return Path(database_url.removeprefix("sqlite://"))


_ready: dict[str, dict[str, str]] = {}
"""PostgreSQL databases made from the session's template: URL -> the cast's tokens."""

_PG_TEMPLATE = f"criogen_template_{os.getpid()}"


def fresh_postgres(prefix: str = "criogen_srv") -> Any:
    """A context manager: a new PostgreSQL database (its URL) already migrated and with
    the cast — a copy (``CREATE DATABASE … TEMPLATE``) of a template this session sets
    up once — dropped afterwards. :func:`start` on it skips the set-up. For servers
    that need a database of their own (they kill its connections, count its rows, or
    must not meet other servers' rows)."""
    from contextlib import contextmanager

    import psycopg

    from tests.conftest import PG_HOST, START_POSTGRES, need_service, postgres_available

    admin = f"host={PG_HOST} user=postgres dbname=test"

    @contextmanager
    def made() -> Any:
        need_service("PostgreSQL", postgres_available(), START_POSTGRES)
        if "pg" not in _template:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{_PG_TEMPLATE}"')
                conn.execute(f'CREATE DATABASE "{_PG_TEMPLATE}"')
            url = f"postgres://postgres@{PG_HOST}:5432/{_PG_TEMPLATE}"
            out = manage(server_env(url, API_ENV), "shell", "-c", setup_script())
            _template["pg"] = json.loads(out.split("TOKENS=", 1)[1].strip())
            _drop(_PG_TEMPLATE)  # when the session ends
        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{_PG_TEMPLATE}"')
        url = f"postgres://postgres@{PG_HOST}:5432/{name}"
        _ready[url] = dict(_template["pg"])
        try:
            yield url
        finally:
            _ready.pop(url, None)
            _drop(name)

    return made()


def run_module_on_postgresql(path: str, env: dict[str, str]) -> Any:
    """Run the test module ``path`` in a pytest of its own whose database is a fresh
    PostgreSQL one (``env`` added to the environment: the module's way to know it is
    the inner run); the completed process. Its test database (``test_<name>``, which
    pytest-django reuses) is a copy of the session's migrated template, so the inner
    run does not migrate from zero, and is dropped afterwards."""
    import os
    import subprocess
    import sys

    import psycopg

    from tests.conftest import PG_HOST

    with fresh_postgres("criogen_inner") as url:
        name = url.rsplit("/", 1)[1]
        with psycopg.connect(f"host={PG_HOST} user=postgres dbname=test", autocommit=True) as c:
            c.execute(f'CREATE DATABASE "test_{name}" TEMPLATE "{name}"')
        try:
            return subprocess.run(  # noqa: S603 - our own interpreter and a test file
                [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "--reuse-db"]
                + ["-x", path],
                env={**os.environ, "DATABASE_URL": url, "PYTHONDONTWRITEBYTECODE": "1", **env},
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
        finally:
            _drop(f"test_{name}")


def _drop(name: str) -> None:
    from tests.conftest import drop_database_later

    drop_database_later(name)


def _from_template(database_url: str) -> dict[str, str] | None:
    """A new SQLite file for ``database_url`` copied from the session's template (one
    ``migrate`` and one cast for every SQLite server of the session, instead of one
    each); its tokens. None when the URL is not a new SQLite file."""
    import shutil
    import sqlite3
    import tempfile

    target = _sqlite_path(database_url)
    if target is None or target.exists():
        return None
    if "path" not in _template:
        folder = tempfile.mkdtemp(prefix="criogen-template-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        path = Path(folder) / "template.db"
        out = manage(server_env(f"sqlite://{path}", API_ENV), "shell", "-c", setup_script())
        _template.update(path=path, tokens=json.loads(out.split("TOKENS=", 1)[1].strip()))
    # SQLite's own copy: consistent even if the template's writer left a WAL behind.
    source, copy = sqlite3.connect(_template["path"]), sqlite3.connect(target)
    try:
        source.backup(copy)
    finally:
        source.close()
        copy.close()
    return dict(_template["tokens"])


def start(
    database_url: str,
    tmp: Path,
    *,
    preset: Mapping[str, str] = API_ENV,
    asgi_server: str = "daphne",
    kind: type[LiveServer] = LiveServer,
    ready: str = "/ok",
    collectstatic: bool = False,
    **settings: str,
) -> Any:
    """Migrate ``database_url``, create the cast, start the server; a ``kind``.

    A new SQLite file is a copy of the session's template (migrated once, with the
    cast); another database is migrated and given the cast by ``manage.py shell``."""
    env = server_env(database_url, preset, **settings)
    tokens = None
    if not collectstatic and not any("ENCRYPTION" in name for name in settings):
        # A database the session's template made (migrated, with the cast): no set-up.
        # With an encryption key the migrations run again under it, as a server does.
        tokens = _ready.get(database_url) or _from_template(database_url)
    if tokens is None:
        out = manage(env, "shell", "-c", setup_script(collectstatic=collectstatic))
        tokens = json.loads(out.split("TOKENS=", 1)[1].strip())
    process, url, log = launch(env, tmp, asgi_server=asgi_server, ready=ready)
    return kind(url, tokens, database_url, process, log, env)


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """Terminate ``process`` (and only it); kill it after 10 s."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def stop(server: LiveServer) -> None:
    """Stop a server :func:`start` started."""
    stop_process(server.process)


# -- the two kinds the suites use ----------------------------------------------------------


class Server(LiveServer):
    """The API tests' server: ``client(who)`` is an async SDK client (alice by default)."""

    def client(self, who: str = "alice") -> Any:
        """An async ``langgraph_sdk`` client for ``who`` (None: no token)."""
        from langgraph_sdk import get_client

        return get_client(url=self.url, api_key=self.tokens[who] if who else None)


class DashboardServer(LiveServer):
    """The dashboard's server: ``client(who)`` is a sync SDK client (olga by default),
    and helpers that leave a thread in a state the pages show."""

    def client(self, who: str = "olga") -> Any:  # type: ignore[override]
        """A sync ``langgraph_sdk`` client acting as ``who`` (use it in ``with``)."""
        return self.sync_client(who)

    def call(self, fn: Any, who: str = "olga") -> Any:
        """``fn(client)`` with a client that is closed afterwards."""
        with self.client(who) as client:
            return fn(client)

    def _start(self, graph_id: str, prefix: str, who: str, **run: Any) -> str:
        thread_id = f"{prefix}-{uuid.uuid4().hex[:10]}"

        def go(client: Any) -> None:
            client.threads.create(thread_id=thread_id, metadata={"graph_id": graph_id})
            made = client.runs.create(thread_id, graph_id, **run)
            client.runs.join(thread_id, made["run_id"])

        self.call(go, who)
        return thread_id

    def start_hitl(self, *, n: int = 1, who: str = "olga", prefix: str = "hitl") -> str:
        """Start a ``hitl`` run on a new thread; return the thread id once it suspended."""
        return self._start("hitl", prefix, who, input={"n": n})

    def start_refund(self, text: str = "refund order 42 of 10 EUR", *, who: str = "olga") -> str:
        """Start a ``refunds`` agent run on a new thread; return it once it waits."""
        message = {"type": "human", "content": text}
        return self._start("refunds", "refund", who, input={"messages": [message]})

    def start_flaky(self, *, who: str = "olga") -> str:
        """Start a ``flaky`` run that fails (its first attempt); return the thread id."""
        thread_id = f"flaky-{uuid.uuid4().hex[:10]}"

        def go(client: Any) -> None:
            client.threads.create(thread_id=thread_id, metadata={"graph_id": "flaky"})
            made = client.runs.create(
                thread_id, "flaky", input={"explode": True, "order": thread_id}
            )
            client.runs.join(thread_id, made["run_id"])

        self.call(go, who)
        return thread_id


def start_api(
    database_url: str, tmp: Path, *, asgi_server: str = "daphne", **settings: str
) -> Server:
    """The API tests' server (:data:`API_ENV`) under Daphne or uvicorn."""
    return start(  # type: ignore[no-any-return]
        database_url, tmp, preset=API_ENV, asgi_server=asgi_server, kind=Server, **settings
    )


def start_dashboard(database_url: str, tmp: Path, **settings: str) -> DashboardServer:
    """The dashboard's server (:data:`DASHBOARD_ENV`) under Daphne's runserver."""
    return start(  # type: ignore[no-any-return]
        database_url,
        tmp,
        preset=DASHBOARD_ENV,
        asgi_server="runserver",
        kind=DashboardServer,
        ready="/accounts/login/",
        **settings,
    )
