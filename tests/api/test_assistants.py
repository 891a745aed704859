"""Assistants over ``langgraph_sdk``: the registered graphs' default assistants,
operator-made assistants, graphs and schemas."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langgraph_sdk.errors import ConflictError, NotFoundError, PermissionDeniedError

from tests.api.conftest import Server
from tests.api.test_verbs_audit import _events

DEFAULT_STEPS = str(uuid.uuid5(uuid.NAMESPACE_URL, "criogen:assistant:steps"))


async def test_every_registered_graph_has_a_default_assistant(client: Any) -> None:
    found = await client.assistants.search(graph_id="steps")
    assert DEFAULT_STEPS in [a["assistant_id"] for a in found]
    by_graph_id = await client.assistants.get("steps")
    assert by_graph_id["assistant_id"] == DEFAULT_STEPS
    assert by_graph_id["graph_id"] == "steps"
    assert await client.assistants.count(graph_id="hitl") >= 1


async def test_an_unknown_assistant_is_a_404(client: Any) -> None:
    with pytest.raises(NotFoundError):
        await client.assistants.get(str(uuid.uuid4()))
    with pytest.raises(NotFoundError):
        await client.assistants.get("no-such-graph")


async def test_an_operator_creates_updates_and_deletes_an_assistant(clients: Any) -> None:
    olga = clients("olga")
    made = await olga.assistants.create(
        "steps", config={"configurable": {"x": 1}}, metadata={"team": "ops"}, name="ops steps"
    )
    assert made["version"] == 1
    assert made["name"] == "ops steps"
    with pytest.raises(ConflictError):
        await olga.assistants.create("steps", assistant_id=made["assistant_id"])
    same = await olga.assistants.create(
        "steps", assistant_id=made["assistant_id"], if_exists="do_nothing"
    )
    assert same["assistant_id"] == made["assistant_id"]
    updated = await olga.assistants.update(made["assistant_id"], metadata={"team": "sre"})
    assert updated["version"] == 2
    assert updated["metadata"] == {"team": "sre"}
    found = await olga.assistants.search(metadata={"team": "sre"})
    assert [a["assistant_id"] for a in found] == [made["assistant_id"]]
    versions = await olga.assistants.get_versions(made["assistant_id"])
    assert [v["version"] for v in versions] == [2]
    # A run may name it.
    result = await olga.runs.wait(None, made["assistant_id"], input={"n": 0})
    assert result["n"] == 3
    await olga.assistants.delete(made["assistant_id"])
    with pytest.raises(NotFoundError):
        await olga.assistants.get(made["assistant_id"])


async def test_a_regular_user_cannot_change_assistants(client: Any) -> None:
    with pytest.raises(PermissionDeniedError):
        await client.assistants.create("steps", name="mine")
    with pytest.raises(PermissionDeniedError):
        await client.assistants.update(DEFAULT_STEPS, metadata={"x": 1})


async def test_it_draws_the_graph_and_its_schemas(client: Any) -> None:
    graph = await client.assistants.get_graph("steps")
    assert [n["id"] for n in graph["nodes"]] == ["__start__", "a", "b", "c", "__end__"]
    edges = {(e["source"], e["target"]) for e in graph["edges"]}
    assert edges == {("__start__", "a"), ("a", "b"), ("b", "c"), ("c", "__end__")}
    schemas = await client.assistants.get_schemas("steps")
    assert schemas["graph_id"] == "steps"
    # steps declares its state (Workflow(state_schema=...)): the append key is an array.
    assert schemas["state_schema"]["properties"]["steps"]["type"] == "array"
    assert await client.assistants.get_subgraphs("steps") == {}


async def test_search_returns_only_the_selected_fields(client: Any) -> None:
    found = await client.assistants.search(graph_id="steps", select=["graph_id"])
    assert {tuple(sorted(a)) for a in found} == {("assistant_id", "graph_id")}


async def test_deleting_an_assistant_with_its_threads_deletes_only_those_audited(
    clients: Any, server: Server
) -> None:
    olga = clients("olga")
    made = await olga.assistants.create("steps", name="short-lived steps")
    ran = (await olga.threads.create())["thread_id"]
    await olga.runs.wait(ran, made["assistant_id"], input={"n": 0})
    other = (await olga.threads.create())["thread_id"]
    await olga.runs.wait(other, "steps", input={"n": 0})

    await olga.assistants.delete(made["assistant_id"], delete_threads=True)

    with pytest.raises(NotFoundError):
        await olga.threads.get(ran)
    assert (await olga.threads.get(other))["thread_id"] == other
    # Deleted through the one delete verb: audited as the operator, from the API.
    assert [(e["action"], e["actor"], e["door"]) for e in _events(server, ran)] == [
        ("create", "olga", "api"),
        ("delete", "olga", "api"),
    ]
    assert [e["action"] for e in _events(server, other)] == ["create"]
