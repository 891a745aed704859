"""Typed suspensions: ``suspend(choices=…, schema=…)`` takes only what it declared, in
every door (``check_answer`` before a run, and ``resume`` itself), naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from criogen import END, START, Workflow, suspend
from criogen.engine.answers import check_typed_answer, first_problem
from criogen.engine.errors import InvalidArgument
from criogen.examples.review import workflow as review

SCHEMA = {
    "type": "object",
    "properties": {
        "decision": {"enum": ["approve", "revise"]},
        "note": {"type": "string", "minLength": 1},
        "amount": {"type": "number", "minimum": 0},
        "urgent": {"type": "boolean"},
    },
    "required": ["decision"],
    "additionalProperties": False,
}


def _suspended(**declared: Any) -> Any:
    wf = Workflow(name="typed")
    wf.add_node("ask", lambda s: {"answer": suspend("ask", {"q": 1}, **declared)})
    wf.add_edge(START, "ask").add_edge("ask", END)
    thread = wf.compile().thread("t")
    thread.run({})
    return thread


def field_of(exc: pytest.ExceptionInfo[InvalidArgument]) -> str:
    return str(exc.value.details["field"])


def test_the_declaration_is_kept_on_the_interrupt() -> None:
    thread = _suspended(choices={"Yes": True, "No": False}, schema={"type": "boolean"})
    (interrupt,) = thread.head.interrupts
    assert interrupt["choices"] == {"Yes": True, "No": False}
    assert interrupt["schema"] == {"type": "boolean"}


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("approve", "command.resume"),
        (True, "command.resume"),
        ({}, "command.resume.decision"),
        ({"decision": "yes"}, "command.resume.decision"),
        ({"decision": "revise", "note": ""}, "command.resume.note"),
        ({"decision": "revise", "amount": -1}, "command.resume.amount"),
        ({"decision": "revise", "amount": "5"}, "command.resume.amount"),
        ({"decision": "revise", "urgent": 1}, "command.resume.urgent"),
        ({"decision": "approve", "extra": 1}, "command.resume.extra"),
    ],
)
def test_a_value_the_schema_refuses_is_named_before_and_at_resume(value: Any, field: str) -> None:
    thread = _suspended(schema=SCHEMA)
    with pytest.raises(InvalidArgument) as before:
        thread.check_answer(value)
    assert field_of(before) == field
    with pytest.raises(InvalidArgument) as at:
        thread.resume(value)
    assert field_of(at) == field
    assert thread.head.status == "suspended"  # nothing ran


def test_a_value_that_fits_resumes() -> None:
    thread = _suspended(schema=SCHEMA)
    value = {"decision": "revise", "note": "shorter", "amount": 2, "urgent": False}
    thread.check_answer(value)
    assert thread.resume(value).state["answer"] == value


def test_choices_alone_take_only_a_choice() -> None:
    thread = _suspended(choices=["ship", "hold"])
    with pytest.raises(InvalidArgument) as exc:
        thread.check_answer(True)
    assert field_of(exc) == "command.resume"
    assert '"ship", "hold"' in str(exc.value)
    assert thread.resume("hold").state["answer"] == "hold"


def test_a_choice_passes_even_when_the_schema_would_want_more() -> None:
    thread = _suspended(choices={"OK": "ok"}, schema={"type": "object"})
    assert thread.resume("ok").state["answer"] == "ok"


def test_json_types_are_not_confused() -> None:
    assert first_problem(True, {"enum": [1]}, "v") is not None
    assert first_problem(1, {"enum": [True]}, "v") is not None
    assert first_problem(2.0, {"type": "integer"}, "v") is None
    check_typed_answer({"choices": [1]}, 1.0, "v")
    with pytest.raises(InvalidArgument):
        check_typed_answer({"choices": [1]}, True, "v")


@pytest.mark.parametrize(
    "declared",
    [
        {"choices": []},
        {"choices": "yes"},
        {"schema": {"type": "object", "patternProperties": {}}},
        {"schema": {"type": "text"}},
        {"schema": {"properties": {"a": {"oneOf": []}}}},
    ],
)
def test_a_declaration_that_cannot_be_checked_is_refused(declared: dict[str, Any]) -> None:
    wf = Workflow(name="bad")
    wf.add_node("ask", lambda s: {"answer": suspend("ask", **declared)})
    wf.add_edge(START, "ask").add_edge("ask", END)
    with pytest.raises(Exception, match="suspend|choices|schema"):
        wf.compile().thread("t").run({})


def test_the_demo_review_approves_with_approve_and_refuses_a_bare_word() -> None:
    thread = review.compile().thread("r")
    thread.run({"title": "Refunds", "body": "We refund."})
    (interrupt,) = thread.head.interrupts
    assert interrupt["choices"] == {"Approve": {"decision": "approve"}}
    for wrong in ("approve", True):
        with pytest.raises(InvalidArgument):
            thread.check_answer(wrong)
    with pytest.raises(InvalidArgument) as exc:
        thread.check_answer({"decision": "approve", "notes": "x"})
    assert field_of(exc) == "command.resume.notes"
    done = thread.resume({"decision": "approve"})
    assert done.status == "completed" and done.state["published"] is True
