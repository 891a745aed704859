"""What one run costs the server: CPU per run and SQL statements per run, in-process.

Run it from the project folder::

    .venv/bin/python bench/run_cost.py                       # PostgreSQL, 200 runs per verb
    .venv/bin/python bench/run_cost.py --database sqlite --runs 100
    .venv/bin/python bench/run_cost.py --verbs wait --profile 25   # cProfile, top 25

It serves ``criogen.asgi`` in this process (no socket: ``httpx.ASGITransport``) with
the production settings of docs/benchmarks.md (``bench/_sdk_workload.PRODUCTION``),
the API tests' settings (auth on, the in-process runner) and a fresh database, and
drives it with the official ``langgraph_sdk`` client the way the HTTP benchmarks'
run cells do: for each run a fresh thread, then the 3-step ``steps`` graph with
``runs.wait`` (verb ``wait``) or with ``runs.create`` and ``runs.join`` (verb
``join``). The output is checked as there.

For each verb it prints, per run (the thread's creation included, as in the HTTP
cells): the process's CPU (``time.process_time``: the client's share too, which is
small and the same before and after a change), that CPU split by thread (the event
loop, the API's database threads, the runner, the ``async`` writer…, from
``/proc/self/task``), the wall time, and the SQL statements, counted at the driver
on PostgreSQL (psycopg ``execute``; ``commit`` and ``rollback`` apart, the ``BEGIN``
psycopg sends implicitly is not counted) and through Django's ``execute_wrappers`` on
SQLite (which leave out the checkpoint path's statements on sqlite3's own cursor and
every commit: compare SQLite's counts only with SQLite's). ``--profile N`` runs the verbs under cProfile (every thread) and prints the
top N functions by cumulative time as well; the CPU figures are then inflated.

The machine is shared: compare figures of one sitting, several rounds (``--rounds``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import os
import pstats
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _sdk_workload as workload  # noqa: E402 - bench/_sdk_workload.py, next to this file

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Statements:
    """SQL statements counted by kind (``execute``, ``commit``, ``rollback``)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.texts: Counter[str] = Counter()
        self.keep_texts = False
        self._lock = threading.Lock()

    def add(self, kind: str, sql: Any = None) -> None:
        with self._lock:
            self.counts[kind] += 1
            if self.keep_texts and sql is not None:
                text = (
                    sql if isinstance(sql, str) else getattr(sql, "as_string", lambda _: "?")(None)
                )
                self.texts[" ".join(str(text).split())[:110]] += 1

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)


def count_statements(database: str, statements: Statements) -> None:
    """Count every statement the process sends from now on."""
    if database == "postgres":
        import psycopg

        execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany
        commit, rollback = psycopg.Connection.commit, psycopg.Connection.rollback

        def counted_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            statements.add("execute", query)
            return execute(self, query, *args, **kwargs)

        def counted_executemany(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            statements.add("execute", query)
            return executemany(self, query, *args, **kwargs)

        def counted_commit(self: Any) -> None:
            statements.add("commit")
            commit(self)

        def counted_rollback(self: Any) -> None:
            statements.add("rollback")
            rollback(self)

        psycopg.Cursor.execute = counted_execute  # type: ignore[method-assign]
        psycopg.Cursor.executemany = counted_executemany  # type: ignore[method-assign]
        psycopg.Connection.commit = counted_commit  # type: ignore[method-assign]
        psycopg.Connection.rollback = counted_rollback  # type: ignore[method-assign]
        return
    from django.db.backends.signals import connection_created

    def wrapper(execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        statements.add("execute", sql)
        return execute(sql, *args)

    def on_connection(sender: Any, connection: Any, **kwargs: Any) -> None:
        if wrapper not in connection.execute_wrappers:
            connection.execute_wrappers.append(wrapper)

    connection_created.connect(on_connection, weak=False)


def thread_cpu() -> dict[str, float]:
    """CPU seconds of each live thread of this process, by thread kind."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: Counter[str] = Counter()
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        seconds = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        name = names.get(int(task.name), "other")
        out[_kind(name)] += seconds
    return dict(out)


def _kind(name: str) -> str:
    """A thread's kind from its name (``criogen-api_3`` -> ``criogen-api``)."""
    if name == "MainThread":
        return "event loop (and client)"
    return name.rstrip("0123456789").rstrip("_-") or name


@contextlib.contextmanager
def fresh_database(database: str, tmp: Path) -> Iterator[str]:
    if database == "sqlite":
        yield f"sqlite://{tmp / 'bench.db'}"
        return
    with workload.fresh_pg_database("criogen_runcost") as name:
        yield f"postgres://postgres@127.0.0.1:5432/{name}"


def set_up_django(url: str) -> tuple[Any, str]:
    """Settings, migrations and one persona with a token; the ASGI app and the token."""
    from tests.servers import API_ENV, setup_script

    os.environ.update(
        {**API_ENV, **workload.PRODUCTION, "DATABASE_URL": url, "LOG_LEVEL": "WARNING"}
    )
    os.environ.pop("REDIS_URL", None)  # the in-memory channel layer, as the API tests
    import django

    django.setup()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(setup_script(), {})  # noqa: S102 - the tests' own persona script
    tokens = __import__("json").loads(out.getvalue().split("TOKENS=", 1)[1])
    from django.db import connections

    connections.close_all()
    from criogen.asgi import application

    return application, tokens["alice"]


def client(application: Any, token: str) -> Any:
    import httpx
    from langgraph_sdk.client import LangGraphClient

    http = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application),
        base_url="http://127.0.0.1",
        headers={"x-api-key": token},
        timeout=60,
    )
    return LangGraphClient(http)


VERBS = {"wait": workload.run_steps, "join": workload.run_create_join}


async def measure(
    sdk: Any, verb: str, runs: int, clients: int, statements: Statements
) -> dict[str, Any]:
    """``runs`` runs of ``verb`` by ``clients`` concurrent clients; figures per run."""
    call = VERBS[verb]
    queue = iter(range(runs))

    async def one_client() -> None:
        for _ in queue:
            await call(sdk)

    before_sql, before_threads = statements.snapshot(), thread_cpu()
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one_client() for _ in range(clients)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    await asyncio.sleep(0.2)  # the runner's last event, the writer's last flush
    after_sql, after_threads = statements.snapshot(), thread_cpu()
    sql = after_sql - before_sql
    threads = {
        k: (after_threads.get(k, 0.0) - before_threads.get(k, 0.0)) * 1000 / runs
        for k in after_threads
    }
    return {
        "cpu_ms": cpu * 1000 / runs,
        "wall_ms": wall * 1000 / runs,
        "runs_per_s": runs / wall,
        "statements": sql["execute"] / runs,
        "commits": sql["commit"] / runs,
        "rollbacks": sql["rollback"] / runs,
        "threads": {k: v for k, v in sorted(threads.items(), key=lambda kv: -kv[1]) if v > 0.05},
    }


def report(verb: str, figures: dict[str, Any]) -> None:
    print(
        f"{verb:5}  CPU {figures['cpu_ms']:6.2f} ms/run   wall {figures['wall_ms']:6.2f} ms/run"
        f"   {figures['runs_per_s']:6.1f} runs/s   statements {figures['statements']:5.2f}"
        f" + commits {figures['commits']:4.2f} + rollbacks {figures['rollbacks']:4.2f} per run"
    )
    split = ", ".join(f"{k} {v:.2f}" for k, v in figures["threads"].items())
    print(f"       CPU by thread (ms/run): {split}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n", 1)[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--runs", type=int, default=200, help="runs per verb and round")
    parser.add_argument("--warmup", type=int, default=30, help="unmeasured runs per verb first")
    parser.add_argument("--rounds", type=int, default=2, help="measured rounds per verb")
    parser.add_argument("--clients", type=int, default=1, help="concurrent clients")
    parser.add_argument(
        "--verbs", default="wait,join", help="comma-separated: wait (runs.wait), join"
    )
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N", help="cProfile; print the top N functions"
    )
    parser.add_argument(
        "--statements", action="store_true", help="print the statements of the last round"
    )
    args = parser.parse_args()
    verbs = [v for v in args.verbs.split(",") if v]
    unknown = [v for v in verbs if v not in VERBS]
    if unknown:
        parser.error(f"unknown verb {unknown[0]!r}; use wait, join")
    tmp = Path(tempfile.mkdtemp(prefix="criogen-runcost-"))
    with fresh_database(args.database, tmp) as url:
        application, token = set_up_django(url)
        statements = Statements()
        count_statements(args.database, statements)
        print(
            f"{args.database}, {args.runs} runs x {args.rounds} rounds per verb, "
            f"{args.clients} client(s), a fresh thread per run"
        )
        try:
            asyncio.run(run_all(application, token, verbs, args, statements))
        finally:
            stop_runner()


def stop_runner() -> None:
    """Stop the in-process runner and close the connections before the database goes."""
    from django.db import connections

    from criogen.runner import drain, request_shutdown

    request_shutdown()
    drain()
    connections.close_all()


async def run_all(
    application: Any, token: str, verbs: list[str], args: argparse.Namespace, stats: Statements
) -> None:
    sdk = client(application, token)
    for verb in verbs:
        await measure(sdk, verb, args.warmup, args.clients, stats)
    profilers = start_profiling() if args.profile else None
    for round_ in range(args.rounds):
        stats.keep_texts = args.statements and round_ == args.rounds - 1
        for verb in verbs:
            report(verb, await measure(sdk, verb, args.runs, args.clients, stats))
    if profilers is not None:
        profilers[threading.get_ident()].disable()
        out = io.StringIO()
        first, *others = profilers.values()
        merged = pstats.Stats(first, stream=out)
        for profiler in others:
            merged.add(profiler)
        merged.sort_stats("cumulative").print_stats(args.profile)
        print("cProfile (CPU time of each thread), after the warm-up:")
        print(out.getvalue())
    if args.statements:
        total = args.runs * len(verbs)
        print(f"statements of the last round ({len(verbs)} verb(s)), per run:")
        for text, n in stats.texts.most_common():
            print(f"  {n / total:5.2f}  {text}")


def start_profiling() -> dict[int, cProfile.Profile]:
    """cProfile, by each thread's CPU clock, of the event loop (this thread: the
    requests' async part and the client), of the API's database jobs and of the
    runner's runs (each thread its own profiler, on only while a job runs)."""
    import api.aio
    import criogen.runner.inprocess

    profilers: dict[int, cProfile.Profile] = {}
    lock = threading.Lock()

    def profiled(job: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            me = threading.get_ident()
            with lock:
                profiler = profilers.setdefault(me, cProfile.Profile(time.thread_time))
            profiler.enable()
            try:
                return job(*args, **kwargs)
            finally:
                profiler.disable()

        return run

    api.aio._job = profiled(api.aio._job)  # type: ignore[assignment]
    criogen.runner.inprocess._job = profiled(criogen.runner.inprocess._job)  # type: ignore[assignment]
    profilers[threading.get_ident()] = cProfile.Profile(time.thread_time)
    profilers[threading.get_ident()].enable()
    return profilers


if __name__ == "__main__":
    main()
