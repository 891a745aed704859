"""criogen.engine.json_schema: the one checker behind tool arguments and typed answers.
Each caller words the same problem for its reader (the model, the person answering) and
names the same place; tools are lenient with text that spells a number, answers are not."""

from __future__ import annotations

from typing import Any

import pytest

from criogen.engine import answers, tools
from criogen.engine.errors import InvalidToolCall
from criogen.engine.json_schema import SchemaProblem, check

ORDER = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                "required": ["qty"],
                "additionalProperties": False,
            },
        },
        "tags": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "required": ["items"],
}


def tool_problem(value: Any) -> tuple[str | None, str]:
    with pytest.raises(InvalidToolCall) as caught:
        tools._validate(ORDER, value, tool="order")
    return caught.value.details["argument"], caught.value.message


@pytest.mark.parametrize(
    ("value", "where", "for_a_person", "for_the_model"),
    [
        ({}, "items", "is required", "is required but missing"),
        ({"items": [{}]}, "items[0].qty", "is required", "is required but missing"),
        ({"items": [{"qty": 1.5}]}, "items[0].qty", "must be an integer", "must be an integer"),
        (
            {"items": [{"qty": 1, "colour": "red"}]},
            "items[0].colour",
            "is not expected (expected: sku, qty)",
            "is not a field of 'items[0]' (known: sku, qty)",
        ),
        ({"items": [], "tags": {"a": 1}}, "tags.a", "must be a string", "must be a string"),
        ({"items": "x"}, "items", "must be an array", "must be an array"),
    ],
)
def test_both_callers_name_the_same_place_in_their_own_words(
    value: Any, where: str, for_a_person: str, for_the_model: str
) -> None:
    assert answers.first_problem(value, ORDER, "command.resume") == (
        f"command.resume.{where}",
        for_a_person,
    )
    argument, message = tool_problem(value)
    assert argument == where
    assert for_the_model in message


def test_text_that_spells_a_number_is_taken_by_tools_not_by_answers() -> None:
    value = {"items": [{"qty": "5"}]}
    assert tools._validate(ORDER, value, tool="order") == {"items": [{"qty": 5}]}
    assert answers.first_problem(value, ORDER, "v") == ("v.items[0].qty", "must be an integer")


def test_json_equality_one_is_one_point_zero_but_never_true() -> None:
    assert check({"enum": [1]}, 1.0) == 1.0
    assert check({"type": "integer"}, 2.0) == 2
    assert check({"type": "number"}, 2) == 2.0
    for schema in ({"enum": [1]}, {"const": 1}, {"type": "integer"}):
        with pytest.raises(SchemaProblem):
            check(schema, True)
    with pytest.raises(SchemaProblem) as caught:
        check({"type": "number"}, float("nan"))
    assert caught.value.problem.kind == "finite"
