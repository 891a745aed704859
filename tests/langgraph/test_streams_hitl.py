"""A LangChain agent with ``HumanInTheLoopMiddleware`` streams over Criogen what
LangGraph streams in-process: its tool calls in ``messages``, its node updates, the
approval interrupt ending the first stream, and the approved tool running once in the
resumed one (the in-process comparison the stream tests make with ``InMemorySaver``
where no recording of LangGraph's server is needed)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from criogen.langgraph.bridge import jsonable
from tests.api.conftest import Server
from tests.langgraph.agents import support
from tests.langgraph.conftest import langgraph_server
from tests.langgraph.stream_cases import normalise

pytestmark = pytest.mark.slow

ASK = {"messages": [{"type": "human", "content": "refund order 42 by 10", "id": "h1"}]}
APPROVE = {"decisions": [{"type": "approve"}]}
MODES = ["updates", "messages-tuple"]


@pytest.fixture(params=["sqlite", "postgres"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    """A server with the agent as ``refunds``; its tools write to the returned ledger."""
    ledger = tmp_path / "ledger.jsonl"
    graphs = {"refunds": "support.py:graph"}
    with langgraph_server(request, tmp_path, graphs, SUPPORT_LEDGER=str(ledger)) as srv:
        yield srv, ledger


def in_process() -> list[list[Any]]:
    """The same two streams from LangGraph itself, as the server names them."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    graph = support.build(["approve", "edit", "reject"]).copy(
        update={"checkpointer": InMemorySaver()}
    )
    config = {"configurable": {"thread_id": str(uuid.uuid4())}}
    out: list[list[Any]] = [["metadata", {}]]
    for stream_input in (ASK, Command(resume=APPROVE)):
        for mode, chunk in graph.stream(stream_input, config, stream_mode=["updates", "messages"]):
            out.append([mode, jsonable(chunk)])
        if stream_input is ASK:
            out.append(["metadata", {}])
    return out


def _comparable(events: list[list[Any]]) -> list[list[Any]]:
    # The metadata event's content is the server's (run id, attempt), not LangGraph's.
    return normalise([[e, {} if e == "metadata" else d] for e, d in events if e != "end"])


async def test_an_approval_streams_as_langgraph_streams_it(served: tuple[Server, Path]) -> None:
    server, ledger = served
    client = server.client("alice")
    try:
        tid = (await client.threads.create())["thread_id"]
        events = [
            [part.event, part.data]
            async for part in client.runs.stream(tid, "refunds", input=ASK, stream_mode=MODES)
        ]
        events += [
            [part.event, part.data]
            async for part in client.runs.stream(
                tid, "refunds", command={"resume": APPROVE}, stream_mode=MODES
            )
        ]
    finally:
        await client.aclose()

    assert _comparable(events) == _comparable(in_process())
    interrupts = [d for e, d in events if e == "updates" and "__interrupt__" in d]
    assert len(interrupts) == 1
    calls = [
        call["name"] for e, d in events if e == "messages" for call in d[0].get("tool_calls") or ()
    ]
    assert calls == ["lookup_order", "issue_refund"]
    refunds = [
        json.loads(line)
        for line in ledger.read_text().splitlines()
        if json.loads(line)["tool"] == "issue_refund"
    ]
    assert refunds == [{"tool": "issue_refund", "order_id": 42, "amount": 10}]
