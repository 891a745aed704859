"""Redis goes away (SIGKILL, restarted empty on the same port) under a real deployment:
Daphne with the Redis channel layer, Celery workers and beat on a Redis broker, a
PostgreSQL database of its own (no other server's reaper may do the recovery).

- The API keeps answering reads, quickly and never a 5xx, while Redis is down.
- A run created while the broker is down is accepted (it is a committed ``pending``
  row) and runs once Redis is back: beat's reaper re-enqueues it. A ``runs/wait``
  started during the outage returns the finished run. Runs in flight when Redis died
  finish; nothing is lost (every accepted run ends ``success``, versions contiguous,
  the approved refund recorded once).
- A dashboard page open in Chromium reconnects by itself when Redis returns and shows
  what changed meanwhile, without a reload.

Fast subset: 3 runs created during the outage; ``make reliability``: 20.
"""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import Server, stop_server
from tests.conftest import need_service
from tests.reliability.conftest import Figures, scale
from tests.reliability.helpers import (
    CeleryWorkers,
    RedisServer,
    approve_refund,
    check_contiguous,
    pg,
    start_beat,
    start_celery_server,
    support_thread_waiting,
)

pytestmark = pytest.mark.postgres

LEASE = 2
"""Seconds: a run queued while the broker was down is re-enqueued a lease later."""
QUICK = 3.0
"""Seconds: the slowest answer a read may give while Redis is down."""


def reads(server: Server, tid: str) -> list[tuple[str, int, float]]:
    """Every read the brief's API promises, timed: (path, status, seconds)."""
    calls: list[tuple[str, str, Any]] = [
        ("GET", f"/threads/{tid}", None),
        ("GET", f"/threads/{tid}/state", None),
        ("POST", f"/threads/{tid}/history", {"limit": 10}),
        ("POST", "/threads/search", {"limit": 10}),
        ("GET", f"/threads/{tid}/runs", None),
        ("GET", "/ok", None),
    ]
    done = []
    with server.http("alice") as http:
        for method, path, body in calls:
            start = time.monotonic()
            try:
                status = http.request(method, path, json=body, timeout=QUICK * 3).status_code
            except httpx.TimeoutException:
                status = 0
            done.append((path, status, time.monotonic() - start))
    return done


def run_statuses(database_url: str, threads: list[str]) -> dict[str, int]:
    with pg(database_url) as db:
        rows = db.execute(
            "SELECT status, count(*) FROM criogen_run WHERE thread_id = ANY(%s) GROUP BY status",
            (threads,),
        ).fetchall()
    return dict(rows)


@pytest.mark.timeout(300)
def test_reads_answer_and_runs_accepted_while_redis_is_down_all_run(
    tmp_path: Path, own_database: str, own_redis: RedisServer, figures: Figures
) -> None:
    queue = f"criogen-redis-away-{uuid.uuid4().hex[:8]}"
    server = start_celery_server(own_database, tmp_path, own_redis, queue, LEASE)
    workers = CeleryWorkers(server.env, queue, tmp_path)
    beat: subprocess.Popen[bytes] | None = None
    waiter = ThreadPoolExecutor(1)
    exited = 0
    try:
        # Two: one running a task when the broker vanishes, one idle; both must
        # reconnect by themselves (Celery 5.7.0 made the busy one exit: pinned below it).
        for name in (workers.start(), workers.start()):
            workers.wait_ready(name)
        beat = start_beat(server.env, tmp_path, reap_seconds=1)
        with server.http("alice") as http:
            support = support_thread_waiting(http)
            busy = http.post("/threads", json={}).json()["thread_id"]
            inflight = http.post(
                f"/threads/{busy}/runs",
                json={"assistant_id": "steps", "input": {"n": 0, "sleep": 1.5}},
            )
            assert inflight.status_code == 200, inflight.text
        deadline = time.monotonic() + 30
        while run_statuses(own_database, [busy]) != {"running": 1}:
            assert time.monotonic() < deadline, workers.dump("the in-flight run never started")
            time.sleep(0.05)

        own_redis.kill()
        outage = time.monotonic()
        answered = reads(server, support) + reads(server, busy)
        threads = [busy, support]
        accepted: list[str] = []
        with server.http("alice") as http:
            accepted.append(approve_refund(http, support))
            for i in range(scale(20, 3)):
                tid = http.post("/threads", json={}).json()["thread_id"]
                start = time.monotonic()
                created = http.post(
                    f"/threads/{tid}/runs", json={"assistant_id": "steps", "input": {"n": i}}
                )
                # Accepted, quickly: a committed pending run, not a hang on the broker.
                assert created.status_code == 200, created.text
                assert time.monotonic() - start < QUICK, time.monotonic() - start
                assert created.json()["status"] == "pending"
                accepted.append(created.json()["run_id"])
                threads.append(tid)
            late = http.post("/threads", json={}).json()["thread_id"]
            threads.append(late)
        # A client waiting for a run created during the outage gets it once Redis is back.
        with server.http("alice") as http:
            http.timeout = httpx.Timeout(120)
            pending_wait = waiter.submit(
                http.post,
                f"/threads/{late}/runs/wait",
                json={"assistant_id": "steps", "input": {"n": 7}},
            )
            answered += reads(server, late)
            time.sleep(max(0.0, LEASE + 1 - (time.monotonic() - outage)))
            assert not pending_wait.done()  # nothing runs without the broker
            answered += reads(server, support)

            own_redis.start()  # the same port, empty: queued tasks and group members are gone
            deadline = time.monotonic() + 90
            while not pending_wait.done():
                # A worker that exits (Celery 5.7.0 did, when its broker vanished while
                # it ran a task) is started again, as a supervisor would, and counted.
                exited += workers.supervise()
                assert time.monotonic() < deadline, workers.dump("the waited run never ran")
                time.sleep(0.2)
            finished = pending_wait.result()
        assert finished.status_code == 200, finished.text
        assert finished.json() == {"steps": ["a", "b", "c"], "n": 10}, finished.text

        slow = [a for a in answered if not (200 <= a[1] < 300 and a[2] < QUICK)]
        assert not slow, slow
        deadline = time.monotonic() + 90
        # The support thread's first run ended waiting for the approval (interrupted).
        expected = {"success": len(threads), "interrupted": 1}
        while run_statuses(own_database, threads) != expected:
            assert time.monotonic() < deadline, workers.dump(
                f"runs left: {run_statuses(own_database, threads)}"
            )
            exited += workers.supervise()
            time.sleep(0.2)
        assert exited == 0, workers.dump(f"{exited} worker(s) exited instead of reconnecting")
        figures.redis_outages_survived += 1
        # The reaper took the runs accepted during the outage back (their tasks never
        # reached the broker); each ran once.
        with pg(own_database) as db:
            attempts = db.execute(
                "SELECT run_id::text, attempts FROM criogen_run WHERE run_id::text = ANY(%s)",
                (accepted,),
            ).fetchall()
            effects = db.execute(
                "SELECT key, status, attempts FROM criogen_effect "
                "WHERE thread_id = %s AND tool = 'issue_refund'",
                (support,),
            ).fetchall()
        assert sorted(a[0] for a in attempts) == sorted(accepted)
        assert all(a[1] == 1 for a in attempts), attempts
        figures.runs_taken_back_by_the_reaper += len(accepted)
        assert len(effects) == 1 and effects[0][1] == "success", effects
        for tid in threads:
            check_contiguous(own_database, tid, figures)
        assert all(200 <= a[1] < 300 for a in reads(server, support))
    finally:
        waiter.shutdown(wait=False, cancel_futures=True)
        if beat is not None:
            beat.terminate()
            beat.wait(15)
        workers.stop_all()
        stop_server(server)


@pytest.mark.browser
@pytest.mark.timeout(240)
def test_live_pages_reconnect_and_resync_when_redis_returns(
    tmp_path: Path, own_database: str, own_redis: RedisServer, figures: Figures
) -> None:
    from playwright.sync_api import expect, sync_playwright

    from tests.dashboard import live_server

    need_service("Chromium", live_server.chromium_available(), "apt-get install -y chromium")
    server = live_server.start(own_database, tmp_path, REDIS_URL=own_redis.url(2))
    try:
        tid = server.start_refund("refund order 1729 of 12 EUR")
        with sync_playwright() as playwright:
            browser = live_server.launch_browser(playwright)
            try:
                thread_page = live_server.sign_in(browser, server, "olga")
                thread_page.set_default_timeout(20_000)
                inbox = thread_page.context.new_page()
                inbox.set_default_timeout(20_000)
                inbox.goto("/ui/inbox/")
                thread_page.goto(f"/ui/threads/{tid}/")
                status = thread_page.locator("#thread-header [data-status]")
                card = inbox.locator(f'article.card.waiting[data-thread="{tid}"]')
                for page in (thread_page, inbox):
                    expect(page.locator("body")).to_have_attribute("data-live", "open")
                    page.evaluate("window.notReloaded = true")
                # However long the outage, a page tries again at most 5 s apart.
                delays = thread_page.evaluate(
                    "[0, 3, 6, 20].map(n => htmx.config.wsReconnectDelay(n))"
                )
                assert all(0 < d <= 5000 for d in delays), delays
                expect(status).to_have_attribute("data-status", "suspended")
                expect(card).to_be_visible()

                seen = len(server.log.read_text(errors="replace"))
                own_redis.kill()
                # The decision is taken while no live event can reach any page.
                with server.client("oscar") as client:
                    client.runs.create(
                        tid,
                        "refunds",
                        command={"resume": {"decisions": [{"type": "approve"}]}},
                    )
                    deadline = time.monotonic() + 60
                    while client.threads.get(tid)["status"] != "idle":
                        assert time.monotonic() < deadline, "the approval never ran"
                        time.sleep(0.2)
                expect(status).to_have_attribute("data-status", "suspended")
                expect(card).to_be_visible()
                for page in (thread_page, inbox):
                    expect(page.locator("body")).to_have_attribute("data-live", "closed")
                # The pages keep trying (each attempt fails while Redis is down).
                deadline = time.monotonic() + 15
                while "WebSocket HANDSHAKING" not in server.log.read_text(errors="replace")[seen:]:
                    assert time.monotonic() < deadline, "no page tried to reconnect"
                    time.sleep(0.2)

                own_redis.start()
                # No reload: each page reconnects by itself and its first push re-syncs.
                for page in (thread_page, inbox):
                    expect(page.locator("body")).to_have_attribute(
                        "data-live", "open", timeout=15_000
                    )
                expect(status).to_have_attribute("data-status", "completed")
                # As a reload would show it: the run oscar's approval started, ended.
                expect(thread_page.locator("#actions")).to_contain_text(
                    re.compile(r"success\s+resume\s+oscar")
                )
                expect(card).to_have_count(0)
                for page in (thread_page, inbox):
                    assert page.evaluate("window.notReloaded") is True

                # And live events flow again through the new Redis.
                other = server.start_refund("refund order 1730 of 3 EUR")
                expect(
                    inbox.locator(f'article.card.waiting[data-thread="{other}"]')
                ).to_be_visible()
            finally:
                browser.close()
        figures.redis_outages_survived += 1
    finally:
        live_server.stop(server)
