"""Memory benchmark: the server process's resident memory over 10,000 runs.

Run it from the project folder::

    .venv/bin/python bench/memory.py --table                 # SQLite, 10,000 runs
    .venv/bin/python bench/memory.py --database postgres --runs 2000 --every 200

It starts the real server as the API tests do (``tests.api.conftest.start_server``:
Daphne serving ``criogen.asgi``, one process, the in-process runner) on a fresh SQLite
file or a fresh PostgreSQL database (dropped at the end), then ``--clients`` concurrent
``langgraph_sdk`` clients each create a thread and ``runs.wait`` the 3-step ``steps``
graph on it with a ~1 KB payload, until ``--runs`` runs have finished. Before the first
run and after every ``--every`` runs it reads ``VmRSS`` from ``/proc/<pid>/status`` of
the server and of every process under it, and prints ONE JSON document on stdout (the
curve, the growth per 1,000 runs over the second half, and the goal: under 300 MB
after 10,000 runs); ``--table`` also prints a table on stderr. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PG_ADMIN = "host=127.0.0.1 user=postgres dbname=test"
GOAL_MB = 300.0
PAYLOAD = "x" * 1000
PRODUCTION = {
    "DEBUG": "false",
    "SECRET_KEY": "criogen-memory-bench-" + "x" * 40,
    "SECURE_SSL_REDIRECT": "false",
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _children(pid: int) -> list[int]:
    found = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(c) for c in f.read().split()]
    return found


def rss_kb(pid: int) -> int:
    """VmRSS of ``pid`` and of every process under it, in kB."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        with contextlib.suppress(OSError), open(f"/proc/{p}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        todo += _children(p)
    return total


@contextlib.contextmanager
def database(kind: str, tmp: Path) -> Iterator[str]:
    """A fresh database URL of ``kind`` (sqlite or postgres), dropped afterwards."""
    if kind == "sqlite":
        yield f"sqlite://{tmp / 'memory.db'}"
        return
    import psycopg

    name = f"criogen_memory_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgres://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def drive(
    url: str, token: str, pid: int, runs: int, clients: int, every: int
) -> dict[str, Any]:
    """``runs`` runs over ``clients`` SDK clients; the RSS curve sampled every ``every``."""
    from langgraph_sdk import get_client

    curve = [{"runs": 0, "rss_mb": round(rss_kb(pid) / 1024, 1)}]
    log(f"  0 runs: {curve[0]['rss_mb']} MB")
    done = claimed = 0
    errors: list[str] = []
    started = time.perf_counter()
    next_sample = every
    lock = asyncio.Lock()

    async def worker() -> None:
        nonlocal done, claimed, next_sample
        sdk = get_client(url=url, api_key=token)
        while True:
            async with lock:
                if claimed >= runs:
                    return
                claimed += 1
            try:
                thread = await sdk.threads.create(metadata={"bench": "memory"})
                values = await sdk.runs.wait(
                    thread["thread_id"], "steps", input={"n": 0, "payload": PAYLOAD}
                )
                if not isinstance(values, dict) or values.get("n") != 3:
                    raise RuntimeError(f"runs.wait returned {str(values)[:200]!r}")
            except Exception as exc:  # noqa: BLE001 - counted and reported
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
                continue
            async with lock:
                done += 1
                if done >= next_sample:
                    next_sample += every
                    mb = round(rss_kb(pid) / 1024, 1)
                    curve.append({"runs": done, "rss_mb": mb})
                    rate = done / (time.perf_counter() - started)
                    log(f"  {done} runs: {mb} MB ({rate:.0f} runs/s)")

    await asyncio.gather(*(worker() for _ in range(clients)))
    seconds = time.perf_counter() - started
    if curve[-1]["runs"] != done:
        curve.append({"runs": done, "rss_mb": round(rss_kb(pid) / 1024, 1)})
    return {
        "runs": done,
        "errors": len(errors),
        "first_errors": errors[:3],
        "seconds": round(seconds, 1),
        "runs_per_s": round(done / seconds, 1) if seconds else 0.0,
        "curve": curve,
    }


def growth_per_1000(curve: list[dict[str, Any]]) -> float:
    """Least-squares slope of RSS over the second half of the curve, MB per 1,000 runs."""
    half = [p for p in curve if p["runs"] >= curve[-1]["runs"] / 2]
    if len(half) < 2:
        return 0.0
    xs = [p["runs"] for p in half]
    ys = [p["rss_mb"] for p in half]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return (
        round(1000 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den, 2)
        if den
        else 0.0
    )


def table(report: dict[str, Any]) -> str:
    debug = ", DEBUG on" if report["debug"] else ""
    lines = [f"Memory: server RSS ({report['database']}, {report['clients']} clients{debug})"]
    lines += [f"  {p['runs']:>6} runs  {p['rss_mb']:>7.1f} MB" for p in report["curve"]]
    verdict = "met" if report["goal_met"] else "MISSED"
    lines.append(
        f"  final {report['final_rss_mb']} MB (goal < {GOAL_MB:g} MB after "
        f"{report['runs']} runs: {verdict}); growth {report['growth_mb_per_1000_runs']} MB"
        f" per 1,000 runs over the second half; {report['runs_per_s']} runs/s,"
        f" {report['errors']} errors"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--every", type=int, default=1000, help="runs between samples")
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--table", action="store_true", help="also print a table on stderr")
    parser.add_argument(
        "--debug", action="store_true", help="run the server with DEBUG on (logs every query)"
    )
    args = parser.parse_args()
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    # As in production: DEBUG off. With DEBUG on, Django keeps the last 9,000 queries
    # of every connection in memory, and the API's worker threads' connections are never
    # reset by a request, so the server grows by their text until each log is full.
    settings = {} if args.debug else PRODUCTION

    from tests.api.conftest import start_server, stop_server

    # A TERM (a time limit, Ctrl-C from make) still stops the server and drops the database.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    tmp = Path(tempfile.mkdtemp(prefix="criogen-bench-memory-"))
    with database(args.database, tmp) as url:
        log(f"starting the server on {args.database}")
        server = start_server(url, tmp, **settings)
        try:
            result = asyncio.run(
                drive(
                    server.url,
                    server.tokens["alice"],
                    server.process.pid,
                    args.runs,
                    args.clients,
                    args.every,
                )
            )
            alive = server.process.poll() is None
        finally:
            stop_server(server)
    final = result["curve"][-1]["rss_mb"]
    report = {
        "database": args.database,
        "server": "daphne, 1 process, in-process runner",
        "debug": args.debug,
        "clients": args.clients,
        **result,
        "server_alive": alive,
        "final_rss_mb": final,
        "growth_mb_per_1000_runs": growth_per_1000(result["curve"]),
        "goal_mb": GOAL_MB,
        "goal_met": bool(alive and result["errors"] == 0 and final < GOAL_MB),
    }
    print(json.dumps(report, indent=2))
    if args.table:
        print(table(report), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
