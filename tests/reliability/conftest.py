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
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from tests.api.conftest import Server, _manage, start_server, stop_server

FULL = os.environ.get("CRIOGEN_RELIABILITY_FULL", "") == "1"
"""The full suite (``make reliability``) rather than the fast subset."""

OPERATOR_PASSWORD = "reliability-olga-7Qx"  # noqa: S105 - a test persona's password


def scale(full: int, fast: int) -> int:
    """``full`` repetitions under ``make reliability``, ``fast`` in the normal run."""
    return full if FULL else fast


@dataclass
class Figures:
    """What the suite did and what went wrong (the bad ones must stay 0)."""

    crashes_injected: int = 0
    crashes_recovered: int = 0
    runs_taken_back_by_the_reaper: int = 0
    checkpoints_lost: int = 0
    duplicate_decisions_applied: int = 0
    concurrent_requests: int = 0
    refused_cleanly: int = 0
    bad_inputs_tried: int = 0
    bad_inputs_5xx: int = 0
    isolation_checks_passed: int = 0
    security_checks_passed: int = 0


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
        tr.write_line(f"{f.name.replace('_', ' '):<{width}}  {getattr(FIGURES, f.name):>6}")


@pytest.fixture(scope="session")
def rel_server(tmp_path_factory: pytest.TempPathFactory, postgres_url: str) -> Iterator[Server]:
    """The API and dashboard server on the session's PostgreSQL database, auth on,
    with a password for the operator ``olga`` (to sign in to the dashboard)."""
    tmp = tmp_path_factory.mktemp("reliability")
    srv = start_server(postgres_url, tmp)
    _manage(
        srv.env,
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model as g; "
        f"u = g().objects.get(username='olga'); u.set_password({OPERATOR_PASSWORD!r}); "
        "u.save()",
    )
    yield srv
    stop_server(srv)
