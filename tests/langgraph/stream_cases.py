"""The stream requests the stream tests make of the graph ``tests/langgraph/agents/
streaming.py``, and how their events are compared across servers.

``bench/stream_reference.py`` makes these requests of LangGraph's own server
(``langgraph dev``) and records what it sends in ``streams_reference.json``;
``test_streams.py`` makes them of Criogen and compares. What differs by nature (ids,
timestamps, the server's own run metadata) is normalised by :func:`normalise`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from langgraph_sdk.client import LangGraphClient

from tests.langgraph.agents.streaming import REPLY

__all__ = ["CASES", "GRAPH", "INPUT", "REPLY", "Case", "normalise", "record"]

GRAPH = "streamer"
"""The id both servers register ``streaming.py:graph`` under."""

INPUT = {"topic": "otters", "messages": [{"type": "human", "content": "tell me about otters"}]}
ASKING = {**INPUT, "ask": True}


@dataclass(frozen=True)
class Case:
    """One ``runs.stream`` request on a new thread (and a resume, for ``resume``)."""

    name: str
    stream_mode: list[str]
    subgraphs: bool = False
    input: dict[str, Any] = field(default_factory=lambda: INPUT)
    resume: Any = None
    """With a value: once the first stream ended (at an interrupt), a second
    ``runs.stream`` with ``command={"resume": resume}``, recorded after it."""


CASES = [
    Case("values", ["values"]),
    Case("updates", ["updates"]),
    Case("messages-tuple", ["messages-tuple"]),
    Case("messages", ["messages"]),
    Case("custom", ["custom"]),
    Case("debug", ["debug"]),
    Case("events", ["events"]),
    Case("updates-subgraphs", ["updates"], subgraphs=True),
    Case("mixed-subgraphs", ["values", "updates", "messages-tuple", "custom"], subgraphs=True),
    Case("interrupt-values", ["values"], input=ASKING, resume="yes"),
    Case("interrupt-updates", ["updates"], input=ASKING, resume="yes"),
]


async def record(client: LangGraphClient, case: Case) -> list[list[Any]]:
    """The events of ``case`` on a new thread, ``[event, data]`` each (the resume's
    follow those of the first stream)."""
    thread = await client.threads.create()
    out: list[list[Any]] = []
    async for part in client.runs.stream(
        thread["thread_id"],
        GRAPH,
        input=case.input,
        stream_mode=case.stream_mode,  # type: ignore[arg-type]
        stream_subgraphs=case.subgraphs,
    ):
        out.append([part.event, part.data])
    if case.resume is not None:
        async for part in client.runs.stream(
            thread["thread_id"],
            GRAPH,
            command={"resume": case.resume},
            stream_mode=case.stream_mode,  # type: ignore[arg-type]
            stream_subgraphs=case.subgraphs,
        ):
            out.append([part.event, part.data])
    return out


SERVER_METADATA = frozenset(
    {
        "assistant_id",
        "graph_id",
        "user_id",
        "run_attempt",
        "langgraph_version",
        "langgraph_api_version",
        "langgraph_plan",
        "langgraph_host",
        "langgraph_api_url",
        "langgraph_request_id",
        "langgraph_auth_user",
        "langgraph_auth_user_id",
        "langgraph_auth_permissions",
        "thread_id",
        "run_id",
        "created_by",
        "x-request-id",
        "__request_start_time_ms__",
        "__after_seconds__",
        "lc_versions",
    }
)
"""Keys the server puts in a run's config metadata, which LangGraph copies into the
metadata of messages, events and checkpoints: they name the server, not the graph;
and ``lc_versions``, the LangChain packages installed where the graph runs."""

_UUID = re.compile(
    r"(lc_run--|run-|run--)?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"|\b[0-9a-f]{32}\b"  # interrupt ids
)
_STAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")


def normalise(events: list[list[Any]]) -> list[list[Any]]:
    """``events`` with ids numbered in order of appearance (``<id1>``…, the same id
    the same number), timestamps as ``<time>``, and :data:`SERVER_METADATA` left
    out."""
    ids: dict[str, str] = {}

    def number(match: re.Match[str]) -> str:
        return ids.setdefault(match.group(0), f"<id{len(ids) + 1}>")

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            # In key order: ids are numbered alike whatever order a server wrote them.
            return {
                walk(k): walk(value[k])
                for k in sorted(value, key=str)
                if not (isinstance(k, str) and k in SERVER_METADATA)
            }
        if isinstance(value, list | tuple):
            return [walk(v) for v in value]
        if isinstance(value, str):
            if _STAMP.match(value):
                return "<time>"
            return _UUID.sub(number, value)
        return value

    return [walk(event) for event in events]
