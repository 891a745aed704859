"""``WorkflowThread.update_state``: a ``fork`` checkpoint written through the reducers,
as if a node had run (the REST API's ``threads.update_state``).

It is a fork, not a step: a person wrote it, so an ``in_progress`` head made by it must
not read as a run that died (``ThreadInterrupted``)."""

from __future__ import annotations

import pytest

from criogen import Storage
from criogen.engine.errors import InvalidArgument, InvalidState
from criogen.examples.hitl import workflow as hitl
from criogen.examples.steps import workflow as steps


def test_it_merges_values_with_the_reducers_as_the_node() -> None:
    thread = steps.compile(storage=Storage()).thread("t")
    first = thread.update_state({"steps": ["a"], "n": 1}, as_node="a")
    second = thread.update_state({"steps": ["x"]}, as_node="b")
    assert second.source == "fork"
    assert second.parent_id == first.id
    assert second.state == {"steps": ["a", "x"], "n": 1}
    assert second.next == ("c",)
    assert second.status == "in_progress"
    assert thread.update_state({"n": 9}, as_node="c").status == "completed"


def test_a_run_without_input_continues_from_the_updated_node() -> None:
    thread = steps.compile(storage=Storage()).thread("t")
    thread.update_state({"steps": ["a"], "n": 1}, as_node="a")
    result = thread.run()
    assert result.status == "completed"
    assert result.state == {"steps": ["a", "b", "c"], "n": 3}


def test_a_run_with_input_after_an_update_starts_a_new_turn() -> None:
    thread = steps.compile(storage=Storage()).thread("t")
    thread.update_state({"steps": ["a"], "n": 1}, as_node="a")
    assert thread.run({"n": 10}).state == {"steps": ["a", "a", "b", "c"], "n": 13}


def test_without_as_node_it_keeps_the_heads_next_and_interrupts() -> None:
    thread = hitl.compile(storage=Storage()).thread("t")
    assert thread.run({"n": 0}).status == "suspended"
    cp = thread.update_state({"n": 41})
    assert cp.status == "suspended"
    assert cp.next == ("ask",)
    assert len(cp.interrupts) == 1
    assert thread.resume("ok").state["answer"] == "ok"


def test_it_refuses_an_unknown_node_and_bad_values_without_writing() -> None:
    thread = steps.compile(storage=Storage()).thread("t")
    with pytest.raises(InvalidArgument) as caught:
        thread.update_state({"n": 1}, as_node="nope")
    assert caught.value.details["field"] == "as_node"
    with pytest.raises(InvalidState):
        thread.update_state({"n": float("nan")})
    assert thread.head is None
