"""A bridged LangGraph graph streams LangGraph's own chunks, as LangGraph's server does.

The graph of ``agents/streaming.py`` (a node, a subgraph of two nodes, a fake chat
model streaming its tokens, a custom stream writer, an interrupt on demand) is served
by Criogen (in-process runner, SQLite and PostgreSQL) and streamed with the official
``langgraph_sdk`` in each mode, with and without subgraphs; the events must be those
``langgraph dev`` sends for the same requests (recorded in ``streams_reference.json``
by ``bench/stream_reference.py``, normalised by :mod:`tests.langgraph.stream_cases`),
Criogen's closing ``end`` aside. A resumable stream replays the same events with
their ids from any ``Last-Event-ID``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import Server, stop_server
from tests.langgraph import stream_cases
from tests.langgraph.conftest import langgraph_project, langgraph_server
from tests.langgraph.stream_cases import CASES, GRAPH, INPUT, Case, normalise

pytestmark = pytest.mark.slow

REFERENCE = json.loads((Path(__file__).parent / "streams_reference.json").read_text())


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """A server whose langgraph.json registers the streaming graph as ``streamer``."""
    tmp = tmp_path_factory.mktemp(f"streams-{request.param}")
    with langgraph_server(request, tmp, {GRAPH: "streaming.py:graph"}) as srv:
        yield srv


def without_end(events: list[list[Any]]) -> list[list[Any]]:
    """Criogen closes each stream with ``event: end`` (LangGraph's server just closes
    the connection)."""
    assert events and events[-1] == ["end", None]
    return [e for e in events if e[0] != "end"]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_each_mode_streams_what_langgraphs_server_streams(server: Server, case: Case) -> None:
    client = server.client("alice")
    try:
        events = await stream_cases.record(client, case)
    finally:
        await client.aclose()

    assert normalise(without_end(events)) == normalise(REFERENCE[case.name])


async def test_tokens_arrive_one_by_one_as_the_model_streams(server: Server) -> None:
    client = server.client("alice")
    try:
        thread = await client.threads.create()
        tokens = [
            part.data[0]["content"]
            async for part in client.runs.stream(
                thread["thread_id"], GRAPH, input=INPUT, stream_mode="messages-tuple"
            )
            if part.event == "messages"
        ]
    finally:
        await client.aclose()

    assert len(tokens) == len(stream_cases.REPLY.split()) * 2 - 1
    assert "".join(tokens) == stream_cases.REPLY


async def test_a_stateless_stream_has_its_first_chunks(server: Server) -> None:
    client = server.client("alice")
    try:
        events = [
            [part.event, part.data]
            async for part in client.runs.stream(
                None, GRAPH, input=INPUT, stream_mode=["updates", "custom"]
            )
        ]
    finally:
        await client.aclose()

    names = [e[0] for e in events]
    assert names == [
        "metadata",
        "updates",
        "updates",
        "updates",
        "custom",
        "custom",
        "updates",
        "end",
    ]
    assert events[1][1] == {"plan": {"notes": ["plan for otters"]}}


async def test_a_thread_stream_follows_a_runs_own_chunks(server: Server) -> None:
    client = server.client("alice")
    try:
        tid = (await client.threads.create())["thread_id"]
        stream = await client.threads.join_stream(tid, stream_mode=["run_modes", "lifecycle"])
        first = await stream.__anext__()
        assert first.event == "metadata"
        await client.runs.create(tid, GRAPH, input=INPUT, stream_mode=["updates", "custom"])
        seen: list[list[Any]] = []
        async with asyncio.timeout(60):
            async for part in stream:
                seen.append([part.event, part.data])
                if part.event == "lifecycle" and part.data["status"] == "success":
                    break
        await stream.aclose()
    finally:
        await client.aclose()

    chunks = [e for e in seen if e[0] != "lifecycle"]
    assert [e[0] for e in chunks] == ["updates"] * 3 + ["custom"] * 2 + ["updates"]
    assert chunks[0][1] == {"plan": {"notes": ["plan for otters"]}}
    assert chunks[3][1] == {"progress": "half"}


def _sse(body: str) -> list[tuple[str | None, str, Any]]:
    """``(id, event, data)`` of each event of an SSE body."""
    out = []
    for block in body.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if line.startswith(":") or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key] = value.strip()
        if "event" in fields:
            out.append((fields.get("id"), fields["event"], json.loads(fields["data"])))
    return out


async def test_a_resumable_stream_replays_from_any_event(server: Server) -> None:
    client = server.client("alice")
    [case] = [c for c in CASES if c.name == "mixed-subgraphs"]
    try:
        thread = await client.threads.create()
        tid = thread["thread_id"]
        live = [
            [part.event, part.data]
            async for part in client.runs.stream(
                tid,
                GRAPH,
                input=INPUT,
                stream_mode=case.stream_mode,  # type: ignore[arg-type]
                stream_subgraphs=case.subgraphs,
                stream_resumable=True,
            )
        ]
        [run] = await client.runs.list(tid)
        joined = [
            [part.event, part.data]
            async for part in client.runs.join_stream(tid, run["run_id"], last_event_id="-1")
        ]
    finally:
        await client.aclose()
    headers = {"Authorization": f"Bearer {server.tokens['alice']}"}
    url = f"{server.url}/threads/{tid}/runs/{run['run_id']}/stream"
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        everything = _sse((await http.get(url, headers={"Last-Event-ID": "0"})).text)
        middle = len(everything) // 2
        rest = _sse((await http.get(url, headers={"Last-Event-ID": str(middle)})).text)

    assert normalise(without_end(live)) == normalise(REFERENCE[case.name])
    assert joined == live
    assert [[event, data] for _, event, data in everything] == live
    assert [int(i) for i, _, _ in everything] == list(range(1, len(everything) + 1))
    assert rest == everything[middle:]


# -- Celery workers: the chunks cross from the worker's process to the web's ----------


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def celery_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """A server whose runs go to one Celery worker (its own Redis: the broker, and the
    channel layer the worker's chunks reach the web process by)."""
    from tests.conftest import need_service
    from tests.reliability.conftest import _fresh_database
    from tests.reliability.helpers import (
        CeleryWorkers,
        RedisServer,
        redis_server_available,
        start_celery_server,
    )

    need_service("redis-server", redis_server_available(), "apt-get install -y redis-server")
    tmp = tmp_path_factory.mktemp(f"streams-celery-{request.param}")
    config = langgraph_project(tmp / "project", {GRAPH: "streaming.py:graph"})
    logs = tmp / "logs"
    logs.mkdir()
    redis = RedisServer(tmp).start()
    with contextlib.ExitStack() as stack:
        stack.callback(redis.stop)
        if request.param == "sqlite":
            url = f"sqlite://{tmp / 'api.db'}"
        else:
            url = stack.enter_context(_fresh_database("criogen_test_lg_streams"))
        server = start_celery_server(
            url,
            tmp,
            redis,
            f"lgs-{uuid.uuid4().hex[:8]}",
            None,
            CRIOGEN_LANGGRAPH_CONFIG=str(config),
        )
        stack.callback(stop_server, server)
        workers = CeleryWorkers(server.env, server.env["CELERY_TASK_DEFAULT_QUEUE"], logs)
        stack.callback(workers.stop_all)
        workers.wait_ready(workers.start(concurrency=1))
        yield server


# On SQLite it shows the worker's side; the storage suites show PostgreSQL's.
@pytest.mark.reliability_variants("postgres")
@pytest.mark.parametrize("name", ["mixed-subgraphs", "interrupt-updates", "messages", "events"])
async def test_a_celery_worker_streams_what_langgraphs_server_streams(
    celery_server: Server, name: str
) -> None:
    [case] = [c for c in CASES if c.name == name]
    client = celery_server.client("alice")
    try:
        events = await stream_cases.record(client, case)
    finally:
        await client.aclose()

    assert normalise(without_end(events)) == normalise(REFERENCE[case.name])


async def test_a_celery_workers_resumable_stream_is_logged(celery_server: Server) -> None:
    [case] = [c for c in CASES if c.name == "mixed-subgraphs"]
    client = celery_server.client("alice")
    try:
        thread = await client.threads.create()
        tid = thread["thread_id"]
        live = [
            [part.event, part.data]
            async for part in client.runs.stream(
                tid,
                GRAPH,
                input=INPUT,
                stream_mode=case.stream_mode,  # type: ignore[arg-type]
                stream_subgraphs=case.subgraphs,
                stream_resumable=True,
            )
        ]
        [run] = await client.runs.list(tid)
        joined = [
            [part.event, part.data]
            async for part in client.runs.join_stream(tid, run["run_id"], last_event_id="3")
        ]
    finally:
        await client.aclose()

    assert normalise(without_end(live)) == normalise(REFERENCE[case.name])
    assert joined == live[3:]
