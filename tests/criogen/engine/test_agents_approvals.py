"""Approvals: suspend before gated tools, approve/reject/decide/edit/respond, decisions
bound to the exact pending call, already_decided races (threads and processes), audit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from criogen import Agent, Storage, tool
from criogen.engine.agents import StaleDecision, args_digest
from criogen.engine.errors import (
    AlreadyDecided,
    InvalidArgument,
    NotSuspended,
    RunFailed,
    ScriptExhausted,
)
from criogen.engine.tools import ToolContext
from criogen.llms import ScriptedModel

RAN: list[tuple[str, dict[str, Any], str]] = []


@tool
def refund(order_id: str, amount: float, ctx: ToolContext) -> str:
    """Refund an order."""
    RAN.append(("refund", {"order_id": order_id, "amount": amount}, ctx.idempotency_key))
    return f"refunded {amount} on {order_id}"


@tool
def email(to: str) -> str:
    """Send an e-mail."""
    RAN.append(("email", {"to": to}, ""))
    return f"sent to {to}"


@tool(idempotent=True)
def lookup(order_id: str) -> str:
    """Look an order up."""
    RAN.append(("lookup", {"order_id": order_id}, ""))
    return f"order {order_id}: 10 EUR"


def last_tool(messages: list[dict[str, Any]]) -> str:
    """Final reply that quotes every tool result since the last human message."""
    results = []
    for m in reversed(messages):
        if m["type"] == "human":
            break
        if m["type"] == "tool":
            results.append(f"{m['status']}:{m['content']}")
    return " | ".join(reversed(results))


def make(storage: Storage, calls: list[dict[str, Any]], **options: Any) -> Agent:
    script: list[Any] = [{"tool_calls": calls}, last_tool]
    options.setdefault("approve", ["refund", "email"])
    return Agent(ScriptedModel(script), tools=[refund, email, lookup], storage=storage, **options)


REFUND = {"name": "refund", "args": {"order_id": "42", "amount": 10.0}, "id": "r1"}
EMAIL = {"name": "email", "args": {"to": "a@example.com"}, "id": "m1"}
LOOKUP = {"name": "lookup", "args": {"order_id": "42"}, "id": "l1"}


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


def test_it_suspends_before_a_gated_tool_listing_every_pending_call(
    storage: Storage, thread_id: str
) -> None:
    t = make(storage, [LOOKUP, REFUND, EMAIL]).thread(thread_id)
    reply = t.send("refund 42")
    assert reply.status == "suspended" and reply.reason == "approval"
    assert [name for name, _, _ in RAN] == ["lookup"]  # the ungated call before it ran
    assert reply.pending == [
        {**{k: REFUND[k] for k in ("id", "name", "args")}, "digest": args_digest(REFUND["args"])},
        {**{k: EMAIL[k] for k in ("id", "name", "args")}, "digest": args_digest(EMAIL["args"])},
    ]
    head = t.head
    assert head is not None and head.source == "suspend" and head.status == "suspended"
    (interrupt,) = head.interrupts
    assert interrupt["reason"] == "approval" and interrupt["node"] == "tools"
    payload = interrupt["payload"]
    assert [r["name"] for r in payload["action_requests"]] == ["refund", "email"]
    assert payload["action_requests"][0]["args"] == REFUND["args"]
    assert payload["review_configs"][0]["allowed_decisions"] == [
        "approve",
        "edit",
        "reject",
        "respond",
    ]
    assert payload["review_configs"][0]["args_schema"]["required"] == ["order_id", "amount"]
    assert t.pending == reply.pending


def test_approve_runs_the_calls_and_records_the_decision(storage: Storage, thread_id: str) -> None:
    t = make(storage, [REFUND, EMAIL]).thread(thread_id)
    suspended = t.send("refund 42")
    reply = t.approve(by="alice")
    assert reply.status == "completed"
    assert reply.text == "success:refunded 10.0 on 42 | success:sent to a@example.com"
    assert [name for name, _, _ in RAN] == ["refund", "email"]
    decisions = t.decisions()
    assert {(d.call_id, d.decision, d.actor) for d in decisions} == {
        ("r1", "approve", "alice"),
        ("m1", "approve", "alice"),
    }
    assert {d.version for d in decisions} == {suspended.checkpoint.version}
    assert {d.digest for d in decisions} == {
        args_digest(REFUND["args"]),
        args_digest(EMAIL["args"]),
    }
    # The decisions went with the checkpoint that resumed the run, right after the suspension.
    resumed = [c for c in t.history() if c.version == suspended.checkpoint.version + 1][0]
    assert resumed.source == "input" and resumed.metadata["actor"] == "alice"
    assert [d["call_id"] for d in resumed.metadata["decisions"]] == ["r1", "m1"]


def test_reject_gives_the_model_the_reason_and_runs_nothing(
    storage: Storage, thread_id: str
) -> None:
    t = make(storage, [REFUND]).thread(thread_id)
    t.send("refund 42")
    reply = t.reject("amount too high", by="bob")
    assert reply.text == "error:Rejected by a person: amount too high The tool was not run."
    assert RAN == []
    assert t.decisions()[0].message == "amount too high"


def test_decide_settles_calls_one_by_one_with_edited_arguments(
    storage: Storage, thread_id: str
) -> None:
    t = make(storage, [REFUND, EMAIL]).thread(thread_id)
    t.send("refund 42")
    reply = t.decide({"r1": {"args": {"order_id": "42", "amount": 5.0}}, "m1": "reject"}, by="c")
    assert reply.status == "completed"
    assert RAN[0][:2] == ("refund", {"order_id": "42", "amount": 5.0})
    # The model's call keeps its arguments; the result says a person changed them.
    note = '[A person edited this call: refund ran with {"amount": 5.0, "order_id": "42"}'
    assert reply.text.startswith(f"success:{note}")
    assert "refunded 5.0 on 42 | error:Rejected" in reply.text
    edit = [d for d in t.decisions() if d.call_id == "r1"][0]
    assert (edit.decision, edit.args) == ("edit", {"order_id": "42", "amount": 5.0})


def test_an_edit_typed_as_text_is_taken_as_the_schema_says_and_checked_before_anything(
    storage: Storage, thread_id: str
) -> None:
    t = make(storage, [REFUND]).thread(thread_id)
    t.send("refund 42")
    head = t.head
    with pytest.raises(InvalidArgument) as caught:
        t.check_answer({"decisions": [{"type": "edit", "args": {"order_id": "42", "amount": "x"}}]})
    assert "'amount'" in caught.value.message and t.head.id == head.id
    t.check_answer({"decisions": [{"type": "edit", "args": {"order_id": "42", "amount": "5"}}]})
    reply = t.resume(
        {"decisions": [{"type": "edit", "args": {"order_id": "42", "amount": "5"}}]}, by="c"
    )
    assert reply.status == "completed"
    assert [("refund", {"order_id": "42", "amount": 5.0}, RAN[0][2])] == RAN
    (edit,) = t.decisions()
    assert edit.args == {"order_id": "42", "amount": 5.0}  # what ran
    (asked,) = [m for m in t.messages if m.get("tool_calls")]
    assert asked["tool_calls"][0]["args"]["amount"] == 10.0  # the model's own call, kept


def test_decide_may_leave_calls_pending_and_the_run_suspends_again(
    storage: Storage, thread_id: str
) -> None:
    t = make(storage, [REFUND, EMAIL]).thread(thread_id)
    first = t.send("refund 42")
    again = t.decide({"r1": "approve"})
    assert again.status == "suspended"
    assert [c["id"] for c in again.pending] == ["m1"]
    assert again.checkpoint.version > first.checkpoint.version
    done = t.decide({"m1": {"type": "respond", "message": "the customer has no e-mail"}})
    assert done.text.endswith("success:the customer has no e-mail")
    assert [name for name, _, _ in RAN] == ["refund"]


def test_respond_answers_the_model_in_place_of_the_tool(storage: Storage, thread_id: str) -> None:
    t = make(storage, [REFUND]).thread(thread_id)
    t.send("refund 42")
    reply = t.respond("Refund already made by phone.", by="dana")
    assert reply.text == "success:Refund already made by phone."
    assert RAN == []


def test_resume_takes_a_langchain_hitl_response(storage: Storage, thread_id: str) -> None:
    t = make(storage, [REFUND, EMAIL]).thread(thread_id)
    t.send("refund 42")
    reply = t.resume(
        {
            "decisions": [
                {
                    "type": "edit",
                    "edited_action": {"name": "refund", "args": {"order_id": "42", "amount": 1.0}},
                },
                {"type": "reject", "message": "no"},
            ]
        },
        by="erin",
    )
    assert reply.text.startswith("success:[A person edited this call: refund ran with")
    assert "] refunded 1.0 on 42 | error:Rejected by a person: no" in reply.text
    with pytest.raises(NotSuspended):
        make(storage, []).thread(f"{thread_id}-x").approve()


def test_bad_decisions_fail_closed_and_change_nothing(storage: Storage, thread_id: str) -> None:
    t = make(storage, [REFUND, EMAIL]).thread(thread_id)
    suspended = t.send("refund 42")
    with pytest.raises(StaleDecision) as stale:
        t.decide({"unknown-call": "approve"})
    assert stale.value.code == "stale_decision"
    with pytest.raises(InvalidArgument):
        t.resume({"decisions": [{"type": "approve"}]})  # one of two
    with pytest.raises(InvalidArgument) as bad_edit:
        t.decide({"r1": {"args": {"order_id": "42", "amount": "lots"}}})
    assert bad_edit.value.details["field"] == "decisions.r1.args"
    with pytest.raises(StaleDecision):
        t.resume({"decisions": [{"type": "approve", "digest": "0" * 64}, "approve"]})
    with pytest.raises(StaleDecision):
        t.approve(version=suspended.checkpoint.version - 1)
    assert t.head == suspended.checkpoint
    assert t.decisions() == [] and RAN == []
    t.approve(version=suspended.checkpoint.version)
    assert len(RAN) == 2


def test_deciding_an_already_decided_suspension_fails_already_decided(
    storage: Storage, thread_id: str
) -> None:
    t = make(storage, [REFUND]).thread(thread_id)
    suspended = t.send("refund 42")
    t.approve(by="alice")
    with pytest.raises(AlreadyDecided) as info:
        t.reject("too late", by="bob")
    assert info.value.code == "already_decided"
    assert info.value.details["decided_by"] == "alice"
    assert info.value.details["decided_at"]
    with pytest.raises(AlreadyDecided):
        t.approve(version=suspended.checkpoint.version)
    assert len(RAN) == 1


def test_a_rewound_suspension_can_be_decided_again(storage: Storage, thread_id: str) -> None:
    agent = Agent(
        ScriptedModel([{"tool_calls": [REFUND]}, last_tool, last_tool]),
        tools=[refund],
        approve=["refund"],
        storage=storage,
    )
    t = agent.thread(thread_id)
    suspended = t.send("refund 42")
    t.reject("no", by="a")
    fork = t.rewind(suspended.checkpoint.id, by="b")
    assert fork.status == "suspended"
    assert t.approve(by="c").text.startswith("success:refunded")
    assert sorted(d.decision for d in t.decisions()) == ["approve", "reject"]


def test_approve_may_be_a_callable_of_the_call_and_state(storage: Storage, thread_id: str) -> None:
    def big_refunds(call: dict[str, Any], state: dict[str, Any]) -> bool:
        return call["name"] == "refund" and call["args"]["amount"] > state.get("limit", 0)

    small = {"name": "refund", "args": {"order_id": "1", "amount": 5.0}, "id": "s"}
    agent = make(storage, [small], approve=big_refunds)
    assert agent.thread(thread_id).send("small", limit=20).status == "completed"
    agent = make(storage, [small], approve=big_refunds)
    assert agent.thread(f"{thread_id}-2").send("small", limit=1).status == "suspended"


def test_the_audit_trail_records_who_did_what(
    storage_url: str, thread_id: str, django_db_blocker: Any
) -> None:
    with django_db_blocker.unblock():
        audited = Storage(storage_url, audit=True)
        t = make(audited, [REFUND]).thread(thread_id)
        t.send("refund 42", by="customer")
        t.decide({"r1": {"args": {"order_id": "42", "amount": 2.0}}}, by="alice")
        t.rewind(t.history()[-1].id, by="bob")
        t.update_state({"plan": "gold"}, by="dave")
        with pytest.raises(ScriptExhausted):
            t.retry(by="erin")  # the script has nothing left: fails again, but is recorded
        t.delete(by="carol")
        events = audited.audit_events(thread_id=thread_id)
    assert [(e.action, e.actor) for e in reversed(events)] == [
        ("input", "customer"),
        ("decide", "alice"),
        ("rewind", "bob"),
        ("update_state", "dave"),
        ("retry", "erin"),
        ("delete", "carol"),
    ]
    assert events[2].details["keys"] == ["plan"]
    decide = events[4]
    assert decide.details["decisions"][0]["args"] == {"order_id": "42", "amount": 2.0}
    # Off by default: a storage without audit=True records nothing.
    quiet = make(Storage(), [REFUND])
    quiet.thread(thread_id).send("x")
    assert quiet.storage.audit_events() == []


def test_a_second_storage_object_on_the_same_database_can_approve(
    storage_url: str, thread_id: str, django_db_blocker: Any
) -> None:
    if storage_url == "memory://":
        pytest.skip("memory storage is private to its object")
    with django_db_blocker.unblock():
        first = make(Storage(storage_url), [REFUND]).thread(thread_id)
        assert first.send("refund 42").status == "suspended"
        # Another Storage object (as another process would have) on the same database.
        reply = (
            Agent(
                ScriptedModel([last_tool]),
                tools=[refund],
                approve=["refund"],
                storage=Storage(storage_url),
            )
            .thread(thread_id)
            .approve(by="other")
        )
        assert reply.status == "completed"
        assert first.head == reply.checkpoint


RACER = """
import json, sys, time
from pathlib import Path
from criogen import Storage
from criogen.examples.support import make_agent
from criogen.engine.errors import AlreadyDecided
url, thread_id, who, go = sys.argv[1:5]
agent = make_agent(Storage(url))
thread = agent.thread(thread_id)
thread.head  # connect before the start line
Path(go + "." + who).touch()
while not Path(go).exists():
    time.sleep(0.005)
try:
    reply = thread.approve(by=who) if who.startswith("approve") else thread.reject("no", by=who)
    print(json.dumps({"won": who, "status": reply.status}))
except AlreadyDecided as exc:
    print(json.dumps({"lost": who, "decided_by": exc.details["decided_by"]}))
"""


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_two_processes_racing_to_decide_exactly_one_wins(
    backend: str,
    request: pytest.FixtureRequest,
    thread_id: str,
    tmp_path: Path,
    django_db_blocker: Any,
) -> None:
    from criogen.examples.support import make_agent

    url = str(request.getfixturevalue(f"{backend}_url"))
    with django_db_blocker.unblock():
        storage = Storage(url)
        suspended = make_agent(storage).thread(thread_id).send("Please refund order 42")
        assert suspended.status == "suspended"
    go = tmp_path / "go"
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, url, thread_id, who, str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for who in ("approve-a", "reject-b")
    ]
    # Both processes import, connect and wait at the start line; then both go at once.
    deadline = time.monotonic() + 60
    while not all(Path(f"{go}.{who}").exists() for who in ("approve-a", "reject-b")):
        assert time.monotonic() < deadline, [p.poll() for p in procs]
        time.sleep(0.01)
    go.touch()
    outcomes = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        outcomes.append(json.loads(out.strip().splitlines()[-1]))
    winners = [o for o in outcomes if "won" in o]
    losers = [o for o in outcomes if "lost" in o]
    assert len(winners) == 1 and len(losers) == 1, outcomes
    assert losers[0]["decided_by"] == winners[0]["won"]
    with django_db_blocker.unblock():
        decisions = storage.decisions(thread_id)
        head = storage.head(thread_id)
    assert [d.actor for d in decisions] == [winners[0]["won"]]
    assert head is not None and head.status == "completed"


def test_resume_with_one_decision_answers_every_pending_call(
    storage: Storage, thread_id: str
) -> None:
    t = make(storage, [REFUND, EMAIL]).thread(thread_id)
    t.send("refund 42")
    reply = t.resume("approve", run_id="run-approve")
    assert reply.status == "completed" and reply.run_id == "run-approve"
    assert [name for name, _, _ in RAN] == ["refund", "email"]


def test_an_approval_rule_that_raises_fails_the_run(storage: Storage, thread_id: str) -> None:
    def broken(call: dict[str, Any], state: dict[str, Any]) -> bool:
        raise KeyError("limit")

    t = make(storage, [REFUND], approve=broken).thread(thread_id)
    with pytest.raises(RunFailed) as info:
        t.send("refund 42")
    assert info.value.checkpoint.status == "failed" and RAN == []


def test_a_version_in_the_resume_value_binds_the_decisions(
    storage: Storage, thread_id: str
) -> None:
    t = make(storage, [REFUND]).thread(thread_id)
    suspended = t.send("refund 42")
    with pytest.raises(StaleDecision):
        t.resume({"decisions": ["approve"], "version": suspended.checkpoint.version + 5})
    with pytest.raises(InvalidArgument):
        t.resume({"decisions": ["approve"], "version": "4"})
    reply = t.resume({"decisions": ["approve"], "version": suspended.checkpoint.version})
    assert reply.status == "completed"


def test_per_tool_options_go_on_the_approval_suspension() -> None:
    from criogen import Agent, tool
    from criogen.llms import ScriptedModel

    @tool
    def pay(amount: float) -> str:
        """Pay."""
        return "paid"

    agent = Agent(
        model=ScriptedModel([{"tool_calls": [{"name": "pay", "args": {"amount": 5}}]}]),
        tools=[pay],
        approve={"pay": {"deadline": "2h", "default": "approve", "remind": "1h"}},
    )
    reply = agent.thread("t").send("pay 5")
    (interrupt,) = reply.checkpoint.interrupts
    assert (interrupt["deadline"], interrupt["default"], interrupt["remind"]) == (
        "2h",
        "approve",
        "1h",
    )


@pytest.mark.parametrize(
    "options",
    [{"deadline": "2h", "default": "maybe"}, {"timeout": "2h"}, "2h"],
)
def test_it_refuses_bad_per_tool_options_naming_the_field(options: Any) -> None:
    from criogen import Agent, tool
    from criogen.engine.errors import InvalidArgument
    from criogen.llms import ScriptedModel

    @tool
    def pay(amount: float) -> str:
        """Pay."""
        return "paid"

    with pytest.raises(InvalidArgument) as caught:
        Agent(model=ScriptedModel(["x"]), tools=[pay], approve={"pay": options})
    assert caught.value.details["field"] == "approve"
