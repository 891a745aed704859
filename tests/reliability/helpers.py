"""Shared checks for the reliability suite: direct looks at the database (versions,
decisions, the effect ledger) and a signed-in dashboard session over HTTP."""

from __future__ import annotations

import math
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from tests.api.conftest import ROOT, Server, _free_port, start_server
from tests.conftest import celery_worker_argv
from tests.reliability.conftest import OPERATOR_PASSWORD, Figures


def pg(database_url: str) -> psycopg.Connection[Any]:
    """An autocommit connection to the server's PostgreSQL database."""
    return psycopg.connect(database_url.replace("postgres://", "postgresql://"), autocommit=True)


def versions(database_url: str, thread_id: str) -> list[int]:
    """The thread's checkpoint versions, ascending."""
    with pg(database_url) as db:
        rows = db.execute(
            "SELECT version FROM criogen_checkpoint WHERE thread_id = %s ORDER BY version",
            (thread_id,),
        ).fetchall()
    return [r[0] for r in rows]


def check_contiguous(database_url: str, thread_id: str, figures: Figures) -> list[int]:
    """Assert the thread's versions are 1..N with no gap or duplicate, and that its head
    is the last one; a gap counts as lost checkpoints in the figures."""
    got = versions(database_url, thread_id)
    expected = list(range(1, len(got) + 1))
    if got != expected:
        figures.checkpoints_lost += len(set(expected) - set(got)) or 1
    assert got == expected, f"versions of {thread_id}: {got}"
    with pg(database_url) as db:
        (head,) = db.execute(
            "SELECT head_version FROM criogen_thread WHERE id = %s", (thread_id,)
        ).fetchone() or (None,)
    assert head == (got[-1] if got else 0), f"head {head} but versions {got[-3:]}"
    return got


def wait_idle(server: Server, thread_id: str, who: str = "alice", timeout: float = 60) -> str:
    """Wait until the thread has no pending or running run; its final status."""
    deadline = time.monotonic() + timeout
    with server.http(who) as http:
        while True:
            status = http.get(f"/threads/{thread_id}").json()["status"]
            if status != "busy" or time.monotonic() > deadline:
                return str(status)
            time.sleep(0.1)


ASK = {"messages": [{"role": "user", "content": "Please refund order 42"}]}
"""The support agent's first turn: it asks to refund an order, which needs approval."""


def support_thread_waiting(http: httpx.Client) -> str:
    """A new thread whose support agent is waiting for its refund to be approved."""
    support = http.post("/threads", json={}).json()["thread_id"]
    waited = http.post(
        f"/threads/{support}/runs/wait", json={"assistant_id": "support", "input": ASK}
    )
    assert "__interrupt__" in waited.json(), waited.text
    return str(support)


def approve_refund(http: httpx.Client, support: str) -> str:
    """Queue the run that approves the refund ``support`` waits for; its run id."""
    approve = http.post(
        f"/threads/{support}/runs",
        json={
            "assistant_id": "support",
            "command": {"resume": {"decisions": [{"type": "approve"}]}},
        },
    )
    assert approve.status_code == 200, approve.text
    return str(approve.json()["run_id"])


def dashboard_session(server: Server) -> httpx.Client:
    """An HTTP client signed in to the dashboard as the operator olga (CSRF-checked)."""
    client = httpx.Client(base_url=server.url, timeout=60)
    page = client.get("/accounts/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token, page.text[:500]
    done = client.post(
        "/accounts/login/",
        data={
            "username": "olga",
            "password": OPERATOR_PASSWORD,
            "csrfmiddlewaretoken": token.group(1),
        },
        headers={"Referer": server.url + "/accounts/login/"},
    )
    assert done.status_code in (200, 302) and "sessionid" in client.cookies, done.text[:300]
    return client


# -- a Redis of the test's own, and Celery workers on it ----------------------------------


@dataclass
class RedisServer:
    """A ``redis-server`` subprocess on a free port, that a test may kill and restart on
    the same port (an outage; nothing is persisted, as with a restarted cache Redis).
    Never the shared one on 6379."""

    tmp: Path
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    outages: int = 0

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> RedisServer:
        self.port = self.port or _free_port()
        log = (self.tmp / f"redis-{self.port}.log").open("ab")
        with log:
            self.process = subprocess.Popen(  # noqa: S603 - a fixed command line
                [
                    "redis-server",
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--daemonize",
                    "no",
                    "--dir",
                    str(self.tmp),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 10
        while not self.answers():
            assert self.process.poll() is None, f"redis-server on {self.port} exited"
            assert time.monotonic() < deadline, f"redis-server on {self.port} never answered"
            time.sleep(0.05)
        return self

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: the clients' connections drop, every key is gone."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        self.process = None
        self.outages += 1

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
        self.process = None


def start_celery_server(
    database_url: str,
    tmp: Path,
    redis: RedisServer,
    queue: str,
    lease: int | None,
    **settings: str,
) -> Server:
    """An API server whose runs go to Celery workers on ``queue`` of ``redis`` (broker
    on database 0, live events on 1), with a lease of ``lease`` seconds (None: the
    default, ``CRIOGEN_LEASE_SECONDS`` unset) and other ``settings`` (its ``env``, for
    the workers too)."""
    lease_setting = {} if lease is None else {"CRIOGEN_LEASE_SECONDS": str(lease)}
    server = start_server(
        database_url,
        tmp,
        REDIS_URL=redis.url(1),
        CELERY_BROKER_URL=redis.url(0),
        CELERY_TASK_DEFAULT_QUEUE=queue,
        CRIOGEN_RUNNER="celery",
        **lease_setting,
        **settings,
    )
    if lease is None:
        server.env.pop("CRIOGEN_LEASE_SECONDS", None)
    return server


def start_beat(
    env: dict[str, str], logs: Path, reap_seconds: int | None = None
) -> subprocess.Popen[bytes]:
    """Celery beat, reaping every ``reap_seconds`` (None: the default,
    ``CRIOGEN_REAP_SECONDS`` unset); its log is ``logs/beat.log``."""
    beat_env = {**env, "PYTHONUNBUFFERED": "1"}
    beat_env.pop("CRIOGEN_REAP_SECONDS", None)
    if reap_seconds is not None:
        beat_env["CRIOGEN_REAP_SECONDS"] = str(reap_seconds)
    with (logs / "beat.log").open("wb") as log:
        return subprocess.Popen(  # noqa: S603 - our own venv's celery
            [
                str(Path(sys.executable).parent / "celery"),
                *("-A", "criogen", "beat", "--schedule", str(logs / "beat-schedule")),
                *("--loglevel", "info"),
            ],
            cwd=ROOT,
            env=beat_env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def percentile(samples: list[float], pct: float) -> float:
    """The nearest-rank ``pct`` percentile of ``samples`` (p95 of 3 is their max)."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def redis_server_available() -> bool:
    return shutil.which("redis-server") is not None


@dataclass
class CeleryWorkers:
    """``celery -A criogen worker --pool threads`` processes on one queue of the test's
    own (as in tests/criogen/test_celery_worker.py), with their logs in ``logs``."""

    env: dict[str, str]
    queue: str
    logs: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    started: int = 0

    def start(self, concurrency: int = 2) -> str:
        self.started += 1
        name = f"w{self.started}"
        with (self.logs / f"{name}.log").open("wb") as log:
            self.procs[name] = subprocess.Popen(  # noqa: S603 - our own venv's celery
                celery_worker_argv(self.queue, name, concurrency=concurrency),
                cwd=ROOT,
                env={**self.env, "PYTHONUNBUFFERED": "1"},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return name

    def wait_ready(self, name: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while b" ready." not in (self.logs / f"{name}.log").read_bytes():
            assert self.procs[name].poll() is None, self.dump(f"worker {name} exited")
            assert time.monotonic() < deadline, self.dump(f"worker {name} never got ready")
            time.sleep(0.1)

    def ready(self) -> list[str]:
        """The workers that are up and consuming (their log says ``ready.``)."""
        return [
            name
            for name, proc in self.procs.items()
            if proc.poll() is None and b" ready." in (self.logs / f"{name}.log").read_bytes()
        ]

    def kill(self, name: str) -> None:
        """SIGKILL the worker: its runs stay ``running`` until their lease expires."""
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def supervise(self) -> int:
        """Start a new worker for each one that exited by itself, as the deployment's
        supervisor does (systemd ``Restart=always``); how many were restarted."""
        gone = [name for name, proc in self.procs.items() if proc.poll() is not None]
        for name in gone:
            del self.procs[name]
            self.start()
        return len(gone)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()

    def dump(self, message: str) -> str:
        logs = "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.logs.glob("w*.log"))
        )
        return f"{message}\n{logs}"
