"""The operator verbs from Python (door ``python``), on every backend: each call makes
its change and exactly one audit event naming the actor and the door, with the head
before and after; the same call again with the same (now stale) ``expected`` is
refused and changes nothing — no checkpoint, no audit event."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from criogen import Storage
from criogen.engine.errors import AlreadyDecided, StaleHead
from criogen.examples.hitl import workflow as hitl
from criogen.examples.steps import workflow as steps
from tests.criogen.engine.test_agents_approvals import REFUND, make


def _count(store: Storage, thread_id: str) -> tuple[int, int]:
    """(checkpoints, audit events) of the thread."""
    return len(store.history(thread_id)), len(store.audit_events(thread_id=thread_id))


def _once_then_refused(
    store: Storage,
    thread: Any,
    call: Callable[[str], Any],
    action: str,
    refused: type[Exception] = StaleHead,
) -> Any:
    """Call ``call(expected=head)`` twice: the first changes the thread with one audit
    event (``action`` by dave from python), the second is refused with nothing new."""
    head = thread.head
    checkpoints, events = _count(store, thread.id)
    result = call(head.id)
    after = thread.head
    assert after.id != head.id
    audit = store.audit_events(thread_id=thread.id)
    assert len(audit) == events + 1
    event = audit[0]
    assert (event.action, event.actor, event.door) == (action, "dave", "python")
    assert event.before == head.id
    if action in ("rewind", "update_state"):
        assert event.after == after.id
    else:  # an answer's event is stored with the checkpoint that resumes the run
        assert event.after in {cp.id for cp in store.history(thread.id)}
    changed = _count(store, thread.id)
    with pytest.raises(refused) as caught:
        call(head.id)
    assert _count(store, thread.id) == changed
    assert thread.head.id == after.id
    if refused is StaleHead:
        assert caught.value.details["current"] == after.id
    assert checkpoints < changed[0]
    return result


@pytest.fixture
def audited(storage_url: str, django_db_blocker: Any) -> Any:
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        yield Storage(storage_url, audit=True)


def test_rewind_and_update_state_of_a_workflow(audited: Storage, thread_id: str) -> None:
    thread = steps.compile(storage=audited).thread(thread_id)
    thread.run({"n": 0})
    first = thread.history()[-1]
    _once_then_refused(
        audited,
        thread,
        lambda seen: thread.rewind(first.id, by="dave", expected=seen),
        "rewind",
    )
    _once_then_refused(
        audited,
        thread,
        lambda seen: thread.update_state({"n": 7}, by="dave", expected=seen),
        "update_state",
    )
    assert thread.head.source == "fork" and thread.state["n"] == 7
    assert audited.audit_events(thread_id=thread_id)[0].details["values"] == {"n": 7}


def test_rewind_and_update_state_of_an_agent(audited: Storage, thread_id: str) -> None:
    thread = make(audited, [REFUND]).thread(thread_id)
    thread.send("refund 42", by="customer")
    first = thread.history()[-1]
    _once_then_refused(
        audited,
        thread,
        lambda seen: thread.update_state({"plan": "gold"}, by="dave", expected=seen),
        "update_state",
    )
    # One source for update_state, agents and workflows alike.
    assert thread.head.source == "fork" and thread.head.status == "suspended"
    _once_then_refused(
        audited,
        thread,
        lambda seen: thread.rewind(first.id, by="dave", expected=seen),
        "rewind",
    )


def test_resuming_a_workflow_twice_is_refused(audited: Storage, thread_id: str) -> None:
    thread = hitl.compile(storage=audited).thread(thread_id)
    thread.run({"n": 0})
    assert thread.head.status == "suspended"
    _once_then_refused(
        audited,
        thread,
        lambda seen: thread.resume("ok", by="dave", expected=seen),
        "resume",
        refused=AlreadyDecided,
    )
    assert thread.state["answer"] == "ok"


def test_approving_an_agent_twice_is_already_decided(audited: Storage, thread_id: str) -> None:
    thread = make(audited, [REFUND]).thread(thread_id)
    thread.send("refund 42", by="customer")
    _once_then_refused(
        audited,
        thread,
        lambda seen: thread.approve(by="dave", expected=seen),
        "decide",  # one name for an answer to an approval, from every verb and door
        refused=AlreadyDecided,
    )
    (event,) = [e for e in audited.audit_events(thread_id=thread_id) if e.action == "decide"]
    assert [d["type"] for d in event.details["decisions"]] == ["approve"]


def test_delete_is_audited_once(audited: Storage, thread_id: str) -> None:
    thread = steps.compile(storage=audited).thread(thread_id)
    thread.run({"n": 0})
    head = thread.head
    assert thread.delete(by="dave") is True
    assert thread.delete(by="dave") is False  # nothing left: no second event
    (event,) = [e for e in audited.audit_events(thread_id=thread_id) if e.action == "delete"]
    assert (event.actor, event.door, event.before) == ("dave", "python", head.id)


def test_an_unknown_door_is_refused_before_anything_is_written(
    audited: Storage, thread_id: str
) -> None:
    from criogen.engine.errors import InvalidArgument

    thread = steps.compile(storage=audited).thread(thread_id)
    thread.run({"n": 0})
    before = _count(audited, thread_id)
    with pytest.raises(InvalidArgument) as caught:
        thread.update_state({"n": 1}, by="dave", door="backdoor")
    assert caught.value.details["field"] == "door"
    assert _count(audited, thread_id) == before


def test_an_update_or_input_that_would_make_the_state_too_large_stores_nothing(
    storage_url: str, django_db_blocker: Any, thread_id: str
) -> None:
    from criogen.engine.errors import StateTooLarge

    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        small = Storage(storage_url, audit=True, max_state_bytes=2_000)
        thread = steps.compile(storage=small).thread(thread_id)
        thread.run({"n": 0})
        before = _count(small, thread_id)
        thread.update_state({"steps": ["x" * 800]}, by="dave")  # appended: still fits
        grown = _count(small, thread_id)
        with pytest.raises(StateTooLarge) as caught:
            thread.update_state({"steps": ["y" * 1_500]}, by="dave")
        assert caught.value.details["limit"] == 2_000
        assert caught.value.details["size"] > 2_000
        assert _count(small, thread_id) == grown  # no checkpoint, no audit event
        with pytest.raises(StateTooLarge):
            thread.run({"steps": ["z" * 1_500]})
        assert _count(small, thread_id) == grown
        assert grown[0] == before[0] + 1
        agent = make(small, [REFUND]).thread(f"{thread_id}-a")
        with pytest.raises(StateTooLarge):
            agent.send("w" * 3_000)
        assert agent.head is None
