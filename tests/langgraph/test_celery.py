"""kill -9 of a Celery worker in the middle of a LangChain agent's approved turn: the
run is taken back and finishes, and the approved tool has not run twice.

A server with the Celery runner (a Redis and a PostgreSQL database of the test's own,
so that only this test's sweep takes its run back), one ``celery worker`` process; the
agent's model is slow after the refund, and the worker is killed while it waits. The
resume runs with ``durability="sync"``: LangGraph's checkpoint after the tools step is
written before the model step starts, so the taken-back run goes on from it.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import Server, _manage, stop_server
from tests.reliability.conftest import _fresh_database
from tests.reliability.helpers import (
    CeleryWorkers,
    RedisServer,
    redis_server_available,
    start_celery_server,
)

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

AGENT = Path(__file__).parent / "agents" / "support.py"
LEASE = 2


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Server, CeleryWorkers, Path]]:
    from tests.conftest import need_service

    need_service("redis-server", redis_server_available(), "apt-get install -y redis-server")
    (tmp_path / "agents").mkdir()
    shutil.copy(AGENT, tmp_path / "agents" / "support.py")
    config = tmp_path / "langgraph.json"
    config.write_text(json.dumps({"graphs": {"refunds": "./agents/support.py:graph"}}))
    ledger = tmp_path / "ledger.jsonl"
    logs = tmp_path / "logs"
    logs.mkdir()
    redis = RedisServer(tmp_path).start()
    try:
        with _fresh_database("criogen_test_lg_celery") as database_url:
            server = start_celery_server(
                database_url,
                tmp_path,
                redis,
                f"lg-{uuid.uuid4().hex[:8]}",
                LEASE,
                CRIOGEN_LANGGRAPH_CONFIG=str(config),
                SUPPORT_LEDGER=str(ledger),
                SUPPORT_SLOW_AFTER_REFUND="30",
            )
            workers = CeleryWorkers(server.env, server.env["CELERY_TASK_DEFAULT_QUEUE"], logs)
            try:
                yield server, workers, ledger
            finally:
                workers.stop_all()
                stop_server(server)
    finally:
        redis.stop()


def _ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_worker_killed_after_the_approved_tool_ran_does_not_run_it_twice(
    cluster: tuple[Server, CeleryWorkers, Path],
) -> None:
    server, workers, ledger = cluster
    first = workers.start(concurrency=1)
    workers.wait_ready(first)
    with server.sync_client("alice") as client:
        tid = client.threads.create()["thread_id"]
        ask = {"messages": [{"role": "user", "content": "refund order 42 by 10", "id": "h1"}]}
        client.runs.wait(tid, "refunds", input=ask)
        assert client.threads.get(tid)["status"] == "interrupted"

        run = client.runs.create(
            tid,
            "refunds",
            command={"resume": {"decisions": [{"type": "approve"}]}},
            durability="sync",
        )
        # The refund ran and the model is thinking about it: kill the worker there.
        deadline = time.monotonic() + 60
        while not any(e["tool"] == "model" for e in _ledger(ledger)):
            assert time.monotonic() < deadline, workers.dump("the refund never ran")
            time.sleep(0.1)
        workers.kill(first)
        # The replacement's model answers at once: the taken-back run must not hang.
        workers.env = {**workers.env, "SUPPORT_SLOW_AFTER_REFUND": ""}
        second = workers.start(concurrency=1)
        workers.wait_ready(second)

        time.sleep(LEASE + 0.5)
        deadline = time.monotonic() + 120
        while True:
            _manage(server.env, "criogen_sweep", "--no-ttl", "--no-deadlines")
            status = client.runs.get(tid, run["run_id"])["status"]
            if status not in ("pending", "running"):
                break
            assert time.monotonic() < deadline, workers.dump(f"the run stayed {status}")
            time.sleep(LEASE)
        state = client.threads.get_state(tid)
        thread = client.threads.get(tid)

    assert status == "success", workers.dump(status)
    assert thread["status"] == "idle"
    assert state["values"]["messages"][-1]["content"] == "done: refunded 10 EUR on order 42"
    refunds = [e for e in _ledger(ledger) if e["tool"] == "issue_refund"]
    assert refunds == [{"tool": "issue_refund", "order_id": 42, "amount": 10}]
    # Only the killed worker's model was slow (and said so): the reply came from the
    # run taken back by the second worker, from LangGraph's checkpoint after the tools.
    assert [e for e in _ledger(ledger) if e["tool"] == "model"] == [
        {"tool": "model", "after": "issue_refund"}
    ]
