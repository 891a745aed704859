"""Criogen's LangGraph checkpointer against LangGraph's own, in one process.

Run it from the project folder::

    .venv/bin/python bench/langgraph_savers.py --table                 # ~1 minute
    .venv/bin/python bench/langgraph_savers.py --seconds 1 --backends sqlite --modes sync

The same compiled LangGraph graph (the 3-node graph of ``bench/langgraph_compare.py``:
START → a → b → c → END over a ~1 KB payload, a fresh thread per run, one client) runs
with ``invoke(..., durability=mode)`` on two checkpointers per database, taking turns
run by run so that they share the machine's load (``--alternate round``: each runs for
half of each of the ``--rounds`` rounds instead, as before 2026-12-01 20:50 UTC; under a
load that changes within a second, that spread the rounds' ratios from 0.4 to 6).
Ratios compare the totals (runs over the time of each engine's own runs); the ratio of
each of the ``--rounds`` slices is in the JSON too:

- **criogen**: :class:`criogen.langgraph.CriogenSaver` on a fresh Criogen storage
  (``sqlite://`` file, or a fresh PostgreSQL database), no encryption key;
- **langgraph**: LangGraph's ``SqliteSaver`` (its own connection, WAL and synchronous
  FULL as Criogen's SQLite runs) or ``PostgresSaver.from_conn_string`` (autocommit, as
  its docs set it up) on a database of its own.

Packages: ``langgraph-checkpoint-sqlite`` and ``langgraph-checkpoint-postgres`` (in the
dev extras). It prints one JSON document on stdout (runs/s, latency percentiles, CPU
per run, and the ratio criogen/langgraph per cell), and with ``--table`` a table on
stderr. Goal (issue 19): a ratio of at least 1.0 in every cell.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import engine  # noqa: E402 - bench/engine.py, next to this file
from _langgraph_worker import build  # noqa: E402 - the same graph as langgraph_compare
from langgraph_compare import merge, ratio, round_ratios  # noqa: E402

BACKENDS = ("sqlite", "postgres")
GOAL = 1.0
"""criogen/langgraph runs per second, at least, in every cell."""

log = engine.log


def run_once(graph: Any, mode: str) -> None:
    """One run of ``graph`` on a fresh thread."""
    config = {"configurable": {"thread_id": str(uuid.uuid4())}}
    state = {"payload": engine.PAYLOAD, "a": 0, "b": "", "c": False}
    out: dict[str, Any] = graph.invoke(state, config, durability=mode)
    if out["c"] is not True:
        raise RuntimeError("the run did not complete")


def summary(latencies: list[float], cpu: float) -> dict[str, Any]:
    """Rates and latencies of ``latencies`` (seconds per run) and ``cpu`` seconds."""
    latencies = sorted(latencies)
    n = len(latencies)
    elapsed = sum(latencies)
    return {
        "runs": n,
        "seconds": round(elapsed, 3),
        "runs_per_s": round(n / elapsed, 1),
        "run_p50_ms": round(latencies[n // 2] * 1000, 3),
        "run_p99_ms": round(latencies[min(n - 1, int(n * 0.99))] * 1000, 3),
        "cpu_ms_per_run": round(cpu / n * 1000, 3),
    }


def throughput(graph: Any, mode: str, seconds: float, warmup: int = 5) -> dict[str, Any]:
    """Fresh threads through ``graph`` for ``seconds``: rates and latencies."""
    for _ in range(warmup):
        run_once(graph, mode)
    latencies: list[float] = []
    cpu0 = time.process_time()
    now = time.perf_counter()
    deadline = now + seconds
    while now < deadline:
        t0 = now
        run_once(graph, mode)
        now = time.perf_counter()
        latencies.append(now - t0)
    return summary(latencies, time.process_time() - cpu0)


def run_by_run(graphs: dict[str, Any], mode: str, seconds: float) -> dict[str, dict[str, Any]]:
    """The graphs in turn, one run each, for ``seconds`` in all: each engine's rates over
    the time of its own runs, so that a change in the machine's load within the round
    hits both alike. Each run is timed whole: ``invoke`` returns once its checkpoint
    writes are done (``async`` and ``exit`` included), and the process's CPU time
    around it is the run's."""
    latencies: dict[str, list[float]] = {name: [] for name in graphs}
    cpu = dict.fromkeys(graphs, 0.0)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for name, graph in graphs.items():
            c0 = time.process_time()
            t0 = time.perf_counter()
            run_once(graph, mode)
            latencies[name].append(time.perf_counter() - t0)
            cpu[name] += time.process_time() - c0
    return {name: summary(latencies[name], cpu[name]) for name in graphs}


def savers(name: str, tmpdir: str, pg_url: str) -> tuple[Any, Any, list[Callable[[], None]]]:
    """(Criogen's saver, LangGraph's saver, cleanups) on fresh databases."""
    from criogen import Storage
    from criogen.langgraph import CriogenSaver

    cleanup: list[Callable[[], None]] = []
    stack = contextlib.ExitStack()
    cleanup.append(stack.close)
    if name == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        storage = Storage(f"sqlite://{tmpdir}/criogen.db", encryption_key=False)
        conn = sqlite3.connect(f"{tmpdir}/langgraph.db", check_same_thread=False)
        stack.callback(conn.close)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        theirs: Any = SqliteSaver(conn)
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        crio_url, crio_drop, _ = engine.fresh_pg_database(pg_url, "criogen_savers")
        lg_url, lg_drop, _ = engine.fresh_pg_database(pg_url, "langgraph_savers")
        storage = Storage(crio_url, encryption_key=False)
        theirs = stack.enter_context(PostgresSaver.from_conn_string(lg_url))

        def close_and_drop() -> None:
            from django.db import connections

            storage.close()
            connections.close_all()
            crio_drop()
            lg_drop()

        cleanup.insert(0, close_and_drop)
    theirs.setup()
    return CriogenSaver(storage), theirs, cleanup


def compare(
    name: str,
    modes: list[str],
    seconds: float,
    tmpdir: str,
    pg_url: str,
    n_rounds: int,
    alternate: str = "run",
) -> dict[str, Any]:
    ours, theirs, cleanup = savers(name, tmpdir, pg_url)
    graphs = {"criogen": build(ours), "langgraph": build(theirs)}
    out: dict[str, Any] = {}
    try:
        for mode in modes:
            rounds: dict[str, list[dict[str, Any]]] = {"criogen": [], "langgraph": []}
            if alternate == "run":
                for graph in graphs.values():
                    for _ in range(5):  # warm-up
                        run_once(graph, mode)
            for r in range(n_rounds):
                log(f"{name}/{mode}: round {r + 1}/{n_rounds}")
                if alternate == "run":
                    # Both engines in one slice of twice the time: each gets about the
                    # same share as in the other method.
                    turns = run_by_run(graphs, mode, 2 * seconds / n_rounds)
                    for engine_name, cell in turns.items():
                        rounds[engine_name].append(cell)
                    continue
                for engine_name, graph in graphs.items():
                    rounds[engine_name].append(throughput(graph, mode, seconds / n_rounds))
            c, lg = merge(rounds["criogen"]), merge(rounds["langgraph"])
            out[mode] = {
                "criogen": c,
                "langgraph": lg,
                "criogen_vs_langgraph": ratio(c, lg),
                "criogen_vs_langgraph_by_round": round_ratios(
                    rounds["criogen"], rounds["langgraph"]
                ),
            }
            log(f"{name}/{mode}: criogen {c['runs_per_s']}, langgraph {lg['runs_per_s']} runs/s")
    finally:
        for fn in cleanup:
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - report and go on cleaning
                log(f"cleanup failed: {exc}")
    return out


def table(report: dict[str, Any]) -> str:
    lines = [
        f"{'backend':<9} {'mode':<6} {'criogen runs/s':>15} {'langgraph runs/s':>17} {'ratio':>6}"
    ]
    for name, cells in report["cells"].items():
        if "skipped" in cells:
            lines.append(f"{name:<9} skipped: {cells['skipped']}")
            continue
        for mode, cell in cells.items():
            lines.append(
                f"{name:<9} {mode:<6} {cell['criogen']['runs_per_s']:>15} "
                f"{cell['langgraph']['runs_per_s']:>17} {cell['criogen_vs_langgraph']:>6}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="wall-clock budget per cell")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--modes", default=",".join(engine.MODES))
    parser.add_argument("--pg-url", default=os.environ.get("BENCH_PG_URL", engine.DEFAULT_PG_URL))
    parser.add_argument("--rounds", type=int, default=3, help="alternations per cell")
    parser.add_argument(
        "--alternate",
        choices=("run", "round"),
        default="run",
        help="take turns run by run (default) or for half a round each",
    )
    parser.add_argument("--table", action="store_true", help="also print a table on stderr")
    args = parser.parse_args(argv)
    backends = engine.parse_list(args.backends, BACKENDS, "backends")
    modes = engine.parse_list(args.modes, engine.MODES, "modes")
    from importlib import metadata

    started = time.perf_counter()
    report: dict[str, Any] = {
        "bench": "criogen-saver-vs-langgraph-savers",
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds_per_cell": args.seconds,
        "rounds": args.rounds,
        "alternate": args.alternate,
        "machine": engine.machine_facts(),
        "versions": {
            p: metadata.version(p)
            for p in (
                "langgraph",
                "langgraph-checkpoint",
                "langgraph-checkpoint-sqlite",
                "langgraph-checkpoint-postgres",
            )
        },
        "graph": {
            "shape": "START -> a -> b -> c -> END (LangGraph StateGraph)",
            "payload_bytes": engine.PAYLOAD_BYTES,
            "client": "one thread, a fresh thread id per run, same process",
        },
        "cells": {},
    }
    with tempfile.TemporaryDirectory(prefix="criogen-savers-") as tmpdir:
        for name in backends:
            try:
                report["cells"][name] = compare(
                    name, modes, args.seconds, tmpdir, args.pg_url, args.rounds, args.alternate
                )
            except engine.Skip as exc:
                log(f"{name}: skipped: {exc}")
                report["cells"][name] = {"skipped": str(exc)}
    misses = [
        f"{name}/{mode}: {cell['criogen_vs_langgraph']}"
        for name, cells in report["cells"].items()
        if "skipped" not in cells
        for mode, cell in cells.items()
        if (cell["criogen_vs_langgraph"] or 0) < GOAL
    ]
    report["goal"] = {"criogen_vs_langgraph_at_least": GOAL, "missed": misses}
    report["elapsed_s"] = round(time.perf_counter() - started, 1)
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    if args.table:
        print(table(report), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
