"""The REST state and history of a LangGraph thread are LangGraph's own checkpoints, one
per LangGraph step, shaped as LangGraph's server shapes them: the same entries, in
the same order, as LangGraph's own ``get_state_history`` of the same graph run
in-process on ``InMemorySaver``; with the ``checkpoint``, ``before``, ``limit`` and
``metadata`` filters and ``GET /state/{checkpoint_id}``; on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from tests.api.conftest import Server
from tests.langgraph.agents import review
from tests.langgraph.conftest import langgraph_server

START = {"topic": "otters", "notes": [], "approved": False}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """A server whose langgraph.json registers the review graph as ``helpdesk``."""
    tmp_path = tmp_path_factory.mktemp(f"history-{request.param}")
    with langgraph_server(request, tmp_path, {"helpdesk": "review.py:graph"}) as srv:
        yield srv


def _in_process() -> list[Any]:
    """LangGraph's own history of the same two turns (newest first)."""
    graph = review.builder().compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "reference"}}
    graph.invoke(START, config)
    graph.invoke(Command(resume="yes"), config)
    return list(graph.get_state_history(config))


def _comparable(entry: dict[str, Any]) -> dict[str, Any]:
    """What two runs of the graph share (ids and times differ)."""
    return {
        "values": entry["values"],
        "next": entry["next"],
        "tasks": [(t["name"], [i["value"] for i in t["interrupts"]]) for t in entry["tasks"]],
        "source": entry["metadata"]["source"],
        "step": entry["metadata"]["step"],
        "interrupts": [i["value"] for i in entry["interrupts"]],
    }


def _reference(snapshot: Any) -> dict[str, Any]:
    return {
        "values": dict(snapshot.values),
        "next": list(snapshot.next),
        "tasks": [(t.name, [i.value for i in t.interrupts]) for t in snapshot.tasks],
        "source": snapshot.metadata["source"],
        "step": snapshot.metadata["step"],
        "interrupts": [i.value for i in snapshot.interrupts],
    }


@pytest.mark.slow
def test_history_is_langgraphs_own_step_by_step(server: Server) -> None:
    with server.sync_client("alice") as client:
        tid = client.threads.create()["thread_id"]
        client.runs.wait(tid, "helpdesk", input=START, durability="sync")
        waiting = client.threads.get_state(tid)
        client.runs.wait(tid, "helpdesk", command={"resume": "yes"}, durability="sync")
        history = client.threads.get_history(tid, limit=100)
        head = client.threads.get_state(tid)

    # The same checkpoints as LangGraph's own, one per step, in the same order.
    reference = _in_process()
    assert [_comparable(h) for h in history] == [_reference(s) for s in reference]
    assert [h["metadata"]["step"] for h in history] == list(range(len(history) - 2, -2, -1))
    # Shaped as LangGraph's server: checkpoint references and parent links.
    for newer, older in zip(history, history[1:], strict=False):
        assert newer["parent_checkpoint"] == older["checkpoint"]
        assert newer["checkpoint"]["thread_id"] == tid
        assert newer["checkpoint"]["checkpoint_ns"] == ""
    assert history[-1]["parent_checkpoint"] is None
    assert history[-1]["metadata"]["source"] == "input"
    assert head["checkpoint"] == history[0]["checkpoint"]
    assert head["values"]["notes"] == ["draft about otters", "reviewed: yes", "published"]
    assert head["next"] == [] and head["tasks"] == []
    # While it waited: the review task with LangGraph's interrupt, and the bridge's
    # suspension fields next to LangGraph's id and value.
    assert waiting["next"] == ["review"]
    [task] = waiting["tasks"]
    assert task["name"] == "review" and task["path"] == ["__pregel_pull", "review"]
    [interrupt] = waiting["interrupts"]
    assert task["interrupts"] == [interrupt]
    assert interrupt["value"]["question"] == "approve the draft?"
    assert interrupt["interrupt_id"] == interrupt["id"]
    assert interrupt["node"] == "__interrupt__" or interrupt["langgraph_node"] == "review"
    assert any(h["checkpoint"] == waiting["checkpoint"] for h in history)


@pytest.mark.slow
def test_history_filters_and_state_at_a_checkpoint(server: Server) -> None:
    with server.sync_client("alice") as client:
        tid = client.threads.create()["thread_id"]
        client.runs.wait(tid, "helpdesk", input=START, durability="sync")
        client.runs.wait(tid, "helpdesk", command={"resume": "no"}, durability="sync")
        everything = client.threads.get_history(tid, limit=100)
        ids = [h["checkpoint"]["checkpoint_id"] for h in everything]

        two = client.threads.get_history(tid, limit=2)
        older = client.threads.get_history(tid, limit=100, before={"checkpoint_id": ids[1]})
        loops = client.threads.get_history(tid, limit=100, metadata={"source": "loop"})
        one = client.threads.get_history(tid, limit=100, checkpoint={"checkpoint_id": ids[2]})
        at = client.threads.get_state(tid, checkpoint_id=ids[2])
        at_post = client.threads.get_state(tid, checkpoint={"checkpoint_id": ids[2]})
        selected = client.threads.get_state(tid, checkpoint_id=ids[2])
    assert [h["checkpoint"]["checkpoint_id"] for h in two] == ids[:2]
    assert [h["checkpoint"]["checkpoint_id"] for h in older] == ids[2:]
    assert loops and all(h["metadata"]["source"] == "loop" for h in loops)
    assert [h["checkpoint"]["checkpoint_id"] for h in loops] == [
        h["checkpoint"]["checkpoint_id"] for h in everything if h["metadata"]["source"] == "loop"
    ]
    assert one == [everything[2]]
    assert at == everything[2] == at_post == selected

    # A checkpoint LangGraph does not have on the thread is a 404, a non-UUID a 422.
    headers = {"x-api-key": server.tokens["alice"]}
    missing = "1f0c0000-0000-6000-8000-000000000000"
    with httpx.Client(base_url=server.url, headers=headers) as http:
        assert http.get(f"/threads/{tid}/state/{missing}").status_code == 404
        assert http.get(f"/threads/{tid}/state/nope").status_code == 422
        assert http.post(f"/threads/{tid}/history", json={"before": "nope"}).status_code == 422
        subset = http.post(
            f"/threads/{tid}/history", json={"limit": 1, "select": ["values.notes", "next"]}
        ).json()
    assert subset == [{"values": {"notes": everything[0]["values"]["notes"]}, "next": []}]


def _audit(server: Server, thread_id: str, django_db_blocker: Any) -> list[Any]:
    with django_db_blocker.unblock():
        from criogen import Storage

        return list(Storage(server.database_url).audit_events(thread_id=thread_id))


@pytest.mark.slow
def test_update_state_forks_langgraphs_checkpoint_and_a_run_goes_on_from_it(
    server: Server, django_db_blocker: Any
) -> None:
    with server.sync_client("alice") as client:
        tid = client.threads.create()["thread_id"]
        client.runs.wait(tid, "helpdesk", input=START, durability="sync")
        client.runs.wait(tid, "helpdesk", command={"resume": "no"}, durability="sync")
        history = client.threads.get_history(tid, limit=100)
        [waiting] = [h for h in history if h["next"] == ["review"]]
        update = {"approved": True, "notes": ["reviewed: by hand"]}
        made = client.threads.update_state(
            tid,
            update,
            as_node="review",
            checkpoint_id=waiting["checkpoint"]["checkpoint_id"],
        )
        forked = client.threads.get_state(tid)
        status = client.threads.get(tid)["status"]
        final = client.runs.wait(tid, "helpdesk", input=None, durability="sync")
        after = client.threads.get_history(tid, limit=100)

    # LangGraph's server answers with the fork, child of the checkpoint named.
    assert made["checkpoint"] == forked["checkpoint"]
    assert forked["parent_checkpoint"] == waiting["checkpoint"]
    assert forked["metadata"]["source"] == "update"
    assert forked["next"] == ["publish"]
    assert status == "idle"
    # The run goes on from the fork, as LangGraph does in-process.
    graph = review.builder().compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "reference"}}
    graph.invoke(START, config)
    graph.invoke(Command(resume="no"), config)
    [before] = [s for s in graph.get_state_history(config) if s.next == ("review",)]
    graph.invoke(None, graph.update_state(before.config, update, as_node="review"))
    assert final == graph.get_state(config).values
    assert final["notes"] == ["draft about otters", "reviewed: by hand", "published"]
    assert after[0]["values"] == final
    assert after[-len(history) :] == history  # nothing of the old branch is lost
    events = [e for e in _audit(server, tid, django_db_blocker) if e.action == "update_state"]
    [event] = events
    assert event.door == "api" and event.actor == "alice"
    assert event.details["langgraph_checkpoint_id"] == made["checkpoint"]["checkpoint_id"]


@pytest.mark.slow
def test_copy_and_prune_take_langgraphs_checkpoints_along(server: Server) -> None:
    with server.sync_client("alice") as client:
        tid = client.threads.create()["thread_id"]
        client.runs.wait(tid, "helpdesk", input=START, durability="sync")
        client.runs.wait(tid, "helpdesk", command={"resume": "yes"}, durability="sync")
        history = client.threads.get_history(tid, limit=100)

        copy = client.threads.copy(tid)["thread_id"]
        copied = client.threads.get_history(copy, limit=100)
        # The copy goes on by itself; the original does not move.
        more = client.runs.wait(
            copy, "helpdesk", input={"topic": "seals", "notes": [], "approved": False}
        )
        original = client.threads.get_history(tid, limit=100)

        client.threads.prune([tid], strategy="keep_latest")
        pruned = client.threads.get_history(tid, limit=100)
        state = client.threads.get_state(tid)

    def without_thread(entries: list[dict[str, Any]]) -> list[Any]:
        return [
            {**e, "checkpoint": e["checkpoint"]["checkpoint_id"], "parent_checkpoint": None}
            for e in entries
        ]

    assert len(copied) == len(history) > 4
    assert without_thread(copied) == without_thread(history)
    assert all(e["checkpoint"]["thread_id"] == copy for e in copied)
    assert more["notes"][-1] == "draft about seals"
    assert original == history
    assert pruned == [history[0]] or [p["checkpoint"] for p in pruned] == [history[0]["checkpoint"]]
    assert state["values"] == history[0]["values"]
