"""Criogen against Aegra over HTTP: the same ``langgraph_sdk`` workload, side by side.

Run it from the project folder::

    .venv/bin/python bench/http_compare.py --table            # ~2-3 minutes
    .venv/bin/python bench/http_compare.py --seconds 1 --rounds 1 --search-threads 1000

The first run creates ``bench/.venvs/aegra`` (gitignored) and installs the reference
self-hosted server there (``aegra-api``, pinned in :data:`REQUIREMENTS`), so it never
meets the project's own dependencies. Then, on the shared PostgreSQL at 127.0.0.1:5432:

- **aegra**: a fresh database, Aegra's Alembic migrations, and ``uvicorn
  aegra_api.main:app`` on a free loopback port (one process, no reload, log level
  warning, ``ENV_MODE=PRODUCTION``, no auth, its default pool sizes), serving
  ``bench/aegra/aegra.json``: the graph ``steps`` of ``bench/aegra/steps_graph.py``,
  START → a → b → c → END, identical to ``criogen/examples/steps.py``;
- **criogen**: a fresh database and uvicorn (``--server daphne``: Daphne) serving
  ``criogen.asgi`` (one process, the in-process runner, token auth), started as
  ``bench/api.py`` starts it, with production settings (``DEBUG=false``,
  ``CONN_MAX_AGE=60``; no TLS redirect on loopback).

Both run the workload of ``bench/_sdk_workload.py`` (the one ``bench/api.py`` runs):
after a warm-up, a thread with 50 checkpoints and 10,000 seeded threads each (SQL into
each server's own thread table, half of them with a metadata mark), every cell runs
``--rounds`` times, alternating the servers (criogen, aegra, criogen, aegra) so that
the machine's load drifts hit both; rates are total operations over total time, and
latencies pool the samples of every round. It prints ONE JSON document on stdout with
both sides, the ratios criogen/aegra and the goals of issue 9 (at least 2× Aegra's
creates/s and runs/s, at most half its p50 for get_state, get_history and search);
with ``--table``, a table on stderr. If Aegra cannot be installed or started, its side
is ``{"skipped": reason}`` and Criogen is still measured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _sdk_workload as workload  # noqa: E402 - bench/_sdk_workload.py, next to this file
from _venv import ensure_venv  # noqa: E402 - bench/_venv.py, next to this file

BENCH = Path(__file__).resolve().parent
AEGRA_DIR = BENCH / "aegra"
REQUIREMENTS = [
    "aegra-api==0.6.0",
    # SQLAlchemy 2.1 no longer pulls greenlet in, and Aegra's async engine needs it.
    "greenlet>=3",
]
AEGRA_PACKAGES = [
    "aegra-api",
    "langgraph",
    "langgraph-checkpoint-postgres",
    "fastapi",
    "uvicorn",
    "sqlalchemy",
    "asyncpg",
    "psycopg",
]
AEGRA_USER = "anonymous"

GOAL_RATE = 2.0
GOAL_LATENCY = 0.5

log = workload.log


# -- the Aegra environment -----------------------------------------------------------


def venv_versions(python: Path) -> dict[str, str]:
    script = (
        "import json, importlib.metadata as m\n"
        f"names = {AEGRA_PACKAGES!r}\n"
        "print(json.dumps({n: m.version(n) for n in names}))\n"
    )
    done = subprocess.run(
        [str(python), "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    versions: dict[str, str] = json.loads(done.stdout)
    return versions


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def aegra_env(db_name: str, overrides: dict[str, str]) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("POSTGRES_", "DATABASE_", "VIRTUAL_ENV", "PYTHONPATH"))
    }
    env.update(
        {
            "DATABASE_URL": f"postgresql://postgres@127.0.0.1:5432/{db_name}",
            "AEGRA_CONFIG": str(AEGRA_DIR / "aegra.json"),
            "AUTH_TYPE": "noop",
            "ENV_MODE": "PRODUCTION",
            "LOG_LEVEL": "WARNING",
            "PYTHONDONTWRITEBYTECODE": "1",
            **overrides,
        }
    )
    return env


@contextlib.contextmanager
def aegra_server(
    python: Path, db_name: str, tmp: Path, overrides: dict[str, str]
) -> Iterator[workload.Target]:
    """Aegra migrated and serving on a free loopback port; stopped afterwards."""
    env = aegra_env(db_name, overrides)
    migrate = subprocess.run(
        [
            str(python),
            "-c",
            "from aegra_api.core.migrations import run_migrations; run_migrations()",
        ],
        cwd=AEGRA_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    if migrate.returncode != 0:
        raise RuntimeError(
            f"Aegra's migrations failed: {(migrate.stderr or migrate.stdout)[-800:]}"
        )
    port = _free_port()
    log_path = tmp / f"aegra-{port}.log"
    with log_path.open("wb") as sink:
        process = subprocess.Popen(  # noqa: S603 - the venv's interpreter, our arguments
            [
                str(python),
                "-m",
                "uvicorn",
                "aegra_api.main:app",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                "1",
                "--log-level",
                "warning",
                "--no-access-log",
            ],
            cwd=AEGRA_DIR,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Aegra did not start: {log_path.read_text()[-800:]}")
            time.sleep(0.2)
        yield workload.Target("aegra", url, None, aegra_seeder(db_name))
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def aegra_seeder(db_name: str) -> Any:
    """Seeds Aegra's ``thread`` table with rows shaped as its ``POST /threads`` writes them."""

    def seed(count: int) -> str:
        import psycopg

        mark = uuid.uuid4().hex
        rows = [
            (
                str(uuid.uuid4()),
                json.dumps(
                    {
                        "mark": mark if i % 2 else "other",
                        "i": i,
                        "owner": AEGRA_USER,
                        "assistant_id": None,
                        "graph_id": None,
                        "thread_name": "",
                    }
                ),
                AEGRA_USER,
            )
            for i in range(count)
        ]
        dsn = f"host=127.0.0.1 port=5432 user=postgres dbname={db_name}"
        with psycopg.connect(dsn) as db, db.cursor() as cur:
            cur.executemany(
                "INSERT INTO thread (thread_id, status, metadata_json, user_id, created_at,"
                " updated_at) VALUES (%s, 'idle', %s, %s, now(), now())",
                rows,
            )
            cur.execute("ANALYZE thread")  # as after any bulk load (see criogen_seeder)
        return mark

    return seed


class ConnectionProbe:
    """Peak PostgreSQL connections per database while the cells run (a thread polling
    ``pg_stat_activity``): a server without a bounded pool can exhaust a shared
    ``max_connections`` under 16 clients, and this shows which one did."""

    def __init__(self, databases: dict[str, str]) -> None:
        self.databases = databases
        self.peaks = dict.fromkeys(databases, 0)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        import psycopg

        with (
            contextlib.suppress(Exception),
            psycopg.connect(workload.PG_ADMIN, autocommit=True) as db,
        ):
            while not self.stop.is_set():
                counts = dict(
                    db.execute(
                        "SELECT datname, count(*) FROM pg_stat_activity"
                        " WHERE datname = ANY(%s) GROUP BY datname",
                        (list(self.databases.values()),),
                    ).fetchall()
                )
                for name, database in self.databases.items():
                    self.peaks[name] = max(self.peaks[name], counts.get(database, 0))
                self.stop.wait(0.1)

    def __enter__(self) -> ConnectionProbe:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


# -- the rounds ------------------------------------------------------------------------

LATENCY_METRICS = {
    "get_state": "get_state p50 (ms)",
    "get_history": "get_history(limit=10) p50 (ms)",
    "search_metadata": "search by metadata p50 (ms)",
    "search_status": "search by status p50 (ms)",
}
RATE_METRICS = {
    "creates_1": "threads.create/s, 1 client",
    "creates_16": "threads.create/s, 16 clients",
    "runs_16": "runs.wait/s, 16 clients",
}
GOALS = {
    "creates_16": ("per_s", ">=", GOAL_RATE),
    "runs_16": ("per_s", ">=", GOAL_RATE),
    "get_state": ("p50", "<=", GOAL_LATENCY),
    "get_history": ("p50", "<=", GOAL_LATENCY),
    "search_metadata": ("p50", "<=", GOAL_LATENCY),
    "search_status": ("p50", "<=", GOAL_LATENCY),
}


async def compare(
    targets: list[workload.Target],
    args: argparse.Namespace,
    failed: dict[str, str],
    metrics: list[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Every cell (of ``metrics``, default all) ``args.rounds`` times per target,
    alternating; a target that fails is dropped with its reason in ``failed``."""
    prepared: dict[str, workload.Prepared] = {}
    for target in targets:
        log(
            f"{target.name}: warm-up, a thread with {args.history_checkpoints} checkpoints,"
            f" {args.search_threads} threads"
        )
        try:
            prepared[target.name] = await workload.prepare(
                target, args.search_threads, args.history_checkpoints
            )
        except Exception as exc:  # noqa: BLE001 - reported as the target's result
            failed[target.name] = f"preparing failed: {type(exc).__name__}: {exc}"[:500]
    cells: dict[str, dict[str, list[workload.Cell]]] = {t.name: {} for t in targets}

    async def one(target: workload.Target, metric: str) -> None:
        if target.name in failed:
            return
        try:
            if metric in LATENCY_METRICS:
                cell = await workload.latency_cell(
                    target, prepared[target.name], metric, args.samples
                )
            else:
                kind, clients = metric.rsplit("_", 1)
                cell = await workload.throughput_cell(target, kind, int(clients), args.seconds)
        except Exception as exc:  # noqa: BLE001 - reported as the target's result
            failed[target.name] = f"{metric} failed: {type(exc).__name__}: {exc}"[:500]
            return
        cells[target.name].setdefault(metric, []).append(cell)

    for metric in metrics or [*LATENCY_METRICS, *RATE_METRICS]:
        log(f"{metric}: {args.rounds} rounds of " + ", ".join(t.name for t in targets))
        for _ in range(args.rounds):
            for target in targets:
                await one(target, metric)

    out: dict[str, dict[str, Any]] = {}
    for target in targets:
        if target.name in failed:
            continue
        side: dict[str, Any] = {}
        for metric, rounds in cells[target.name].items():
            total = workload.merge(rounds)
            summary = total.summary(rate=metric in RATE_METRICS)
            if metric in RATE_METRICS:
                summary["rounds"] = [c.per_s() for c in rounds]
            side[metric] = summary
        side["history_checkpoints"] = prepared[target.name].history_checkpoints
        side["search_threads"] = prepared[target.name].search_threads
        out[target.name] = side
    return out


def ratios(criogen: dict[str, Any], aegra: dict[str, Any]) -> dict[str, Any]:
    """criogen/aegra per metric, and the goal verdicts."""
    out: dict[str, Any] = {}
    for metric in [*RATE_METRICS, *LATENCY_METRICS]:
        key = "per_s" if metric in RATE_METRICS else "p50"
        mine, theirs = criogen.get(metric, {}).get(key), aegra.get(metric, {}).get(key)
        ratio = round(mine / theirs, 2) if mine and theirs else None
        entry: dict[str, Any] = {"ratio": ratio}
        if metric in GOALS:
            _, op, bound = GOALS[metric]
            entry["goal"] = f"{op} {bound}"
            entry["met"] = ratio is not None and (ratio >= bound if op == ">=" else ratio <= bound)
        out[metric] = entry
    runs_p50 = (criogen.get("runs_16", {}).get("p50"), aegra.get("runs_16", {}).get("p50"))
    if all(runs_p50):
        out["runs_16_p50"] = {"ratio": round(runs_p50[0] / runs_p50[1], 2)}
    return out


def table(report: dict[str, Any]) -> str:
    criogen = report.get("criogen", {})
    aegra = report.get("aegra", {})
    rat = report.get("ratios", {})
    rows = [("metric", "criogen", "aegra", "criogen/aegra", "goal")]

    def fmt(value: Any) -> str:
        return "—" if value is None else f"{value:g}"

    def add(label: str, metric: str, key: str, ratio_key: str) -> None:
        entry = rat.get(ratio_key, {})
        goal = "—"
        if "goal" in entry:
            goal = f"{entry['goal']}: {'met' if entry['met'] else 'MISSED'}"
        errors = [
            f"{side_name} errors {side[metric]['errors']}"
            for side_name, side in (("criogen", criogen), ("aegra", aegra))
            if isinstance(side.get(metric), dict) and side[metric].get("errors")
        ]
        rows.append(
            (
                label,
                fmt(criogen.get(metric, {}).get(key)),
                fmt(aegra.get(metric, {}).get(key)),
                fmt(entry.get("ratio")),
                goal + (f" ({'; '.join(errors)})" if errors else ""),
            )
        )

    for metric, label in RATE_METRICS.items():
        add(label, metric, "per_s", metric)
    add("runs.wait p50 (ms), 16 clients", "runs_16", "p50", "runs_16_p50")
    for metric, label in LATENCY_METRICS.items():
        add(label, metric, "p50", metric)
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [" | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    for name in ("criogen", "aegra"):
        if "skipped" in report.get(name, {}):
            lines.append(f"{name} skipped: {report[name]['skipped']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per throughput cell and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--samples", type=int, default=50, help="per latency cell and round")
    parser.add_argument("--search-threads", type=int, default=10_000)
    parser.add_argument("--history-checkpoints", type=int, default=workload.HISTORY_CHECKPOINTS)
    parser.add_argument(
        "--aegra-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra setting for Aegra (e.g. SQLALCHEMY_POOL_SIZE=8); repeatable",
    )
    parser.add_argument(
        "--server", choices=workload.ASGI_SERVERS, default="uvicorn", help="Criogen's ASGI server"
    )
    parser.add_argument("--table", action="store_true", help="also print a table on stderr")
    args = parser.parse_args()
    overrides = dict(item.split("=", 1) for item in args.aegra_env)
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    tmp = Path(tempfile.mkdtemp(prefix="criogen-bench-http-"))
    log(f"server logs in {tmp}")
    report: dict[str, Any] = {}
    failed: dict[str, str] = {}
    peaks: dict[str, int] = {}
    versions: dict[str, Any] = {"langgraph_sdk (client)": _version("langgraph-sdk")}

    python: Path | None = None
    try:
        python = ensure_venv("aegra", REQUIREMENTS, log)
        versions["aegra"] = venv_versions(python)
    except Exception as exc:  # noqa: BLE001 - reported as Aegra's result
        failed["aegra"] = f"installing {' '.join(REQUIREMENTS)} failed: {exc}"[:500]

    with contextlib.ExitStack() as stack:
        targets: list[workload.Target] = []
        databases: dict[str, str] = {}
        try:
            target, server = stack.enter_context(
                workload.criogen_server("postgres", tmp, asgi_server=args.server)
            )
            targets.append(target)
            databases["criogen"] = server.database_url.rsplit("/", 1)[1]
        except Exception as exc:  # noqa: BLE001 - reported as Criogen's result
            failed["criogen"] = f"starting failed: {type(exc).__name__}: {exc}"[:500]
        if python is not None:
            try:
                db_name = stack.enter_context(workload.fresh_pg_database("aegra_bench"))
                targets.append(stack.enter_context(aegra_server(python, db_name, tmp, overrides)))
                databases["aegra"] = db_name
            except Exception as exc:  # noqa: BLE001 - reported as Aegra's result
                failed["aegra"] = f"starting failed: {type(exc).__name__}: {exc}"[:500]
        if targets:
            with ConnectionProbe(databases) as probe:
                report.update(asyncio.run(compare(targets, args, failed)))
            peaks = probe.peaks
    for name, reason in failed.items():
        report[name] = {"skipped": reason}
    if "skipped" not in report.get("criogen", {}) and "skipped" not in report.get("aegra", {}):
        report["ratios"] = ratios(report["criogen"], report["aegra"])
    document = {
        "criogen": report.get("criogen"),
        "aegra": report.get("aegra"),
        "ratios": report.get("ratios"),
        "workload": {
            "graph": workload.GRAPH,
            "run_input_bytes": len(json.dumps(workload.RUN_INPUT, separators=(",", ":"))),
            "seconds_per_cell_and_round": args.seconds,
            "rounds": args.rounds,
            "samples_per_latency_cell_and_round": args.samples,
            "search_threads": args.search_threads,
            "history_checkpoints": args.history_checkpoints,
            "order": "per cell: criogen, aegra, repeated --rounds times",
        },
        "servers": {
            "criogen": f"{args.server} criogen.asgi, 1 process, in-process runner, token auth, "
            + ", ".join(f"{k}={v}" for k, v in workload.PRODUCTION.items() if k != "SECRET_KEY"),
            "aegra": "uvicorn aegra_api.main:app, 1 worker, no reload, noop auth, "
            "ENV_MODE=PRODUCTION, LOG_LEVEL=WARNING"
            + "".join(f", {k}={v}" for k, v in overrides.items()),
            "postgresql": "127.0.0.1:5432, a fresh database per server",
        },
        "peak_connections": peaks,
        "versions": versions,
        "machine": {
            "cores": os.cpu_count(),
            "load": os.getloadavg(),
            "python": platform.python_version(),
        },
    }
    print(json.dumps(document, indent=2))
    if args.table:
        print(table(report), file=sys.stderr)
        if peaks:
            print(
                "peak PostgreSQL connections: "
                + ", ".join(f"{name} {n}" for name, n in peaks.items())
                + f" (max_connections {_max_connections()}, shared with every other client)",
                file=sys.stderr,
            )


def _max_connections() -> str:
    import psycopg

    try:
        with psycopg.connect(workload.PG_ADMIN) as db:
            row = db.execute("SHOW max_connections").fetchone()
    except psycopg.Error:
        return "?"
    return str(row[0]) if row else "?"


def _version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
