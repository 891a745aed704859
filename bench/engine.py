"""Engine benchmark: throughput per backend and durability, storage growth, head reads.

Run it from the project folder (Criogen pip-installed in ``.venv``)::

    .venv/bin/python bench/engine.py                      # everything, ~1 minute
    .venv/bin/python bench/engine.py --seconds 1 --backends sqlite --modes sync
    .venv/bin/python bench/engine.py --profile postgres:sync   # cProfile to stderr

It prints ONE JSON document on stdout; progress goes to stderr. What it measures:

- ``throughput``: a 3-node workflow (START → a → b → c → END) with a ~1 KB payload in
  the state, each node changing one small key. One client (this thread) runs it on a
  fresh thread per run for a fixed wall-clock budget per cell, on memory, SQLite (a
  fresh file in a temp dir, WAL + synchronous FULL as the engine configures it) and
  PostgreSQL (a fresh database created on 127.0.0.1 and dropped at the end), for each
  durability mode. A *step* is one node step (3 per run); ``checkpoints_per_run`` is
  what the engine wrote (input + 3 steps, or 1 with ``exit``).
- ``statements``: SQL statements, ``executemany`` calls, durable commits and relaxed
  (lease) commits per run in a short untimed pass (all threads, heartbeat included):
  through Django's cursor on PostgreSQL, from sqlite3's statement trace on SQLite.
- ``growth``: a thread whose ``steps`` list (append reducer) grows by one item per
  step; the bytes stored for the checkpoint at step 10 and at step 500 (octet length
  of the checkpoint body plus its value rows, read from the tables), their ratio, the
  size the full state would take, and the time to read the head state at step 10 and
  at step 500.
- ``history_depth``: a thread of ``--history-depth`` checkpoints (50,000) whose state
  does not grow; a history page of 10 just after checkpoint 50 and the newest page,
  an old checkpoint read by id and the head: paged reads cost the same at any depth.
- ``machine``: cores, CPU, load, Python, SQLite and PostgreSQL versions and settings.

The machine is shared and the numbers are noisy: compare ratios from one run.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import platform
import pstats
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

BACKENDS = ("memory", "sqlite", "postgres")
MODES = ("sync", "async", "exit")
DEFAULT_PG_URL = "postgres://postgres@127.0.0.1:5432/postgres"
GROWTH_STEPS = (10, 500)


def log(message: str) -> None:
    """Progress line on stderr (stdout holds only the JSON document)."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# -- the workloads ---------------------------------------------------------------------


def make_payload(size: int = 1000) -> dict[str, Any]:
    """A JSON object of about ``size`` bytes, shaped like a real order/ticket."""
    payload: dict[str, Any] = {
        "customer": {"id": "cus_8f3a2c", "name": "Ada Lovelace", "tier": "gold"},
        "items": [{"sku": f"SKU-{i:04d}", "qty": i % 3 + 1, "price": 9.99 + i} for i in range(8)],
        "notes": "",
    }
    filler = size - len(json.dumps(payload, separators=(",", ":")))
    payload["notes"] = "n" * max(0, filler)
    return payload


PAYLOAD = make_payload()
PAYLOAD_BYTES = len(json.dumps(PAYLOAD, separators=(",", ":")))


def node_a(state: dict[str, Any]) -> dict[str, Any]:
    """First node: changes one small key."""
    return {"a": state.get("a", 0) + 1}


def node_b(state: dict[str, Any]) -> dict[str, Any]:
    """Second node: changes one small key."""
    return {"b": "checked"}


def node_c(state: dict[str, Any]) -> dict[str, Any]:
    """Third node: changes one small key."""
    return {"c": True}


def three_node_workflow() -> Any:
    """START → a → b → c → END (uncompiled)."""
    from criogen import END, START, Workflow

    wf = Workflow(name="bench3")
    wf.add_node("a", node_a).add_node("b", node_b).add_node("c", node_c)
    wf.add_edge(START, "a").add_edge("a", "b").add_edge("b", "c").add_edge("c", END)
    return wf


def three_node_input() -> dict[str, Any]:
    """The input of each run: the ~1 KB payload and the keys the nodes change."""
    return {"payload": PAYLOAD, "a": 0, "b": "", "c": False}


def growing_workflow() -> Any:
    """One node looping on itself, appending one item to ``steps`` per step, until
    ``len(steps) == target``."""
    from criogen import END, START, Workflow

    def grow(state: dict[str, Any]) -> dict[str, Any]:
        n = len(state["steps"])
        return {"steps": [{"n": n, "note": f"step {n} done", "ok": True}]}

    def route(state: dict[str, Any]) -> str:
        return "grow" if len(state["steps"]) < state["target"] else END

    wf = Workflow(reducers={"steps": "append"}, name="grow")
    wf.add_node("grow", grow)
    wf.add_edge(START, "grow")
    wf.add_conditional_edges("grow", route)
    return wf


# -- backends --------------------------------------------------------------------------


@dataclass
class Backend:
    """A storage under test and what is needed to clean it up."""

    name: str
    url: str | None
    storage: Any = None
    cleanup: list[Callable[[], None]] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)


class Skip(Exception):
    """A backend that cannot run here (the message says why and what to do)."""


def pg_connect(url: str) -> Any:
    """A psycopg autocommit connection, or Skip when PostgreSQL is down."""
    try:
        import psycopg
    except ImportError as exc:
        raise Skip("psycopg is not installed; run `make install`.") from exc
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Skip(
            f"PostgreSQL at {url} is not reachable ({first}); start it with "
            "`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start` "
            "or pass --pg-url (or BENCH_PG_URL)."
        ) from exc


def fresh_pg_database(base_url: str, prefix: str) -> tuple[str, Callable[[], None], dict[str, Any]]:
    """Create an empty database next to ``base_url``'s; return its URL, a dropper, facts."""
    from urllib.parse import urlsplit

    conn = pg_connect(base_url)
    name = f"{prefix}_{os.getpid()}_{int(time.time())}"
    conn.execute(f'CREATE DATABASE "{name}"')
    facts = {
        "version": conn.execute("SHOW server_version").fetchone()[0],
        "synchronous_commit": conn.execute("SHOW synchronous_commit").fetchone()[0],
        "fsync": conn.execute("SHOW fsync").fetchone()[0],
        "shared_buffers": conn.execute("SHOW shared_buffers").fetchone()[0],
        "database": name,
    }
    conn.close()
    parts = urlsplit(base_url)
    url = parts._replace(path=f"/{name}").geturl()

    def drop() -> None:
        with contextlib.closing(pg_connect(base_url)) as c:
            # FORCE: writer-pool and heartbeat threads may still hold connections.
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return url, drop, facts


def open_backend(name: str, tmpdir: str, pg_url: str) -> Backend:
    """Set up a fresh storage for ``name`` (raises Skip when it cannot run)."""
    from criogen import Storage

    if name == "memory":
        return Backend(name, None, Storage())
    if name == "sqlite":
        url = f"sqlite://{tmpdir}/bench.db"
        backend = Backend(name, url, Storage(url))
        backend.facts = sqlite_facts(f"{tmpdir}/bench.db")
        return backend
    if name == "postgres":
        url, drop, facts = fresh_pg_database(pg_url, "criogen_bench")
        backend = Backend(name, url, cleanup=[drop], facts=facts)
        try:
            backend.storage = Storage(url)
        except Exception:
            drop()
            raise
        return backend
    raise SystemExit(f"unknown backend {name!r}; use {', '.join(BACKENDS)}")


def close_backend(backend: Backend) -> None:
    """Close the storage's connections and drop what the backend created."""
    if backend.storage is not None and backend.name != "memory":
        from django.db import connections

        backend.storage.close()
        connections.close_all()
    for fn in backend.cleanup:
        try:
            fn()
        except Exception as exc:
            log(f"cleanup of {backend.name} failed: {exc}")


def sqlite_facts(path: str) -> dict[str, Any]:
    """The SQLite library version and the pragmas the engine set on the file."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    return {
        "version": sqlite3.sqlite_version,
        "journal_mode": journal,
        "synchronous": "FULL (set by criogen.storage.setup)",
    }


# -- counting statements and commits -----------------------------------------------


class StatementCounter:
    """Counts the SQL a database runs and its commits, in every thread.

    PostgreSQL: statements sent through Django's CursorWrapper, and the storage's
    prepared statements (``pg_run``, which runs them on psycopg's cursor itself). SQLite: the storage runs its hot statements on
    sqlite3's own cursor, so Django's wrapper does not see them; there the counter
    reads sqlite3's trace of every statement each connection runs, BEGIN and COMMIT
    included. A commit is *durable* when it waits for the disk; lease statements
    commit without waiting (``synchronous_commit`` off / ``synchronous = NORMAL``)
    and are counted as ``relaxed_commits``.
    """

    _WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.execute = 0
        self.executemany = 0
        self.commits = 0
        self.relaxed_commits = 0
        self.kinds: dict[str, int] = {}
        self._sqlite: dict[int, dict[str, Any]] = {}

    def _kind(self, text: str) -> str:
        word = text.split(None, 1)[0] if text else "?"
        self.kinds[word] = self.kinds.get(word, 0) + 1
        return word

    def _count_pg(self, attr: str, sql: str, db: Any) -> None:
        text = sql.lstrip().upper()
        with self.lock:
            setattr(self, attr, getattr(self, attr) + 1)
            word = self._kind(text)
            if db.in_atomic_block or word == "SELECT":
                return  # committed (or not) by the atomic block
            if text.startswith("WITH RELAXED"):
                self.relaxed_commits += 1  # the lease: synchronous_commit off
            elif word != "WITH" or any(w in text for w in self._WRITES):
                self.commits += 1  # a write in autocommit is its own transaction

    def _trace_sqlite(self, key: int, sql: str) -> None:
        text = sql.lstrip().upper()
        with self.lock:
            state = self._sqlite.setdefault(key, {"tx": False, "sync": 2})
            word = text.split(None, 1)[0] if text else "?"
            if word == "PRAGMA":
                if text.startswith("PRAGMA SYNCHRONOUS ="):
                    level = text.split("=", 1)[1].strip()
                    state["sync"] = {"OFF": 0, "NORMAL": 1, "FULL": 2, "EXTRA": 3}.get(
                        level, int(level) if level.isdigit() else 2
                    )
                return
            self.execute += 1
            self._kind(text)
            if word == "BEGIN":
                state["tx"] = True
            elif word in ("COMMIT", "END"):
                state["tx"] = False
                self._commit(state)
            elif word == "ROLLBACK":
                state["tx"] = False
            elif not state["tx"] and (word in self._WRITES or word == "WITH"):
                self._commit(state)

    def _commit(self, state: dict[str, Any]) -> None:
        if state["sync"] >= 2:
            self.commits += 1
        else:
            self.relaxed_commits += 1

    @contextlib.contextmanager
    def installed(self, vendor: str) -> Iterator[StatementCounter]:
        from django.db.backends.base.base import BaseDatabaseWrapper
        from django.db.backends.utils import CursorWrapper

        counter = self
        orig_execute = CursorWrapper.execute
        orig_many = CursorWrapper.executemany
        orig_commit = BaseDatabaseWrapper.commit
        orig_ensure = BaseDatabaseWrapper.ensure_connection
        orig_logged = BaseDatabaseWrapper.queries_logged
        traced: list[Any] = []

        import criogen.storage.orm.base as orm_base

        orig_pg_run = orm_base.pg_run
        inside = threading.local()

        def pg_run(alias: str, sql: str, params: Any, *, fetch: bool) -> Any:
            # The storage's prepared statements run on psycopg's cursor itself, past
            # Django's CursorWrapper: count them here (and not again if pg_run falls
            # back to Django's cursor).
            from django.db import connections

            counter._count_pg("execute", sql, connections[alias])
            inside.on = True
            try:
                return orig_pg_run(alias, sql, params, fetch=fetch)
            finally:
                inside.on = False

        def execute(self: Any, sql: str, params: Any = None) -> Any:
            if not getattr(inside, "on", False):
                counter._count_pg("execute", sql, self.db)
            return orig_execute(self, sql, params)

        def executemany(self: Any, sql: str, param_list: Any) -> Any:
            counter._count_pg("executemany", sql, self.db)
            return orig_many(self, sql, param_list)

        def commit(self: Any) -> Any:
            with counter.lock:
                counter.commits += 1
            return orig_commit(self)

        def trace(db: Any) -> None:
            raw = db.connection
            if db.vendor == "sqlite" and raw is not None and raw not in traced:
                key = id(raw)
                raw.set_trace_callback(lambda sql, k=key: counter._trace_sqlite(k, sql))
                traced.append(raw)

        def ensure_connection(self: Any) -> Any:
            # A new connection: trace it.
            orig_ensure(self)
            trace(self)

        def queries_logged(self: Any) -> bool:
            # Asked before every statement, Django's or the storage's hot path (which
            # skips ensure_connection once connected): trace a connection opened before.
            trace(self)
            return bool(orig_logged.fget(self))

        if vendor == "sqlite":
            BaseDatabaseWrapper.ensure_connection = ensure_connection  # type: ignore[method-assign]
            BaseDatabaseWrapper.queries_logged = property(queries_logged)  # type: ignore[method-assign,assignment]
        else:
            orm_base.pg_run = pg_run
            CursorWrapper.execute = execute  # type: ignore[method-assign]
            CursorWrapper.executemany = executemany  # type: ignore[method-assign]
            BaseDatabaseWrapper.commit = commit  # type: ignore[method-assign]
        try:
            yield self
        finally:
            orm_base.pg_run = orig_pg_run
            CursorWrapper.execute = orig_execute  # type: ignore[method-assign]
            CursorWrapper.executemany = orig_many  # type: ignore[method-assign]
            BaseDatabaseWrapper.commit = orig_commit  # type: ignore[method-assign]
            BaseDatabaseWrapper.ensure_connection = orig_ensure  # type: ignore[method-assign]
            BaseDatabaseWrapper.queries_logged = orig_logged  # type: ignore[method-assign]
            for raw in traced:
                with contextlib.suppress(Exception):  # closed meanwhile
                    raw.set_trace_callback(None)

    def per(self, n: int) -> dict[str, Any]:
        """The counts divided by ``n`` (runs or reads)."""
        return {
            "statements": round((self.execute + self.executemany) / n, 2),
            "executemany_calls": round(self.executemany / n, 2),
            "commits": round(self.commits / n, 2),
            "relaxed_commits": round(self.relaxed_commits / n, 2),
            "by_kind": {k: round(v / n, 2) for k, v in sorted(self.kinds.items())},
        }


# -- measurements ----------------------------------------------------------------------


def throughput(app: Any, seconds: float, *, warmup: int = 5) -> dict[str, Any]:
    """Run the 3-node workflow on fresh threads for ``seconds``; rates and latencies."""
    for _ in range(warmup):
        app.run(three_node_input())
    latencies: list[float] = []
    checkpoints = 0
    cpu0 = time.process_time()
    start = time.perf_counter()
    deadline = start + seconds
    now = start
    while now < deadline:
        t0 = now
        result = app.run(three_node_input())
        now = time.perf_counter()
        latencies.append(now - t0)
        checkpoints += result.checkpoint.version
        if result.status != "completed" or result.state["c"] is not True:
            raise RuntimeError(f"the bench run did not complete: {result.status}")
    elapsed = now - start
    cpu = time.process_time() - cpu0
    runs = len(latencies)
    latencies.sort()
    return {
        "runs": runs,
        "seconds": round(elapsed, 3),
        "runs_per_s": round(runs / elapsed, 1),
        "steps_per_s": round(3 * runs / elapsed, 1),
        "checkpoints_per_s": round(checkpoints / elapsed, 1),
        "checkpoints_per_run": round(checkpoints / runs, 2),
        "run_p50_ms": round(latencies[runs // 2] * 1000, 3),
        "run_p99_ms": round(latencies[min(runs - 1, int(runs * 0.99))] * 1000, 3),
        # CPU of this whole process (all threads) per run: robust to I/O noise.
        "cpu_ms_per_run": round(cpu / runs * 1000, 3),
    }


def bench_agent(storage: Any, durability: str) -> Any:
    """An agent whose turn is: model asks for a tool, the tool runs, model answers
    (3 steps: two model calls, one tool call), on a scripted model (no network)."""
    from criogen import Agent, tool
    from criogen.llms import ScriptedModel

    @tool(idempotent=True)
    def lookup(order_id: str) -> dict[str, Any]:
        """Look an order up."""
        return {"order_id": order_id, "status": "delivered"}

    def reply(messages: list[dict[str, Any]], tools: Any = None) -> Any:
        if messages[-1]["type"] == "tool":
            return "Order 42 was delivered."
        return {"tool_calls": [{"name": "lookup", "args": {"order_id": "42"}}]}

    return Agent(
        model=ScriptedModel([reply] * 10_000_000),
        tools=[lookup],
        storage=storage,
        durability=durability,
        name="bench",
    )


def agent_turns(agent: Any, seconds: float, *, warmup: int = 3) -> dict[str, Any]:
    """Agent turns per second, each on a fresh thread (one client)."""
    for i in range(warmup):
        agent.thread(f"warm-{i}-{time.time_ns()}").send("Where is order 42?")
    turns = 0
    start = time.perf_counter()
    deadline = start + seconds
    now = start
    while now < deadline:
        reply = agent.thread(f"turn-{time.time_ns()}").send("Where is order 42?")
        if reply.status != "completed":
            raise RuntimeError(f"the bench agent turn did not complete: {reply.status}")
        turns += 1
        now = time.perf_counter()
    elapsed = now - start
    return {"turns": turns, "turns_per_s": round(turns / elapsed, 1)}


def count_statements(app: Any, runs: int = 20) -> dict[str, Any]:
    """Statements and durable commits per run (untimed pass)."""
    app.run(three_node_input())
    counter = StatementCounter()
    with counter.installed(app.storage.vendor):
        for _ in range(runs):
            app.run(three_node_input())
    return counter.per(runs)


def stored_bytes(backend: Backend, thread_id: str, version: int) -> dict[str, Any]:
    """Bytes stored for one checkpoint: body + its value rows, read from the tables."""
    from django.db import connections

    alias = backend.storage.alias
    with connections[alias].cursor() as cur:
        if backend.name == "postgres":
            cur.execute(
                "SELECT octet_length(body), pg_column_size(c.*) FROM criogen_checkpoint c"
                " WHERE thread_id = %s AND version = %s",
                [thread_id, version],
            )
            body, body_row = cur.fetchone()
            cur.execute(
                "SELECT count(*), coalesce(sum(octet_length(data)), 0),"
                " coalesce(sum(pg_column_size(v.*)), 0) FROM criogen_value v"
                " WHERE thread_id = %s AND version = %s",
                [thread_id, version],
            )
            rows, data, data_row = cur.fetchone()
        else:
            # length(CAST(x AS BLOB)) is the UTF-8 byte length; rows add their other columns.
            cur.execute(
                "SELECT length(CAST(body AS BLOB)),"
                " length(CAST(body AS BLOB)) + length(CAST(id AS BLOB))"
                " + length(CAST(thread_id AS BLOB)) + length(CAST(run_id AS BLOB))"
                " + length(source) + length(status) + coalesce(length(parent_id), 0)"
                " + length(created_at) + 8 FROM criogen_checkpoint"
                " WHERE thread_id = %s AND version = %s",
                [thread_id, version],
            )
            body, body_row = cur.fetchone()
            cur.execute(
                "SELECT count(*), coalesce(sum(length(CAST(data AS BLOB))), 0),"
                " coalesce(sum(length(CAST(data AS BLOB)) + length(CAST(thread_id AS BLOB))"
                " + length(CAST(state_key AS BLOB)) + 1 + 16), 0) FROM criogen_value"
                " WHERE thread_id = %s AND version = %s",
                [thread_id, version],
            )
            rows, data, data_row = cur.fetchone()
    return {
        "stored_bytes": int(body) + int(data),
        "body_bytes": int(body),
        "value_rows": int(rows),
        "value_bytes": int(data),
        "row_bytes": int(body_row) + int(data_row),
    }


def time_reads(fn: Callable[[], Any], *, seconds: float = 0.5, at_least: int = 20) -> float:
    """Median seconds of ``fn()`` over ``seconds`` (at least ``at_least`` calls)."""
    fn()
    samples: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(samples) < at_least or time.perf_counter() < deadline:
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def growth(backend: Backend, steps: tuple[int, ...] = GROWTH_STEPS) -> dict[str, Any]:
    """Grow one thread to max(steps) steps; bytes per checkpoint and head reads at each."""
    from criogen.engine.store import encode

    storage = backend.storage
    longest = max(steps)
    app = growing_workflow().compile(storage=storage, durability="sync", max_steps=longest + 10)
    tid = f"grow-{longest}-{os.getpid()}"
    t0 = time.perf_counter()
    result = app.thread(tid).run({"payload": PAYLOAD, "steps": [], "target": longest})
    grow_s = time.perf_counter() - t0
    assert len(result.state["steps"]) == longest
    out: dict[str, Any] = {"grow_seconds": round(grow_s, 3), "steps": longest}
    if backend.name != "memory":
        # Production tables have planner statistics; a fresh bench database has none
        # until autovacuum gets to it, which would make the read plans a coin toss.
        from django.db import connections

        with connections[storage.alias].cursor() as cur:
            cur.execute("ANALYZE")
        out["analyzed"] = True
    for n in steps:
        # Step n's checkpoint is version n + 1 (version 1 is the input).
        (cp,) = storage.history(tid, limit=1, before=n + 2)
        assert len(cp.state["steps"]) == n, (n, len(cp.state["steps"]))
        entry: dict[str, Any] = {"version": cp.version, "full_state_bytes": len(encode(cp.state))}
        if backend.name != "memory":
            entry.update(stored_bytes(backend, tid, cp.version))
        # The head read at step n: a thread whose head is step n.
        head_tid = tid if n == longest else f"grow-{n}-{os.getpid()}"
        if head_tid != tid:
            app.thread(head_tid).run({"payload": PAYLOAD, "steps": [], "target": n})
        head = storage.head(head_tid)
        assert len(head.state["steps"]) == n
        entry["head_read_us"] = round(time_reads(lambda t=head_tid: storage.head(t)) * 1e6, 1)
        if backend.name != "memory":
            counter = StatementCounter()
            with counter.installed(storage.vendor):
                storage.head(head_tid)
            entry["head_read_statements"] = counter.execute + counter.executemany
        out[f"step_{n}"] = entry
    first, last = out[f"step_{min(steps)}"], out[f"step_{longest}"]
    if "stored_bytes" in first:
        out["stored_bytes_ratio"] = round(last["stored_bytes"] / first["stored_bytes"], 3)
        out["row_bytes_ratio"] = round(last["row_bytes"] / first["row_bytes"], 3)
    out["full_state_ratio"] = round(last["full_state_bytes"] / first["full_state_bytes"], 2)
    out["head_read_ratio"] = round(last["head_read_us"] / first["head_read_us"], 2)
    return out


def profile_cell(app: Any, seconds: float, top: int, clock: str = "wall") -> str:
    """cProfile the 3-node workflow for ``seconds``; the top functions as text.

    ``clock="cpu"`` times with the process's CPU clock, so waits on the database drop
    out and what remains is the Python (and driver) work per call.
    """
    profiler = cProfile.Profile(time.process_time) if clock == "cpu" else cProfile.Profile()
    profiler.enable()
    stats_cell = throughput(app, seconds, warmup=2)
    profiler.disable()
    buf = io.StringIO()
    buf.write(f"{json.dumps(stats_cell)}\n")
    stats = pstats.Stats(profiler, stream=buf)
    stats.strip_dirs()
    buf.write("\n== by own time (tottime) ==\n")
    stats.sort_stats("tottime").print_stats(top)
    buf.write("\n== by cumulative time ==\n")
    stats.sort_stats("cumulative").print_stats(top)
    return buf.getvalue()


# -- machine ---------------------------------------------------------------------------


def machine_facts() -> dict[str, Any]:
    """Cores, CPU model, load, Python, Django and driver versions."""
    cpu = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    facts: dict[str, Any] = {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
    }
    with contextlib.suppress(ImportError):
        import django

        facts["django"] = django.get_version()
    with contextlib.suppress(ImportError):
        import psycopg

        facts["psycopg"] = psycopg.__version__
    with contextlib.suppress(ImportError):
        import criogen

        facts["criogen"] = criogen.__version__
    return facts


# -- main ------------------------------------------------------------------------------


def parse_list(value: str, allowed: tuple[str, ...], what: str) -> list[str]:
    """Comma-separated names, each checked against ``allowed``."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    for item in items:
        if item not in allowed:
            raise SystemExit(f"--{what}: {item!r} is not one of {', '.join(allowed)}")
    return items


def looping_workflow() -> Any:
    """One node looping on itself, overwriting a counter, until ``n == target``."""
    from criogen import END, START, Workflow

    wf = Workflow(name="loop")
    wf.add_node("tick", lambda state: {"n": state["n"] + 1, "note": f"tick {state['n'] + 1}"})
    wf.add_edge(START, "tick")
    wf.add_conditional_edges("tick", lambda s: "tick" if s["n"] < s["target"] else END)
    return wf


def history_depth(backend: Backend, depth: int) -> dict[str, Any]:
    """History pages near the first checkpoints and near the head of a deep thread.

    A thread of ``depth`` checkpoints whose state does not grow (the payload once, a
    counter overwritten per step); a page of 10 checkpoints (with their states) just
    after checkpoint 50 and the newest page, and one old checkpoint read by id: what a
    history read costs far from the head against next to it.
    """
    storage = backend.storage
    app = looping_workflow().compile(storage=storage, durability="async", max_steps=depth + 10)
    tid = f"deep-{depth}-{os.getpid()}"
    t0 = time.perf_counter()
    app.thread(tid).run({"payload": PAYLOAD, "n": 0, "target": depth - 1})
    out: dict[str, Any] = {
        "checkpoints": depth,
        "build_seconds": round(time.perf_counter() - t0, 1),
    }
    if backend.name != "memory":
        from django.db import connections

        with connections[storage.alias].cursor() as cur:
            cur.execute("ANALYZE")
    old_page = storage.history(tid, limit=10, before=61)
    new_page = storage.history(tid, limit=10)
    assert [cp.version for cp in old_page] == list(range(60, 50, -1))
    assert new_page[0].version == depth and new_page[0].state["n"] == depth - 1
    old_id = old_page[-1].id
    reads = {
        "page_at_50_us": lambda: storage.history(tid, limit=10, before=61),
        f"page_at_{depth}_us": lambda: storage.history(tid, limit=10),
        "checkpoint_50_us": lambda: storage.get_checkpoint(tid, old_id),
        f"head_{depth}_us": lambda: storage.head(tid),
    }
    for name, read in reads.items():
        out[name] = round(time_reads(read) * 1e6, 1)
    out["page_ratio"] = round(out[f"page_at_{depth}_us"] / out["page_at_50_us"], 2)
    out["checkpoint_vs_head_ratio"] = round(out[f"head_{depth}_us"] / out["checkpoint_50_us"], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="wall-clock budget per cell")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--pg-url", default=os.environ.get("BENCH_PG_URL", DEFAULT_PG_URL))
    parser.add_argument("--no-growth", action="store_true", help="skip the storage growth part")
    parser.add_argument(
        "--history-depth",
        type=int,
        default=50_000,
        help="checkpoints in the deep thread whose history pages are timed (0: skip)",
    )
    parser.add_argument(
        "--profile", metavar="BACKEND:MODE", help="cProfile one cell; print the top to stderr"
    )
    parser.add_argument("--top", type=int, default=30, help="functions shown by --profile")
    parser.add_argument(
        "--profile-clock",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: leave database waits out of the profile",
    )
    args = parser.parse_args(argv)
    backends = parse_list(args.backends, BACKENDS, "backends")
    modes = parse_list(args.modes, MODES, "modes")
    if args.profile:
        backend_name, _, mode = args.profile.partition(":")
        backends, modes = parse_list(backend_name, BACKENDS, "profile"), [mode or "sync"]
        parse_list(modes[0], MODES, "profile")

    started = time.perf_counter()
    report: dict[str, Any] = {
        "bench": "criogen-engine",
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds_per_cell": args.seconds,
        "machine": machine_facts(),
        "workflow": {
            "shape": "START -> a -> b -> c -> END",
            "payload_bytes": PAYLOAD_BYTES,
            "steps_per_run": 3,
            "client": "one thread, a fresh thread id per run",
        },
        "throughput": {},
        "agent_turns": {},
        "statements": {},
        "growth": {},
        "history_depth": {},
    }
    with tempfile.TemporaryDirectory(prefix="criogen-bench-") as tmpdir:
        for name in backends:
            log(f"{name}: setting up")
            try:
                backend = open_backend(name, tmpdir, args.pg_url)
            except Skip as exc:
                log(f"{name}: skipped: {exc}")
                report["throughput"][name] = {"skipped": str(exc)}
                if not args.no_growth:
                    report["growth"][name] = {"skipped": str(exc)}
                continue
            try:
                if backend.facts:
                    report["machine"][name] = backend.facts
                wf = three_node_workflow()
                cells: dict[str, Any] = {}
                counts: dict[str, Any] = {}
                for mode in modes:
                    app = wf.compile(storage=backend.storage, durability=mode)
                    if args.profile:
                        log(f"{name}/{mode}: profiling {args.seconds}s")
                        print(
                            profile_cell(app, args.seconds, args.top, args.profile_clock),
                            file=sys.stderr,
                        )
                        continue
                    log(f"{name}/{mode}: running {args.seconds}s")
                    cells[mode] = throughput(app, args.seconds)
                    log(f"{name}/{mode}: {cells[mode]['runs_per_s']} runs/s")
                    if name != "memory":
                        counts[mode] = count_statements(app)
                if args.profile:
                    continue
                report["throughput"][name] = cells
                report["agent_turns"][name] = {}
                for mode in modes:
                    log(f"{name}/{mode}: agent turns for {args.seconds}s")
                    agent = bench_agent(backend.storage, mode)
                    report["agent_turns"][name][mode] = agent_turns(agent, args.seconds)
                    log(
                        f"{name}/{mode}: {report['agent_turns'][name][mode]['turns_per_s']} turns/s"
                    )
                if counts:
                    report["statements"][name] = counts
                if not args.no_growth:
                    log(f"{name}: growing a thread to {max(GROWTH_STEPS)} steps")
                    report["growth"][name] = growth(backend)
                if args.history_depth:
                    log(f"{name}: a thread of {args.history_depth} checkpoints")
                    report["history_depth"][name] = history_depth(backend, args.history_depth)
            finally:
                close_backend(backend)
    report["elapsed_s"] = round(time.perf_counter() - started, 1)
    if args.profile:
        return 0
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
