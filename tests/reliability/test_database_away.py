"""The database goes away mid-run: every server connection is killed with
``pg_terminate_backend`` while runs are in flight. Runs end ``success`` (resumed) or
``error`` (failed cleanly) — none stays stuck — nothing half-written is visible
(versions contiguous, the head is the last checkpoint, every body is JSON), and the same
server process answers again without a restart.

A connection killed during a step, with the default settings: the run's own worker
hands the run back (it is not left for the reaper), it finishes, and nothing is logged
as an internal error."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import Server, start_server, stop_server
from tests.reliability.conftest import FULL, Figures, scale
from tests.reliability.helpers import (
    CeleryWorkers,
    RedisServer,
    check_contiguous,
    pg,
    start_celery_server,
    versions,
)

pytestmark = pytest.mark.postgres


@pytest.fixture
def own_database() -> Iterator[str]:
    """A database of its own: killing every connection to it touches no other test."""
    from tests.servers import fresh_postgres

    with fresh_postgres("criogen_away") as url:
        yield url


@pytest.fixture(params=["0", "60"], ids=["conn-per-request", "persistent-conn"])
def db_server(
    request: pytest.FixtureRequest, tmp_path: Path, own_database: str
) -> Iterator[Server]:
    """A server of its own, on a database of its own, whose connections the test kills
    (short lease: the in-process reaper takes back a run whose worker lost its lease)."""
    srv = start_server(
        own_database,
        tmp_path,
        CONN_MAX_AGE=request.param,
        CRIOGEN_LEASE_SECONDS="2",
        CRIOGEN_SWEEP_SECONDS="1",
    )
    yield srv
    stop_server(srv)


def kill_connections(database_url: str) -> int:
    """Terminate every other connection to the database; how many."""
    name = database_url.rsplit("/", 1)[1]
    with pg(database_url) as db:
        rows = db.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        ).fetchall()
    return len(rows)


def test_killed_database_connections_fail_cleanly_or_resume(
    db_server: Server, figures: Figures
) -> None:
    n = scale(20, 6)
    threads: list[str] = []
    with db_server.http("alice") as http:
        for i in range(n):
            tid = http.post("/threads", json={}).json()["thread_id"]
            created = http.post(
                f"/threads/{tid}/runs", json={"assistant_id": "steps", "input": {"n": i}}
            )
            assert created.status_code == 200, created.text
            threads.append(tid)
    # Kill the server's connections a few times while those runs execute.
    killed = 0
    for _ in range(5):
        killed += kill_connections(db_server.database_url)
        time.sleep(0.03)
    figures.crashes_injected += 1
    # The same process answers again (a request may fail while it reconnects, not after).
    with db_server.http("alice") as http:
        deadline = time.monotonic() + 10
        while True:
            try:
                ok = (
                    http.get("/ok").status_code == 200
                    and http.post("/threads/search", json={"limit": 1}).status_code == 200
                )
            except httpx.HTTPError:
                ok = False
            if ok or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert ok, "the server did not recover without a restart"
        # Every run settles (the reaper takes back the ones whose worker lost its lease).
        deadline = time.monotonic() + 60
        while True:
            with pg(db_server.database_url) as db:
                statuses = dict(
                    db.execute(
                        "SELECT status, count(*) FROM criogen_run WHERE thread_id = ANY(%s) "
                        "GROUP BY status",
                        (threads,),
                    ).fetchall()
                )
            if set(statuses) <= {"success", "error"} or time.monotonic() > deadline:
                break
            time.sleep(0.3)
    assert set(statuses) <= {"success", "error"}, statuses
    assert sum(statuses.values()) == n
    figures.crashes_recovered += 1
    for tid in threads:
        check_contiguous(db_server.database_url, tid, figures)
    with pg(db_server.database_url) as db:
        bodies = db.execute(
            "SELECT body FROM criogen_checkpoint WHERE thread_id = ANY(%s)", (threads,)
        ).fetchall()
    for (body,) in bodies:
        json.loads(body)
    # Afterwards the runner's worker threads (whose connections were killed too) and
    # the request handlers work again: fresh runs all succeed, first time.
    kill_connections(db_server.database_url)  # also the connections idle since then
    with db_server.http("alice") as http:
        for i in range(8):
            tid = http.post("/threads", json={}).json()["thread_id"]
            done = http.post(
                f"/threads/{tid}/runs/wait", json={"assistant_id": "steps", "input": {"n": i}}
            )
            assert done.status_code == 200 and done.json().get("n") == i + 3, done.text
    print(f"killed {killed} connections; runs: {statuses}")


def run_row(database_url: str, run_id: str) -> tuple[str, int, int]:
    """The run's (status, attempts, hand_backs)."""
    with pg(database_url) as db:
        row = db.execute(
            "SELECT status, attempts, hand_backs FROM criogen_run WHERE run_id = %s", (run_id,)
        ).fetchone()
    assert row is not None, run_id
    return row[0], row[1], row[2]


def leases(database_url: str, run_id: str, thread_id: str) -> tuple[float, float]:
    """When the run's lease and its thread's lease expire (Unix time)."""
    with pg(database_url) as db:
        row = db.execute(
            "SELECT r.lease_expires, t.lease_expires FROM criogen_run r, criogen_thread t "
            "WHERE r.run_id = %s AND t.id = %s",
            (run_id, thread_id),
        ).fetchone()
    assert row is not None
    return float(row[0]), float(row[1])


def kill_connections_during_a_step(
    server: Server, durability: str, sleep: int, figures: Figures
) -> tuple[str, tuple[str, int, int]]:
    """Start a ``steps`` run whose node b sleeps ``sleep`` seconds; while b sleeps, and
    once both heartbeats (the run's lease, the thread's) have renewed, so that their
    connections are among the killed ones, kill every connection to the database. The
    run's own connection is found dead by its next look at the database (the cancel
    check before c, or b's checkpoint). Returns the thread id and the run's (status,
    attempts, hand_backs) once it ended."""
    database_url = server.database_url
    with server.http("alice") as http:
        http.timeout = 120  # the first run waits for a worker that may still be starting
        tid = http.post("/threads", json={}).json()["thread_id"]
        created = http.post(
            f"/threads/{tid}/runs",
            json={
                "assistant_id": "steps",
                "input": {"n": 0, "sleep": sleep},
                "durability": durability,
            },
        )
        assert created.status_code == 200, created.text
        run_id = created.json()["run_id"]
    deadline = time.monotonic() + 60
    while len(versions(database_url, tid)) < 2:
        assert time.monotonic() < deadline, "node a never checkpointed"
        time.sleep(0.02)
    assert run_row(database_url, run_id)[:2] == ("running", 1)
    claimed = leases(database_url, run_id, tid)
    while True:
        run_lease, thread_lease = leases(database_url, run_id, tid)
        if run_lease > claimed[0] and thread_lease > claimed[1]:
            break
        assert time.monotonic() < deadline, "the leases were never renewed"
        time.sleep(0.05)
    assert run_row(database_url, run_id)[:2] == ("running", 1)
    assert kill_connections(database_url) >= 3
    figures.crashes_injected += 1
    deadline = time.monotonic() + 60
    while (row := run_row(database_url, run_id))[0] in ("pending", "running"):
        assert time.monotonic() < deadline, f"the run never ended: {row}"
        time.sleep(0.05)
    return tid, row


def check_handed_back_cleanly(row: tuple[str, int, int], log: str) -> None:
    """Handed back by its own worker, once (not re-claimed by the reaper after its
    lease ran out), continued to success, and nothing logged as an internal error: no
    traceback but the one Celery logs with the task's ``Reject`` (the message going
    back to the queue is how a Celery worker hands a run back)."""
    assert row == ("success", 2, 1), (row, log[-3000:])
    assert "handing it back" in log, log[-3000:]
    assert "lost its worker" not in log, log[-3000:]
    assert "internal_error" not in log, log[-5000:]
    for trace in log.split("Traceback (most recent call last):")[1:]:
        assert (
            "celery.exceptions.Reject: ('worker shutting down; run handed back'"
            in trace.split("\n20")[0]
        ), log[-5000:]


@pytest.mark.parametrize(
    ("durability", "sleep"),
    [("async", 4), ("sync", 15)],
    ids=["async-short-step", "sync-step-longer-than-two-leases"],
)
def test_a_connection_killed_between_two_steps_hands_the_run_back_and_it_finishes(
    tmp_path: Path, own_database: str, durability: str, sleep: int, figures: Figures
) -> None:
    # With a step longer than two leases (6 s), the heartbeats, whose connections are
    # killed too, must reconnect: otherwise the leases lapse and the reaper takes the
    # live run away. Default lease and reaper; connections kept between requests and
    # runs, as in production, so that the killed ones are the ones the runner goes on
    # using.
    srv = start_server(own_database, tmp_path, CONN_MAX_AGE="60")
    try:
        tid, row = kill_connections_during_a_step(srv, durability, sleep, figures)
        check_handed_back_cleanly(row, srv.log.read_text(errors="replace"))
        check_contiguous(own_database, tid, figures)
        figures.crashes_recovered += 1
        figures.connection_losses_handed_back += 1
    finally:
        stop_server(srv)


@pytest.mark.skipif(
    not FULL,
    reason="the connection-killed hand-back again, under a Celery worker (~60 s): make "
    "reliability runs it; make test keeps the in-process cases above",
)
def test_a_celery_worker_whose_connection_is_killed_hands_the_run_back(
    tmp_path: Path, own_database: str, own_redis: RedisServer, figures: Figures
) -> None:
    # No beat: nothing but the worker's own hand-back can bring the run back.
    queue = f"criogen-away-{uuid.uuid4().hex[:8]}"
    srv = start_celery_server(own_database, tmp_path, own_redis, queue, None, CONN_MAX_AGE="60")
    workers = CeleryWorkers(srv.env, queue, tmp_path)
    try:
        workers.wait_ready(workers.start())
        tid, row = kill_connections_during_a_step(srv, "async", 4, figures)
        log = "\n".join(p.read_text(errors="replace") for p in sorted(tmp_path.glob("w*.log")))
        check_handed_back_cleanly(row, log)
        check_contiguous(own_database, tid, figures)
        figures.crashes_recovered += 1
        figures.connection_losses_handed_back += 1
    finally:
        workers.stop_all()
        stop_server(srv)
