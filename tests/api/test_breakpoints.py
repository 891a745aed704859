"""Breakpoints over the SDK, on SQLite and PostgreSQL: ``interrupt_before`` /
``interrupt_after`` on runs (create, wait, stream) and on an assistant's config stop a
workflow's run at those nodes — the thread is ``interrupted`` with ``next`` naming the
node and a task for it — a run with no input (or ``command.resume``) continues, and
``input`` starts a new turn, as in LangGraph. Unknown nodes, and breakpoints on an
agent, are a 422 naming the field."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.conftest import Server


def _new(client: Any) -> str:
    return str(client.threads.create()["thread_id"])


def _refused(call: Any) -> httpx.Response:
    with pytest.raises(httpx.HTTPStatusError) as caught:
        call()
    return caught.value.response


def _paused_at(client: Any, tid: str, node: str) -> None:
    thread = client.threads.get(tid)
    assert thread["status"] == "interrupted"
    state = client.threads.get_state(tid)
    assert state["next"] == [node]
    assert [t["name"] for t in state["tasks"]] == [node]
    assert state["interrupts"] == []


def test_interrupt_before_stops_and_a_run_without_input_continues(alice: Any) -> None:
    tid = _new(alice)
    values = alice.runs.wait(tid, "steps", input={"n": 0}, interrupt_before=["b"])
    assert values["steps"] == ["a"]
    _paused_at(alice, tid, "b")
    final = alice.runs.wait(tid, "steps", input=None)
    assert final["steps"] == ["a", "b", "c"]
    assert alice.threads.get(tid)["status"] == "idle"


def test_interrupt_after_with_create_and_a_resume_continues(alice: Any) -> None:
    tid = _new(alice)
    run = alice.runs.create(tid, "steps", input={"n": 0}, interrupt_after="*")
    alice.runs.join(tid, run["run_id"])
    assert alice.runs.get(tid, run["run_id"])["status"] == "interrupted"
    _paused_at(alice, tid, "b")
    final = alice.runs.wait(tid, "steps", command={"resume": None}, interrupt_after="*")
    assert final["steps"] == ["a", "b"]
    _paused_at(alice, tid, "c")
    assert alice.runs.wait(tid, "steps", command={"resume": "go"})["steps"] == ["a", "b", "c"]


def test_a_breakpoint_over_a_stream(alice: Any) -> None:
    tid = _new(alice)
    parts = list(
        alice.runs.stream(
            tid, "steps", input={"n": 0}, interrupt_before=["c"], stream_mode="values"
        )
    )
    values = [p.data for p in parts if p.event == "values"]
    assert values[-1]["steps"] == ["a", "b"] and parts[-1].event == "end"
    _paused_at(alice, tid, "c")


def test_input_at_a_breakpoint_is_a_new_turn(alice: Any) -> None:
    tid = _new(alice)
    alice.runs.wait(tid, "steps", input={"n": 0}, interrupt_before=["b"])
    final = alice.runs.wait(tid, "steps", input={"n": 10})
    assert final["steps"] == ["a", "a", "b", "c"] and final["n"] == 13
    # input {} too: a new turn from the start (LangGraph writes it to __start__).
    alice.runs.wait(tid, "steps", input={"n": 0}, interrupt_before=["b"])
    again = alice.runs.wait(tid, "steps", input={})
    assert again["steps"] == ["a", "a", "b", "c", "a", "a", "b", "c"]


def test_an_assistants_config_sets_the_default_breakpoints(alice: Any, any_server: Server) -> None:
    olga = any_server.sync_client("olga")  # an operator: assistants are theirs to make
    assistant = olga.assistants.create("steps", config={"interrupt_before": ["c"]})
    olga.close()
    tid = _new(alice)
    alice.runs.wait(tid, assistant["assistant_id"], input={"n": 0})
    _paused_at(alice, tid, "c")
    # The run's own field wins over the assistant's.
    other = _new(alice)
    alice.runs.wait(other, assistant["assistant_id"], input={"n": 0}, interrupt_before=["b"])
    _paused_at(alice, other, "b")


def test_unknown_nodes_and_agents_are_422_naming_the_field(alice: Any) -> None:
    tid = _new(alice)
    for graph, field, value in (
        ("steps", "interrupt_before", ["nowhere"]),
        ("steps", "interrupt_after", ["a", "zz"]),
        ("steps", "interrupt_before", "a"),
        ("support", "interrupt_before", ["model"]),
        ("support", "interrupt_after", "*"),
    ):
        for call in (alice.runs.wait, alice.runs.create):
            response = _refused(
                lambda c=call, g=graph, f=field, v=value: c(tid, g, input={"n": 0}, **{f: v})
            )
            assert response.status_code == 422, response.text
            assert response.json()["field"] == field
    assert alice.runs.list(tid) == []
