"""The reliability suite's figures and servers.

Every test here feeds one session-wide :class:`Figures` collector (crashes injected and
recovered, checkpoints lost, duplicate decisions applied, bad inputs tried and the 5xx
they caused, isolation checks passed); ``pytest_terminal_summary`` prints the table at
the end of the session, which is what ``make reliability`` shows.

The long tests (many crashes, hundreds of runs) run only with
``CRIOGEN_RELIABILITY_FULL=1`` (``make reliability`` sets it); without it a small fast
subset of each runs, so the normal ``pytest`` stays quick.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import Server, start_server, stop_server
from tests.conftest import PASSWORD

FULL = os.environ.get("CRIOGEN_RELIABILITY_FULL", "") == "1"
"""The full suite (``make reliability``) rather than the fast subset."""

OPERATOR_PASSWORD = PASSWORD
"""olga's password: the one cast's (tests/conftest.py), on every server."""


def scale(full: int, fast: int) -> int:
    """``full`` repetitions under ``make reliability``, ``fast`` in the normal run."""
    return full if FULL else fast


@dataclass
class Figures:
    """What the suite did and what went wrong (the bad ones must stay 0)."""

    crashes_injected: int = 0
    crashes_recovered: int = 0
    runs_taken_back_by_the_reaper: int = 0
    celery_crashes_injected: int = 0
    celery_crashes_recovered: int = 0
    dead_worker_recovery_seconds: list[float] = field(default_factory=list)
    """From a worker's SIGKILL until another worker has claimed its run (default
    settings); printed as min / median / p95 / max."""
    redis_outages_survived: int = 0
    connection_losses_handed_back: int = 0
    checkpoints_lost: int = 0
    duplicate_decisions_applied: int = 0
    concurrent_requests: int = 0
    refused_cleanly: int = 0
    bad_inputs_tried: int = 0
    bad_inputs_5xx: int = 0
    nul_inputs_tried: int = 0
    nul_inputs_5xx: int = 0
    isolation_checks_passed: int = 0
    security_checks_passed: int = 0
    csrf_checks_passed: int = 0
    escaping_checks_passed: int = 0
    encryption_checks_passed: int = 0
    webhooks_to_internal_addresses_tried: int = 0
    webhooks_to_internal_addresses_refused: int = 0
    webhooks_to_internal_addresses_delivered: int = 0


FIGURES = Figures()


@pytest.fixture(scope="session")
def figures() -> Figures:
    """The session's figures collector."""
    return FIGURES


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.reliability)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if Figures() == FIGURES:
        return  # no reliability test ran in this session
    tr = terminalreporter
    tr.section("reliability figures" + (" (full)" if FULL else " (fast subset)"))
    width = max(len(f.name) for f in fields(Figures))
    for f in fields(Figures):
        value = getattr(FIGURES, f.name)
        if isinstance(value, list):
            value = _spread(value)
        tr.write_line(f"{f.name.replace('_', ' '):<{width}}  {value:>6}")


def _spread(samples: list[float]) -> str:
    """``min / median / p95 / max (n)`` of timings, or ``-`` when none was taken."""
    from tests.reliability.helpers import percentile

    if not samples:
        return "-"
    figures = (min(samples), percentile(samples, 50), percentile(samples, 95), max(samples))
    return " / ".join(f"{x:.1f}" for x in figures) + f" s (min/median/p95/max of {len(samples)})"


def _fresh_database(prefix: str) -> Any:
    """A PostgreSQL database of its own (URL), dropped afterwards: a copy of the
    session's migrated template with the cast (``tests.servers.fresh_postgres``)."""
    from tests.servers import fresh_postgres

    return fresh_postgres(prefix)


@pytest.fixture(scope="session")
def rel_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The API and dashboard server on a PostgreSQL database of its own, auth on (the
    cast signs in to the dashboard with its one password). Its own database: the
    reliability tests count rows and kill runs that other suites' servers would see."""
    with _fresh_database("criogen_test_rel_server") as database_url:
        tmp = tmp_path_factory.mktemp("reliability")
        srv = start_server(database_url, tmp)
        yield srv
        stop_server(srv)


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[Any]:
    """A ``redis-server`` of the test's own on a free port (never the shared one), which
    the test may kill and start again: a :class:`tests.reliability.helpers.RedisServer`."""
    from tests.conftest import need_service
    from tests.reliability.helpers import RedisServer, redis_server_available

    need_service("redis-server", redis_server_available(), "apt-get install -y redis-server")
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()


@pytest.fixture
def own_database() -> Iterator[str]:
    """A fresh PostgreSQL database of the test's own, dropped afterwards. For tests whose
    recovery must be their own: the session database's other servers run a reaper that
    would take their dead runs back."""
    with _fresh_database("criogen_test_rel") as database_url:
        yield database_url


@pytest.fixture
def olga_dashboard(rel_server: Server) -> Iterator[httpx.Client]:
    """An HTTP client signed in to the dashboard as olga, closed after the test."""
    from tests.reliability.helpers import dashboard_session

    client = dashboard_session(rel_server)
    yield client
    client.close()
