"""Celery capacity: a run's CPU split into web, worker and database, and a projection.

Run it from the project folder, with PostgreSQL and Redis on 127.0.0.1::

    .venv/bin/python bench/celery_capacity.py --table        # ~1 minute
    .venv/bin/python bench/celery_capacity.py --seconds 3 --table

It serves Criogen as production does with Celery (uvicorn serving ``criogen.asgi``
with ``CRIOGEN_RUNNER=celery`` and the production settings of ``bench/api.py``, on a
fresh PostgreSQL database and a fresh Redis queue, ``redis://127.0.0.1:6379/10``) and
starts 1, then 2 Celery workers (``--pool threads --concurrency 4``, as
``bench/runner.py`` starts them). For ``--seconds``, ``--clients`` concurrent
``langgraph_sdk`` clients each start runs of the 3-step ``steps`` graph back to back
(a fresh thread, ``runs.create``, ``runs.join``; the output checked as in
``bench/_sdk_workload.py``), and the script reads ``utime + stime`` from
``/proc/<pid>/stat`` before and after, per group of processes:

- ``web``: the uvicorn process (and any child of it);
- ``worker``: the Celery worker processes (and their children);
- ``database``: the PostgreSQL backends serving the bench's database (their pids from
  ``pg_stat_activity``, polled every 0.25 s so that a backend that starts meanwhile is
  counted from its start);
- ``broker``: ``redis-server``; ``client``: this process (the SDK clients);
- ``other``: every other process on the machine (the machine's busy time from
  ``/proc/stat`` less the groups above): what the machine's other users took.

Each group's CPU is divided by the runs completed: CPU milliseconds per run.

**The projection.** A machine with N cores runs N workers, the web server(s) and
PostgreSQL; the clients are elsewhere. It assumes the runs are bound by CPU, that a
run costs what it cost here with one worker (no contention that grows with N: no lock
waits, no connection limits, PostgreSQL's CPU per run constant), that the web tier
gets as many processes as it needs, and that every core can be kept busy. Then::

    runs/s(N) = min(N × 1000 / (web + worker + database + broker),
                    N × 1000 / worker)            # one worker process: one core at most

(per-run milliseconds). **The check**: the same formula for this machine as it was
during the 2-worker measurement, the 2 cores less what ``other`` took, with the
client's CPU added (it shares these cores here), against the 2-worker runs/s
measured. ``measured / projected`` near 1 says the model holds; well under 1 says the
runs wait on something other than CPU (locks, round trips, the broker), which the
projection leaves out, and the table for more cores is an upper bound.

It prints ONE JSON document on stdout (progress on stderr; with ``--table``, the
tables on stderr). The machine is shared and the numbers are noisy: per-run CPU is
steadier than runs/s, and the check says how far the model is from this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _sdk_workload as workload  # noqa: E402 - bench/_sdk_workload.py, next to this file

ROOT = Path(__file__).resolve().parents[1]
BROKER = "redis://127.0.0.1:6379/10"
GROUPS = ("web", "worker", "database", "broker", "client", "other")
SERVER_GROUPS = ("web", "worker", "database", "broker")
PROJECTED_WORKERS = (1, 2, 4, 8, 16)
CHECK_TOLERANCE = 0.25
"""The projection "holds" when the measured 2-worker runs/s is within this share of it."""
ASSUMPTION = (
    "N cores run N Celery workers, the web tier and PostgreSQL (the clients elsewhere);"
    " runs are CPU-bound; a run costs the CPU measured with 1 worker whatever N (no"
    " contention growing with N); the web tier has the processes it needs; every core"
    " can be kept busy; one worker process uses at most one core"
)

log = workload.log


# -- CPU per process ---------------------------------------------------------------------

TICK = os.sysconf("SC_CLK_TCK")


def proc_stat(pid: int) -> tuple[str, int, float] | None:
    """(command name, parent pid, CPU seconds user + system) of ``pid``, or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = raw[raw.index("(") + 1 : raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2 :].split()
    return name, int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK


def all_processes() -> dict[int, tuple[str, int, float]]:
    seen: dict[int, tuple[str, int, float]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := proc_stat(int(entry))) is not None:
            seen[int(entry)] = stat
    return seen


def with_descendants(roots: set[int], processes: dict[int, tuple[str, int, float]]) -> set[int]:
    """``roots`` and every process below them."""
    found = set(roots)
    grew = True
    while grew:
        grew = False
        for pid, (_, parent, _) in processes.items():
            if parent in found and pid not in found:
                found.add(pid)
                grew = True
    return found


def machine_busy_seconds() -> float:
    """CPU seconds every core of the machine spent busy since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values[:8]) - idle) / TICK


class CpuMeter:
    """CPU seconds per group between entering and leaving it: the web and worker
    process trees, the PostgreSQL backends of ``database``, ``redis-server``, this
    process, and the rest of the machine.

    Every process is read on entering and on leaving (the trees as they are then: a
    process seen only on leaving started meanwhile and counts from zero). In between, a
    thread looks up the database's backends in ``pg_stat_activity`` every 0.25 s and
    reads only theirs, so that a backend that starts and ends meanwhile still counts,
    without scanning the machine's processes (the scan would cost the client CPU)."""

    def __init__(self, web: int, workers: set[int], database: str) -> None:
        self.web, self.workers, self.database = web, workers, database
        self.first: dict[int, tuple[str, float]] = {}  # pid -> (group, CPU at first sight)
        self.last: dict[int, float] = {}
        self.stopping = threading.Event()
        self.poller = threading.Thread(target=self._poll, daemon=True)

    def _backends(self, db: Any) -> set[int]:
        rows = db.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (self.database,)
        ).fetchall()
        return {int(pid) for (pid,) in rows}

    def _see(self, pid: int, group: str, cpu: float, *, at_start: bool) -> None:
        if pid not in self.first:
            self.first[pid] = (group, cpu if at_start else 0.0)
        self.last[pid] = cpu

    def _snapshot(self, db: Any, *, at_start: bool) -> None:
        """Read every process of every group."""
        processes = all_processes()
        groups: dict[int, str] = {}
        for pid, (name, _, _) in processes.items():
            if name == "redis-server":
                groups[pid] = "broker"
        groups.update(dict.fromkeys(with_descendants({self.web}, processes), "web"))
        groups.update(dict.fromkeys(with_descendants(self.workers, processes), "worker"))
        groups.update(dict.fromkeys(self._backends(db), "database"))
        groups[os.getpid()] = "client"
        for pid, group in groups.items():
            if pid in processes:
                self._see(pid, group, processes[pid][2], at_start=at_start)

    def _poll(self) -> None:
        while not self.stopping.wait(0.25):
            for pid in self._backends(self.poll_db):
                if (stat := proc_stat(pid)) is not None:
                    self._see(pid, "database", stat[2], at_start=False)

    def __enter__(self) -> CpuMeter:
        import psycopg

        self.db = psycopg.connect(workload.PG_ADMIN, autocommit=True)
        self.poll_db = psycopg.connect(workload.PG_ADMIN, autocommit=True)
        self._snapshot(self.db, at_start=True)
        self.busy_before, self.began = machine_busy_seconds(), time.perf_counter()
        self.poller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.busy_after, self.ended = machine_busy_seconds(), time.perf_counter()
        self.stopping.set()
        self.poller.join(timeout=30)
        self._snapshot(self.db, at_start=False)
        self.db.close()
        self.poll_db.close()

    @property
    def seconds(self) -> float:
        """The measurement's length: from the first reading to the last."""
        return self.ended - self.began

    def spent(self) -> dict[str, float]:
        """CPU seconds per group, ``other`` included."""
        out = dict.fromkeys(GROUPS, 0.0)
        for pid, (group, first) in self.first.items():
            out[group] += max(0.0, self.last.get(pid, first) - first)
        measured = sum(out.values())
        out["other"] = max(0.0, (self.busy_after - self.busy_before) - measured)
        return out


# -- one measurement -------------------------------------------------------------------


async def drive(target: workload.Target, clients: int, seconds: float) -> workload.Cell:
    """``clients`` SDK clients starting runs (create + join) back to back."""
    return await workload.throughput(target, clients, seconds, workload.run_create_join)


async def metered(
    target: workload.Target, clients: int, seconds: float, meter: CpuMeter
) -> workload.Cell:
    """:func:`drive` inside ``meter``, the clients made before it starts (making 16
    HTTP clients costs this process CPU that no run causes)."""
    sdks = [target.client() for _ in range(clients)]
    with meter:
        return await workload.throughput(
            target, clients, seconds, workload.run_create_join, sdks=sdks
        )


def measure(
    target: workload.Target, server: Any, workers: list[Any], clients: int, seconds: float
) -> dict[str, Any]:
    """Runs/s and CPU per run of each group, with ``workers`` serving the queue."""
    database = server.database_url.rsplit("/", 1)[1]
    asyncio.run(drive(target, clients, min(2.0, seconds)))  # warm every process up
    meter = CpuMeter(server.process.pid, {w.pid for w in workers}, database)
    cell = asyncio.run(metered(target, clients, seconds, meter))
    spent = meter.spent()
    runs = max(cell.ops, 1)
    result: dict[str, Any] = {
        "runs": cell.ops,
        "seconds": round(cell.seconds, 2),
        "runs_per_s": cell.per_s(),
        "cpu_ms_per_run": {group: round(1000 * spent[group] / runs, 2) for group in GROUPS},
        "cores_busy": {group: round(spent[group] / meter.seconds, 2) for group in GROUPS},
        "metered_seconds": round(meter.seconds, 2),
        "join_p50_ms": workload.percentiles(cell.latencies)["p50"],
    }
    if cell.errors:
        result["errors"] = cell.errors
        result["first_error"] = cell.first_error[:300]
    return result


# -- the projection ----------------------------------------------------------------------


def projected_runs_per_s(cpu_ms: dict[str, float], cores: float, groups: tuple[str, ...]) -> float:
    """Runs/s of ``cores`` cores with as many workers, each run costing ``cpu_ms`` of the
    ``groups`` (see the module's docstring)."""
    total = sum(cpu_ms.get(group, 0.0) for group in groups)
    worker = cpu_ms.get("worker", 0.0)
    if total <= 0 or worker <= 0 or cores <= 0:
        return 0.0
    return round(min(cores * 1000 / total, cores * 1000 / worker), 1)


def projection(one: dict[str, Any], two: dict[str, Any] | None, cores: int) -> dict[str, Any]:
    """The capacity table from the 1-worker figures, and its check against 2 workers."""
    cpu = one["cpu_ms_per_run"]
    out: dict[str, Any] = {
        "assumption": ASSUMPTION,
        "from": "cpu_ms_per_run with 1 worker",
        "server_cpu_ms_per_run": round(sum(cpu[g] for g in SERVER_GROUPS), 2),
        "runs_per_s": {
            str(n): projected_runs_per_s(cpu, n, SERVER_GROUPS) for n in PROJECTED_WORKERS
        },
    }
    if two is not None:
        free = max(0.0, min(cores, 2) - two["cores_busy"]["other"])
        expected = projected_runs_per_s(cpu, free, (*SERVER_GROUPS, "client"))
        ratio = round(two["runs_per_s"] / expected, 2) if expected else None
        out["check"] = {
            "measured_2_workers_runs_per_s": two["runs_per_s"],
            "projected_for_this_machine": expected,
            "cores_left_by_other_processes": round(free, 2),
            "measured_vs_projected": ratio,
            "tolerance": CHECK_TOLERANCE,
            "holds": ratio is not None and abs(ratio - 1) <= CHECK_TOLERANCE,
        }
    return out


def table(doc: dict[str, Any]) -> str:
    """The CPU split per run, and the capacity projection with its check."""
    measured = doc.get("measured") or {}
    lines = []
    shown = [g for g in GROUPS if g != "other"]
    header = ("workers", "runs/s", *(f"{g} ms/run" for g in shown), "other cores", "join p50 ms")
    rows = [header]
    for count, m in measured.items():
        if "skipped" in m:
            lines.append(f"{count} worker(s) skipped: {m['skipped']}")
            continue
        cpu = m["cpu_ms_per_run"]
        rows.append(
            (
                count,
                f"{m['runs_per_s']:g}",
                *(f"{cpu[g]:g}" for g in shown),
                f"{m['cores_busy']['other']:g}",
                f"{m['join_p50_ms']}",
            )
        )
    lines = [*_grid(rows), *lines] if len(rows) > 1 else lines
    proj = doc.get("projection") or {}
    if proj:
        lines.append("")
        lines.append(
            f"projected runs/s (a run: {proj['server_cpu_ms_per_run']:g} ms of server CPU):"
        )
        lines += _grid(
            [
                ("workers = cores", *proj["runs_per_s"]),
                ("runs/s", *(f"{v:g}" for v in proj["runs_per_s"].values())),
            ]
        )
        lines.append(f"assuming: {proj['assumption']}")
        check = proj.get("check")
        if check:
            lines.append(
                f"check: 2 workers measured {check['measured_2_workers_runs_per_s']:g} runs/s,"
                f" projected for this machine {check['projected_for_this_machine']:g}"
                f" ({check['cores_left_by_other_processes']:g} cores left by other processes,"
                f" the client's CPU included): {check['measured_vs_projected']}x,"
                f" {'holds' if check['holds'] else 'does NOT hold'}"
                f" (within ±{check['tolerance']:.0%})"
            )
    return "\n".join(lines)


def _grid(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [" | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return lines


# -- main ------------------------------------------------------------------------------------


@contextlib.contextmanager
def celery_workers(env: dict[str, str], count: int, tag: str) -> Iterator[list[Any]]:
    import runner  # bench/runner.py: its worker command line and readiness ping

    workers: list[Any] = []
    try:
        for i in range(count):
            workers.append(runner.start_worker(env, f"cap{tag}{count}{i}"))
        yield workers
    finally:
        runner.stop(workers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per worker count")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--workers", default="1,2", help="the worker counts to measure")
    parser.add_argument("--table", action="store_true", help="also print the tables on stderr")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",") if n]
    tmp = Path(tempfile.mkdtemp(prefix="criogen-bench-capacity-"))
    queue = f"criogen-bench-{uuid.uuid4().hex[:8]}"
    settings = {
        "CRIOGEN_RUNNER": "celery",
        "CELERY_BROKER_URL": BROKER,
        "CELERY_TASK_DEFAULT_QUEUE": queue,
        "CRIOGEN_SWEEP_SECONDS": "0",
    }
    log(f"server and worker logs in {tmp} and /tmp/criogen-bench-cap*")
    measured: dict[str, Any] = {}
    try:
        with workload.criogen_server("postgres", tmp, **settings) as (target, server):
            os.environ.update(server.env)  # the ping to the workers reads the same settings
            import django

            django.setup()
            for count in counts:
                log(f"{count} worker(s): {args.clients} clients for {args.seconds:g} s")
                try:
                    with celery_workers(server.env, count, queue[-4:]) as workers:
                        measured[str(count)] = measure(
                            target, server, workers, args.clients, args.seconds
                        )
                except (Exception, SystemExit) as exc:  # noqa: BLE001 - reported in the table
                    measured[str(count)] = {"skipped": f"{type(exc).__name__}: {exc}"[:300]}
                log(f"{count} worker(s): {measured[str(count)]}")
    finally:
        with contextlib.suppress(Exception):
            import redis

            redis.Redis.from_url(BROKER).delete(queue)
    ok = {k: v for k, v in measured.items() if "skipped" not in v}
    doc: dict[str, Any] = {
        "measured": measured,
        "projection": projection(ok["1"], ok.get("2"), os.cpu_count() or 1) if "1" in ok else {},
        "workload": {
            "graph": workload.GRAPH,
            "clients": args.clients,
            "seconds_per_worker_count": args.seconds,
            "per_run": "threads.create, runs.create, runs.join (output checked)",
        },
        "servers": {
            "web": "uvicorn criogen.asgi, 1 process, CRIOGEN_RUNNER=celery, "
            + ", ".join(f"{k}={v}" for k, v in workload.PRODUCTION.items() if k != "SECRET_KEY"),
            "worker": "celery -A criogen worker --pool threads --concurrency 4",
            "broker": BROKER,
            "postgresql": "127.0.0.1:5432, a fresh database",
        },
        "machine": {
            "cores": os.cpu_count(),
            "load": os.getloadavg(),
            "python": platform.python_version(),
        },
    }
    print(json.dumps(doc, indent=2))
    if args.table:
        print(table(doc), file=sys.stderr)


if __name__ == "__main__":
    main()
