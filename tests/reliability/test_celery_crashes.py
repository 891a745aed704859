"""Crash at a random step, Celery runner: while an approved refund and steps runs are in
flight on real ``celery worker`` processes (a Redis broker and a PostgreSQL database of
the test's own, so that only this test's sweep recovers), a worker is killed with
SIGKILL at a random moment and a new one started, as a supervisor does. After recovery (``manage.py criogen_sweep``
once a lease has passed) every run ends ``success`` (a support thread's first run
``interrupted``, waiting for the approval), every thread's versions are contiguous,
and each approved refund ran within the at-least-once contract: one effect-ledger row
per idempotency key, finished, run at most once per claim of its run, its result once
in the state.

Fast subset: 3 crashes; ``make reliability``: 50.

Recovery time: with the default settings (lease, reaper period) and beat running, the
worker holding a run is killed with SIGKILL and the time until another worker claims
the run is measured; its p95 must stay within the 10 s of docs/deployment.md. Fast
subset: 3 kills; ``make reliability``: 20.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from pathlib import Path

import pytest

from tests.api.conftest import Server, _manage, stop_server
from tests.reliability.conftest import FULL, Figures, scale
from tests.reliability.helpers import (
    CeleryWorkers,
    RedisServer,
    approve_refund,
    check_contiguous,
    percentile,
    pg,
    start_beat,
    start_celery_server,
    support_thread_waiting,
)

pytestmark = pytest.mark.postgres

LEASE = 2
"""Seconds: short, so the reaper may take a dead worker's runs back quickly."""


def put_runs_in_flight(server: Server, rng: random.Random) -> tuple[list[str], str, list[str]]:
    """A support thread waiting for approval, then its approval and three ``steps``
    runs queued at once. Returns (thread ids, the support thread, the runs queued)."""
    with server.http("alice") as http:
        http.timeout = 120  # the first turn waits for a worker that may still be starting
        support = support_thread_waiting(http)
        tids, runs = [support], [approve_refund(http, support)]
        for i in range(3):
            tid = http.post("/threads", json={}).json()["thread_id"]
            created = http.post(
                f"/threads/{tid}/runs",
                json={
                    "assistant_id": "steps",
                    "input": {"n": i, "sleep": round(rng.uniform(0, 0.5), 3)},
                    "durability": rng.choice(["sync", "async", "exit"]),
                },
            )
            assert created.status_code == 200, created.text
            tids.append(tid)
            runs.append(created.json()["run_id"])
    return tids, support, runs


def victim(workers: CeleryWorkers, database_url: str, runs: list[str], rng: random.Random) -> str:
    """The worker to kill: one that holds a run of ``runs`` now, if any; else any."""
    with pg(database_url) as db:
        holders = [
            int(worker.rsplit(":", 1)[1])
            for (worker,) in db.execute(
                "SELECT worker FROM criogen_run WHERE run_id::text = ANY(%s) "
                "AND status = 'running'",
                (runs,),
            ).fetchall()
        ]
    by_pid = {proc.pid: name for name, proc in workers.procs.items()}
    holding = sorted({by_pid[pid] for pid in holders if pid in by_pid})
    return rng.choice(holding or sorted(workers.ready()) or sorted(workers.procs))


@pytest.mark.timeout(1500)  # fifty worker kills and restarts in the full suite
def test_celery_workers_killed_at_random_steps_all_runs_recover(
    tmp_path: Path, own_database: str, own_redis: RedisServer, figures: Figures
) -> None:
    rng = random.Random(8)  # reproducible kill points
    crashes = scale(50, 3)
    queue = f"criogen-crashes-{uuid.uuid4().hex[:8]}"
    server = start_celery_server(own_database, tmp_path, own_redis, queue, LEASE)
    workers = CeleryWorkers(server.env, queue, tmp_path)
    threads: list[str] = []
    approved: list[str] = []
    killed_holding = 0
    try:
        for name in (workers.start(), workers.start()):
            workers.wait_ready(name)
        for _ in range(crashes):
            # Victims are workers that got up (a replacement killed while it boots has
            # held no run): wait for one when every live worker is still booting.
            deadline = time.monotonic() + 90
            while not workers.ready():
                assert time.monotonic() < deadline, workers.dump("no worker got ready")
                time.sleep(0.1)
            tids, support, runs = put_runs_in_flight(server, rng)
            threads += tids
            approved.append(support)
            time.sleep(rng.uniform(0, 0.6))
            name = victim(workers, own_database, runs, rng)
            with pg(own_database) as db:
                (holding,) = db.execute(
                    "SELECT count(*) FROM criogen_run WHERE run_id::text = ANY(%s) "
                    "AND status = 'running' AND worker LIKE %s",
                    (runs, f"%:{workers.procs[name].pid}"),
                ).fetchone()
            workers.kill(name)
            figures.celery_crashes_injected += 1
            killed_holding += 1 if holding else 0
            workers.start()  # the supervisor's replacement
            workers.supervise()

        # Recovery: after one lease every dead worker's run is the reaper's to re-queue.
        time.sleep(LEASE + 0.5)
        reaped = 0
        deadline = time.monotonic() + 180
        while True:
            workers.supervise()
            summary = json.loads(_manage(server.env, "criogen_sweep", "--no-ttl", "--no-deadlines"))
            reaped += len(summary["reaped"]["requeued"]) + len(summary["reaped"]["restarted"])
            with pg(own_database) as db:
                active = db.execute(
                    "SELECT count(*) FROM criogen_run WHERE thread_id = ANY(%s) "
                    "AND status IN ('pending', 'running')",
                    (threads,),
                ).fetchone()[0]
            if not active:
                break
            assert time.monotonic() < deadline, workers.dump(f"{active} runs never ended")
            time.sleep(LEASE)
        figures.runs_taken_back_by_the_reaper += reaped
        if FULL:
            # Fifty kill points: some must land mid-run, or the test proves nothing.
            assert killed_holding >= 1 and reaped >= 1, (killed_holding, reaped)

        with pg(own_database) as db:
            runs_by_status = dict(
                db.execute(
                    "SELECT status, count(*) FROM criogen_run WHERE thread_id = ANY(%s) "
                    "GROUP BY status",
                    (threads,),
                ).fetchall()
            )
            effects = db.execute(
                "SELECT e.thread_id, e.status, e.attempts, r.attempts FROM criogen_effect e "
                "JOIN criogen_run r ON r.thread_id = e.thread_id AND r.command IS NOT NULL "
                "WHERE e.thread_id = ANY(%s) AND e.tool = 'issue_refund'",
                (approved,),
            ).fetchall()
            # Every run, for the failure message: which one ended otherwise, and how.
            runs = db.execute(
                "SELECT thread_id, run_id, status, attempts, hand_backs, command IS NOT NULL, "
                "error FROM criogen_run WHERE thread_id = ANY(%s) ORDER BY created_at",
                (threads,),
            ).fetchall()
        expected = {"interrupted": crashes, "success": crashes * 4}
        assert runs_by_status == expected, (runs_by_status, runs, workers.dump("worker logs"))
        figures.celery_crashes_recovered += crashes
        for tid in threads:
            check_contiguous(own_database, tid, figures)
        # At least once, recorded once: one finished ledger row per approved refund, the
        # tool run at most once per claim of the approval's run.
        assert sorted(e[0] for e in effects) == sorted(approved), effects
        assert all(e[1] == "success" and 1 <= e[2] <= e[3] for e in effects), effects
        with server.http("alice") as http:
            for tid in approved:
                messages = http.get(f"/threads/{tid}/state").json()["values"]["messages"]
                refunds = [
                    m for m in messages if m["type"] == "tool" and "Refunded" in m["content"]
                ]
                assert len(refunds) == 1, messages
    finally:
        workers.stop_all()
        stop_server(server)


RECOVERY_SECONDS = 10
"""The promise of docs/deployment.md: a dead worker's run runs again within this, p95,
with the default settings (lease 6 s renewed every 2 s, reaper every 2 s)."""


@pytest.mark.timeout(900)
@pytest.mark.skipif(
    not FULL,
    reason="a p95 figure (20 kills) for make reliability; in make test, killed workers' "
    "runs recovering is shown by test_celery_workers_killed_at_random_steps_all_runs_"
    "recover and tests/criogen/test_celery_worker.py",
)
def test_a_killed_worker_s_run_is_running_again_within_ten_seconds(
    tmp_path: Path, own_database: str, own_redis: RedisServer, figures: Figures
) -> None:
    rng = random.Random(15)  # reproducible kill points
    kills = scale(20, 3)
    queue = f"criogen-recovery-{uuid.uuid4().hex[:8]}"
    # Default lease and reaper period: the figure is the one a deployment gets.
    server = start_celery_server(own_database, tmp_path, own_redis, queue, lease=None)
    assert "CRIOGEN_REAP_SECONDS" not in server.env, "the test measures the defaults"
    workers = CeleryWorkers(server.env, queue, tmp_path)
    beat = start_beat(server.env, tmp_path)
    samples: list[float] = []
    try:
        for name in (workers.start(), workers.start()):
            workers.wait_ready(name)
        for _ in range(kills):
            # Another worker is up to take the run once it is re-queued.
            deadline = time.monotonic() + 90
            while len(workers.ready()) < 2:
                assert time.monotonic() < deadline, workers.dump("no second worker got ready")
                time.sleep(0.1)
            with server.http("alice") as http:
                tid = http.post("/threads", json={}).json()["thread_id"]
                created = http.post(
                    f"/threads/{tid}/runs",
                    json={"assistant_id": "steps", "input": {"n": 0, "sleep": 3}},
                )
                assert created.status_code == 200, created.text
                run_id = created.json()["run_id"]
            deadline = time.monotonic() + 60
            while (held := holder(own_database, run_id)) is None:
                assert time.monotonic() < deadline, workers.dump(f"run {run_id} never started")
                time.sleep(0.02)
            by_pid = {proc.pid: name for name, proc in workers.procs.items()}
            assert held in by_pid, (held, by_pid)
            # Anywhere in the heartbeat's period (2 s) and in node b's sleep.
            time.sleep(rng.uniform(0, 2.5))
            workers.kill(by_pid[held])
            killed_at = time.monotonic()
            figures.celery_crashes_injected += 1
            workers.start()  # the supervisor's replacement
            # Taken again: another worker's claim (attempts 2) sets it running.
            deadline = killed_at + 60
            with pg(own_database) as db:
                while True:
                    row = db.execute(
                        "SELECT attempts, status FROM criogen_run WHERE run_id = %s", (run_id,)
                    ).fetchone()
                    if row is not None and row[0] >= 2:
                        samples.append(time.monotonic() - killed_at)
                        break
                    assert time.monotonic() < deadline, workers.dump(f"run {run_id} not reclaimed")
                    time.sleep(0.02)
            deadline = time.monotonic() + 60
            while (status := run_status(own_database, run_id)) in ("pending", "running"):
                assert time.monotonic() < deadline, workers.dump(f"run {run_id} never ended")
                time.sleep(0.05)
            assert status == "success", workers.dump(f"run {run_id} ended {status}")
            check_contiguous(own_database, tid, figures)
            figures.celery_crashes_recovered += 1
    finally:
        beat.terminate()
        beat.wait(15)
        workers.stop_all()
        stop_server(server)
    figures.dead_worker_recovery_seconds += samples
    p95 = percentile(samples, 95)
    print(f"a dead worker's run ran again after {sorted(round(s, 2) for s in samples)} s")
    assert p95 <= RECOVERY_SECONDS, (p95, samples)


def holder(database_url: str, run_id: str) -> int | None:
    """The pid of the worker running the run, or None while nobody runs it."""
    with pg(database_url) as db:
        row = db.execute(
            "SELECT worker FROM criogen_run WHERE run_id = %s AND status = 'running'", (run_id,)
        ).fetchone()
    return None if row is None else int(row[0].rsplit(":", 1)[1])


def run_status(database_url: str, run_id: str) -> str:
    with pg(database_url) as db:
        row = db.execute("SELECT status FROM criogen_run WHERE run_id = %s", (run_id,)).fetchone()
    return str(row[0])
