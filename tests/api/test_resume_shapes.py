"""The resume shapes LangGraph front ends send: a non-empty ``command`` wins over
``input`` (chat UIs resume with ``input: {}``), ``command.update`` with ``resume``
updates the values (an audited update_state by the token's owner) and then resumes,
``update`` alone changes the values and the thread keeps waiting."""

from __future__ import annotations

from typing import Any

import httpx
import pytest


def _waiting(client: Any) -> str:
    tid = str(client.threads.create()["thread_id"])
    assert "__interrupt__" in client.runs.wait(tid, "hitl", input={"n": 0})
    return tid


def test_a_command_wins_over_an_empty_input(alice: Any) -> None:
    tid = _waiting(alice)
    final = alice.runs.wait(tid, "hitl", input={}, command={"resume": "ok"})
    assert final["answer"] == "ok"
    assert alice.threads.get(tid)["status"] == "idle"


def test_update_with_resume_updates_then_resumes(alice: Any) -> None:
    tid = _waiting(alice)
    final = alice.runs.wait(tid, "hitl", command={"update": {"n": 41}, "resume": "go"})
    assert final["answer"] == "go"
    assert final["n"] >= 41  # the node after the suspension saw the updated value
    sources = [s["metadata"]["source"] for s in alice.threads.get_history(tid, limit=20)]
    assert "fork" in sources  # the update is its own checkpoint, as update_state writes


def test_update_alone_changes_the_values_and_the_thread_keeps_waiting(alice: Any) -> None:
    tid = _waiting(alice)
    alice.runs.wait(tid, "hitl", command={"update": {"n": 7}})
    thread = alice.threads.get(tid)
    assert thread["status"] == "interrupted"
    assert alice.threads.get_state(tid)["values"]["n"] == 7
    final = alice.runs.wait(tid, "hitl", command={"resume": "later"})
    assert final["answer"] == "later"


def test_goto_and_a_non_object_update_are_422_naming_the_field(alice: Any) -> None:
    tid = _waiting(alice)
    for command, field in (
        ({"goto": "nowhere"}, "command.goto"),
        ({"goto": "c", "resume": "ok"}, "command.goto"),
        ({"update": [1, 2]}, "command.update"),
    ):
        with pytest.raises(httpx.HTTPStatusError) as caught:
            alice.runs.wait(tid, "hitl", command=command)
        assert caught.value.response.status_code == 422
        assert caught.value.response.json()["field"] == field
    assert alice.threads.get(tid)["status"] == "interrupted"
