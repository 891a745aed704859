"""``command.goto`` over the SDK, on SQLite and PostgreSQL: ``"__end__"`` on a
suspended thread resolves it as the token's owner without running what waited (one
``resolve`` audit event, door ``api``; the thread completes), a workflow's node
continues from that node, and a goto the graph cannot honour is a 422 naming
``command.goto`` before any run exists."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.conftest import Server
from tests.api.test_verbs_audit import _events

ASK = {"messages": [{"role": "user", "content": "Please refund order 42"}]}


def _waiting(client: Any, graph: str = "hitl") -> str:
    tid = str(client.threads.create()["thread_id"])
    given = {"n": 0} if graph == "hitl" else ASK
    assert "__interrupt__" in client.runs.wait(tid, graph, input=given)
    return tid


def _refused(call: Any) -> httpx.Response:
    with pytest.raises(httpx.HTTPStatusError) as caught:
        call()
    return caught.value.response


def test_goto_end_resolves_a_workflow_without_running_the_step(
    alice: Any, any_server: Server
) -> None:
    tid = _waiting(alice)
    # As the chat front end's "Mark as resolved" sends it: input {} and the command.
    final = alice.runs.wait(tid, "hitl", input={}, command={"goto": "__end__"})
    assert final["steps"] == ["a"] and "answer" not in final  # ask never ran
    thread = alice.threads.get(tid)
    assert thread["status"] == "idle" and not thread["interrupts"]
    state = alice.threads.get_state(tid)
    assert state["next"] == [] and state["tasks"] == []
    assert state["metadata"]["resolved_by"] == "alice"
    (event,) = [e for e in _events(any_server, tid) if e["action"] == "resolve"]
    assert (event["actor"], event["door"]) == ("alice", "api")
    # A second "resolve" of the same suspension: refused, naming who came first.
    again = _refused(lambda: alice.runs.wait(tid, "hitl", command={"goto": "__end__"}))
    assert again.status_code == 409
    assert again.json()["code"] == "already_decided"
    assert again.json()["decided_by"] == "alice"
    # The thread takes new turns afterwards.
    assert "__interrupt__" in alice.runs.wait(tid, "hitl", input={"n": 0})


def test_goto_a_node_continues_from_it(alice: Any, any_server: Server) -> None:
    tid = _waiting(alice)
    run = alice.runs.create(tid, "hitl", command={"goto": "c"})
    alice.runs.join(tid, run["run_id"])
    assert alice.runs.get(tid, run["run_id"])["status"] == "success"
    values = alice.threads.get_state(tid)["values"]
    assert values["steps"] == ["a", "c"] and "answer" not in values
    (event,) = [e for e in _events(any_server, tid) if e["action"] == "goto"]
    assert (event["actor"], event["door"]) == ("alice", "api")


def test_goto_over_a_stream(alice: Any) -> None:
    tid = _waiting(alice)
    parts = list(alice.runs.stream(tid, "hitl", command={"goto": "__end__"}))
    assert parts[-1].event != "error"
    assert alice.threads.get(tid)["status"] == "idle"


def test_a_goto_the_graph_cannot_honour_is_422_and_creates_no_run(alice: Any) -> None:
    tid = _waiting(alice)
    agent = _waiting(alice, "support")
    runs = {t: len(alice.runs.list(t)) for t in (tid, agent)}
    for thread, goto in ((tid, "nowhere"), (tid, "__start__"), (tid, ["c"]), (agent, "tools")):
        graph = "hitl" if thread == tid else "support"
        for call in (alice.runs.wait, alice.runs.create):
            response = _refused(
                lambda c=call, t=thread, g=graph, to=goto: c(t, g, command={"goto": to})
            )
            assert response.status_code == 422, response.text
            assert response.json()["field"] == "command.goto"
    assert {t: len(alice.runs.list(t)) for t in (tid, agent)} == runs
    assert alice.threads.get(tid)["status"] == "interrupted"
    assert alice.threads.get(agent)["status"] == "interrupted"


def test_goto_end_on_a_thread_that_is_not_waiting_is_409(alice: Any) -> None:
    tid = str(alice.threads.create()["thread_id"])
    alice.runs.wait(tid, "steps", input={"n": 0})
    response = _refused(lambda: alice.runs.wait(tid, "steps", command={"goto": "__end__"}))
    assert response.status_code == 409
    assert response.json()["code"] == "not_suspended"


def test_goto_end_resolves_an_agents_approval_without_running_the_tool(
    alice: Any, any_server: Server
) -> None:
    tid = _waiting(alice, "support")
    final = alice.runs.wait(tid, "support", input={}, command={"goto": "__end__"})
    last = final["messages"][-1]
    assert last["type"] == "tool" and last["status"] == "error"
    assert "alice" in last["content"] and "Not run" in last["content"]
    assert alice.threads.get(tid)["status"] == "idle"
    (event,) = [e for e in _events(any_server, tid) if e["action"] == "resolve"]
    assert (event["actor"], event["door"]) == ("alice", "api")
