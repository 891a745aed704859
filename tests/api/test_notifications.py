"""Notifications over the API, on SQLite and PostgreSQL (docs/rest-api.md, "Assistants":
``metadata.notify``): an assistant's webhook gets exactly one Slack-compatible payload
when its run leaves the thread suspended, a 500 is retried, every attempt is recorded,
the suspension is in the audit log, and a bad setting is a 422 naming the field.

The server allows 127.0.0.2 only (``CRIOGEN_OUTBOUND_ALLOW``); the e-mail side is
tested in process with Django's locmem backend (tests/criogen/services/
test_notifications.py).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import Server, start_server, stop_server
from tests.listeners import Listener


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def notify_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """An API server whose webhooks may reach 127.0.0.2, with a 0.2 s first backoff."""
    tmp = tmp_path_factory.mktemp(f"notify-{request.param}")
    if request.param == "postgres":
        database_url = str(request.getfixturevalue("postgres_url"))
    else:
        database_url = f"sqlite://{tmp / 'notify.db'}"
    srv = start_server(
        database_url,
        tmp,
        CRIOGEN_OUTBOUND_ALLOW="127.0.0.2",
        CRIOGEN_OUTBOUND_ATTEMPTS="3",
        CRIOGEN_OUTBOUND_BACKOFF_SECONDS="0.2",
        CRIOGEN_PUBLIC_URL="https://criogen.example.com/",
    )
    yield srv
    stop_server(srv)


@pytest.fixture
def http(notify_server: Server) -> Iterator[Any]:
    with notify_server.http("olga") as client:  # an operator: creates assistants
        yield client


def attempts(server: Server, thread_id: str) -> list[tuple[Any, ...]]:
    """``(kind, attempt, outcome, status_code)`` of the thread's outbound calls."""
    return select(
        server,
        "SELECT kind, attempt, outcome, status_code FROM criogen_outbound_attempt "
        "WHERE thread_id = {} ORDER BY kind, attempt",
        thread_id,
    )


def select(server: Server, query: str, thread_id: str) -> list[tuple[Any, ...]]:
    """Rows of ``query`` (``{}``: the thread id) from the server's database."""
    url = server.database_url
    if url.startswith("sqlite://"):
        with sqlite3.connect(Path(url.removeprefix("sqlite://"))) as conn:
            return [tuple(r) for r in conn.execute(query.format("?"), (thread_id,))]
    import psycopg

    with psycopg.connect(url) as conn:
        return [tuple(r) for r in conn.execute(query.format("%s"), (thread_id,))]


def wait_for(check: Any, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return found


def suspend(http: Any, assistant_id: str) -> tuple[str, dict[str, Any]]:
    tid = http.post("/threads", json={}).json()["thread_id"]
    response = http.post(
        f"/threads/{tid}/runs/wait", json={"assistant_id": assistant_id, "input": {"n": 1}}
    )
    assert response.status_code == 200, response.text
    assert http.get(f"/threads/{tid}").json()["status"] == "interrupted"
    return tid, response.json()


def test_a_suspension_posts_exactly_one_webhook_with_a_link(
    notify_server: Server, http: Any
) -> None:
    hooks = Listener("127.0.0.2")
    try:
        url = f"http://127.0.0.2:{hooks.port}/hook"
        assistant = http.post(
            "/assistants",
            json={
                "graph_id": "hitl",
                "name": "Approvals",
                "metadata": {"notify": {"webhook": url}},
            },
        ).json()
        tid, _ = suspend(http, assistant["assistant_id"])
        wait_for(lambda: attempts(notify_server, tid))
        time.sleep(0.5)  # a second, duplicate call would have arrived by now
        (hook,) = [r["body"] for r in hooks.received]
    finally:
        hooks.close()
    page = f"https://criogen.example.com/ui/threads/{tid}/"
    assert hook["text"].startswith("Waiting for a decision: approve? (Approvals")
    assert hook["text"].endswith(f"<{page}|open the thread>")
    assert (hook["event"], hook["thread_id"], hook["url"]) == ("suspension", tid, page)
    assert hook["assistant_id"] == assistant["assistant_id"]
    assert (
        hook["checkpoint_id"]
        == http.get(f"/threads/{tid}/state").json()["checkpoint"]["checkpoint_id"]
    )
    assert attempts(notify_server, tid) == [("notify", 1, "delivered", 204)]
    audit = "SELECT actor FROM criogen_audit_event WHERE thread_id = {} AND action = 'notify'"
    assert select(notify_server, audit, tid) == [("system",)]


def test_a_500_is_retried_and_each_attempt_recorded(notify_server: Server, http: Any) -> None:
    hooks = Listener("127.0.0.2", statuses=[500])
    try:
        url = f"http://127.0.0.2:{hooks.port}/hook"
        assistant = http.post(
            "/assistants", json={"graph_id": "hitl", "metadata": {"notify": {"webhook": url}}}
        ).json()
        tid, _ = suspend(http, assistant["assistant_id"])
        rows = wait_for(lambda: (r := attempts(notify_server, tid)) and len(r) == 2 and r)
    finally:
        hooks.close()
    assert rows == [("notify", 1, "failed", 500), ("notify", 2, "delivered", 204)]
    assert [r["body"]["event"] for r in hooks.received] == ["suspension", "suspension"]


def test_an_assistant_without_notify_sends_nothing(notify_server: Server, http: Any) -> None:
    assistant = http.post("/assistants", json={"graph_id": "hitl"}).json()
    tid, _ = suspend(http, assistant["assistant_id"])
    time.sleep(0.5)
    assert attempts(notify_server, tid) == []
    audit = "SELECT actor FROM criogen_audit_event WHERE thread_id = {} AND action = 'notify'"
    assert select(notify_server, audit, tid) == []


@pytest.mark.parametrize(
    ("notify", "field"),
    [
        (["https://hooks.example.com"], "metadata.notify"),
        ({"webhook": "hooks.example.com"}, "metadata.notify.webhook"),
        ({"email": ["ops"]}, "metadata.notify.email"),
    ],
)
def test_a_bad_notify_setting_is_a_422_naming_the_field(http: Any, notify: Any, field: str) -> None:
    response = http.post("/assistants", json={"graph_id": "hitl", "metadata": {"notify": notify}})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
    assistant = http.post("/assistants", json={"graph_id": "hitl"}).json()
    response = http.patch(
        f"/assistants/{assistant['assistant_id']}", json={"metadata": {"notify": notify}}
    )
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
