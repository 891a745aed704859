"""The ``langgraph_sdk`` workload that ``bench/api.py`` and ``bench/http_compare.py`` share.

It speaks only the LangGraph Platform REST API through the official async client, so
the same code measures Criogen and any compatible server (Aegra, LangGraph's own
server). A :class:`Target` names the server: its URL, its API key (None when the
server has no auth) and how to seed threads (straight into its own tables where it
has them, since seeding 10,000 threads through the API takes longer than the
measurements; through the API for a server that keeps them in memory:
:func:`api_seeder`).

The cells:

- ``creates``: ``threads.create()`` by N concurrent clients for a number of seconds;
- ``runs``: a fresh thread and ``runs.wait`` of the 3-step ``steps`` graph with
  :data:`RUN_INPUT` (``n`` and a ~1 KB payload) by N concurrent clients; the output
  is checked (``steps == ["a", "b", "c"]``, ``n == 3``, the payload intact) and a wrong
  one counts as an error, since a server that answers fast with nothing must not score;
- ``joins``: the same, with ``runs.create`` and then ``runs.join`` (a client that
  starts a run in the background and collects its result); checked the same way;
- ``deletes``: ``threads.delete`` of seeded threads by N concurrent clients until a
  given list is exhausted (:func:`delete_cell`);
- ``get_state`` / ``get_history`` / ``get_history_50``: sequential calls on a thread
  with at least 50 checkpoints (``get_history(limit=10)`` and ``limit=50``);
- the search shapes of :data:`SEARCH_SHAPES`: sequential ``threads.search(limit=20)``
  among the seeded threads: the first page unfiltered, by a metadata value half of
  them carry, by ``status="idle"``, by both, and the unfiltered page at offset 5,000
  (or half the seeded count, when fewer than 10,000 are seeded).

Each cell returns a :class:`Cell` (operations, seconds, per-operation latencies,
errors); :func:`merge` adds up cells of the same kind from several rounds.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph_sdk import get_client

ROOT = Path(__file__).resolve().parents[1]
GRAPH = "steps"
HISTORY_CHECKPOINTS = 50


def _payload(size: int = 1000) -> dict[str, Any]:
    """A ~``size``-byte JSON document shaped like an agent's working data."""
    payload: dict[str, Any] = {
        "customer": {"id": "c-1042", "name": "Ada Lovelace", "tier": "gold"},
        "items": [{"sku": f"sku-{i}", "qty": i + 1, "price": 9.5 + i} for i in range(5)],
        "tags": ["bench", "steps", "http"],
    }
    filler = size - len(json.dumps(payload, separators=(",", ":")))
    payload["notes"] = "n" * max(0, filler)
    return payload


PAYLOAD = _payload()
RUN_INPUT: dict[str, Any] = {"n": 0, "payload": PAYLOAD}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class Seeded:
    """What a seeder made: the metadata mark half of the threads carry, and their ids."""

    mark: str
    thread_ids: list[str]


@dataclass
class Target:
    """A server the workload drives."""

    name: str
    url: str
    api_key: str | None
    seed_threads: Callable[[int], Seeded]
    """Insert ``count`` idle threads of the workload's user, half of them carrying
    ``{"mark": <the mark returned>}`` in their metadata; return the mark and the ids."""

    def client(self) -> Any:
        return get_client(url=self.url, api_key=self.api_key)


@dataclass
class Cell:
    """What one measured cell did."""

    ops: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""

    def add(self, other: Cell) -> None:
        self.ops += other.ops
        self.seconds += other.seconds
        self.latencies += other.latencies
        self.errors += other.errors
        self.first_error = self.first_error or other.first_error

    def per_s(self) -> float:
        return round(self.ops / self.seconds, 1) if self.seconds else 0.0

    def summary(self, *, rate: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"per_s": self.per_s()} if rate else {}
        out.update(percentiles(self.latencies))
        if self.errors:
            out["errors"] = self.errors
            out["first_error"] = self.first_error[:300]
        return out


def percentiles(samples: list[float]) -> dict[str, Any]:
    """p50 and p95 in milliseconds."""
    if not samples:
        return {"p50": None, "p95": None, "n": 0}
    ordered = sorted(samples)
    p95 = ordered[max(0, int(len(ordered) * 0.95) - 1)]
    return {
        "p50": round(statistics.median(ordered) * 1000, 2),
        "p95": round(p95 * 1000, 2),
        "n": len(ordered),
    }


def merge(cells: list[Cell]) -> Cell:
    total = Cell()
    for cell in cells:
        total.add(cell)
    return total


# -- the operations ------------------------------------------------------------------


async def create_thread(sdk: Any) -> float:
    start = time.perf_counter()
    await sdk.threads.create()
    return time.perf_counter() - start


def check_output(values: Any, call: str) -> None:
    """A 3-step run's output, or an error: a server that answers fast with nothing must
    not score."""
    if (
        not isinstance(values, dict)
        or values.get("steps") != ["a", "b", "c"]
        or values.get("n") != 3
        or values.get("payload") != PAYLOAD
    ):
        raise RuntimeError(f"{call} returned {str(values)[:200]!r}")


async def run_steps(sdk: Any) -> float:
    """A fresh thread and one ``runs.wait``; the latency is that of ``runs.wait`` alone."""
    thread = await sdk.threads.create()
    start = time.perf_counter()
    values = await sdk.runs.wait(thread["thread_id"], GRAPH, input=RUN_INPUT)
    elapsed = time.perf_counter() - start
    check_output(values, "runs.wait")
    return elapsed


async def run_create_join(sdk: Any) -> float:
    """A fresh thread, ``runs.create`` and ``runs.join``; the latency is that of the two."""
    thread = await sdk.threads.create()
    start = time.perf_counter()
    run = await sdk.runs.create(thread["thread_id"], GRAPH, input=RUN_INPUT)
    values = await sdk.runs.join(thread["thread_id"], run["run_id"])
    elapsed = time.perf_counter() - start
    check_output(values, "runs.join")
    return elapsed


# -- the cells -----------------------------------------------------------------------


async def throughput(
    target: Target,
    clients: int,
    seconds: float,
    op: Callable[[Any], Awaitable[float]],
    sdks: list[Any] | None = None,
) -> Cell:
    """``op`` run back to back by ``clients`` concurrent SDK clients for ``seconds``
    (``sdks``: clients made beforehand, closed here)."""
    sdks = sdks or [target.client() for _ in range(clients)]
    cell = Cell()
    deadline = time.perf_counter() + seconds

    async def worker(sdk: Any) -> None:
        while time.perf_counter() < deadline:
            try:
                cell.latencies.append(await op(sdk))
                cell.ops += 1
            except Exception as exc:  # noqa: BLE001 - counted and reported, not hidden
                cell.errors += 1
                cell.first_error = cell.first_error or f"{type(exc).__name__}: {exc}"
                await asyncio.sleep(0.05)

    start = time.perf_counter()
    await asyncio.gather(*(worker(s) for s in sdks))
    cell.seconds = time.perf_counter() - start
    for sdk in sdks:
        await sdk.aclose()
    return cell


async def sequential(op: Callable[[], Awaitable[Any]], n: int) -> Cell:
    """``n`` calls of ``op`` one after another, by one client."""
    cell = Cell()
    start = time.perf_counter()
    for _ in range(n):
        began = time.perf_counter()
        try:
            await op()
        except Exception as exc:  # noqa: BLE001 - counted and reported, not hidden
            cell.errors += 1
            cell.first_error = cell.first_error or f"{type(exc).__name__}: {exc}"
            continue
        cell.latencies.append(time.perf_counter() - began)
        cell.ops += 1
    cell.seconds = time.perf_counter() - start
    return cell


async def delete_cell(target: Target, clients: int, thread_ids: list[str]) -> Cell:
    """``threads.delete`` of every id in ``thread_ids`` by ``clients`` concurrent SDK
    clients, each taking the next id until none is left."""
    sdks = [target.client() for _ in range(clients)]
    cell = Cell()
    queue = list(reversed(thread_ids))

    async def worker(sdk: Any) -> None:
        while queue:
            tid = queue.pop()
            began = time.perf_counter()
            try:
                await sdk.threads.delete(tid)
            except Exception as exc:  # noqa: BLE001 - counted and reported, not hidden
                cell.errors += 1
                cell.first_error = cell.first_error or f"{type(exc).__name__}: {exc}"
                continue
            cell.latencies.append(time.perf_counter() - began)
            cell.ops += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker(s) for s in sdks))
    cell.seconds = time.perf_counter() - start
    for sdk in sdks:
        await sdk.aclose()
    return cell


@dataclass
class Prepared:
    """What the latency and delete cells use: the history thread and the seeded threads."""

    history_thread: str
    history_checkpoints: int
    mark: str
    search_threads: int
    thread_ids: list[str] = field(default_factory=list)
    seed_seconds: float = 0.0

    @property
    def search_offset(self) -> int:
        """The offset of the deep-page search: 5,000, or half the seeded threads."""
        return min(SEARCH_OFFSET, self.search_threads // 2)


async def prepare(
    target: Target, search_threads: int, checkpoints: int = HISTORY_CHECKPOINTS
) -> Prepared:
    """Warm the server up, build a thread with at least ``checkpoints`` checkpoints and
    seed the search threads."""
    sdk = target.client()
    try:
        for _ in range(3):
            await run_steps(sdk)
        thread = await sdk.threads.create()
        tid = thread["thread_id"]
        while len(await sdk.threads.get_history(tid, limit=checkpoints + 10)) < checkpoints:
            await sdk.runs.wait(tid, GRAPH, input=RUN_INPUT)
        checkpoints = len(await sdk.threads.get_history(tid, limit=1000))
    finally:
        await sdk.aclose()
    began = time.perf_counter()
    seeded = target.seed_threads(search_threads)
    seconds = round(time.perf_counter() - began, 1)
    log(f"{target.name}: {len(seeded.thread_ids)} threads seeded in {seconds} s")
    return Prepared(tid, checkpoints, seeded.mark, search_threads, seeded.thread_ids, seconds)


SEARCH_OFFSET = 5_000
SEARCH_SHAPES = (
    "search_first_page",
    "search_metadata",
    "search_status",
    "search_metadata_status",
    "search_offset",
)
"""The search cells: every shape is ``threads.search(limit=20)`` among the seeded
threads, sorted as the server sorts by default (newest first)."""


async def latency_cell(target: Target, prepared: Prepared, kind: str, n: int) -> Cell:
    """``n`` sequential calls of one read: get_state, get_history or a search shape."""
    sdk = target.client()
    tid, mark, offset = prepared.history_thread, prepared.mark, prepared.search_offset
    search = sdk.threads.search
    ops: dict[str, Callable[[], Awaitable[Any]]] = {
        "get_state": lambda: sdk.threads.get_state(tid),
        "get_history": lambda: sdk.threads.get_history(tid, limit=10),
        "get_history_50": lambda: sdk.threads.get_history(tid, limit=50),
        "search_first_page": lambda: search(limit=20),
        "search_metadata": lambda: search(metadata={"mark": mark}, limit=20),
        "search_status": lambda: search(status="idle", limit=20),
        "search_metadata_status": lambda: search(metadata={"mark": mark}, status="idle", limit=20),
        "search_offset": lambda: search(limit=20, offset=offset),
    }
    try:
        await ops[kind]()
        return await sequential(ops[kind], n)
    finally:
        await sdk.aclose()


THROUGHPUT_OPS: dict[str, Callable[[Any], Awaitable[float]]] = {
    "creates": create_thread,
    "runs": run_steps,
    "joins": run_create_join,
}


async def throughput_cell(target: Target, kind: str, clients: int, seconds: float) -> Cell:
    """One throughput cell: ``creates``, ``runs`` (``runs.wait``) or ``joins``
    (``runs.create`` + ``runs.join``) with ``clients`` clients."""
    return await throughput(target, clients, seconds, THROUGHPUT_OPS[kind])


LATENCY_KINDS = ("get_state", "get_history", "search_metadata", "search_status")
THROUGHPUT_CELLS = (("creates", 1), ("creates", 16), ("runs", 16))


async def measure(
    target: Target,
    seconds: float,
    search_threads: int,
    samples: int = 100,
    checkpoints: int = HISTORY_CHECKPOINTS,
) -> dict[str, Any]:
    """The whole workload on one server, in the shape ``bench/api.py`` prints."""
    log(f"{target.name}: warm-up, a thread with {checkpoints} checkpoints, seeding")
    prepared = await prepare(target, search_threads, checkpoints)
    log(f"{target.name}: get_state, get_history, search")
    lat = {k: await latency_cell(target, prepared, k, samples) for k in LATENCY_KINDS}
    log(f"{target.name}: threads.create with 1 and 16 clients, runs.wait with 16")
    thr = {
        f"{kind}_{clients}": await throughput_cell(target, kind, clients, seconds)
        for kind, clients in THROUGHPUT_CELLS
    }
    return {
        "threads_created_per_s": {
            "clients_1": thr["creates_1"].summary(rate=True),
            "clients_16": thr["creates_16"].summary(rate=True),
        },
        "runs_per_s": {"clients_16": thr["runs_16"].summary(rate=True)},
        "get_state_ms": lat["get_state"].summary(rate=False),
        "get_history_ms": lat["get_history"].summary(rate=False),
        "history_checkpoints": prepared.history_checkpoints,
        "search_ms": {
            "threads": search_threads,
            "by_metadata": lat["search_metadata"].summary(rate=False),
            "by_status": lat["search_status"].summary(rate=False),
        },
    }


# -- Criogen as a target ---------------------------------------------------------------


def vacuum_analyze(database_url: str, table: str) -> None:
    """``VACUUM ANALYZE`` of a freshly seeded PostgreSQL table: what autovacuum does a
    minute after a bulk load on a production server (this machine's PostgreSQL runs
    with it off). Without statistics the planner takes the 10,000 new rows for a
    handful and sorts them all for a page of 20; without the visibility map no scan
    is index-only. Both servers' tables get it (bench/http_compare.py)."""
    import psycopg

    dsn = database_url.replace("postgres://", "postgresql://", 1)
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute(f"VACUUM ANALYZE {table}")


def criogen_seeder(database_url: str, username: str = "alice") -> Callable[[int], Seeded]:
    """Seeds ``criogen_thread`` rows of ``username`` (SQLite or PostgreSQL) in one batch,
    then gathers the table's statistics (as Aegra's seeder does for its table)."""

    def seed(count: int) -> Seeded:
        mark = uuid.uuid4().hex
        rows = [
            (
                f"bench-{i}-{uuid.uuid4().hex[:8]}",
                json.dumps({"owner": username, "mark": mark if i % 2 else "other", "i": i}),
            )
            for i in range(count)
        ]
        columns = (
            "INSERT INTO criogen_thread (id, created_at, updated_at, metadata, owner_id,"
            " head_version, head_id, head_status, lease_id, lease_expires, ttl_strategy)"
        )
        if database_url.startswith("sqlite"):
            import sqlite3

            with sqlite3.connect(database_url.removeprefix("sqlite://"), timeout=60) as db:
                (owner,) = db.execute(
                    "SELECT id FROM auth_user WHERE username = ?", (username,)
                ).fetchone()
                db.executemany(
                    columns + " VALUES (?, datetime('now'), datetime('now'), ?, ?, 0, '', '',"
                    " NULL, 0, 'delete')",
                    [(tid, meta, owner) for tid, meta in rows],
                )
                db.execute("ANALYZE criogen_thread")
        else:
            import psycopg

            with psycopg.connect(database_url.replace("postgres://", "postgresql://", 1)) as db:
                (owner,) = db.execute(
                    "SELECT id FROM auth_user WHERE username = %s", (username,)
                ).fetchone()
                with db.cursor() as cur:
                    cur.executemany(
                        columns + " VALUES (%s, now(), now(), %s, %s, 0, '', '', NULL, 0,"
                        " 'delete')",
                        [(tid, meta, owner) for tid, meta in rows],
                    )
            vacuum_analyze(database_url, "criogen_thread")
        return Seeded(mark, [tid for tid, _ in rows])

    return seed


def api_seeder(url: str, api_key: str | None = None, clients: int = 16) -> Callable[[int], Seeded]:
    """Seeds through ``threads.create(metadata=…)`` by ``clients`` concurrent clients, for
    a server with no table to insert into (LangGraph's in-memory server). Called from
    :func:`prepare` inside the running event loop, so it runs its own loop in a thread."""

    async def create_all(count: int, mark: str) -> list[str]:
        sdks = [get_client(url=url, api_key=api_key) for _ in range(clients)]
        ids: list[str | None] = [None] * count
        todo = iter(range(count))

        async def worker(sdk: Any) -> None:
            for i in todo:
                meta = {"mark": mark if i % 2 else "other", "i": i}
                ids[i] = (await sdk.threads.create(metadata=meta))["thread_id"]

        try:
            await asyncio.gather(*(worker(s) for s in sdks))
        finally:
            for sdk in sdks:
                await sdk.aclose()
        return [tid for tid in ids if tid]

    def seed(count: int) -> Seeded:
        import concurrent.futures

        mark = uuid.uuid4().hex
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            ids = pool.submit(asyncio.run, create_all(count, mark)).result()
        return Seeded(mark, ids)

    return seed


PG_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=test"


@contextmanager
def fresh_pg_database(prefix: str) -> Iterator[str]:
    """A new PostgreSQL database on 127.0.0.1 (dropped afterwards); yields its name."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as db:
        db.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as db:
            db.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


ASGI_SERVERS = ("uvicorn", "daphne")
"""The servers Criogen can be measured under (the first is the default)."""

PRODUCTION = {
    "DEBUG": "false",
    "SECRET_KEY": "criogen-bench-" + "k" * 40,
    "ALLOWED_HOSTS": "127.0.0.1,localhost",
    "SECURE_SSL_REDIRECT": "false",  # plain HTTP on loopback, as behind a TLS proxy
    "CONN_MAX_AGE": "60",
}
"""The settings a production server runs with (docs/deployment.md), less TLS."""


@contextmanager
def criogen_server(
    database: str, tmp: Path, *, asgi_server: str = "uvicorn", **settings: str
) -> Iterator[tuple[Target, Any]]:
    """Criogen as the API tests start it (one process, the in-process runner) under
    ``asgi_server`` (uvicorn or Daphne) with the :data:`PRODUCTION` settings, on a fresh
    SQLite file or PostgreSQL database, with ``settings`` as extra environment; yields
    the target and the server."""
    sys.path.insert(0, str(ROOT))
    from tests.api.conftest import start_server, stop_server

    databases = nullcontext() if database == "sqlite" else fresh_pg_database("criogen_bench")
    with databases as pg_name:
        url = (
            f"sqlite://{tmp / 'bench.db'}"
            if database == "sqlite"
            else f"postgres://postgres@127.0.0.1:5432/{pg_name}"
        )
        server = start_server(url, tmp, asgi_server=asgi_server, **{**PRODUCTION, **settings})
        try:
            yield Target("criogen", server.url, server.tokens["alice"], criogen_seeder(url)), server
        finally:
            stop_server(server)
