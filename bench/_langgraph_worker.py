"""LangGraph side of ``bench/langgraph_compare.py``; runs in ``bench/.venvs/langgraph``.

It imports nothing from Criogen: the comparison script starts it with the LangGraph
virtualenv's Python and talks to it over stdin/stdout, one JSON object per line::

    {"cmd": "setup", "backend": "sqlite", "sqlite_path": "...", "pg_url": "..."}
    {"cmd": "run", "mode": "sync", "seconds": 3}      -> {"runs_per_s": ..., ...}
    {"cmd": "close"}                                   -> closes the checkpointer
    {"cmd": "quit"}

The graph is the one ``bench/engine.py`` runs: START → a → b → c → END over a state
holding a ~1 KB payload, each node changing one small key, a fresh thread per run,
one client. Checkpointers: ``InMemorySaver``, ``SqliteSaver`` (WAL, synchronous FULL)
and ``PostgresSaver`` (``from_conn_string``: autocommit, as its docs set it up).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import sys
import time
import uuid
from importlib import metadata
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph


class State(TypedDict):
    """The bench state: a payload and the three keys the nodes change."""

    payload: dict[str, Any]
    a: int
    b: str
    c: bool


def node_a(state: State) -> dict[str, Any]:
    return {"a": state["a"] + 1}


def node_b(state: State) -> dict[str, Any]:
    return {"b": "checked"}


def node_c(state: State) -> dict[str, Any]:
    return {"c": True}


def build(checkpointer: Any) -> Any:
    """The compiled 3-node graph on ``checkpointer``."""
    g = StateGraph(State)
    g.add_node("a", node_a)
    g.add_node("b", node_b)
    g.add_node("c", node_c)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", "c")
    g.add_edge("c", END)
    return g.compile(checkpointer=checkpointer)


class Worker:
    """Holds one checkpointer at a time and runs timed cells on it."""

    def __init__(self) -> None:
        self.stack = contextlib.ExitStack()
        self.graph: Any = None
        self.payload: dict[str, Any] = {}

    def setup(self, backend: str, payload: dict[str, Any], **opts: Any) -> dict[str, Any]:
        self.close()
        self.payload = payload
        if backend == "memory":
            from langgraph.checkpoint.memory import InMemorySaver

            saver: Any = InMemorySaver()
        elif backend == "sqlite":
            from langgraph.checkpoint.sqlite import SqliteSaver

            conn = sqlite3.connect(opts["sqlite_path"], check_same_thread=False)
            self.stack.callback(conn.close)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            saver = SqliteSaver(conn)
            saver.setup()
        elif backend == "postgres":
            from langgraph.checkpoint.postgres import PostgresSaver

            saver = self.stack.enter_context(PostgresSaver.from_conn_string(opts["pg_url"]))
            saver.setup()
        else:
            raise ValueError(f"unknown backend {backend!r}")
        self.graph = build(saver)
        return {"ok": True}

    def run(self, mode: str, seconds: float, warmup: int = 5) -> dict[str, Any]:
        graph = self.graph

        def once() -> dict[str, Any]:
            config = {"configurable": {"thread_id": str(uuid.uuid4())}}
            state = {"payload": self.payload, "a": 0, "b": "", "c": False}
            return graph.invoke(state, config, durability=mode)

        for _ in range(warmup):
            once()
        latencies: list[float] = []
        cpu0 = time.process_time()
        start = now = time.perf_counter()
        deadline = start + seconds
        while now < deadline:
            t0 = now
            out = once()
            now = time.perf_counter()
            latencies.append(now - t0)
            if out["c"] is not True:
                raise RuntimeError("the LangGraph run did not complete")
        elapsed = now - start
        cpu = time.process_time() - cpu0
        runs = len(latencies)
        latencies.sort()
        return {
            "runs": runs,
            "seconds": round(elapsed, 3),
            "runs_per_s": round(runs / elapsed, 1),
            "steps_per_s": round(3 * runs / elapsed, 1),
            "run_p50_ms": round(latencies[runs // 2] * 1000, 3),
            "run_p99_ms": round(latencies[min(runs - 1, int(runs * 0.99))] * 1000, 3),
            # CPU of this whole process (all threads) per run: robust to I/O noise.
            "cpu_ms_per_run": round(cpu / runs * 1000, 3),
        }

    def close(self) -> dict[str, Any]:
        self.stack.close()
        self.stack = contextlib.ExitStack()
        self.graph = None
        return {"ok": True}


def versions() -> dict[str, str]:
    """Installed versions of the LangGraph packages."""
    out = {}
    for name in (
        "langgraph",
        "langgraph-checkpoint",
        "langgraph-checkpoint-sqlite",
        "langgraph-checkpoint-postgres",
        "psycopg",
    ):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[name] = metadata.version(name)
    return out


def main() -> int:
    worker = Worker()
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        cmd = msg.pop("cmd")
        try:
            if cmd == "quit":
                break
            if cmd == "versions":
                reply: dict[str, Any] = versions()
            elif cmd == "setup":
                reply = worker.setup(msg.pop("backend"), msg.pop("payload"), **msg)
            elif cmd == "run":
                reply = worker.run(msg["mode"], float(msg["seconds"]))
            elif cmd == "close":
                reply = worker.close()
            else:
                reply = {"error": f"unknown command {cmd!r}"}
        except Exception as exc:
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
