"""An agent's approval over the SDK, in LangChain's human-in-the-loop shapes: the
interrupt's value is an ``HITLRequest`` and ``command.resume`` takes an
``HITLResponse`` — so LangChain's HITL front ends drive Criogen approvals unchanged.
(``support`` plays a scripted conversation: look order 42 up, then refund it.)"""

from __future__ import annotations

import sqlite3
from typing import Any

import httpx
import pytest

from tests.api.conftest import Server

ASK = {"messages": [{"role": "user", "content": "Please refund order 42"}]}


async def suspended_thread(client: Any) -> tuple[str, dict[str, Any]]:
    thread = await client.threads.create()
    result = await client.runs.wait(thread["thread_id"], "support", input=ASK)
    (interrupt,) = result["__interrupt__"]
    return thread["thread_id"], interrupt


async def test_an_approval_is_an_hitl_request(client: Any) -> None:
    tid, interrupt = await suspended_thread(client)
    request = interrupt["value"]
    (action,) = request["action_requests"]
    assert action["name"] == "issue_refund"
    assert action["args"] == {"order_id": "42", "amount": 10.0}
    assert action["description"]
    (review,) = request["review_configs"]
    assert review["action_name"] == "issue_refund"
    assert set(review["allowed_decisions"]) == {"approve", "edit", "reject", "respond"}
    assert review["args_schema"]["properties"]["order_id"]["type"] == "string"
    assert interrupt["reason"] == "approval"
    thread = await client.threads.get(tid)
    assert thread["status"] == "interrupted"
    assert next(iter(thread["interrupts"].values()))[0]["value"] == request


async def test_a_threads_and_a_states_interrupts_keep_criogens_fields(client: Any) -> None:
    """The thread, its state and its history carry the same interrupt as the run's
    ``__interrupt__``: ``reason``, ``node`` and each pending call with its digest."""
    tid, interrupt = await suspended_thread(client)
    (call,) = interrupt["calls"]
    assert call["name"] == "issue_refund" and call["digest"]
    thread = await client.threads.get(tid)
    (from_thread,) = next(iter(thread["interrupts"].values()))
    state = await client.threads.get_state(tid)
    (from_state,) = state["interrupts"]
    (task,) = state["tasks"]
    (from_task,) = task["interrupts"]
    (latest, *_) = await client.threads.get_history(tid, limit=1)
    (from_history,) = latest["interrupts"]
    for seen in (from_thread, from_state, from_task, from_history):
        assert seen == interrupt


async def test_an_hitl_response_approves_and_the_tool_runs(server: Server, client: Any) -> None:
    tid, _ = await suspended_thread(client)
    final = await client.runs.wait(
        tid,
        "support",
        command={"resume": {"decisions": [{"type": "approve"}]}},
        metadata={"resumed_by": "someone else"},  # cannot spoof the actor
    )
    tool_results = [m["content"] for m in final["messages"] if m["type"] == "tool"]
    assert "Refunded 10.00 EUR on order 42." in tool_results
    assert (await client.threads.get(tid))["status"] == "idle"
    # The same server-side decision as the dashboard's, by the token's owner.
    path = server.database_url.removeprefix("sqlite://")
    with sqlite3.connect(path) as db:
        decisions = db.execute(
            "SELECT decision, actor FROM criogen_decision WHERE thread_id = ?", (tid,)
        ).fetchall()
    assert decisions == [("approve", "alice")]
    # Answering again is a conflict: nothing is waiting any more.
    with pytest.raises(httpx.HTTPStatusError) as caught:
        await client.runs.wait(
            tid, "support", command={"resume": {"decisions": [{"type": "approve"}]}}
        )
    assert caught.value.response.status_code == 409


async def test_an_hitl_response_rejects_with_a_message(client: Any) -> None:
    tid, _ = await suspended_thread(client)
    decision = {"decisions": [{"type": "reject", "message": "not without a receipt"}]}
    final = await client.runs.wait(tid, "support", command={"resume": decision})
    tool_results = " ".join(m["content"] for m in final["messages"] if m["type"] == "tool")
    assert "Refunded" not in tool_results
    assert "not without a receipt" in tool_results


async def test_an_edit_typed_as_text_runs_with_the_schemas_type(client: Any) -> None:
    tid, _ = await suspended_thread(client)
    edit = {
        "type": "edit",
        "edited_action": {"name": "issue_refund", "args": {"order_id": "42", "amount": "5"}},
    }
    final = await client.runs.wait(tid, "support", command={"resume": {"decisions": [edit]}})
    results = [m["content"] for m in final["messages"] if m["type"] == "tool"]
    refunds = [r for r in results if "Refunded" in r]
    assert len(refunds) == 1 and "Refunded 5.00 EUR on order 42." in refunds[0]
    assert refunds[0].startswith("[A person edited this call: issue_refund ran with")


@pytest.mark.parametrize("how", ["create", "stream", "wait"])
async def test_a_bad_edit_is_a_422_before_any_run_exists(client: Any, how: str) -> None:
    tid, _ = await suspended_thread(client)
    edit = {
        "type": "edit",
        "edited_action": {"name": "issue_refund", "args": {"order_id": "42", "amount": "lots"}},
    }
    command = {"resume": {"decisions": [edit]}}
    with pytest.raises(httpx.HTTPStatusError) as caught:
        if how == "create":
            await client.runs.create(tid, "support", command=command)
        elif how == "wait":
            await client.runs.wait(tid, "support", command=command)
        else:
            async for _ in client.runs.stream(tid, "support", command=command):
                pass
    refused = caught.value.response
    assert refused.status_code == 422
    assert "'amount'" in refused.json()["detail"]
    assert refused.json()["field"].endswith(".args")
    assert len(await client.runs.list(tid)) == 1  # only the run that suspended
    assert (await client.threads.get(tid))["status"] == "interrupted"
