"""Criogen against Aegra and LangGraph's own server over HTTP: one ``langgraph_sdk`` workload.

Run it from the project folder::

    .venv/bin/python bench/http_compare.py --table            # ~5 minutes
    .venv/bin/python bench/http_compare.py --seconds 1 --rounds 1 --search-threads 1000
    .venv/bin/python bench/http_compare.py --servers criogen,langgraph --table

The first run creates ``bench/.venvs/aegra`` and ``bench/.venvs/langgraph`` (gitignored)
and installs the other servers there (pinned in :data:`REQUIREMENTS` and
:data:`LANGGRAPH_REQUIREMENTS`), so they never meet the project's own dependencies.
Then, on the shared PostgreSQL at 127.0.0.1:5432:

- **aegra**: the reference self-hosted server, as its users run it: a fresh database,
  Aegra's Alembic migrations, and ``uvicorn aegra_api.main:app`` on a free loopback
  port (one process, no reload, log level warning, ``ENV_MODE=PRODUCTION``, no auth),
  with the pool sizes of its newer releases (:data:`AEGRA_POOLS`:
  ``SQLALCHEMY_POOL_SIZE=10``, ``SQLALCHEMY_MAX_OVERFLOW=20``,
  ``LANGGRAPH_MIN_POOL_SIZE=5``, ``LANGGRAPH_MAX_POOL_SIZE=20``; 0.6.0's own 2 + 0 and
  1–6 starve it under 16 clients; ``--aegra-env KEY=VALUE`` overrides any setting),
  serving ``bench/aegra/aegra.json``: the graph ``steps`` of
  ``bench/aegra/steps_graph.py``, START → a → b → c → END, identical to
  ``criogen/examples/steps.py``;
- **langgraph**: LangGraph's own server in memory (``langgraph-cli[inmem]``):
  ``langgraph dev --no-browser --no-reload --n-jobs-per-worker 10`` serving the same
  graph from ``bench/aegra/langgraph.json``, in a folder of its own under the run's
  temporary folder, with no network (no analytics, version check or tracing:
  :data:`LANGGRAPH_ENV`); it has no table to insert into, so its 10,000 threads are
  created through its API by 16 concurrent clients;
- **criogen**: a fresh database and uvicorn (``--server daphne``: Daphne) serving
  ``criogen.asgi`` (one process, the in-process runner, token auth), started as
  ``bench/api.py`` starts it, with production settings (``DEBUG=false``,
  ``CONN_MAX_AGE=60``; no TLS redirect on loopback).

All run the workload of ``bench/_sdk_workload.py``: after a warm-up, a thread with 50
checkpoints and 10,000 seeded threads each (SQL into Criogen's and Aegra's own thread
tables, half of them with a metadata mark); then every cell ``--rounds`` times,
alternating the servers (criogen, aegra, langgraph, criogen, …) so that the machine's
load drifts hit all: ``get_state``; ``get_history`` with limit 10 and 50; five search
shapes (first page, by metadata, by status, by both, and the first page at offset
5,000); ``threads.create`` with 1 and 16 clients; ``runs.wait`` and ``runs.create`` +
``runs.join`` with 16 clients; and last ``threads.delete`` of the seeded threads by 16
clients, each round deleting its share. Rates are total operations over total time,
and latencies pool the samples of every round.

It prints ONE JSON document on stdout with every side, the ratios criogen/aegra and
criogen/langgraph and the goals of issue 18 (:data:`GOALS`: against Aegra every
throughput at least 2× and every p50 at most 0.5×; against LangGraph's in-memory
server every read p50 at most 1.0×); with ``--table``, a table on stderr. A server that
cannot be installed or started is ``{"skipped": reason}`` and the others are still
measured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _sdk_workload as workload  # noqa: E402 - bench/_sdk_workload.py, next to this file
from _servers import (  # noqa: E402 - bench/_servers.py, next to this file
    LANGGRAPH_ENV,
    LANGGRAPH_REQUIREMENTS,
    free_port,
    langgraph_dev,
    stop,
    wait_healthy,
)
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
AEGRA_POOLS = {
    "SQLALCHEMY_POOL_SIZE": "10",
    "SQLALCHEMY_MAX_OVERFLOW": "20",
    "LANGGRAPH_MIN_POOL_SIZE": "5",
    "LANGGRAPH_MAX_POOL_SIZE": "20",
}
"""The pool sizes Aegra's newer releases default to and its users run with: 0.6.0's own
defaults (2 + 0 and 1–6 connections) starve it under 16 clients (issue 18)."""

GOAL_RATE = 2.0
GOAL_LATENCY = 0.5
GOAL_VS_INMEM = 1.0

log = workload.log


# -- the Aegra environment -----------------------------------------------------------


def venv_versions(python: Path, packages: list[str]) -> dict[str, str]:
    script = (
        "import json, importlib.metadata as m\n"
        f"names = {packages!r}\n"
        "print(json.dumps({n: m.version(n) for n in names}))\n"
    )
    done = subprocess.run(
        [str(python), "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    versions: dict[str, str] = json.loads(done.stdout)
    return versions


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
            **AEGRA_POOLS,
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
    port = free_port()
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
        wait_healthy(process, url + "/health", log_path, "Aegra")
        yield workload.Target("aegra", url, None, aegra_seeder(db_name))
    finally:
        stop(process)


def aegra_seeder(db_name: str) -> Any:
    """Seeds Aegra's ``thread`` table with rows shaped as its ``POST /threads`` writes them."""

    def seed(count: int) -> workload.Seeded:
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
        workload.vacuum_analyze(f"postgresql://postgres@127.0.0.1:5432/{db_name}", "thread")
        return workload.Seeded(mark, [row[0] for row in rows])

    return seed


# -- LangGraph's own server ------------------------------------------------------------

LANGGRAPH_PACKAGES = [
    "langgraph-cli",
    "langgraph-api",
    "langgraph-runtime-inmem",
    "langgraph",
    "uvicorn",
    "starlette",
]
LANGGRAPH_JOBS = 10
"""``--n-jobs-per-worker``: the concurrent runs its queue executes. ``langgraph dev
--help`` documents 10 as the default, but the command passes 1 when the option is
absent, which would run 16 clients' runs one at a time."""


@contextlib.contextmanager
def langgraph_server(python: Path, tmp: Path) -> Iterator[workload.Target]:
    """``langgraph dev`` (the in-memory server) serving ``bench/aegra/langgraph.json``
    from a folder of its own under ``tmp`` (it keeps its pickled state in
    ``.langgraph_api/`` of its working folder and resolves the graph's path from it)."""
    home = tmp / "langgraph"
    home.mkdir()
    for name in ("langgraph.json", "steps_graph.py"):
        shutil.copy(AEGRA_DIR / name, home / name)
    options = ["--config", "langgraph.json", "--n-jobs-per-worker", str(LANGGRAPH_JOBS)]
    try:
        with langgraph_dev(python, home, tmp, *options, "--server-log-level", "WARNING") as url:
            yield workload.Target("langgraph", url, None, workload.api_seeder(url))
    finally:
        shutil.rmtree(home / ".langgraph_api", ignore_errors=True)  # its pickled state


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

RATE_METRICS = {
    "creates_1": "threads.create/s, 1 client",
    "creates_16": "threads.create/s, 16 clients",
    "runs_16": "runs.wait/s, 16 clients",
    "joins_16": "runs.create + join/s, 16 clients",
    "deletes_16": "threads.delete/s, 16 clients",
}
LATENCY_METRICS = {
    "get_state": "get_state p50 (ms)",
    "get_history": "get_history(limit=10) p50 (ms)",
    "get_history_50": "get_history(limit=50) p50 (ms)",
    "search_first_page": "search, first page p50 (ms)",
    "search_metadata": "search by metadata p50 (ms)",
    "search_status": "search by status p50 (ms)",
    "search_metadata_status": "search by metadata + status p50 (ms)",
    "search_offset": "search at offset {offset} p50 (ms)",
}
OTHERS = ("aegra", "langgraph")
GOALS: dict[str, dict[str, tuple[str, float]]] = {
    # Issue 18: against Aegra every throughput at least 2x, every p50 at most half.
    "aegra": {
        **dict.fromkeys(RATE_METRICS, (">=", GOAL_RATE)),
        **dict.fromkeys(LATENCY_METRICS, ("<=", GOAL_LATENCY)),
    },
    # Against LangGraph's in-memory server: Criogen on PostgreSQL no slower on the reads.
    "langgraph": dict.fromkeys(LATENCY_METRICS, ("<=", GOAL_VS_INMEM)),
}


async def compare(
    targets: list[workload.Target],
    args: argparse.Namespace,
    failed: dict[str, str],
    metrics: list[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Every cell (of ``metrics``, default all) ``args.rounds`` times per target,
    alternating; a target that fails is dropped with its reason in ``failed``. The
    deletes come last (they delete the seeded threads the searches read), each round
    deleting its share of them."""
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

    async def one(target: workload.Target, metric: str, round_: int) -> None:
        if target.name in failed:
            return
        try:
            kind, _, clients = metric.rpartition("_")
            if metric in LATENCY_METRICS:
                cell = await workload.latency_cell(
                    target, prepared[target.name], metric, args.samples
                )
            elif kind == "deletes":
                limit = getattr(args, "delete_threads", None)
                ids = prepared[target.name].thread_ids[:limit][round_ :: args.rounds]
                cell = await workload.delete_cell(target, int(clients), ids)
            else:
                cell = await workload.throughput_cell(target, kind, int(clients), args.seconds)
        except Exception as exc:  # noqa: BLE001 - reported as the target's result
            failed[target.name] = f"{metric} failed: {type(exc).__name__}: {exc}"[:500]
            return
        cells[target.name].setdefault(metric, []).append(cell)

    for metric in metrics or [*LATENCY_METRICS, *RATE_METRICS]:
        log(f"{metric}: {args.rounds} rounds of " + ", ".join(t.name for t in targets))
        for round_ in range(args.rounds):
            for target in targets:
                await one(target, metric, round_)

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
            if metric.startswith("deletes"):
                summary["threads"] = total.ops + total.errors
            side[metric] = summary
        done = prepared[target.name]
        side["history_checkpoints"] = done.history_checkpoints
        side["search_threads"] = done.search_threads
        side["seed_seconds"] = done.seed_seconds
        side["deep_page_offset"] = done.search_offset
        out[target.name] = side
    return out


def ratios(criogen: dict[str, Any], other: dict[str, Any], name: str) -> dict[str, Any]:
    """criogen/``name`` (aegra or langgraph) per metric, and the goal verdicts."""
    goals = GOALS[name]
    out: dict[str, Any] = {}
    for metric in [*RATE_METRICS, *LATENCY_METRICS]:
        key = "per_s" if metric in RATE_METRICS else "p50"
        mine, theirs = criogen.get(metric, {}).get(key), other.get(metric, {}).get(key)
        ratio = round(mine / theirs, 2) if mine and theirs else None
        entry: dict[str, Any] = {"ratio": ratio}
        if metric in goals:
            op, bound = goals[metric]
            entry["goal"] = f"{op} {bound}"
            entry["met"] = ratio is not None and (ratio >= bound if op == ">=" else ratio <= bound)
        out[metric] = entry
    for metric in ("runs_16", "joins_16"):
        p50s = (criogen.get(metric, {}).get("p50"), other.get(metric, {}).get("p50"))
        if all(p50s):
            out[f"{metric}_p50"] = {"ratio": round(p50s[0] / p50s[1], 2)}
    return out


def _fmt(value: Any) -> str:
    return "—" if value is None else f"{value:g}"


def _goal(entry: dict[str, Any]) -> str:
    if "goal" not in entry:
        return "—"
    if entry.get("ratio") is None:
        return f"{entry['goal']}: not run"
    return f"{entry['goal']}: {'met' if entry['met'] else 'MISSED'}"


def table(report: dict[str, Any]) -> str:
    """One row per figure: each server's, criogen/aegra and criogen/langgraph with the
    goal and its verdict; the errors a side met and the reason a side was skipped."""
    sides = {name: report.get(name) or {} for name in ("criogen", *OTHERS)}
    rat = report.get("ratios") or {}
    header = ("metric", *sides, "c/aegra", "goal vs aegra", "c/langgraph", "goal vs langgraph")
    rows = [header]
    criogen = sides["criogen"]

    def add(label: str, metric: str, key: str, ratio_key: str) -> None:
        row = [label, *(_fmt(side.get(metric, {}).get(key)) for side in sides.values())]
        for other in OTHERS:
            entry = (rat.get(other) or {}).get(ratio_key, {})
            row += [_fmt(entry.get("ratio")), _goal(entry)]
        rows.append(tuple(row))
        errors = [
            f"{name} {side[metric]['errors']} errors: {side[metric].get('first_error', '')}"
            for name, side in sides.items()
            if isinstance(side.get(metric), dict) and side[metric].get("errors")
        ]
        notes.extend(f"  {label}: {error}"[:200] for error in errors)

    notes: list[str] = []
    for metric, label in RATE_METRICS.items():
        if metric.startswith("deletes"):
            counts = {
                side["deletes_16"]["threads"]
                for side in sides.values()
                if isinstance(side.get("deletes_16"), dict) and "threads" in side["deletes_16"]
            }
            label += f" ({' / '.join(f'{n:,}' for n in sorted(counts))} threads)" if counts else ""
        add(label, metric, "per_s", metric)
        if metric in ("runs_16", "joins_16"):
            add(label.replace("/s", " p50 (ms)"), metric, "p50", f"{metric}_p50")
    offset = criogen.get("deep_page_offset")
    offsets = {
        side.get("deep_page_offset") for side in sides.values() if side.get("deep_page_offset")
    }
    for metric, label in LATENCY_METRICS.items():
        shown = offset if offset is not None else (min(offsets) if offsets else "?")
        add(
            label.format(offset=f"{shown:,}" if isinstance(shown, int) else shown),
            metric,
            "p50",
            metric,
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [" | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    threads = {side.get("search_threads") for side in sides.values() if side.get("search_threads")}
    if threads:
        lines.append(
            "searches among " + " / ".join(f"{n:,}" for n in sorted(threads)) + " seeded threads"
        )
    if notes:
        lines += ["errors:", *notes]
    for name, side in sides.items():
        if "skipped" in side:
            lines.append(f"{name} skipped: {side['skipped']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per throughput cell and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--samples", type=int, default=50, help="per latency cell and round")
    parser.add_argument("--search-threads", type=int, default=10_000)
    parser.add_argument("--history-checkpoints", type=int, default=workload.HISTORY_CHECKPOINTS)
    parser.add_argument(
        "--delete-threads",
        type=int,
        default=None,
        help="how many of the seeded threads the deletes cell deletes (default: all)",
    )
    parser.add_argument(
        "--aegra-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for Aegra over the defaults (e.g. SQLALCHEMY_POOL_SIZE=2); repeatable",
    )
    parser.add_argument(
        "--servers",
        default="criogen,aegra,langgraph",
        help="comma-separated: which of criogen, aegra, langgraph to measure",
    )
    parser.add_argument(
        "--server", choices=workload.ASGI_SERVERS, default="uvicorn", help="Criogen's ASGI server"
    )
    parser.add_argument("--table", action="store_true", help="also print a table on stderr")
    args = parser.parse_args()
    overrides = dict(item.split("=", 1) for item in args.aegra_env)
    wanted = {name.strip() for name in args.servers.split(",") if name.strip()}
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    tmp = Path(tempfile.mkdtemp(prefix="criogen-bench-http-"))
    log(f"server logs in {tmp}")
    report: dict[str, Any] = {}
    failed: dict[str, str] = {}
    peaks: dict[str, int] = {}
    versions: dict[str, Any] = {"langgraph_sdk (client)": _version("langgraph-sdk")}

    pythons: dict[str, Path] = {}
    for name, requirements, packages in (
        ("aegra", REQUIREMENTS, AEGRA_PACKAGES),
        ("langgraph", LANGGRAPH_REQUIREMENTS, LANGGRAPH_PACKAGES),
    ):
        if name not in wanted:
            continue
        try:
            pythons[name] = ensure_venv(name, requirements, log)
            versions[name] = venv_versions(pythons[name], packages)
        except Exception as exc:  # noqa: BLE001 - reported as that side's result
            failed[name] = f"installing {' '.join(requirements)} failed: {exc}"[:500]

    with contextlib.ExitStack() as stack:
        targets: list[workload.Target] = []
        databases: dict[str, str] = {}
        if "criogen" in wanted:
            try:
                target, server = stack.enter_context(
                    workload.criogen_server("postgres", tmp, asgi_server=args.server)
                )
                targets.append(target)
                databases["criogen"] = server.database_url.rsplit("/", 1)[1]
            except Exception as exc:  # noqa: BLE001 - reported as Criogen's result
                failed["criogen"] = f"starting failed: {type(exc).__name__}: {exc}"[:500]
        if "aegra" in pythons:
            try:
                db_name = stack.enter_context(workload.fresh_pg_database("aegra_bench"))
                targets.append(
                    stack.enter_context(aegra_server(pythons["aegra"], db_name, tmp, overrides))
                )
                databases["aegra"] = db_name
            except Exception as exc:  # noqa: BLE001 - reported as Aegra's result
                failed["aegra"] = f"starting failed: {type(exc).__name__}: {exc}"[:500]
        if "langgraph" in pythons:
            try:
                targets.append(stack.enter_context(langgraph_server(pythons["langgraph"], tmp)))
            except Exception as exc:  # noqa: BLE001 - reported as LangGraph's result
                failed["langgraph"] = f"starting failed: {type(exc).__name__}: {exc}"[:500]
        if targets:
            with ConnectionProbe(databases) as probe:
                report.update(asyncio.run(compare(targets, args, failed)))
            peaks = probe.peaks
    for name, reason in failed.items():
        report[name] = {"skipped": reason}
    for name in ("criogen", *OTHERS):
        if name not in wanted:
            report[name] = {"skipped": "not asked for (--servers)"}
    criogen = report.get("criogen") or {}
    if "skipped" not in criogen:
        report["ratios"] = {
            name: ratios(criogen, report[name], name)
            for name in OTHERS
            if "skipped" not in report.get(name, {"skipped": ""})
        }
    document = {
        "criogen": report.get("criogen"),
        "aegra": report.get("aegra"),
        "langgraph": report.get("langgraph"),
        "ratios": report.get("ratios"),
        "goals": {
            name: {metric: f"{op} {bound}" for metric, (op, bound) in goals.items()}
            for name, goals in GOALS.items()
        },
        "workload": {
            "graph": workload.GRAPH,
            "run_input_bytes": len(json.dumps(workload.RUN_INPUT, separators=(",", ":"))),
            "seconds_per_cell_and_round": args.seconds,
            "rounds": args.rounds,
            "samples_per_latency_cell_and_round": args.samples,
            "search_threads": args.search_threads,
            "search_shapes": list(workload.SEARCH_SHAPES),
            "history_checkpoints": args.history_checkpoints,
            "deletes": f"{args.delete_threads or args.search_threads} of the seeded threads,"
            " each round its share, by 16 clients",
            "order": "per cell: criogen, aegra, langgraph, repeated --rounds times",
        },
        "servers": {
            "criogen": f"{args.server} criogen.asgi, 1 process, in-process runner, token auth, "
            + ", ".join(f"{k}={v}" for k, v in workload.PRODUCTION.items() if k != "SECRET_KEY"),
            "aegra": "uvicorn aegra_api.main:app, 1 worker, no reload, noop auth, "
            "ENV_MODE=PRODUCTION, LOG_LEVEL=WARNING"
            + "".join(f", {k}={v}" for k, v in {**AEGRA_POOLS, **overrides}.items()),
            "langgraph": "langgraph dev --no-browser --no-reload "
            f"--n-jobs-per-worker {LANGGRAPH_JOBS} --server-log-level WARNING (in memory), "
            + ", ".join(f"{k}={v}" for k, v in LANGGRAPH_ENV.items()),
            "postgresql": "127.0.0.1:5432, a fresh database per server (not LangGraph's)",
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
