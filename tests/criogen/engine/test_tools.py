from __future__ import annotations

import asyncio
import enum
import json
import math
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, NotRequired, TypedDict

import pytest

from criogen.engine import tools
from criogen.engine.errors import InvalidTool, InvalidToolCall
from criogen.engine.tools import Tool, ToolContext, build_idempotency_key, tool, tool_specs


@tool
def issue_refund(order_id: str, amount: float) -> str:
    """Refund an order.

    Args:
        order_id: The order to refund.
        amount: Amount in euros.
    """
    return f"Refunded {amount:.2f} EUR on order {order_id}."


class Priority(enum.Enum):
    LOW = "low"
    HIGH = "high"


class LineItem(TypedDict):
    sku: str
    quantity: int
    note: NotRequired[str]


@dataclass
class Address:
    street: str
    city: str
    postcode: str | None = None
    tags: list[str] = field(default_factory=list)


def make_ctx(**overrides: Any) -> ToolContext:
    values: dict[str, Any] = {"call_id": "call_1", "idempotency_key": "crg_key"}
    return ToolContext(**(values | overrides))


# --- building the schema ---------------------------------------------------------------------


def test_it_builds_a_schema_from_type_hints_and_docstring() -> None:
    assert issue_refund.name == "issue_refund"
    assert issue_refund.description == "Refund an order."
    assert issue_refund.idempotent is False
    assert issue_refund.is_async is False
    assert issue_refund.parameters == {
        "type": "object",
        "properties": {
            "order_id": {"description": "The order to refund.", "type": "string"},
            "amount": {"description": "Amount in euros.", "type": "number"},
        },
        "required": ["order_id", "amount"],
        "additionalProperties": False,
    }


def test_it_gives_the_openai_tool_spec() -> None:
    assert issue_refund.spec() == {
        "type": "function",
        "function": {
            "name": "issue_refund",
            "description": "Refund an order.",
            "parameters": issue_refund.parameters,
        },
    }


def test_it_takes_name_description_and_idempotent_as_keyword_arguments() -> None:
    @tool(name="lookup", idempotent=True, description="Look an order up by its id.")
    def lookup_order(order_id: str) -> dict[str, Any]:
        """Not what the model reads."""
        return {"order_id": order_id}

    assert isinstance(lookup_order, Tool)
    assert lookup_order.name == "lookup"
    assert lookup_order.description == "Look an order up by its id."
    assert lookup_order.idempotent is True


def test_the_tool_is_still_callable_like_the_function() -> None:
    assert issue_refund("42", 10) == "Refunded 10.00 EUR on order 42."
    assert issue_refund.__name__ == "issue_refund"
    assert issue_refund.__doc__ is not None and issue_refund.__doc__.startswith("Refund an order.")


def test_it_makes_parameters_with_a_default_optional_and_shows_the_default() -> None:
    @tool
    def search(query: str, limit: int = 10, exact: bool = False, cursor: str | None = None) -> str:
        """Search orders."""
        return query

    assert search.parameters["required"] == ["query"]
    assert search.parameters["properties"]["limit"] == {"type": "integer", "default": 10}
    assert search.parameters["properties"]["exact"] == {"type": "boolean", "default": False}
    assert search.parameters["properties"]["cursor"] == {
        "anyOf": [{"type": "string"}, {"type": "null"}],
        "default": None,
    }


@pytest.mark.parametrize(
    ("hint", "schema"),
    [
        (str, {"type": "string"}),
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (bool, {"type": "boolean"}),
        (list, {"type": "array"}),
        (list[int], {"type": "array", "items": {"type": "integer"}}),
        (dict, {"type": "object"}),
        (dict[str, float], {"type": "object", "additionalProperties": {"type": "number"}}),
        (int | None, {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
        (int | str, {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
        (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
        (Literal[1, 2], {"type": "integer", "enum": [1, 2]}),
        (Literal["a", 1], {"enum": ["a", 1]}),
        (Priority, {"type": "string", "enum": ["low", "high"]}),
        (Any, {}),
        (
            Annotated[str, "An ISO 8601 date."],
            {"description": "An ISO 8601 date.", "type": "string"},
        ),
    ],
)
def test_it_maps_type_hints_to_json_schema(hint: Any, schema: dict[str, Any]) -> None:
    def fn(value: Any) -> None:
        """Take a value."""

    fn.__annotations__["value"] = hint

    assert tool(fn).parameters["properties"]["value"] == schema


def test_it_describes_typeddicts_and_dataclasses_as_objects() -> None:
    @tool
    def ship(items: list[LineItem], address: Address) -> str:
        """Ship items."""
        return "ok"

    properties = ship.parameters["properties"]
    assert properties["items"]["items"] == {
        "type": "object",
        "properties": {
            "sku": {"type": "string"},
            "quantity": {"type": "integer"},
            "note": {"type": "string"},
        },
        "required": ["sku", "quantity"],
        "additionalProperties": False,
    }
    assert properties["address"] == {
        "type": "object",
        "properties": {
            "street": {"type": "string"},
            "city": {"type": "string"},
            "postcode": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["street", "city"],
        "additionalProperties": False,
    }


def test_it_resolves_types_defined_where_the_tool_is_defined() -> None:
    class Local(TypedDict):
        code: str

    @tool
    def check(value: Local) -> bool:
        """Check a local value."""
        return True

    assert check.parameters["properties"]["value"]["properties"] == {"code": {"type": "string"}}


def test_it_reads_google_style_docstrings() -> None:
    @tool
    def transfer(source: str, target: str, amount: float, memo: str = "") -> str:
        """Move money between two accounts.

        Use this only after the customer confirmed the amount.

        Args:
            source (str): The account to take the money from.
            target: The account to pay into; it must
                belong to the same customer.
            amount: Amount in euros.

        Returns:
            A confirmation number.

        Raises:
            ValueError: amount: must be positive.
        """
        return "ok"

    assert transfer.description == (
        "Move money between two accounts.\n\nUse this only after the customer confirmed the amount."
    )
    properties = transfer.parameters["properties"]
    assert properties["source"]["description"] == "The account to take the money from."
    assert properties["target"]["description"] == (
        "The account to pay into; it must belong to the same customer."
    )
    assert properties["amount"]["description"] == "Amount in euros."
    assert "description" not in properties["memo"]


def test_it_leaves_the_context_parameter_out_of_the_schema() -> None:
    @tool
    def lookup(order_id: str, ctx: ToolContext) -> str:
        """Look an order up."""
        return ctx.idempotency_key

    @tool
    def maybe(order_id: str, context: ToolContext | None = None) -> str:
        """Look an order up."""
        return "ok"

    assert list(lookup.parameters["properties"]) == ["order_id"]
    assert lookup.context_param == "ctx"
    assert maybe.context_param == "context"
    assert maybe.parameters["required"] == ["order_id"]


# --- invalid tools ---------------------------------------------------------------------------


def no_docstring(order_id: str) -> str:
    return order_id


def star_args(*ids: str) -> str:
    """Take many ids."""
    return ""


def star_kwargs(**fields: str) -> str:
    """Take any fields."""
    return ""


def positional_only(order_id: str, /) -> str:
    """Take an id."""
    return order_id


def no_hint(order_id) -> str:  # type: ignore[no-untyped-def]
    """Take an id."""
    return str(order_id)


def set_hint(ids: set[str]) -> str:
    """Take ids."""
    return ""


def int_keys(counts: dict[int, str]) -> str:
    """Take counts."""
    return ""


def object_hint(thing: threading.Lock) -> str:
    """Take a lock."""
    return ""


def unresolvable(value: DoesNotExist) -> str:  # type: ignore[name-defined]  # noqa: F821
    """Take a value."""
    return ""


@pytest.mark.parametrize(
    ("fn", "options", "problem"),
    [
        (no_docstring, {}, "no description"),
        (lambda order_id: order_id, {}, "name"),
        (issue_refund.fn, {"name": "issue refund!"}, "name"),
        (issue_refund.fn, {"name": "x" * 65}, "name"),
        (star_args, {}, r"\*args"),
        (star_kwargs, {}, r"\*\*kwargs"),
        (positional_only, {}, "positional-only"),
        (no_hint, {}, "no type hint"),
        (set_hint, {}, "no JSON Schema"),
        (int_keys, {}, "no JSON Schema"),
        (object_hint, {}, "no JSON Schema"),
        (unresolvable, {}, "Could not resolve"),
    ],
)
def test_it_refuses_a_function_it_cannot_describe(
    fn: Callable[..., Any], options: dict[str, Any], problem: str
) -> None:
    with pytest.raises(InvalidTool, match=problem) as caught:
        tool(**options)(fn)

    assert caught.value.code == "invalid_tool"


def test_a_description_argument_replaces_a_missing_docstring() -> None:
    assert tool(description="Echo an id.")(no_docstring).description == "Echo an id."


def test_it_explains_how_to_name_a_tool() -> None:
    with pytest.raises(TypeError, match=r"@tool\(name='lookup'\)"):
        tool("lookup")  # type: ignore[call-overload]


# --- validating arguments --------------------------------------------------------------------


def test_it_validates_arguments_and_accepts_ints_for_floats() -> None:
    args = issue_refund.validate_args({"order_id": "42", "amount": 10})

    assert args == {"order_id": "42", "amount": 10.0}
    assert isinstance(args["amount"], float)


def test_it_accepts_integral_floats_for_integers() -> None:
    @tool
    def take(count: int) -> int:
        """Take a count."""
        return count

    assert take.validate_args({"count": 3.0}) == {"count": 3}
    assert isinstance(take.validate_args({"count": 3.0})["count"], int)


@pytest.mark.parametrize(
    ("args", "argument", "problem"),
    [
        ({"amount": 10}, "order_id", "is required but missing"),
        ({"order_id": "42", "amount": 10, "reason": "x"}, "reason", "is not a parameter"),
        ({"order_id": 42, "amount": 10}, "order_id", "must be a string, got integer 42"),
        ({"order_id": "42", "amount": "ten"}, "amount", "must be a number, got string"),
        ({"order_id": "42", "amount": True}, "amount", "must be a number, got boolean"),
        ({"order_id": "42", "amount": math.nan}, "amount", "must be a finite number"),
        ({"order_id": None, "amount": 10}, "order_id", "got null"),
    ],
)
def test_it_rejects_bad_arguments_naming_the_argument(
    args: dict[str, Any], argument: str, problem: str
) -> None:
    with pytest.raises(InvalidToolCall, match=problem) as caught:
        issue_refund.validate_args(args)

    assert caught.value.code == "invalid_tool_call"
    assert caught.value.details == {"tool": "issue_refund", "argument": argument}
    assert f"'{argument}'" in caught.value.message
    assert "issue_refund" in caught.value.message


@pytest.mark.parametrize("args", ["{}", ["42", 10], None])
def test_it_rejects_arguments_that_are_not_an_object(args: object) -> None:
    with pytest.raises(InvalidToolCall, match="must be an object"):
        issue_refund.validate_args(args)


@tool
def ship(
    items: list[LineItem],
    address: Address | None = None,
    priority: Priority = Priority.LOW,
    counts: dict[str, int] | None = None,
) -> str:
    """Ship items."""
    return "ok"


@pytest.mark.parametrize(
    ("args", "argument", "problem"),
    [
        ({"items": [{"sku": "a"}]}, "items[0].quantity", "is required but missing"),
        (
            {"items": [{"sku": "a", "quantity": 1, "colour": "red"}]},
            "items[0].colour",
            "not a field",
        ),
        ({"items": [{"sku": "a", "quantity": 1.5}]}, "items[0].quantity", "must be an integer"),
        ({"items": "a"}, "items", "must be an array"),
        ({"items": [], "address": {"city": "Lyon"}}, "address.street", "is required"),
        ({"items": [], "priority": "urgent"}, "priority", 'one of "low", "high"'),
        ({"items": [], "counts": {"a": "one"}}, "counts.a", "must be an integer"),
    ],
)
def test_it_names_nested_arguments_in_errors(
    args: dict[str, Any], argument: str, problem: str
) -> None:
    with pytest.raises(InvalidToolCall, match=problem) as caught:
        ship.validate_args(args)

    assert caught.value.details["argument"] == argument


def test_it_does_not_take_true_for_one_in_an_enum() -> None:
    @tool
    def pick(level: Literal[0, 1]) -> int:
        """Pick a level."""
        return level

    assert pick.validate_args({"level": 1}) == {"level": 1}
    with pytest.raises(InvalidToolCall, match="must be one of 0, 1"):
        pick.validate_args({"level": True})


# --- invoking --------------------------------------------------------------------------------


def test_it_invokes_the_function_with_validated_arguments() -> None:
    assert issue_refund.invoke({"order_id": "42", "amount": 10}) == (
        "Refunded 10.00 EUR on order 42."
    )


def test_it_converts_arguments_to_enums_and_dataclasses() -> None:
    received: dict[str, Any] = {}

    @tool
    def ship_order(
        items: list[LineItem], address: Address | None = None, priority: Priority = Priority.LOW
    ) -> str:
        """Ship items."""
        received.update(items=items, address=address, priority=priority)
        return "ok"

    ship_order.invoke(
        {
            "items": [{"sku": "a", "quantity": 2}],
            "address": {"street": "1 Rue X", "city": "Lyon", "tags": ["home"]},
            "priority": "high",
        }
    )

    assert received["items"] == [{"sku": "a", "quantity": 2}]
    assert received["address"] == Address(street="1 Rue X", city="Lyon", tags=["home"])
    assert received["priority"] is Priority.HIGH


def test_it_injects_the_tool_context() -> None:
    @tool
    def charge(amount: float, ctx: ToolContext) -> dict[str, Any]:
        """Charge the customer."""
        return {"key": ctx.idempotency_key, "thread": ctx.thread_id, "user": ctx.state["user"]}

    ctx = make_ctx(thread_id="t-1", state={"user": "alice"})

    assert charge.invoke({"amount": 5}, ctx) == {"key": "crg_key", "thread": "t-1", "user": "alice"}


def test_it_needs_a_context_for_a_tool_that_declares_one() -> None:
    @tool
    def charge(amount: float, ctx: ToolContext) -> str:
        """Charge the customer."""
        return "ok"

    with pytest.raises(TypeError, match="ctx"):
        charge.invoke({"amount": 5})


def test_it_validates_before_calling() -> None:
    calls: list[str] = []

    @tool
    def record(value: str) -> str:
        """Record a value."""
        calls.append(value)
        return value

    with pytest.raises(InvalidToolCall):
        record.invoke({"value": 1})
    assert calls == []


def test_errors_raised_by_the_tool_propagate_unchanged() -> None:
    @tool
    def fail(order_id: str) -> str:
        """Always fail."""
        raise LookupError(f"no order {order_id}")

    with pytest.raises(LookupError, match="no order 99"):
        fail.invoke({"order_id": "99"})


@pytest.mark.parametrize(
    ("result", "problem"),
    [
        ({1, 2}, "result is a set"),
        ({"when": object()}, r"result\.when is a object"),
        ([1, math.inf], r"result\[1\] is inf"),
        ({1: "a"}, "non-string key 1"),
    ],
)
def test_it_refuses_a_result_that_is_not_json(result: object, problem: str) -> None:
    @tool
    def bad() -> object:
        """Return something."""
        return result

    with pytest.raises(InvalidTool, match=problem):
        bad.invoke({})


def test_it_runs_an_async_tool_from_sync_code() -> None:
    @tool
    async def fetch(order_id: str) -> dict[str, str]:
        """Fetch an order."""
        await asyncio.sleep(0)
        return {"order_id": order_id}

    assert fetch.is_async is True
    assert fetch.invoke({"order_id": "42"}) == {"order_id": "42"}


async def test_it_awaits_async_tools_and_runs_sync_tools_in_a_thread() -> None:
    threads: list[int] = []

    @tool
    async def fetch(order_id: str) -> str:
        """Fetch an order."""
        return order_id

    @tool
    def compute(order_id: str) -> str:
        """Compute something slowly."""
        threads.append(threading.get_ident())
        return order_id * 2

    assert await fetch.ainvoke({"order_id": "42"}) == "42"
    assert await compute.ainvoke({"order_id": "42"}) == "4242"
    assert threads != [threading.get_ident()]


async def test_invoking_an_async_tool_inside_a_running_loop_says_to_use_ainvoke() -> None:
    @tool
    async def fetch(order_id: str) -> str:
        """Fetch an order."""
        return order_id

    with pytest.raises(RuntimeError, match="ainvoke"):
        fetch.invoke({"order_id": "42"})


async def test_ainvoke_validates_arguments() -> None:
    with pytest.raises(InvalidToolCall):
        await issue_refund.ainvoke({"order_id": "42"})


# --- context, keys and specs -----------------------------------------------------------------


def test_the_context_state_is_read_only() -> None:
    state = {"user": "alice"}
    ctx = make_ctx(state=state)

    with pytest.raises(TypeError):
        ctx.state["user"] = "mallory"  # type: ignore[index]
    state["user"] = "changed after"
    assert ctx.state["user"] == "alice"


def test_the_idempotency_key_is_stable_for_the_same_call_and_differs_otherwise() -> None:
    key = build_idempotency_key(thread_id="t1", checkpoint_id="cp1", call_id="call_1")

    assert key == build_idempotency_key(thread_id="t1", checkpoint_id="cp1", call_id="call_1")
    assert key.startswith("crg_") and len(key) == 44
    others = {
        build_idempotency_key(thread_id="t2", checkpoint_id="cp1", call_id="call_1"),
        build_idempotency_key(thread_id="t1", checkpoint_id="cp2", call_id="call_1"),
        build_idempotency_key(thread_id="t1", checkpoint_id="cp1", call_id="call_2"),
        build_idempotency_key(thread_id=None, checkpoint_id="cp1", call_id="call_1"),
    }
    assert key not in others and len(others) == 4


def test_tool_specs_accepts_tools_and_raw_specs() -> None:
    raw_function = {"name": "now", "description": "The time.", "parameters": {"type": "object"}}
    full = {"type": "function", "function": raw_function}

    assert tool_specs([issue_refund, full, raw_function]) == [issue_refund.spec(), full, full]


def test_specs_are_plain_json() -> None:
    assert json.loads(json.dumps(ship.spec())) == ship.spec()


@pytest.mark.parametrize("module", [tools])
def test_it_exports_exactly_what_all_lists(module: types.ModuleType) -> None:
    defined_here = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
    }

    assert all(hasattr(module, name) for name in module.__all__)
    assert defined_here <= set(module.__all__)


def test_strings_that_spell_the_schemas_type_are_taken_leniently() -> None:
    from criogen.engine.tools import tool as make_tool

    @make_tool
    def pay(order_id: str, amount: float, count: int, urgent: bool = False) -> str:
        """Pay an order."""
        return f"{order_id}:{amount}:{count}:{urgent}"

    cleaned = pay.validate_args({"order_id": "42", "amount": " 5 ", "count": "3", "urgent": "Yes"})
    assert cleaned == {"order_id": "42", "amount": 5.0, "count": 3, "urgent": True}
    for bad in ({"amount": "five"}, {"amount": "nan"}, {"count": "3.5"}, {"urgent": "maybe"}):
        args = {"order_id": "42", "amount": 1, "count": 1, **bad}
        with pytest.raises(InvalidToolCall) as caught:
            pay.validate_args(args)
        assert repr(next(iter(bad))) in caught.value.message
