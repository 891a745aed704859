"""A LangGraph graph run by Criogen's server (in-process runner), driven over the REST
API with ``langgraph_sdk``: an ``interrupt()`` leaves the thread interrupted with the
graph's values as its state, ``Command(resume=...)`` finishes it, and the history has
each step; on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.conftest import Server
from tests.langgraph.conftest import langgraph_server

START = {"topic": "otters", "notes": [], "approved": False}


@pytest.fixture(params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    """A server whose langgraph.json registers the review graph as ``helpdesk``."""
    with langgraph_server(request, tmp_path, {"helpdesk": "review.py:graph"}) as srv:
        yield srv


@pytest.mark.slow
async def test_an_interrupt_suspends_the_thread_and_a_resume_finishes_it(server: Server) -> None:
    client = server.client("alice")
    try:
        thread = await client.threads.create()
        tid = thread["thread_id"]

        first = await client.runs.wait(tid, "helpdesk", input=START)
        waiting = await client.threads.get(tid)
        state = await client.threads.get_state(tid)

        final = await client.runs.wait(tid, "helpdesk", command={"resume": "yes"})
        done = await client.threads.get(tid)
        history = await client.threads.get_history(tid, limit=50)
        again = await client.runs.wait(
            tid, "helpdesk", input={"topic": "seals", "notes": [], "approved": False}
        )
        # A thread deleted and made again under the same id starts afresh.
        await client.threads.delete(tid)
        await client.threads.create(thread_id=tid)
        reborn = await client.runs.wait(tid, "helpdesk", input=START)
    finally:
        await client.aclose()

    assert first["notes"] == ["draft about otters"]
    assert waiting["status"] == "interrupted"
    assert state["values"] == {
        "topic": "otters",
        "notes": ["draft about otters"],
        "approved": False,
    }
    [interrupt] = state["interrupts"]
    assert interrupt["value"]["question"] == "approve the draft?"
    assert final == {
        "topic": "otters",
        "notes": ["draft about otters", "reviewed: yes", "published"],
        "approved": True,
    }
    assert done["status"] == "idle"
    assert history[0]["values"] == final
    assert any(h["values"].get("notes") == ["draft about otters"] for h in history)
    # A new turn goes on from the finished one (the notes reducer appends).
    assert again["notes"][-1] == "draft about seals"
    assert again["notes"][:3] == final["notes"]
    assert reborn["notes"] == ["draft about otters"]


@pytest.mark.slow
def test_durability_says_when_langgraphs_own_checkpoints_are_written(
    server: Server, django_db_blocker: object
) -> None:
    """``durability="exit"`` writes LangGraph's checkpoints of a turn once, when it
    stops (here at its interrupt); ``sync`` writes one per step. Both end the same."""
    counts = {}
    with server.sync_client("alice") as client:
        for mode in ("sync", "exit"):
            tid = client.threads.create()["thread_id"]
            client.runs.wait(tid, "helpdesk", input=START, durability=mode)
            state = client.threads.get_state(tid)
            assert state["values"]["notes"] == ["draft about otters"]
            assert state["interrupts"][0]["value"]["question"] == "approve the draft?"
            final = client.runs.wait(tid, "helpdesk", command={"resume": "yes"}, durability=mode)
            assert final["notes"][-1] == "published"
            counts[mode] = tid
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        from criogen import Storage
        from criogen.langgraph import CriogenSaver

        saver = CriogenSaver(Storage(server.database_url, encryption_key=False))
        written = {
            mode: len(list(saver.list({"configurable": {"thread_id": tid}})))
            for mode, tid in counts.items()
        }
    # sync: the input, each step of both turns; exit: one per turn.
    assert written["exit"] == 2
    assert written["sync"] > 4
