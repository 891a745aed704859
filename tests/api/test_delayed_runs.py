"""Delayed runs (``after_seconds``) over the official ``langgraph_sdk`` client, on a live
server with SQLite and with PostgreSQL: the run is ``pending`` until its time and its
thread busy; a run queued meanwhile runs after it (first in, first out); cancelling
works; a server restarted while the run waits still starts it (the time is in the
database); bad values are a 422 naming ``after_seconds``."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import Server, start_server, stop_server
from tests.conftest import (
    PG_HOST,
    START_POSTGRES,
    drop_database_later,
    need_service,
    postgres_available,
)

STEPS_DONE = {"steps": ["a", "b", "c"], "n": 3}
DELAY = 2


@pytest.fixture(params=["sqlite", "postgres"])
def live(request: pytest.FixtureRequest) -> Server:
    """The session's API server on SQLite, then on PostgreSQL."""
    name = "server" if request.param == "sqlite" else "pg_server"
    return request.getfixturevalue(name)


@pytest.fixture
def sdk(live: Server) -> Iterator[Any]:
    """alice's SDK client on ``live``, closed after the test."""
    client = live.sync_client()
    yield client
    client.close()


def test_a_delayed_run_waits_pending_with_its_thread_busy(sdk: Any) -> None:
    client = sdk
    tid = client.threads.create()["thread_id"]
    sent = time.monotonic()
    run = client.runs.create(tid, "steps", input={"n": 0}, after_seconds=DELAY)
    assert run["status"] == "pending"
    time.sleep(DELAY / 2)
    assert client.runs.get(tid, run["run_id"])["status"] == "pending"
    assert (client.threads.get(tid))["status"] == "busy"
    assert client.runs.join(tid, run["run_id"]) == STEPS_DONE
    assert time.monotonic() - sent >= DELAY
    assert client.runs.get(tid, run["run_id"])["status"] == "success"


def test_a_stateless_wait_takes_after_seconds(sdk: Any) -> None:
    sent = time.monotonic()
    assert sdk.runs.wait(None, "steps", input={"n": 0}, after_seconds=1) == STEPS_DONE
    assert time.monotonic() - sent >= 1


def test_a_thread_wait_takes_after_seconds(sdk: Any) -> None:
    tid = sdk.threads.create()["thread_id"]
    sent = time.monotonic()
    assert sdk.runs.wait(tid, "steps", input={"n": 0}, after_seconds=1) == STEPS_DONE
    assert time.monotonic() - sent >= 1


def test_a_stream_takes_after_seconds(sdk: Any) -> None:
    tid = sdk.threads.create()["thread_id"]
    sent = time.monotonic()
    last = None
    for part in sdk.runs.stream(tid, "steps", input={"n": 10}, after_seconds=1):
        if part.event == "values":
            last = part.data
    assert time.monotonic() - sent >= 1
    assert last == {"steps": ["a", "b", "c"], "n": 13}


def test_a_run_enqueued_meanwhile_runs_after_the_delayed_one(sdk: Any) -> None:
    client = sdk
    tid = client.threads.create()["thread_id"]
    first = client.runs.create(tid, "steps", input={"n": 0}, after_seconds=DELAY)
    second = client.runs.create(tid, "steps", input={"n": 100}, multitask_strategy="enqueue")
    time.sleep(DELAY / 2)
    # Not its turn: the delayed run was queued first.
    assert (client.runs.get(tid, second["run_id"]))["status"] == "pending"
    client.runs.join(tid, second["run_id"])
    assert (client.runs.get(tid, first["run_id"]))["status"] == "success"
    # The second run's input is the last one applied: it ran after the first.
    assert (client.threads.get_state(tid))["values"]["n"] == 103


def test_a_delayed_run_can_be_cancelled_and_frees_its_thread(sdk: Any) -> None:
    client = sdk
    tid = client.threads.create()["thread_id"]
    run = client.runs.create(tid, "steps", input={"n": 0}, after_seconds=3600)
    client.runs.cancel(tid, run["run_id"])
    cancelled = client.runs.get(tid, run["run_id"])
    assert cancelled["status"] == "interrupted"
    assert (client.threads.get(tid))["status"] == "idle"
    # The thread is free at once: a new run does not wait for the cancelled one's time.
    sent = time.monotonic()
    assert client.runs.wait(tid, "steps", input={"n": 0}) == STEPS_DONE
    assert time.monotonic() - sent < 30


def test_after_seconds_zero_runs_at_once(sdk: Any) -> None:
    client = sdk
    tid = client.threads.create()["thread_id"]
    assert client.runs.wait(tid, "steps", input={"n": 0}, after_seconds=0) == STEPS_DONE


@pytest.mark.parametrize("value", [-1, 1.5, "soon", True, [5], 10**20])
@pytest.mark.parametrize("door", ["runs", "wait", "stream", "stateless"])
def test_bad_after_seconds_is_a_422_naming_it(live: Server, value: Any, door: str) -> None:
    with live.http() as http:
        tid = http.post("/threads", json={}).json()["thread_id"]
        path = {
            "runs": f"/threads/{tid}/runs",
            "wait": f"/threads/{tid}/runs/wait",
            "stream": f"/threads/{tid}/runs/stream",
            "stateless": "/runs/wait",
        }[door]
        body = {"assistant_id": "steps", "input": {"n": 0}, "after_seconds": value}
        response = http.post(path, json=body)
        assert response.status_code == 422, response.text
        assert response.json()["field"] == "after_seconds"
        # Nothing was created.
        assert http.get(f"/threads/{tid}/runs").json() == []


@pytest.mark.parametrize("door", ["wait", "stream", "stateless wait", "stateless stream"])
def test_a_wait_or_stream_holds_at_most_a_minute_of_delay(live: Server, door: str) -> None:
    """They hold the request until the run ends: a longer delay is a 422 naming
    ``after_seconds`` (and nothing is created); a background run takes it."""
    with live.http() as http:
        tid = http.post("/threads", json={}).json()["thread_id"]
        path = {
            "wait": f"/threads/{tid}/runs/wait",
            "stream": f"/threads/{tid}/runs/stream",
            "stateless wait": "/runs/wait",
            "stateless stream": "/runs/stream",
        }[door]
        body = {"assistant_id": "steps", "input": {"n": 0}, "after_seconds": 61}
        response = http.post(path, json=body)
        assert response.status_code == 422, response.text
        assert response.json()["field"] == "after_seconds"
        assert "background" in response.json()["detail"]
        assert http.get(f"/threads/{tid}/runs").json() == []
        created = http.post(f"/threads/{tid}/runs", json=body)
        assert created.status_code == 200, created.text
        http.post(f"/threads/{tid}/runs/{created.json()['run_id']}/cancel")


# -- a server restarted while the run waits ---------------------------------------------


@pytest.fixture
def fresh_postgres_url() -> Iterator[str]:
    """A PostgreSQL database of this test's own: no other server's reaper sees it."""
    need_service("PostgreSQL", postgres_available(), START_POSTGRES)
    import psycopg

    name = f"criogen_delayed_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(f"host={PG_HOST} user=postgres dbname=test", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield f"postgres://postgres@{PG_HOST}:5432/{name}"
    drop_database_later(name)


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'delayed.db'}"
    return request.getfixturevalue("fresh_postgres_url")


@pytest.mark.reliability_variants("postgres")  # the timer's recovery is the same on both
def test_a_delayed_run_survives_a_server_restart(database_url: str, tmp_path: Path) -> None:
    server = start_server(database_url, tmp_path)
    try:
        with server.http() as http:
            tid = http.post("/threads", json={}).json()["thread_id"]
            body = {"assistant_id": "steps", "input": {"n": 0}, "after_seconds": 3}
            run = http.post(f"/threads/{tid}/runs", json=body).json()
            assert run["status"] == "pending"
    finally:
        stop_server(server)
    # The first server's timer died with it; only the row knows the time.
    server = start_server(database_url, tmp_path)
    try:
        client = server.sync_client()
        deadline = time.monotonic() + 60
        while (status := client.runs.get(tid, run["run_id"])["status"]) in ("pending", "running"):
            assert time.monotonic() < deadline, status
            time.sleep(0.2)
        assert status == "success"
        assert client.threads.get_state(tid)["values"] == STEPS_DONE
        client.close()
    finally:
        stop_server(server)
