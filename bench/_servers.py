"""The other servers the comparison scripts start: a free loopback port, the wait until
one answers, its stop, and LangGraph's own server (``langgraph dev``).

``bench/http_compare.py`` measures LangGraph's server; ``bench/stream_reference.py`` and
``bench/record_langgraph_server.py`` record what it answers for the tests. All three run
it from ``bench/.venvs/langgraph`` (:mod:`_venv`, :data:`LANGGRAPH_REQUIREMENTS`) with
:func:`langgraph_dev`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

LANGGRAPH_REQUIREMENTS = ["langgraph-cli[inmem]==0.4.40", "langgraph-api==0.16.7"]
LANGGRAPH_ENV = {
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",  # the CLI's usage report
    "LANGGRAPH_NO_VERSION_CHECK": "true",  # the server's look-up of newer releases
    "LANGSMITH_TRACING": "false",
    "LOG_LEVEL": "WARNING",  # as Aegra's; the in-memory server logs at info by default
    "PYTHONDONTWRITEBYTECODE": "1",
}
"""No network: no analytics, no version check, no tracing; with no licence key the
server sends no usage metadata either."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(process: subprocess.Popen[bytes], url: str, log_path: Path, name: str) -> None:
    deadline = time.monotonic() + 120
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        if process.poll() is not None or time.monotonic() > deadline:
            stop(process)
            raise RuntimeError(f"{name} did not start: {log_path.read_text()[-800:]}")
        time.sleep(0.2)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def langgraph_env() -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("LANGSMITH_", "LANGCHAIN_", "LANGGRAPH_", "VIRTUAL_ENV"))
        and key not in ("PYTHONPATH", "DATABASE_URI", "REDIS_URI")
    }
    env.update(LANGGRAPH_ENV)
    return env


@contextlib.contextmanager
def langgraph_dev(python: Path, home: Path, logs: Path, *options: str) -> Iterator[str]:
    """``langgraph dev`` of the venv whose interpreter is ``python``, run from ``home``
    (which holds its ``langgraph.json`` and graphs) on a free loopback port with
    :func:`langgraph_env`, its output in ``logs/langgraph-<port>.log``, and ``options``
    after the host and port; yields its URL once ``/ok`` answers and stops it afterwards."""
    port = free_port()
    log_path = logs / f"langgraph-{port}.log"
    with log_path.open("wb") as sink:
        process = subprocess.Popen(  # noqa: S603 - the venv's command, our arguments
            [
                str(python.parent / "langgraph"),
                "dev",
                "--no-browser",
                "--no-reload",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                *options,
            ],
            cwd=home,
            env=langgraph_env(),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(process, url + "/ok", log_path, "LangGraph's server")
        yield url
    finally:
        stop(process)
