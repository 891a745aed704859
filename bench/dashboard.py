"""Dashboard benchmark: server render time of the inbox and of a long timeline, and the
live latency from a suspension's commit to its card in an open inbox in Chromium.

Run it from the project folder::

    .venv/bin/python bench/dashboard.py                     # SQLite, PostgreSQL, browser
    .venv/bin/python bench/dashboard.py --backends sqlite --suspensions 20

It prints ONE JSON document on stdout; progress goes to stderr. What it measures:

- ``render``: per backend (a fresh SQLite file; a fresh PostgreSQL database on
  127.0.0.1, dropped at the end), with 200 suspended threads (100 workflows, 100 agents
  waiting for approval) and one thread of 1,000 checkpoints, the time Django takes to
  answer ``GET /ui/inbox/`` (the 50 oldest cards) and ``GET /ui/threads/<long>/`` (the
  newest 100 checkpoints, the head's state and its diff) for a signed-in operator: the
  whole request through the test client (middleware, session, queries, templates), no
  network. Median and p95 of 30 requests after 3 warm-ups, and the query count.
  Target: under 100 ms.
- ``live``: a real server (Daphne, in-process runner, SQLite, in-memory channel layer)
  and headless Debian Chromium with the inbox open. For each of N suspensions (a
  ``hitl`` run started over the REST API, and answered once seen), the time from the suspended checkpoint's
  ``created_at`` (written just before its commit, so this slightly overstates) to the
  moment a MutationObserver in the page sees its card. p50/p95/max over N.
  Target: p95 under 250 ms.

The machine is shared and the numbers are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PG_ADMIN = "host=127.0.0.1 user=postgres dbname=test"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


# -- render (runs in a child process configured for one database) ---------------------


def render_child(requests: int) -> dict[str, Any]:
    """Fill the configured database and time the two pages (in this process)."""
    import django

    django.setup()
    from django.contrib.auth.models import Permission, User
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from criogen import END, START, Workflow, registry

    call_command("migrate", verbosity=0)
    user = User.objects.create_user(f"bench-{uuid.uuid4().hex[:6]}", password="x")
    user.user_permissions.add(Permission.objects.get(codename="operate"))
    started = time.perf_counter()
    hitl = registry.get_graph("hitl")
    agent = registry.get_graph("refunds")
    for i in range(100):
        hitl.thread(f"bench-wf-{uuid.uuid4().hex[:8]}").run({"n": i}, durability="sync")
        agent.thread(f"bench-ag-{uuid.uuid4().hex[:8]}").run(
            f"refund order {i} of {i + 1} EUR", durability="sync"
        )
    loop = Workflow(reducers={"log": "append"}, name="loop")
    loop.add_node("tick", lambda s: {"i": int(s.get("i") or 0) + 1, "log": [s.get("i") or 0]})
    loop.add_conditional_edges("tick", lambda s: END if s["i"] >= 999 else "tick")
    loop.add_edge(START, "tick")
    long_id = f"bench-long-{uuid.uuid4().hex[:8]}"
    loop.compile(storage=registry.storage()).thread(long_id).run({"i": 0}, durability="sync")
    log(f"  data ready in {time.perf_counter() - started:.1f}s")

    client = Client(HTTP_HOST="localhost")  # a host ALLOWED_HOSTS accepts
    client.force_login(user)
    out: dict[str, Any] = {"vendor": connection.vendor}
    for name, url in (("inbox", "/ui/inbox/"), ("timeline_1000", f"/ui/threads/{long_id}/")):
        for _ in range(3):
            assert client.get(url).status_code == 200
        times = []
        for _ in range(requests):
            t0 = time.perf_counter()
            response = client.get(url)
            times.append((time.perf_counter() - t0) * 1000)
            assert response.status_code == 200
        with CaptureQueriesContext(connection) as queries:
            client.get(url)
        out[name] = {
            "median_ms": round(statistics.median(times), 1),
            "p95_ms": round(percentile(times, 0.95), 1),
            "queries": len(queries.captured_queries),
            "bytes": len(response.content),
        }
    return out


def render(backend: str, requests: int) -> dict[str, Any]:
    """Run :func:`render_child` in a subprocess on a fresh database of ``backend``."""
    tmp = tempfile.mkdtemp(prefix="criogen-bench-")
    pg_name = ""
    if backend == "sqlite":
        url = f"sqlite://{Path(tmp) / 'bench.db'}"
    else:
        import psycopg

        pg_name = f"criogen_bench_{os.getpid()}"
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{pg_name}"')
        url = f"postgres://postgres@127.0.0.1:5432/{pg_name}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.dashboard.settings",
        "DATABASE_URL": url,
        "LOG_LEVEL": "WARNING",
        "CRIOGEN_RUNNER": "inprocess",
    }
    env.pop("REDIS_URL", None)
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--render-child", str(requests)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        sys.stderr.write(done.stderr[-3000:] if done.returncode else done.stderr)
        if done.returncode != 0:
            return {"error": done.stderr[-2000:]}
        return json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        if pg_name:
            import psycopg

            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{pg_name}" WITH (FORCE)')


# -- live latency ---------------------------------------------------------------------

OBSERVER = """
window.__seen = {};
new MutationObserver(() => {
  for (const card of document.querySelectorAll('article.card.waiting[data-thread]')) {
    const id = card.dataset.thread;
    if (!(id in window.__seen)) window.__seen[id] = performance.timeOrigin + performance.now();
  }
}).observe(document.body, {childList: true, subtree: true});
"""


_CLAIM_HALF = """
from django.contrib.auth import get_user_model
from criogen.services.claims import claim_thread
oscar = get_user_model().objects.get(username="oscar")
for tid in {ids!r}[::2]:
    claim_thread(tid, by=oscar, door="python")
"""


def live(suspensions: int, *, claims: bool = False) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    from tests.dashboard import live_server

    if not live_server.chromium_available():
        return {"error": "Chromium is missing: apt-get install -y chromium"}
    tmp = Path(tempfile.mkdtemp(prefix="criogen-live-"))
    db = tmp / "live.db"
    server = live_server.start(f"sqlite://{db}", tmp)
    try:
        with sync_playwright() as playwright:
            browser = live_server.launch_browser(playwright)
            if claims:
                # Claims and presence on: 20 older threads wait, half claimed by Oscar
                # (the inbox shows their strips), and Olga and Oscar both have one of
                # them open (their thread pages exchange presence heartbeats).
                older = [server.start_hitl(prefix="claimed") for _ in range(20)]
                server.manage("shell", "-c", _CLAIM_HALF.format(ids=older))
                for who in ("olga", "oscar"):
                    watcher = live_server.sign_in(browser, server, who)
                    watcher.goto(f"/ui/threads/{older[0]}/")
                    watcher.wait_for_selector("body[data-live=open]")
                    watcher.wait_for_selector("#claim [data-claim]")
            page = live_server.sign_in(browser, server, "olga")
            page.wait_for_selector("body[data-live=open]")
            page.evaluate(OBSERVER)
            ids = []
            with server.client("olga") as client:
                for i in range(suspensions):
                    tid = f"live-{i:03d}-{uuid.uuid4().hex[:6]}"
                    client.threads.create(thread_id=tid, metadata={"graph_id": "hitl"})
                    run = client.runs.create(tid, "hitl", input={"n": i})
                    client.runs.join(tid, run["run_id"])
                    ids.append(tid)
                    # Wait for this card before the next run, so each is measured alone;
                    # then settle it, so the inbox (50 oldest cards) has room for the next.
                    page.wait_for_function(f"() => {json.dumps(tid)} in window.__seen")
                    answer = client.runs.create(tid, "hitl", command={"resume": "ok"})
                    client.runs.join(tid, answer["run_id"])
            seen = page.evaluate("() => window.__seen")
            browser.close()
        with sqlite3.connect(db) as conn:
            rows = dict(
                conn.execute(
                    "SELECT thread_id, created_at FROM criogen_checkpoint WHERE status = 'suspended'"
                ).fetchall()
            )
        latencies = []
        for tid in ids:
            committed = datetime.fromisoformat(rows[tid]).replace(tzinfo=None)
            epoch = (committed - datetime(1970, 1, 1)).total_seconds() * 1000
            latencies.append(seen[tid] - epoch)
        return {
            "suspensions": len(latencies),
            "p50_ms": round(percentile(latencies, 0.5), 1),
            "p95_ms": round(percentile(latencies, 0.95), 1),
            "max_ms": round(max(latencies), 1),
        }
    finally:
        live_server.stop(server)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--suspensions", type=int, default=100)
    parser.add_argument("--no-live", action="store_true")
    parser.add_argument(
        "--claims", action="store_true", help="live: with claimed threads and presence on"
    )
    parser.add_argument("--render-child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.render_child:
        print(json.dumps(render_child(args.render_child)))
        return 0
    result: dict[str, Any] = {"render": {}, "targets": {"render_ms": 100, "live_p95_ms": 250}}
    for backend in [b for b in args.backends.split(",") if b]:
        log(f"render on {backend}…")
        result["render"][backend] = render(backend, args.requests)
    if not args.no_live:
        log(f"live latency over {args.suspensions} suspensions…")
        try:
            result["live"] = live(args.suspensions, claims=args.claims)
        except Exception as exc:
            result["live"] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
