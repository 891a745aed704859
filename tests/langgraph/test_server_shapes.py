"""Criogen answers as LangGraph's own server does for the same graphs: the assistants'
schemas, drawing (with and without ``xray``) and subgraphs, and a thread's state and
history, against what ``langgraph dev`` answered to the same ``langgraph_sdk`` calls
(``data/langgraph_server.json``, recorded by ``bench/record_langgraph_server.py``; the
test needs no network and no LangGraph server). Ids and times differ between two runs,
and LangGraph's server adds its own run metadata (``graph_id``, ``assistant_id``…):
those are left out of the comparison."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import Server
from tests.langgraph.conftest import langgraph_server

HERE = Path(__file__).parent
RECORDED = json.loads((HERE / "data" / "langgraph_server.json").read_text())
START = {"topic": "otters", "notes": [], "approved": False}
SERVER_METADATA = {
    "graph_id",
    "assistant_id",
    "user_id",
    "created_by",
    "run_attempt",
    "thread_id",
    "run_id",
    "langgraph_version",
    "langgraph_api_version",
    "langgraph_plan",
    "langgraph_host",
    "langgraph_api_url",
    "langgraph_auth_user_id",
    "langgraph_request_id",
}
"""What LangGraph's server adds to each checkpoint's metadata from its run."""
CRIOGEN_INTERRUPT = {
    "reason",
    "node",
    "index",
    "interrupt_id",
    "langgraph_node",
    "pending",
    "schema",
}
"""What Criogen adds to a pending interrupt (its suspension's fields)."""
VARYING = {"id", "checkpoint_id", "parent_checkpoint_id", "thread_id", "created_at"}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    tmp_path = tmp_path_factory.mktemp(f"shapes-{request.param}")
    graphs = {"nested": "nested.py:graph", "helpdesk": "review.py:graph"}
    with langgraph_server(request, tmp_path, graphs) as srv:
        yield srv


def _same(value: Any, *, interrupt: bool = False) -> Any:
    """``value`` without what differs between two runs or two servers."""
    if isinstance(value, list):
        return [_same(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    is_interrupt = interrupt or ("value" in value and "id" in value and len(value) >= 2)
    for key, item in value.items():
        if key in VARYING:
            out[key] = "…" if item is not None else None
        elif key == "metadata" and isinstance(item, dict):
            out[key] = {k: v for k, v in item.items() if k not in SERVER_METADATA}
        elif is_interrupt and key in CRIOGEN_INTERRUPT or key == "calls":
            continue
        else:
            out[key] = _same(item)
    return out


@pytest.mark.slow
def test_assistants_describe_a_langgraph_graph_as_langgraphs_server(server: Server) -> None:
    with server.sync_client("alice") as client:
        got = {
            "schemas": client.assistants.get_schemas("nested"),
            "graph": client.assistants.get_graph("nested"),
            "graph_xray": client.assistants.get_graph("nested", xray=True),
            "subgraphs": client.assistants.get_subgraphs("nested"),
            "subgraphs_recurse": client.assistants.get_subgraphs("nested", recurse=True),
            "subgraphs_ns": client.assistants.get_subgraphs("nested", namespace="draft"),
        }
    for key, answer in got.items():
        assert answer == RECORDED[key], key
    # What LangGraph's schemas say, concretely: the graph's own input and context.
    assert got["schemas"]["input_schema"]["required"] == ["topic"]
    assert got["schemas"]["context_schema"]["properties"]["tone"]["enum"] == ["plain", "formal"]


@pytest.mark.slow
def test_a_threads_state_and_history_are_shaped_as_langgraphs_server(server: Server) -> None:
    with server.sync_client("alice") as client:
        tid = client.threads.create()["thread_id"]
        client.runs.wait(tid, "helpdesk", input=START, durability="sync")
        waiting = client.threads.get_state(tid)
        client.runs.wait(tid, "helpdesk", command={"resume": "yes"}, durability="sync")
        history = client.threads.get_history(tid, limit=100)
    assert _same(waiting) == _same(RECORDED["waiting"])
    assert _same(history) == _same(RECORDED["history"])
