"""REST API benchmark, over the official ``langgraph_sdk`` client.

Run it from the project folder::

    .venv/bin/python bench/api.py                       # SQLite, ~1-2 minutes
    .venv/bin/python bench/api.py --database postgres   # a fresh PostgreSQL database
    .venv/bin/python bench/api.py --search-threads 2000 --seconds 3

It starts the real server (Daphne serving ``criogen.asgi``, one process, the in-process
runner) on a fresh database, exactly as the API tests do, and prints ONE JSON document
on stdout (progress on stderr):

- ``threads_created_per_s``: ``threads.create()`` with 1 and with 16 concurrent
  clients, for ``--seconds`` each;
- ``runs_per_s``: ``runs.wait`` of the 3-step ``steps`` graph (input, a, b, c: four
  checkpoints each) with 16 concurrent clients, each on its own threads;
- ``get_state_ms`` / ``get_history_ms``: p50 and p95 of ``threads.get_state`` and of
  ``threads.get_history(limit=10)`` on a thread with 50 checkpoints;
- ``search_ms``: p50 and p95 of ``threads.search(metadata=…, limit=20)`` and of
  ``threads.search(status="idle", limit=20)`` among ``--search-threads`` threads (10,000
  by default; inserted with SQL, not through the API, to keep the run short).

The machine is shared and the numbers are noisy: compare ratios from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.api.conftest import Server, start_server, stop_server  # noqa: E402


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[max(0, int(len(ordered) * 0.95) - 1)]
    return {
        "p50": round(statistics.median(ordered) * 1000, 2),
        "p95": round(p95 * 1000, 2),
        "n": len(ordered),
    }


async def rate(
    server: Server, clients: int, seconds: float, op: Callable[[Any], Awaitable[Any]]
) -> float:
    """Operations per second of ``op`` run by ``clients`` concurrent SDK clients."""
    sdks = [server.client("alice") for _ in range(clients)]
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker(sdk: Any) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await op(sdk)
            done += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker(s) for s in sdks))
    elapsed = time.perf_counter() - start
    for sdk in sdks:
        await sdk.aclose()
    return round(done / elapsed, 1)


async def timed(op: Callable[[], Awaitable[Any]], n: int) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        await op()
        samples.append(time.perf_counter() - start)
    return samples


def insert_threads(server: Server, count: int) -> str:
    """``count`` idle threads of alice, half of them marked, straight into SQLite."""
    path = server.database_url.removeprefix("sqlite://")
    mark = uuid.uuid4().hex
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
    with sqlite3.connect(path, timeout=60) as db:
        (owner,) = db.execute("SELECT id FROM auth_user WHERE username = 'alice'").fetchone()
        rows = [
            (
                f"bench-{i}-{uuid.uuid4().hex[:8]}",
                now,
                now,
                json.dumps({"owner": "alice", "mark": mark if i % 2 else "other", "i": i}),
                owner,
            )
            for i in range(count)
        ]
        db.executemany(
            "INSERT INTO criogen_thread (id, created_at, updated_at, metadata, owner_id,"
            " head_version, head_id, head_status, lease_id, lease_expires, ttl_strategy)"
            " VALUES (?, ?, ?, ?, ?, 0, '', '', NULL, 0, 'delete')",
            rows,
        )
    return mark


def insert_threads_pg(server: Server, count: int) -> str:
    import psycopg

    mark = uuid.uuid4().hex
    with psycopg.connect(server.database_url.replace("postgres://", "postgresql://")) as db:
        (owner,) = db.execute("SELECT id FROM auth_user WHERE username = 'alice'").fetchone()
        with db.cursor() as cur:
            cur.executemany(
                "INSERT INTO criogen_thread (id, created_at, updated_at, metadata, owner_id,"
                " head_version, head_id, head_status, lease_id, lease_expires, ttl_strategy)"
                " VALUES (%s, now(), now(), %s, %s, 0, '', '', NULL, 0, 'delete')",
                [
                    (
                        f"bench-{i}-{uuid.uuid4().hex[:8]}",
                        json.dumps({"owner": "alice", "mark": mark if i % 2 else "other"}),
                        owner,
                    )
                    for i in range(count)
                ],
            )
    return mark


async def measure(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sdk = server.client("alice")

    log("threads.create, 1 and 16 clients")
    out["threads_created_per_s"] = {
        "clients_1": await rate(server, 1, args.seconds, lambda c: c.threads.create()),
        "clients_16": await rate(server, 16, args.seconds, lambda c: c.threads.create()),
    }

    log("runs.wait of steps, 16 clients")

    async def one_run(c: Any) -> None:
        thread = await c.threads.create()
        await c.runs.wait(thread["thread_id"], "steps", input={"n": 0})

    out["runs_per_s"] = {"clients_16": await rate(server, 16, args.seconds, one_run)}

    log("get_state / get_history on a thread with 50 checkpoints")
    thread = await sdk.threads.create(graph_id="steps")
    tid = thread["thread_id"]
    while len(await sdk.threads.get_history(tid, limit=60)) < 50:
        await sdk.runs.wait(tid, "steps", input={"n": 0})
    history = await sdk.threads.get_history(tid, limit=100)
    out["get_state_ms"] = percentiles(await timed(lambda: sdk.threads.get_state(tid), 100))
    out["get_history_ms"] = percentiles(
        await timed(lambda: sdk.threads.get_history(tid, limit=10), 100)
    )
    out["history_checkpoints"] = len(history)

    log(f"search among {args.search_threads} threads")
    if server.database_url.startswith("sqlite"):
        mark = insert_threads(server, args.search_threads)
    else:
        mark = insert_threads_pg(server, args.search_threads)
    out["search_ms"] = {
        "threads": args.search_threads,
        "by_metadata": percentiles(
            await timed(lambda: sdk.threads.search(metadata={"mark": mark}, limit=20), 50)
        ),
        "by_status": percentiles(
            await timed(lambda: sdk.threads.search(status="idle", limit=20), 50)
        ),
    }
    await sdk.aclose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--seconds", type=float, default=5.0, help="per throughput cell")
    parser.add_argument("--search-threads", type=int, default=10_000)
    args = parser.parse_args()
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    tmp = Path(tempfile.mkdtemp(prefix="criogen-bench-api-"))
    pg_name = None
    if args.database == "sqlite":
        url = f"sqlite://{tmp / 'bench.db'}"
    else:
        import psycopg

        pg_name = f"criogen_bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect("host=127.0.0.1 user=postgres dbname=test", autocommit=True) as db:
            db.execute(f'CREATE DATABASE "{pg_name}"')
        url = f"postgres://postgres@127.0.0.1:5432/{pg_name}"
    log(f"starting the server on {args.database}")
    server = start_server(url, tmp)
    try:
        results = asyncio.run(measure(server, args))
    finally:
        stop_server(server)
        if pg_name:
            import psycopg

            with psycopg.connect("host=127.0.0.1 user=postgres dbname=test", autocommit=True) as db:
                db.execute(f'DROP DATABASE IF EXISTS "{pg_name}" WITH (FORCE)')
    print(
        json.dumps(
            {
                "database": args.database,
                "server": "daphne, 1 process, in-process runner",
                **results,
                "machine": {
                    "cores": os.cpu_count(),
                    "load": os.getloadavg(),
                    "python": platform.python_version(),
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
