"""Criogen against LangGraph and against the raw-driver floor, side by side in one run.

Run it from the project folder::

    .venv/bin/python bench/langgraph_compare.py --table          # ~2 minutes
    .venv/bin/python bench/langgraph_compare.py --seconds 1 --backends sqlite --modes sync

The first run creates ``bench/.venvs/langgraph`` (gitignored) and installs LangGraph
and its SQLite and PostgreSQL checkpointers there, so they never meet the project's
own dependencies. For each backend (memory, SQLite, PostgreSQL) and durability mode
(sync, async, exit) it then times three engines, alternating in ``--rounds`` short
rounds so that they share the machine's load (the ratios compare the totals;
the per-round ratios are in the JSON too):

- **criogen**: the 3-node workflow of ``bench/engine.py`` in this process;
- **langgraph**: the identical graph in a worker process on the LangGraph venv
  (``bench/_langgraph_worker.py``), ``invoke(..., durability=mode)`` with
  ``InMemorySaver``, ``SqliteSaver`` (WAL, synchronous FULL) or ``PostgresSaver``;
- **floor**: a minimal engine on the raw driver (``sqlite3``/``psycopg``): the same
  three functions over a dict, one row per checkpoint (input + 3 steps; one at the
  end for ``exit``), autocommit, and for ``async`` a writer thread that commits what
  has queued up in one transaction (group commit).

Each engine gets its own fresh SQLite file and its own fresh PostgreSQL database
(created on 127.0.0.1 as user postgres and dropped at the end). It prints one JSON
document on stdout with the figures and the ratios criogen/langgraph and
criogen/floor per cell, and with ``--table`` a table on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import engine  # noqa: E402 - bench/engine.py, next to this file
from _venv import ensure_venv  # noqa: E402 - bench/_venv.py, next to this file

BENCH = Path(__file__).resolve().parent
WORKER = BENCH / "_langgraph_worker.py"
REQUIREMENTS = [
    "langgraph>=1.2,<2",
    "langgraph-checkpoint-sqlite>=3,<4",
    "langgraph-checkpoint-postgres>=3,<4",
    "psycopg[binary]>=3.2,<4",
]
GOAL_VS_LANGGRAPH = 3.0
GOAL_VS_FLOOR = 0.5

log = engine.log


# -- the LangGraph environment ---------------------------------------------------------


class LangGraphWorker:
    """The worker process on the LangGraph venv: one JSON line in, one JSON line out."""

    def __init__(self, python: Path) -> None:
        self.proc = subprocess.Popen(
            [str(python), str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def call(self, cmd: str, **fields: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"cmd": cmd, **fields}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the LangGraph worker exited (code {self.proc.wait()})")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"LangGraph worker: {reply['error']}")
        return reply

    def quit(self) -> None:
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.write('{"cmd": "quit"}\n')
            self.proc.stdin.flush()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- the raw-driver floor ----------------------------------------------------------------

_FLOOR_TABLE = (
    "CREATE TABLE IF NOT EXISTS floor_checkpoint ("
    " thread_id TEXT NOT NULL, version INTEGER NOT NULL, data TEXT NOT NULL,"
    " PRIMARY KEY (thread_id, version))"
)
_FLOOR_INSERT = "INSERT INTO floor_checkpoint (thread_id, version, data) VALUES ({p}, {p}, {p})"

Row = tuple[str, int, str]


class MemorySink:
    """Checkpoint rows in a dict."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int], str] = {}
        self.lock = threading.Lock()

    def write(self, row: Row) -> None:
        with self.lock:
            self.rows[(row[0], row[1])] = row[2]

    def write_many(self, rows: list[Row]) -> None:
        with self.lock:
            for row in rows:
                self.rows[(row[0], row[1])] = row[2]

    def close(self) -> None:
        self.rows.clear()


class SqliteSink:
    """Checkpoint rows in a SQLite file: WAL, synchronous FULL, autocommit."""

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute(_FLOOR_TABLE)
        self.sql = _FLOOR_INSERT.format(p="?")

    def write(self, row: Row) -> None:
        self.conn.execute(self.sql, row)

    def write_many(self, rows: list[Row]) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.executemany(self.sql, rows)
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


class PostgresSink:
    """Checkpoint rows in PostgreSQL through psycopg: autocommit, prepared statements."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.conn.execute(_FLOOR_TABLE)
        self.sql = _FLOOR_INSERT.format(p="%s")

    def write(self, row: Row) -> None:
        self.conn.execute(self.sql, row, prepare=True)

    def write_many(self, rows: list[Row]) -> None:
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany(self.sql, rows)

    def close(self) -> None:
        self.conn.close()


class GroupWriter:
    """A writer thread that commits everything queued so far in one transaction."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.cv = threading.Condition()
        self.queue: list[Row] = []
        self.submitted = 0
        self.written = 0
        self.stopped = False
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._loop, name="floor-writer", daemon=True)
        self.thread.start()

    def submit(self, row: Row) -> None:
        with self.cv:
            self.queue.append(row)
            self.submitted += 1
            self.cv.notify_all()

    def _loop(self) -> None:
        while True:
            with self.cv:
                while not self.queue and not self.stopped:
                    self.cv.wait()
                if self.stopped and not self.queue:
                    return
                batch, self.queue = self.queue, []
            try:
                self.sink.write_many(batch)
            except BaseException as exc:
                self.error = exc
            with self.cv:
                self.written += len(batch)
                self.cv.notify_all()

    def flush(self) -> None:
        with self.cv:
            target = self.submitted
            while self.written < target:
                self.cv.wait()
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        with self.cv:
            self.stopped = True
            self.cv.notify_all()
        self.thread.join()


class FloorEngine:
    """The minimal durable engine: three functions over a dict, one row per checkpoint."""

    def __init__(self, sink: Any, mode: str) -> None:
        self.sink = sink
        self.mode = mode
        self.writer = GroupWriter(sink) if mode == "async" else None
        self.nodes = (engine.node_a, engine.node_b, engine.node_c)

    def _put(self, row: Row) -> None:
        if self.writer is not None:
            self.writer.submit(row)
        else:
            self.sink.write(row)

    def run(self, data: dict[str, Any]) -> dict[str, Any]:
        thread_id = str(uuid.uuid4())
        state = dict(data)
        version = 1
        if self.mode != "exit":
            self._put((thread_id, version, json.dumps(data)))
        for node in self.nodes:
            update = node(state)
            state = {**state, **update}
            version += 1
            if self.mode != "exit":
                self._put((thread_id, version, json.dumps(update)))
        if self.mode == "exit":
            self._put((thread_id, 1, json.dumps(state)))
        if self.writer is not None:
            self.writer.flush()
        return state

    def close(self) -> None:
        if self.writer is not None:
            self.writer.stop()


def floor_throughput(sink: Any, mode: str, seconds: float) -> dict[str, Any]:
    """Time the floor engine like engine.throughput times Criogen."""
    floor = FloorEngine(sink, mode)
    try:

        class _App:
            def run(self, data: dict[str, Any]) -> Any:
                state = floor.run(data)
                return _Result(state, 4 if mode != "exit" else 1)

        return engine.throughput(_App(), seconds)
    finally:
        floor.close()


class _Result:
    """Just what engine.throughput reads from a run result."""

    def __init__(self, state: dict[str, Any], version: int) -> None:
        self.state = state
        self.status = "completed"
        self.checkpoint = type("Cp", (), {"version": version})()


# -- the comparison ----------------------------------------------------------------------


def merge(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Rounds of one engine as one cell: total runs over total time, median latencies."""
    runs = sum(c["runs"] for c in cells)
    seconds = sum(c["seconds"] for c in cells)
    return {
        "runs": runs,
        "seconds": round(seconds, 3),
        "runs_per_s": round(runs / seconds, 1),
        "steps_per_s": round(3 * runs / seconds, 1),
        "run_p50_ms": round(statistics.median(c["run_p50_ms"] for c in cells), 3),
        "run_p99_ms": round(max(c["run_p99_ms"] for c in cells), 3),
        "cpu_ms_per_run": round(sum(c["cpu_ms_per_run"] * c["runs"] for c in cells) / runs, 3),
        "rounds_runs_per_s": [c["runs_per_s"] for c in cells],
    }


def ratio(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    """a's rate over b's, both over all rounds (equal time per round for each)."""
    return round(a["runs_per_s"] / b["runs_per_s"], 2) if b["runs_per_s"] else None


def round_ratios(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[float]:
    """a's rate over b's in each round: how much the load moved during the cell."""
    return [round(x["runs_per_s"] / y["runs_per_s"], 2) for x, y in zip(a, b, strict=True)]


def compare_backend(
    name: str,
    modes: list[str],
    seconds: float,
    worker: LangGraphWorker,
    tmpdir: str,
    pg_url: str,
    n_rounds: int = 3,
) -> dict[str, Any]:
    """All modes of one backend: criogen, langgraph and floor, cell by cell."""
    cleanup: list[Callable[[], None]] = []
    sinks: dict[str, Any] = {}
    out: dict[str, Any] = {}
    crio: engine.Backend | None = None
    try:
        crio_dir = os.path.join(tmpdir, f"criogen-{name}")
        os.makedirs(crio_dir, exist_ok=True)
        crio = engine.open_backend(name, crio_dir, pg_url)
        if name == "memory":
            worker.call("setup", backend=name, payload=engine.PAYLOAD)
            floor_sink: Any = MemorySink()
        elif name == "sqlite":
            worker.call(
                "setup",
                backend=name,
                payload=engine.PAYLOAD,
                sqlite_path=os.path.join(tmpdir, "langgraph.db"),
            )
            floor_sink = SqliteSink(os.path.join(tmpdir, "floor.db"))
        else:
            lg_url, lg_drop, _ = engine.fresh_pg_database(pg_url, "langgraph_bench")
            cleanup.append(lg_drop)
            worker.call("setup", backend=name, payload=engine.PAYLOAD, pg_url=lg_url)
            floor_url, floor_drop, _ = engine.fresh_pg_database(pg_url, "floor_bench")
            cleanup.append(floor_drop)
            floor_sink = PostgresSink(floor_url)
        sinks["floor"] = floor_sink
        wf = engine.three_node_workflow()
        for mode in modes:
            app = wf.compile(storage=crio.storage, durability=mode)
            # Rounds alternate the three engines so that they share the machine's load;
            # the ratios compare the totals (each engine gets the same time per round).
            rounds: dict[str, list[dict[str, Any]]] = {"criogen": [], "langgraph": [], "floor": []}
            for r in range(n_rounds):
                log(f"{name}/{mode}: round {r + 1}/{n_rounds}")
                rounds["criogen"].append(engine.throughput(app, seconds / n_rounds))
                rounds["langgraph"].append(
                    worker.call("run", mode=mode, seconds=seconds / n_rounds)
                )
                rounds["floor"].append(floor_throughput(floor_sink, mode, seconds / n_rounds))
            c, lg, fl = (merge(rounds[k]) for k in ("criogen", "langgraph", "floor"))
            out[mode] = {
                "criogen": c,
                "langgraph": lg,
                "floor": fl,
                "criogen_vs_langgraph": ratio(c, lg),
                "criogen_vs_floor": ratio(c, fl),
                "langgraph_vs_floor": ratio(lg, fl),
                "criogen_vs_langgraph_by_round": round_ratios(
                    rounds["criogen"], rounds["langgraph"]
                ),
                "criogen_vs_floor_by_round": round_ratios(rounds["criogen"], rounds["floor"]),
            }
            log(
                f"{name}/{mode}: criogen {c['runs_per_s']}, langgraph {lg['runs_per_s']}, "
                f"floor {fl['runs_per_s']} runs/s"
            )
    finally:
        with contextlib.suppress(Exception):
            worker.call("close")
        for sink in sinks.values():
            with contextlib.suppress(Exception):
                sink.close()
        if crio is not None:
            engine.close_backend(crio)
        for fn in cleanup:
            try:
                fn()
            except Exception as exc:
                log(f"cleanup failed: {exc}")
    return out


def goals(cells: dict[str, Any]) -> dict[str, Any]:
    """Issue 9's in-process goals, checked cell by cell."""
    misses: list[str] = []
    skipped: list[str] = []
    for backend, modes in cells.items():
        if "skipped" in modes:
            skipped.append(backend)
            continue
        for mode, cell in modes.items():
            vs_lg = cell["criogen_vs_langgraph"] or 0
            if vs_lg < GOAL_VS_LANGGRAPH:
                misses.append(f"{backend}/{mode}: {vs_lg}x LangGraph < {GOAL_VS_LANGGRAPH}x")
            vs_floor = cell["criogen_vs_floor"] or 0
            if backend != "memory" and vs_floor < GOAL_VS_FLOOR:
                misses.append(f"{backend}/{mode}: {vs_floor}x floor < {GOAL_VS_FLOOR}x")
    return {
        "criogen_vs_langgraph_at_least": GOAL_VS_LANGGRAPH,
        "criogen_vs_floor_at_least (sqlite, postgres)": GOAL_VS_FLOOR,
        # A skipped backend is not a met goal.
        "met": not misses and not skipped,
        "misses": misses,
        "skipped": skipped,
    }


def table(report: dict[str, Any]) -> str:
    """The figures as a fixed-width text table (runs per second and ratios)."""
    head = (
        f"{'backend':<9} {'mode':<6} {'criogen':>9} {'langgraph':>10} {'floor':>9}"
        f" {'vs LG':>7} {'vs floor':>9}  {'CPU ms/run C / LG / floor':>26}  goal"
    )
    lines = [
        "runs/s, 3-node workflow, ~1 KB payload, one client; same run, same machine;"
        " CPU = this client's process time per run",
        head,
        "-" * len(head),
    ]
    for backend, modes in report["cells"].items():
        if "skipped" in modes:
            lines.append(f"{backend:<9} skipped: {modes['skipped']}")
            continue
        for mode, cell in modes.items():
            vs_lg, vs_fl = cell["criogen_vs_langgraph"], cell["criogen_vs_floor"]
            cpu = " / ".join(
                f"{cell[k]['cpu_ms_per_run']:.2f}" for k in ("criogen", "langgraph", "floor")
            )
            ok = (vs_lg or 0) >= GOAL_VS_LANGGRAPH and (
                backend == "memory" or (vs_fl or 0) >= GOAL_VS_FLOOR
            )
            lines.append(
                f"{backend:<9} {mode:<6} {cell['criogen']['runs_per_s']:>9,.0f}"
                f" {cell['langgraph']['runs_per_s']:>10,.0f} {cell['floor']['runs_per_s']:>9,.0f}"
                f" {vs_lg:>6.2f}x {vs_fl:>8.2f}x  {cpu:>26}  {'met' if ok else 'MISSED'}"
            )
    lines.append(
        f"goal: criogen >= {GOAL_VS_LANGGRAPH}x LangGraph everywhere and >= "
        f"{GOAL_VS_FLOOR}x the floor on SQLite and PostgreSQL"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="wall-clock budget per cell")
    parser.add_argument("--backends", default=",".join(engine.BACKENDS))
    parser.add_argument("--modes", default=",".join(engine.MODES))
    parser.add_argument("--pg-url", default=os.environ.get("BENCH_PG_URL", engine.DEFAULT_PG_URL))
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternate the engines this many times per cell"
    )
    parser.add_argument("--table", action="store_true", help="also print a table on stderr")
    args = parser.parse_args(argv)
    backends = engine.parse_list(args.backends, engine.BACKENDS, "backends")
    modes = engine.parse_list(args.modes, engine.MODES, "modes")

    started = time.perf_counter()
    python = ensure_venv("langgraph", REQUIREMENTS, log)
    worker = LangGraphWorker(python)
    report: dict[str, Any] = {
        "bench": "criogen-vs-langgraph",
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds_per_cell": args.seconds,
        "rounds": args.rounds,
        "machine": engine.machine_facts(),
        "workflow": {
            "shape": "START -> a -> b -> c -> END",
            "payload_bytes": engine.PAYLOAD_BYTES,
            "client": "one thread, a fresh thread id per run",
            "floor": "raw sqlite3/psycopg, one row per checkpoint, autocommit; "
            "async = group commit in a writer thread",
        },
        "cells": {},
    }
    try:
        report["langgraph_versions"] = worker.call("versions")
        with tempfile.TemporaryDirectory(prefix="criogen-cmp-") as tmpdir:
            for name in backends:
                try:
                    report["cells"][name] = compare_backend(
                        name, modes, args.seconds, worker, tmpdir, args.pg_url, args.rounds
                    )
                except engine.Skip as exc:
                    log(f"{name}: skipped: {exc}")
                    report["cells"][name] = {"skipped": str(exc)}
    finally:
        worker.quit()
    report["goals"] = goals(report["cells"])
    report["elapsed_s"] = round(time.perf_counter() - started, 1)
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    if args.table:
        print(table(report), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
