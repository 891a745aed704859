"""Shared checks for the reliability suite: direct looks at the database (versions,
decisions, the effect ledger) and a signed-in dashboard session over HTTP."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import psycopg

from tests.api.conftest import Server
from tests.reliability.conftest import OPERATOR_PASSWORD, Figures


def pg(database_url: str) -> psycopg.Connection[Any]:
    """An autocommit connection to the server's PostgreSQL database."""
    return psycopg.connect(database_url.replace("postgres://", "postgresql://"), autocommit=True)


def versions(database_url: str, thread_id: str) -> list[int]:
    """The thread's checkpoint versions, ascending."""
    with pg(database_url) as db:
        rows = db.execute(
            "SELECT version FROM criogen_checkpoint WHERE thread_id = %s ORDER BY version",
            (thread_id,),
        ).fetchall()
    return [r[0] for r in rows]


def check_contiguous(database_url: str, thread_id: str, figures: Figures) -> list[int]:
    """Assert the thread's versions are 1..N with no gap or duplicate, and that its head
    is the last one; a gap counts as lost checkpoints in the figures."""
    got = versions(database_url, thread_id)
    expected = list(range(1, len(got) + 1))
    if got != expected:
        figures.checkpoints_lost += len(set(expected) - set(got)) or 1
    assert got == expected, f"versions of {thread_id}: {got}"
    with pg(database_url) as db:
        (head,) = db.execute(
            "SELECT head_version FROM criogen_thread WHERE id = %s", (thread_id,)
        ).fetchone() or (None,)
    assert head == (got[-1] if got else 0), f"head {head} but versions {got[-3:]}"
    return got


def wait_idle(server: Server, thread_id: str, who: str = "alice", timeout: float = 60) -> str:
    """Wait until the thread has no pending or running run; its final status."""
    deadline = time.monotonic() + timeout
    with server.http(who) as http:
        while True:
            status = http.get(f"/threads/{thread_id}").json()["status"]
            if status != "busy" or time.monotonic() > deadline:
                return str(status)
            time.sleep(0.1)


def dashboard_session(server: Server) -> httpx.Client:
    """An HTTP client signed in to the dashboard as the operator olga (CSRF-checked)."""
    client = httpx.Client(base_url=server.url, timeout=60)
    page = client.get("/accounts/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token, page.text[:500]
    done = client.post(
        "/accounts/login/",
        data={
            "username": "olga",
            "password": OPERATOR_PASSWORD,
            "csrfmiddlewaretoken": token.group(1),
        },
        headers={"Referer": server.url + "/accounts/login/"},
    )
    assert done.status_code in (200, 302) and "sessionid" in client.cookies, done.text[:300]
    return client
