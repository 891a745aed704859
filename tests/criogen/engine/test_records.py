"""Interrupts, decisions and run errors are built as typed records
(criogen.engine.records) and stored as the same JSON as before: these tests pin the
stored shapes (keys and their order) the REST API and the dashboard read, and that
each record reads back what it wrote."""

from __future__ import annotations

from typing import Any

import pytest

from criogen import END, START, Agent, Storage, Workflow, suspend, tool
from criogen.engine.agents import args_digest
from criogen.engine.errors import RunFailed
from criogen.engine.records import (
    Decision,
    Interrupt,
    PendingCall,
    RunError,
    TakenDecision,
)
from criogen.llms import ScriptedModel


@tool
def refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    return f"refunded {amount} on {order_id}"


REFUND = {"name": "refund", "args": {"order_id": "42", "amount": 10.0}, "id": "r1"}


def agent(storage: Storage, **options: Any) -> Agent:
    script: list[Any] = [{"tool_calls": [REFUND]}, "done"]
    options.setdefault("approve", ["refund"])
    return Agent(ScriptedModel(script), tools=[refund], storage=storage, **options)


def test_an_agents_interrupt_keeps_its_stored_shape(storage: Storage, thread_id: str) -> None:
    reply = (
        agent(storage, approve={"refund": {"deadline": "1h", "default": "reject"}})
        .thread(thread_id)
        .send("refund 42")
    )

    (stored,) = storage.head(thread_id).interrupts  # type: ignore[union-attr]
    assert list(stored) == ["id", "node", "reason", "payload", "calls", "deadline", "default"]
    assert (stored["node"], stored["reason"]) == ("tools", "approval")
    assert list(stored["payload"]) == ["action_requests", "review_configs"]
    assert stored["calls"] == [
        {
            "id": "r1",
            "name": "refund",
            "args": REFUND["args"],
            "digest": args_digest(REFUND["args"]),
        }
    ]
    assert (stored["deadline"], stored["default"]) == ("1h", "reject")
    # The record reads it back whole, and writes it again unchanged.
    record = Interrupt.from_dict(stored)
    assert record.calls == (
        PendingCall("r1", "refund", REFUND["args"], stored["calls"][0]["digest"]),
    )
    assert record.extra == {"deadline": "1h", "default": "reject"}
    assert record.to_dict() == stored and list(record.to_dict()) == list(stored)
    assert reply.pending == stored["calls"]


@pytest.mark.parametrize(
    ("answer", "taken"),
    [
        ("approve", {"type": "approve"}),
        (
            {"type": "edit", "args": {"order_id": "42", "amount": "5"}},
            {"type": "edit", "args": {"order_id": "42", "amount": 5.0}},
        ),
        ({"type": "reject", "message": "too much"}, {"type": "reject", "message": "too much"}),
        (
            {"type": "respond", "message": "done by hand"},
            {"type": "respond", "message": "done by hand"},
        ),
    ],
)
def test_a_decision_is_carried_in_the_resumed_checkpoints_tasks_as_before(
    storage: Storage, thread_id: str, answer: Any, taken: dict[str, Any]
) -> None:
    t = agent(storage).thread(thread_id)
    suspended = t.send("refund 42")

    t.resume({"decisions": [answer]}, by="alice")

    resumed = next(c for c in t.history() if c.version == suspended.checkpoint.version + 1)
    entry = resumed.tasks["decisions"]["r1"]
    version = suspended.checkpoint.version
    assert entry == {**taken, "for": "approval", "by": "alice", "version": version}
    assert list(entry) == [*taken, "for", "by", "version"]
    assert TakenDecision.from_dict(entry).to_dict() == entry
    assert resumed.metadata["decisions"] == [{"call_id": "r1", "name": "refund", **taken}]


def test_a_failed_run_keeps_its_error_shape(storage: Storage, thread_id: str) -> None:
    def broken(messages: Any) -> Any:
        raise ValueError("the model is down")

    t = Agent(ScriptedModel([broken]), storage=storage).thread(thread_id)
    with pytest.raises(RunFailed):
        t.send("hello")

    error = t.head.error  # type: ignore[union-attr]
    assert list(error) == ["type", "code", "message", "node", "traceback"]
    assert (error["type"], error["code"], error["message"], error["node"]) == (
        "ValueError",
        "run_error",
        "the model is down",
        "model",
    )
    assert "ValueError: the model is down" in error["traceback"]
    assert RunError.from_dict(error).to_dict() == error


def test_a_workflows_interrupt_and_error_keep_their_shapes(
    storage: Storage, thread_id: str
) -> None:
    def ask(state: dict[str, Any]) -> dict[str, Any]:
        answer = suspend("approve refund", {"amount": 10}, deadline="2h")
        if answer == "boom":
            raise KeyError("no such order")
        return {"answer": answer}

    wf = Workflow()
    wf.add_node("ask", ask)
    wf.add_edge(START, "ask")
    wf.add_edge("ask", END)
    t = wf.compile(storage=storage).thread(thread_id)
    t.run({})

    (stored,) = t.head.interrupts  # type: ignore[union-attr]
    assert list(stored) == ["id", "node", "index", "reason", "payload", "deadline"]
    assert (stored["node"], stored["index"], stored["reason"]) == ("ask", 0, "approve refund")
    assert (stored["payload"], stored["deadline"]) == ({"amount": 10}, "2h")
    assert Interrupt.from_dict(stored).to_dict() == stored

    with pytest.raises(RunFailed):
        t.resume("boom")
    error = t.head.error  # type: ignore[union-attr]
    assert list(error) == ["type", "code", "message", "node", "traceback"]
    assert (error["type"], error["code"], error["node"]) == ("KeyError", "node_error", "ask")


def test_records_read_older_shapes_with_defaults() -> None:
    assert RunError.from_dict({"type": "X", "message": "m"}) == RunError(
        "X", "run_error", "m", None, ""
    )
    assert Decision.from_dict({"type": "unheard-of"}) == Decision("approve")
    old = {"type": "reject", "message": "no", "version": 3}
    assert TakenDecision.from_dict(old) == TakenDecision(
        Decision("reject", message="no"), "approval", None, 3
    )
    bare = Interrupt.from_dict({"id": "i", "node": "n", "reason": "r", "payload": None})
    assert (bare.index, bare.calls, dict(bare.extra)) == (None, None, {})
    assert bare.to_dict() == {"id": "i", "node": "n", "reason": "r", "payload": None}
