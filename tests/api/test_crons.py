"""Crons over ``langgraph_sdk``: 5-field schedules with a time zone, on a thread or
stateless; ``durability`` / ``checkpoint_during`` apply to every run they fire (the
threads page); update, delete, search, count; each user's crons are private."""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from langgraph_sdk.errors import NotFoundError, UnprocessableEntityError

from tests.api.conftest import Server


def _make_due(server: Server, cron_id: str) -> None:
    """Move a cron's next run into the past, so the server's timer fires it now."""
    path = server.database_url.removeprefix("sqlite://")
    past = (datetime.now(UTC) - timedelta(seconds=5)).strftime("%Y-%m-%d %H:%M:%S")
    with sqlite3.connect(path, timeout=30) as db:
        db.execute(
            "UPDATE api_cron SET next_run_date = ? WHERE cron_id = ?",
            (past, uuid.UUID(cron_id).hex),
        )


async def test_a_thread_cron_has_a_schedule_time_zone_and_next_run(client: Any) -> None:
    thread = await client.threads.create()
    cron = await client.crons.create_for_thread(
        thread["thread_id"],
        "steps",
        schedule="*/5 * * * *",
        input={"n": 0},
        timezone="Europe/Paris",
    )
    assert cron["thread_id"] == thread["thread_id"]
    assert cron["schedule"] == "*/5 * * * *"
    assert cron["timezone"] == "Europe/Paris"
    assert cron["enabled"] is True
    nxt = datetime.fromisoformat(cron["next_run_date"])
    assert datetime.now(UTC) < nxt <= datetime.now(UTC) + timedelta(minutes=5)
    assert nxt.minute % 5 == 0
    assert cron["payload"]["input"] == {"n": 0}


async def test_a_due_cron_fires_a_run_with_its_durability(server: Server, client: Any) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    cron = await client.crons.create_for_thread(
        tid, "steps", schedule="0 3 * * *", input={"n": 0}, durability="exit"
    )
    _make_due(server, cron["cron_id"])
    for _ in range(100):
        runs = await client.runs.list(tid)
        if runs:
            break
        await asyncio.sleep(0.1)
    (run,) = runs
    assert run["kwargs"]["durability"] == "exit"
    assert run["metadata"]["cron_id"] == cron["cron_id"]
    assert await client.runs.join(tid, run["run_id"]) == {"steps": ["a", "b", "c"], "n": 3}
    assert len(await client.threads.get_history(tid)) == 1  # exit: one checkpoint
    (after,) = await client.crons.search(thread_id=tid)
    assert datetime.fromisoformat(after["next_run_date"]) > datetime.now(UTC)


def test_a_crons_after_seconds_delays_each_run_it_fires(server: Server) -> None:
    with server.http() as http:
        tid = http.post("/threads", json={}).json()["thread_id"]
        created = http.post(
            f"/threads/{tid}/runs/crons",
            json={
                "assistant_id": "steps",
                "schedule": "0 3 * * *",
                "input": {"n": 0},
                "after_seconds": 2,
            },
        )
        assert created.status_code == 200, created.text
        cron = created.json()
        assert cron["payload"]["after_seconds"] == 2
        _make_due(server, cron["cron_id"])
        deadline = time.monotonic() + 10
        while not (runs := http.get(f"/threads/{tid}/runs").json()):
            assert time.monotonic() < deadline, "the cron never fired"
            time.sleep(0.1)
        (run,) = runs
        # Fired, and delayed: pending (its thread busy) until its time, then it runs.
        assert run["status"] == "pending"
        assert http.get(f"/threads/{tid}").json()["status"] == "busy"
        joined = http.get(f"/threads/{tid}/runs/{run['run_id']}/join", timeout=30)
        assert joined.json() == {"steps": ["a", "b", "c"], "n": 3}
        ended = http.get(f"/threads/{tid}/runs/{run['run_id']}").json()
        started = datetime.fromisoformat(ended["updated_at"])
        assert started - datetime.fromisoformat(ended["created_at"]) >= timedelta(seconds=2)


def test_checkpoint_during_applies_and_durability_wins(sync_client: Any) -> None:
    tid = sync_client.threads.create()["thread_id"]
    with pytest.warns(DeprecationWarning):
        one = sync_client.crons.create_for_thread(
            tid, "steps", schedule="* * * * *", checkpoint_during=False
        )
    assert one["payload"]["durability"] == "exit"
    with pytest.warns(DeprecationWarning):
        two = sync_client.crons.create_for_thread(
            tid, "steps", schedule="* * * * *", checkpoint_during=False, durability="sync"
        )
    assert two["payload"]["durability"] == "sync"
    updated = sync_client.crons.update(one["cron_id"], durability="async")
    assert updated["payload"]["durability"] == "async"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"schedule": "every minute"}, "schedule"),
        ({"schedule": "* * * * * *"}, "schedule"),
        ({"schedule": "61 * * * *"}, "schedule"),
        ({"schedule": "* * * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"schedule": "* * * * *", "durability": "later"}, "durability"),
        ({"schedule": "* * * * *", "checkpoint_during": "maybe"}, "checkpoint_during"),
        ({"schedule": "* * * * *", "interrupt_before": ["b"]}, "interrupt_before"),
        ({"schedule": "* * * * *", "after_seconds": -1}, "after_seconds"),
        ({"schedule": "* * * * *", "after_seconds": "soon"}, "after_seconds"),
        (
            {"schedule": "* * * * *", "config": {"configurable": {"run_timeout_seconds": 0}}},
            "config.configurable.run_timeout_seconds",
        ),
    ],
)
def test_it_refuses_a_bad_cron_with_422(server: Server, body: dict[str, Any], field: str) -> None:
    with server.http() as http:
        response = http.post("/runs/crons", json={"assistant_id": "steps", **body})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field


async def test_a_stateless_cron_is_updated_searched_counted_and_deleted(client: Any) -> None:
    mark = uuid.uuid4().hex
    cron = await client.crons.create(
        "steps", schedule="0 9 * * 1", metadata={"mark": mark}, on_run_completed="keep"
    )
    assert cron["thread_id"] is None
    assert cron["on_run_completed"] == "keep"
    updated = await client.crons.update(cron["cron_id"], schedule="30 8 * * *", enabled=False)
    assert updated["schedule"] == "30 8 * * *"
    assert updated["enabled"] is False
    found = await client.crons.search(enabled=False)
    assert cron["cron_id"] in [c["cron_id"] for c in found]
    assert await client.crons.count(assistant_id="steps") >= 1
    await client.crons.delete(cron["cron_id"])
    assert cron["cron_id"] not in [c["cron_id"] for c in await client.crons.search(limit=100)]


async def test_another_users_cron_is_a_404(clients: Any, server: Server) -> None:
    cron = await clients("alice").crons.create("steps", schedule="0 0 * * *")
    bob = clients("bob")
    with pytest.raises(NotFoundError):
        await bob.crons.delete(cron["cron_id"])
    with httpx.Client(base_url=server.url, headers={"x-api-key": server.tokens["bob"]}) as http:
        response = http.patch(f"/runs/crons/{cron['cron_id']}", json={"enabled": False})
    assert response.status_code == 404
    assert cron["cron_id"] not in [c["cron_id"] for c in await bob.crons.search(limit=100)]
    alices_thread = await clients("alice").threads.create()
    with pytest.raises(NotFoundError):
        await bob.crons.create_for_thread(alices_thread["thread_id"], "steps", schedule="* * * * *")


async def test_an_unknown_assistant_for_a_cron_is_a_404(client: Any) -> None:
    with pytest.raises(NotFoundError):
        await client.crons.create("nope", schedule="* * * * *")
    with pytest.raises(UnprocessableEntityError):
        await client.crons.create("steps", schedule="")


def _new_user(server: Server) -> tuple[str, str]:
    """A user of this test only (it gets deactivated) and their token."""
    from tests.api.conftest import _manage

    name = f"dora-{uuid.uuid4().hex[:8]}"
    out = _manage(
        server.env,
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model; from criogen.storage.models import ApiToken; "
        f"u = get_user_model().objects.create(username='{name}'); "
        "print('TOKEN=' + ApiToken.issue(u)[1])",
    )
    return name, out.split("TOKEN=", 1)[1].strip()


def _wait_for(predicate: Any, what: str, timeout: float = 30.0) -> Any:
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_deactivated_users_cron_stops_firing(server: Server) -> None:
    name, token = _new_user(server)
    with httpx.Client(base_url=server.url, headers={"x-api-key": token}, timeout=30) as dora:
        tid = dora.post("/threads", json={}).json()["thread_id"]
        created = dora.post(
            f"/threads/{tid}/runs/crons",
            json={"assistant_id": "steps", "schedule": "0 3 * * *", "input": {"n": 0}},
        )
        assert created.status_code == 200, created.text
    cron_id = created.json()["cron_id"]
    with server.http("olga") as olga:

        def runs() -> list[Any]:
            return list(olga.get(f"/threads/{tid}/runs").json())

        def next_run() -> datetime:
            (cron,) = [
                c
                for c in olga.post("/runs/crons/search", json={"thread_id": tid}).json()
                if c["cron_id"] == cron_id
            ]
            return datetime.fromisoformat(cron["next_run_date"])

        # While its owner is active the cron fires...
        _make_due(server, cron_id)
        _wait_for(runs, "the cron's first run")
        assert len(runs()) == 1
        # ...and after the owner is deactivated it does not.
        path = server.database_url.removeprefix("sqlite://")
        with sqlite3.connect(path, timeout=30) as db:
            db.execute("UPDATE auth_user SET is_active = 0 WHERE username = ?", (name,))
        _make_due(server, cron_id)
        _wait_for(lambda: next_run() > datetime.now(UTC), "the timer to pass the tick")
        assert len(runs()) == 1
    skipped = f"cron {cron_id} skipped: its owner '{name}' is deactivated"
    _wait_for(lambda: skipped in server.log.read_text(), "the skip in the server's log")


def test_a_stateless_cron_deletes_its_runs_thread_through_the_audited_verb(
    server: Server,
) -> None:
    """The cron is the actor (``cron:<id>``, door ``cron``) of the delete it causes,
    as a user is of theirs: the thread goes through the one delete verb."""
    with server.http() as http:
        created = http.post(
            "/runs/crons",
            json={"assistant_id": "steps", "schedule": "0 3 * * *", "input": {"n": 0}},
        )
        assert created.status_code == 200, created.text
        cron_id = created.json()["cron_id"]
        _make_due(server, cron_id)
        path = server.database_url.removeprefix("sqlite://")

        def deleted() -> list[tuple[str, str]]:
            with sqlite3.connect(path, timeout=30) as db:
                return db.execute(
                    "SELECT door, thread_id FROM criogen_audit_event"
                    " WHERE action = 'delete' AND actor = ?",
                    (f"cron:{cron_id}",),
                ).fetchall()

        ((door, thread_id),) = _wait_for(deleted, "the audited delete of the run's thread")
        assert door == "cron"
        assert http.get(f"/threads/{thread_id}").status_code == 404
