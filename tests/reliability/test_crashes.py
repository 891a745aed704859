"""Crash at a random point: the server running runs in-process is killed with SIGKILL
while approvals and runs are in flight, ``manage.py criogen_sweep`` recovers (after one
lease), and then every run ends ``success``, every thread's versions are contiguous, and
the approved refund ran within the at-least-once contract (one effect-ledger row per
idempotency key; the tool result appears once in the state).

Fast subset: 3 crashes; ``make reliability``: 50."""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path

import pytest

from tests.api.conftest import Server, _manage, start_server
from tests.reliability.conftest import FULL, Figures, scale
from tests.reliability.helpers import (
    approve_refund,
    check_contiguous,
    pg,
    support_thread_waiting,
)

pytestmark = pytest.mark.postgres

LEASE = 2
"""Seconds: short, so the reaper may take a dead worker's runs back quickly."""


def one_crash(server: Server, rng: random.Random) -> tuple[list[str], list[str]]:
    """Put runs in flight on ``server``, then SIGKILL it at a random moment.
    Returns (thread ids, support thread ids whose refund was approved)."""
    with server.http("alice") as http:
        support = support_thread_waiting(http)
        approve_refund(http, support)
        tids = [support]
        for i in range(3):
            tid = http.post("/threads", json={}).json()["thread_id"]
            created = http.post(
                f"/threads/{tid}/runs", json={"assistant_id": "steps", "input": {"n": i}}
            )
            assert created.status_code == 200, created.text
            tids.append(tid)
    time.sleep(rng.uniform(0, 0.06))
    server.process.send_signal(signal.SIGKILL)
    server.process.wait()
    return tids, [support]


@pytest.mark.timeout(1200)  # fifty server restarts in the full suite
def test_runs_killed_at_random_points_all_recover(
    tmp_path: Path, postgres_url: str, figures: Figures
) -> None:
    rng = random.Random(8)  # reproducible kill points
    crashes = scale(50, 3)
    settings = {"CRIOGEN_LEASE_SECONDS": str(LEASE), "CRIOGEN_SWEEP_SECONDS": "0"}
    threads: list[str] = []
    approved: list[str] = []
    env: dict[str, str] = {}
    for _ in range(crashes):
        server = start_server(postgres_url, tmp_path, **settings)
        env = server.env
        tids, support = one_crash(server, rng)
        figures.crashes_injected += 1
        threads += tids
        approved += support
    # Recovery: after one lease every dead worker's run is the reaper's to re-queue.
    time.sleep(LEASE + 0.5)
    reaped = 0
    for _ in range(3):
        summary = json.loads(_manage(env, "criogen_sweep", "--no-ttl", "--no-deadlines"))
        more = len(summary["reaped"]["requeued"]) + len(summary["reaped"]["restarted"])
        reaped += more
        if not more:
            break
    figures.runs_taken_back_by_the_reaper += reaped
    if FULL:
        # Fifty kill points: some must land mid-run, or the test proves nothing.
        assert reaped >= 1
    with pg(postgres_url) as db:
        runs = db.execute(
            "SELECT thread_id, status FROM criogen_run WHERE thread_id = ANY(%s)", (threads,)
        ).fetchall()
        effects = db.execute(
            "SELECT thread_id, key, status, attempts FROM criogen_effect "
            "WHERE thread_id = ANY(%s) AND tool = 'issue_refund'",
            (approved,),
        ).fetchall()
    by_status: dict[str, int] = {}
    for _, status in runs:
        by_status[status] = by_status.get(status, 0) + 1
    # Each crash: a support thread (its first run ends interrupted, waiting for the
    # approval; the approval's run succeeds) and 3 steps runs.
    assert by_status == {"interrupted": crashes, "success": crashes * 4}, by_status
    figures.crashes_recovered += crashes
    for tid in threads:
        check_contiguous(postgres_url, tid, figures)
    # At least once, recorded once: one ledger row per approved refund, finished.
    assert sorted(e[0] for e in effects) == sorted(approved), effects
    assert all(e[2] == "success" and e[3] >= 1 for e in effects), effects
