"""Breakpoints on a workflow's run: ``interrupt_before`` / ``interrupt_after`` (node
names or ``"*"``) stop the run before or after those nodes — the thread waits with
``next`` naming the node and no interrupt — a run without input (or a resume) goes on,
and new input starts a new turn. Unknown nodes are refused naming the option."""

from __future__ import annotations

from typing import Any

import pytest

from criogen import Storage
from criogen.engine.errors import InvalidArgument
from criogen.examples.steps import workflow as steps


@pytest.fixture
def store(storage_url: str, django_db_blocker: Any) -> Any:
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        yield Storage(storage_url)


def test_interrupt_before_stops_before_the_node_and_a_run_without_input_goes_on(
    store: Storage, thread_id: str
) -> None:
    thread = steps.compile(storage=store).thread(thread_id)
    result = thread.run({"n": 0}, interrupt_before=["b"])
    assert result.status == "suspended" and result.interrupts == []
    head = thread.head
    assert (head.status, list(head.next), head.state["steps"]) == ("suspended", ["b"], ["a"])
    done = thread.run(None)
    assert done.status == "completed" and done.state["steps"] == ["a", "b", "c"]


def test_interrupt_before_the_first_node_and_resume(store: Storage, thread_id: str) -> None:
    thread = steps.compile(storage=store).thread(thread_id)
    thread.run({"n": 0}, interrupt_before="*")
    assert list(thread.head.next) == ["a"] and thread.head.source == "input"
    step = thread.resume(None, interrupt_before="*")
    assert list(step.checkpoint.next) == ["b"]  # stops again before the next node
    assert thread.resume(None).state["steps"] == ["a", "b", "c"]


def test_interrupt_after_stops_after_the_node(store: Storage, thread_id: str) -> None:
    thread = steps.compile(storage=store).thread(thread_id)
    result = thread.run({"n": 0}, interrupt_after=["a", "c"])
    assert result.state["steps"] == ["a"] and list(result.checkpoint.next) == ["b"]
    # After the last node there is nothing to stop before: the run completes.
    assert thread.run(None, interrupt_after=["a", "c"]).state["steps"] == ["a", "b", "c"]


def test_new_input_at_a_breakpoint_is_a_new_turn(store: Storage, thread_id: str) -> None:
    thread = steps.compile(storage=store).thread(thread_id)
    thread.run({"n": 0}, interrupt_before=["b"])
    result = thread.run({"n": 10})
    assert result.status == "completed"
    assert result.state["steps"] == ["a", "a", "b", "c"] and result.state["n"] == 13


def test_unknown_nodes_are_refused_naming_the_option(store: Storage, thread_id: str) -> None:
    thread = steps.compile(storage=store).thread(thread_id)
    for field, value in (
        ("interrupt_before", ["zz"]),
        ("interrupt_after", "a"),
        ("interrupt_after", [1]),
    ):
        with pytest.raises(InvalidArgument) as caught:
            thread.run({"n": 0}, **{field: value})
        assert caught.value.details["field"] == field
    assert thread.head is None
