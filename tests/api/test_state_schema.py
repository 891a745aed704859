"""A workflow's declared state schema over the REST API: ``GET /assistants/{id}/schemas``
returns it, and ``update_state`` refuses a value it does not take with a 422 naming the
key (the check is the engine's, so every door gets it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from langgraph_sdk.errors import UnprocessableEntityError

from criogen.examples.steps import STATE_SCHEMA
from tests.api.conftest import Server


async def test_the_declared_state_schema_is_the_assistants_state_and_input_schema(
    client: Any,
) -> None:
    schemas = await client.assistants.get_schemas("steps")
    assert schemas["state_schema"] == STATE_SCHEMA
    assert schemas["input_schema"] == STATE_SCHEMA
    # A workflow that declares none keeps the schema drawn from its reducers.
    hitl = await client.assistants.get_schemas("hitl")
    assert hitl["state_schema"]["additionalProperties"] is True


@pytest.mark.parametrize(
    ("values", "field", "says"),
    [
        ({"fail": "no"}, "values.fail", "values.fail must be a boolean."),
        ({"n": 1.5}, "values.n", "values.n must be an integer."),
        ({"sleep": -1}, "values.sleep", "values.sleep must be at least 0."),
        # steps appends: the merged list ["a", "b", 2] is checked, so its index is named.
        ({"steps": ["b", 2]}, "values.steps[2]", "values.steps[2] must be a string."),
    ],
)
async def test_update_state_refuses_a_value_the_schema_does_not_take_with_422(
    client: Any, values: dict[str, Any], field: str, says: str
) -> None:
    thread = await client.threads.create(graph_id="steps")
    await client.threads.update_state(thread["thread_id"], {"n": 1, "steps": ["a"]}, as_node="a")
    before = await client.threads.get_state(thread["thread_id"])
    with pytest.raises(UnprocessableEntityError) as caught:
        await client.threads.update_state(thread["thread_id"], values)
    assert caught.value.body["field"] == field
    assert caught.value.body["detail"] == says
    after = await client.threads.get_state(thread["thread_id"])
    assert after["checkpoint"] == before["checkpoint"]  # nothing was written


async def test_update_state_takes_what_the_schema_takes_and_keys_it_does_not_name(
    client: Any,
) -> None:
    thread = await client.threads.create(graph_id="steps")
    await client.threads.update_state(thread["thread_id"], {"n": 2, "fail": False, "note": [1]})
    assert (await client.threads.get(thread["thread_id"]))["values"] == {
        "n": 2,
        "fail": False,
        "note": [1],
    }


@pytest.fixture
async def pg(pg_server: Server) -> AsyncIterator[Any]:
    """alice's async client on the PostgreSQL server."""
    client = pg_server.client("alice")
    yield client
    await client.aclose()


@pytest.mark.postgres
async def test_the_declared_schema_is_served_and_checked_on_postgresql(pg: Any) -> None:
    assert (await pg.assistants.get_schemas("steps"))["state_schema"] == STATE_SCHEMA
    thread = await pg.threads.create(graph_id="steps")
    with pytest.raises(UnprocessableEntityError) as caught:
        await pg.threads.update_state(thread["thread_id"], {"n": "three"})
    assert caught.value.body["field"] == "values.n"
    await pg.threads.update_state(thread["thread_id"], {"n": 3, "fail": False})
    assert (await pg.threads.get(thread["thread_id"]))["values"] == {"n": 3, "fail": False}
