"""The API on PostgreSQL: the flows whose SQL differs by backend (JSON metadata
filters, status search, copy, prune, runs, streaming, history)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.api.conftest import Server

pytestmark = pytest.mark.postgres


@pytest.fixture
async def pg(pg_server: Server) -> AsyncIterator[Any]:
    """alice's async client on the PostgreSQL server."""
    client = pg_server.client("alice")
    yield client
    await client.aclose()


async def test_threads_search_count_and_copy_on_postgres(pg: Any) -> None:
    mark = uuid.uuid4().hex
    one = await pg.threads.create(graph_id="steps", metadata={"mark": mark, "nested": {"a": [1]}})
    await pg.threads.create(metadata={"mark": mark})
    found = await pg.threads.search(metadata={"mark": mark, "nested": {"a": [1]}})
    assert [t["thread_id"] for t in found] == [one["thread_id"]]
    assert await pg.threads.count(metadata={"mark": mark}, status="idle") == 2
    await pg.threads.update_state(one["thread_id"], {"n": 1, "steps": ["a"]}, as_node="a")
    copy = await pg.threads.copy(one["thread_id"])
    assert copy["values"] == {"n": 1, "steps": ["a"]}
    updated = await pg.threads.update(copy["thread_id"], metadata={"x": 1}, ttl=30)
    assert updated["metadata"]["x"] == 1
    assert updated["ttl"]["ttl"] == 30
    await pg.threads.delete(copy["thread_id"])
    assert await pg.threads.search(ids=[copy["thread_id"]]) == []


async def test_runs_stream_and_interrupts_on_postgres(pg: Any) -> None:
    thread = await pg.threads.create()
    tid = thread["thread_id"]
    values = [
        p.data async for p in pg.runs.stream(tid, "steps", input={"n": 0}) if p.event == "values"
    ]
    assert values[-1] == {"steps": ["a", "b", "c"], "n": 3}
    result = await pg.runs.wait(tid, "hitl", input={"n": 0})
    assert result["__interrupt__"][0]["value"]["question"] == "approve?"
    assert [t["thread_id"] for t in await pg.threads.search(status="interrupted", ids=[tid])] == [
        tid
    ]
    final = await pg.runs.wait(tid, "hitl", command={"resume": "ok"})
    assert final["answer"] == "ok"
    history = await pg.threads.get_history(tid, limit=3)
    assert [s["metadata"]["version"] for s in history] == sorted(
        (s["metadata"]["version"] for s in history), reverse=True
    )


async def test_prune_keep_latest_on_postgres(pg: Any) -> None:
    thread = await pg.threads.create()
    tid = thread["thread_id"]
    await pg.runs.wait(tid, "steps", input={"n": 0})
    assert (await pg.threads.prune([tid], strategy="keep_latest"))["pruned_count"] == 1
    history = await pg.threads.get_history(tid)
    assert [s["values"] for s in history] == [{"steps": ["a", "b", "c"], "n": 3}]
    assert await pg.runs.wait(tid, "steps", input={}) == {"steps": ["a", "b", "c"] * 2, "n": 6}
