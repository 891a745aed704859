"""Fixtures of the dashboard tests: graphs, threads waiting for a person, live servers.

The personas are the one cast of ``tests/conftest.py`` (``operator``: olga, may act
through ``criogen.operate``, not staff; ``viewer``: vera, may only look, and only at
threads she owns; ``stranger``: sam, sees nothing of the others' threads).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from criogen import registry
from criogen.storage.models import Thread
from tests.conftest import client_for

__all__ = ["TEST_ASSISTANTS", "client_for", "new_thread_id", "redis_available"]

TEST_ASSISTANTS = {
    "steps": "criogen.examples.steps:workflow",
    "hitl": "criogen.examples.hitl:workflow",
    "refunds": "tests.dashboard.graphs:agent",
    "flaky": "tests.dashboard.graphs:flaky",
}


@pytest.fixture(autouse=True)
def _graphs(settings: Any) -> Iterator[None]:
    """The example workflows plus the refunds agent, bound to the test database."""
    settings.CRIOGEN_ASSISTANTS = TEST_ASSISTANTS
    registry.reset()
    yield
    registry.reset()


# The personas (olga and oscar operators, vera a viewer, sam a stranger) are the one cast
# of tests/conftest.py; its fixtures ``operator``, ``operator2``, ``viewer``, ``stranger``,
# ``as_operator``, ``as_viewer`` and ``client_for`` (re-exported here) serve these tests.


def new_thread_id(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def suspended_workflow(db: None) -> Callable[..., Thread]:
    """Make a ``hitl`` thread suspended at ``ask`` (run through ``Storage.default()``)."""

    def make(*, owner: User | None = None, n: int = 1, thread_id: str | None = None) -> Thread:
        tid = thread_id or new_thread_id("wf")
        registry.get_graph("hitl").thread(tid).run({"n": n}, durability="sync")
        Thread.objects.filter(pk=tid).update(owner=owner, metadata={"graph_id": "hitl"})
        return Thread.objects.get(pk=tid)

    return make


@pytest.fixture
def waiting_agent(db: None) -> Callable[..., Thread]:
    """Make a ``refunds`` agent thread waiting for approval of ``issue_refund``."""

    def make(
        *,
        owner: User | None = None,
        text: str = "refund order 42 of 10 EUR",
        thread_id: str | None = None,
    ) -> Thread:
        tid = thread_id or new_thread_id("ag")
        registry.get_graph("refunds").thread(tid).run(text, durability="sync")
        Thread.objects.filter(pk=tid).update(owner=owner, metadata={"graph_id": "refunds"})
        return Thread.objects.get(pk=tid)

    return make


@pytest.fixture
def failed_thread(db: None) -> Callable[..., Thread]:
    """Make a ``flaky`` thread whose run failed (its head is a failure checkpoint)."""

    def make(*, owner: User | None = None) -> Thread:
        from criogen.engine.errors import RunFailed

        tid = new_thread_id("fail")
        with pytest.raises(RunFailed):
            registry.get_graph("flaky").thread(tid).run({"explode": True}, durability="sync")
        Thread.objects.filter(pk=tid).update(owner=owner, metadata={"graph_id": "flaky"})
        return Thread.objects.get(pk=tid)

    return make


# -- browser tests ------------------------------------------------------------------------
# A real server (Daphne, in-process runner, its own SQLite file) and Debian's Chromium.

RESULTS = Path(__file__).resolve().parents[2] / "test-results"


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keep each phase's report on the test item, so fixtures can see a failure."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(scope="session")
def dashboard_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The dashboard served by Daphne on a fresh SQLite database (personas olga, oscar,
    vera; see ``live_server``)."""
    from tests import servers

    tmp = tmp_path_factory.mktemp("dashboard")
    server = servers.start_dashboard(f"sqlite://{tmp / 'dashboard.db'}", tmp)
    yield server
    servers.stop(server)


def redis_available() -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture(scope="session")
def pg_dashboard_server(
    tmp_path_factory: pytest.TempPathFactory, postgres_url: str
) -> Iterator[Any]:
    """The dashboard on the session's PostgreSQL database with the Redis channel layer
    (the production setup): live events cross processes through Redis."""
    from tests import servers
    from tests.conftest import START_REDIS, need_service, redis_url

    need_service("Redis", redis_available(), START_REDIS)
    tmp = tmp_path_factory.mktemp("dashboard-pg")
    server = servers.start_dashboard(postgres_url, tmp, REDIS_URL=redis_url("dashboard"))
    yield server
    servers.stop(server)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Headless Debian Chromium (:func:`live_server.headless_chromium`)."""
    from tests.dashboard import live_server

    yield from live_server.headless_chromium()


@pytest.fixture
def signed_in(request: pytest.FixtureRequest, chromium: Any) -> Iterator[Callable[..., Any]]:
    """``signed_in("olga")``: a page of a new browser context signed in as that persona
    (on ``dashboard_server`` unless another server is given).

    When the test fails, every page it opened is saved as a PNG under test-results/.
    """
    from tests.dashboard import live_server

    pages: list[Any] = []

    def make(who: str, server: Any = None, **options: Any) -> Any:
        server = server or request.getfixturevalue("dashboard_server")
        page = live_server.sign_in(chromium, server, who, **options)
        page.set_default_timeout(10_000)
        pages.append(page)
        return page

    yield make
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        RESULTS.mkdir(exist_ok=True)
        for i, page in enumerate(pages):
            # A screenshot is a diagnostic only: a closed page must not hide the failure.
            with contextlib.suppress(Exception):
                page.screenshot(path=str(RESULTS / f"{request.node.name}-{i}.png"), full_page=True)
    for page in pages:
        page.context.close()
