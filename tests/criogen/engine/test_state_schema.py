"""``Workflow(state_schema=...)``: the declaration (a JSON Schema, a pydantic model or a
TypedDict), and the check of a person's state update against it, in the engine (so
every door, REST and dashboard alike, refuses the same values by name)."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import BaseModel
from typing_extensions import TypedDict

from criogen import END, START, Storage, Workflow
from criogen.engine.errors import InvalidArgument


class Ticket(BaseModel):
    priority: Literal["low", "high"] = "low"
    retries: int = 0
    urgent: bool = False


class Order(TypedDict):
    order_id: str
    amount: float


class Nested(BaseModel):
    note: str | None = None


def graph(schema: Any, reducers: dict[str, Any] | None = None) -> Any:
    wf = Workflow(state_schema=schema, reducers=reducers)
    wf.add_node("a", lambda state: None)
    wf.add_edge(START, "a")
    wf.add_edge("a", END)
    return wf.compile(storage=Storage())


def test_a_pydantic_model_and_a_typeddict_are_read_as_json_schema() -> None:
    ticket = Workflow(state_schema=Ticket).state_schema
    assert ticket is not None
    assert ticket["properties"]["priority"] == {
        "default": "low",
        "enum": ["low", "high"],
        "title": "Priority",
        "type": "string",
    }
    order = Workflow(state_schema=Order).state_schema
    assert order is not None and order["required"] == ["order_id", "amount"]
    assert Workflow().state_schema is None


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        (Nested, "state_schema.properties.note uses anyOf, which Criogen does not check"),
        ({"type": "array"}, 'state_schema.type must be "object"'),
        ({"type": "object", "patternProperties": {}}, "uses patternProperties"),
        ("not a schema", "state_schema must be a JSON Schema object"),
    ],
)
def test_a_schema_criogen_cannot_check_is_refused_when_declared(schema: Any, says: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        Workflow(state_schema=schema)
    assert says in caught.value.message
    assert caught.value.message.startswith("Workflow(state_schema=...): ")


def test_a_state_update_is_checked_against_the_declared_keys_only() -> None:
    thread = graph(Ticket).thread("t1")
    thread.run({"priority": "low"})
    with pytest.raises(InvalidArgument) as caught:
        thread.update_state({"priority": "urgent"})
    assert caught.value.message == 'values.priority must be one of "low", "high".'
    assert caught.value.details["field"] == "values.priority"
    head = thread.head
    thread.update_state({"retries": 2, "extra": [1]})  # keys it does not name pass
    assert thread.head.state == {"priority": "low", "retries": 2, "extra": [1]}
    assert thread.head.version == head.version + 1


def test_required_keys_bind_only_when_an_update_names_them() -> None:
    thread = graph(Order).thread("t2")
    thread.update_state({"amount": 3})  # order_id is required, but not changed here
    with pytest.raises(InvalidArgument) as caught:
        thread.update_state({"order_id": 7})
    assert caught.value.details["field"] == "values.order_id"


def test_a_refused_update_writes_nothing() -> None:
    thread = graph({"type": "object", "properties": {"n": {"type": "integer"}}}).thread("t3")
    thread.update_state({"n": 1})
    head = thread.head
    with pytest.raises(InvalidArgument):
        thread.update_state({"n": "two"})
    assert thread.head.id == head.id
