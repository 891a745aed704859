"""Leaving a suspension without answering it, from Python: ``thread.resolve(by=…)``
(what REST's ``command.goto: "__end__"`` does) and a workflow's ``thread.goto(node)``,
each one audited action; a place the graph cannot go is refused before anything is
written."""

from __future__ import annotations

from typing import Any

import pytest

from criogen import Storage
from criogen.engine.errors import InvalidArgument, NotSuspended, StaleHead
from criogen.examples.hitl import workflow as hitl
from criogen.examples.steps import workflow as steps
from tests.criogen.engine.test_agents_approvals import RAN, REFUND, make


@pytest.fixture
def audited(storage_url: str, django_db_blocker: Any) -> Any:
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        yield Storage(storage_url, audit=True)


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


def _count(store: Storage, thread_id: str) -> tuple[int, int]:
    return len(store.history(thread_id)), len(store.audit_events(thread_id=thread_id))


def test_resolving_a_workflow_completes_it_without_running_the_step(
    audited: Storage, thread_id: str
) -> None:
    thread = hitl.compile(storage=audited).thread(thread_id)
    thread.run({"n": 0})
    suspended = thread.head
    assert suspended.status == "suspended"
    checkpoint = thread.resolve(by="dave", expected=suspended.id)
    assert thread.head.id == checkpoint.id
    assert (checkpoint.status, list(checkpoint.next), list(checkpoint.interrupts)) == (
        "completed",
        [],
        [],
    )
    assert checkpoint.metadata["resolved_by"] == "dave"
    assert thread.state["steps"] == ["a"] and "answer" not in thread.state  # ask never ran
    (event, *_) = audited.audit_events(thread_id=thread_id)
    assert (event.action, event.actor, event.door) == ("resolve", "dave", "python")
    assert (event.before, event.after) == (suspended.id, checkpoint.id)
    # The same click again: refused, nothing written.
    before = _count(audited, thread_id)
    with pytest.raises(StaleHead):
        thread.resolve(by="dave", expected=suspended.id)
    with pytest.raises(NotSuspended):
        thread.resolve(by="dave")
    assert _count(audited, thread_id) == before
    # The thread takes a new turn afterwards.
    assert thread.run({"n": 0}).status == "suspended"


def test_goto_a_node_continues_from_it_and_skips_the_suspended_step(
    audited: Storage, thread_id: str
) -> None:
    thread = hitl.compile(storage=audited).thread(thread_id)
    thread.run({"n": 0})
    suspended = thread.head
    result = thread.goto("c", by="dave", door="ui", expected=suspended.id)
    assert result.status == "completed"
    assert result.state["steps"] == ["a", "c"]  # ask was not run again
    events = audited.audit_events(thread_id=thread_id)
    assert (events[0].action, events[0].actor, events[0].door) == ("goto", "dave", "ui")
    assert events[0].details["node"] == "c" and events[0].before == suspended.id
    # goto "__end__" is resolve.
    thread.run({"n": 0})
    assert thread.goto("__end__", by="erin").status == "completed"
    assert audited.audit_events(thread_id=thread_id)[0].action == "resolve"


def test_goto_somewhere_the_graph_cannot_go_is_refused_naming_goto(
    audited: Storage, thread_id: str
) -> None:
    thread = hitl.compile(storage=audited).thread(thread_id)
    thread.run({"n": 0})
    before = _count(audited, thread_id)
    for target in ("nowhere", "__start__", ""):
        with pytest.raises(InvalidArgument) as caught:
            thread.goto(target, by="dave")
        assert caught.value.details["field"] == "goto"
    assert _count(audited, thread_id) == before
    done = steps.compile(storage=audited).thread(f"{thread_id}-s")
    done.run({"n": 0})
    with pytest.raises(NotSuspended):
        done.goto("b", by="dave")


def test_resolving_an_agent_runs_no_tool_and_keeps_the_transcript_whole(
    audited: Storage, thread_id: str
) -> None:
    agent = make(audited, [REFUND])
    thread = agent.thread(thread_id)
    thread.send("refund 42", by="customer")
    assert thread.head.status == "suspended"
    checkpoint = thread.resolve(by="dave", door="ui")
    assert RAN == []  # the refund never ran
    assert checkpoint.status == "completed" and thread.pending == []
    last = thread.messages[-1]
    assert (last["type"], last["tool_call_id"], last["status"]) == ("tool", "r1", "error")
    assert "dave" in last["content"]
    (event, *_) = audited.audit_events(thread_id=thread_id)
    assert (event.action, event.actor, event.door) == ("resolve", "dave", "ui")
    with pytest.raises(InvalidArgument) as caught:
        thread.goto("tools", by="dave")
    assert caught.value.details["field"] == "goto"


def test_an_agents_goto_end_after_resolving_is_not_suspended(
    audited: Storage, thread_id: str
) -> None:
    thread = make(audited, [REFUND]).thread(thread_id)
    thread.send("refund 42", by="customer")
    thread.goto("__end__", by="dave")
    with pytest.raises(NotSuspended):
        thread.goto("__end__", by="dave")
