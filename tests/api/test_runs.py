"""Runs over the official ``langgraph_sdk`` client: background, wait, stream (SSE),
join, cancel, interrupt/resume, failures, checkpoints, durability, stateless runs, and
the thread statuses and metadata runs leave behind."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk.errors import ConflictError, NotFoundError, UnprocessableEntityError

from tests.api.conftest import Server

STEPS_DONE = {"steps": ["a", "b", "c"], "n": 3}


async def wait_status(client: Any, thread_id: str, run_id: str, *statuses: str) -> dict[str, Any]:
    """Poll the run until it has one of ``statuses`` (30 s at most: 200 polls, ~11 s,
    left little room over the 6–10 s that a run with a 4 s node takes to be cancelled
    here, and the run may queue behind other tests' runs on a busy machine)."""
    deadline = time.monotonic() + 30
    while True:
        run = await client.runs.get(thread_id, run_id)
        if run["status"] in statuses:
            return run
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} stayed {run['status']}, not {statuses}")
        await asyncio.sleep(0.05)


async def wait_cancel_asked(client: Any, thread_id: str, run_id: str) -> dict[str, Any]:
    """Poll the run until a cancel was asked of it (``cancelled_by`` set), 30 s at most."""
    deadline = time.monotonic() + 30
    while True:
        run = await client.runs.get(thread_id, run_id)
        if run.get("cancelled_by"):
            return run
        if time.monotonic() > deadline:
            raise AssertionError(f"no cancel reached run {run_id}: {run}")
        await asyncio.sleep(0.05)


async def events_of(stream: Any) -> list[tuple[str, Any]]:
    return [(part.event, part.data) async for part in stream]


# -- wait, background, join -----------------------------------------------------------------


async def test_wait_runs_steps_to_the_end(client: Any) -> None:
    thread = await client.threads.create()
    result = await client.runs.wait(thread["thread_id"], "steps", input={"n": 0})
    assert result == STEPS_DONE
    after = await client.threads.get(thread["thread_id"])
    assert after["status"] == "idle"
    assert after["values"] == STEPS_DONE
    assert after["metadata"]["graph_id"] == "steps"
    assert after["metadata"]["owner"] == "alice"
    assert uuid.UUID(after["metadata"]["assistant_id"])


async def test_a_background_run_is_joined_and_listed(client: Any) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    run = await client.runs.create(tid, "steps", input={"n": 10})
    assert run["status"] in ("pending", "running")
    assert run["thread_id"] == tid
    assert await client.runs.join(tid, run["run_id"]) == {"steps": ["a", "b", "c"], "n": 13}
    done = await client.runs.get(tid, run["run_id"])
    assert done["status"] == "success"
    assert done["cancel_reason"] is None
    listed = await client.runs.list(tid)
    assert [r["run_id"] for r in listed] == [run["run_id"]]
    assert await client.runs.list(tid, status="error") == []


def test_the_sync_client_waits_and_reads_history(sync_client: Any) -> None:
    thread = sync_client.threads.create()
    tid = thread["thread_id"]
    assert sync_client.runs.wait(tid, "steps", input={"n": 0}) == STEPS_DONE
    history = sync_client.threads.get_history(tid)
    assert [s["values"].get("n") for s in history] == [3, 2, 1, 0]
    assert history[-1]["metadata"]["source"] == "input"
    assert history[0]["next"] == []


async def test_it_refuses_an_unknown_assistant_with_404(client: Any) -> None:
    thread = await client.threads.create()
    with pytest.raises(NotFoundError) as caught:
        await client.runs.create(thread["thread_id"], "no-such-graph", input={})
    assert caught.value.body["code"] == "graph_not_found"


async def test_a_run_names_an_assistant_by_id(client: Any) -> None:
    # The graph's default assistant, by its UUID (other tests make "steps" assistants with
    # breakpoints or time limits on this server: a search could find one of those).
    assistant = await client.assistants.get("steps")
    assert assistant["assistant_id"] != "steps"
    result = await client.runs.wait(None, assistant["assistant_id"], input={"n": 1})
    assert result == {"steps": ["a", "b", "c"], "n": 4}


# -- streaming -------------------------------------------------------------------------------


async def test_stream_sends_values_then_end(client: Any) -> None:
    thread = await client.threads.create()
    events = await events_of(client.runs.stream(thread["thread_id"], "steps", input={"n": 0}))
    names = [e for e, _ in events]
    assert names[0] == "metadata"
    assert names[-1] == "end"
    values = [d for e, d in events if e == "values"]
    assert values[0] == {"n": 0}
    assert values[-1] == STEPS_DONE
    assert len(values) == 4  # input, a, b, c


async def test_stream_sends_updates_per_node(client: Any) -> None:
    thread = await client.threads.create()
    events = await events_of(
        client.runs.stream(thread["thread_id"], "steps", input={"n": 0}, stream_mode="updates")
    )
    updates = [d for e, d in events if e == "updates"]
    nodes = [next(iter(u)) for u in updates if not next(iter(u)).startswith("__")]
    assert nodes == ["a", "b", "c"]
    assert updates[-1] == {"c": {"steps": ["c"], "n": 3}}


async def test_stream_sends_every_requested_mode(client: Any) -> None:
    thread = await client.threads.create()
    modes = [
        "values",
        "updates",
        "debug",
        "events",
        "tasks",
        "checkpoints",
        "custom",
        "messages-tuple",
    ]
    events = await events_of(
        client.runs.stream(thread["thread_id"], "steps", input={"n": 0}, stream_mode=modes)
    )
    names = {e for e, _ in events}
    assert {
        "metadata",
        "values",
        "updates",
        "debug",
        "events",
        "tasks",
        "checkpoints",
        "end",
    } <= names
    debug = next(d for e, d in events if e == "debug")
    assert debug["type"] == "checkpoint"
    assert debug["payload"]["config"]["configurable"]["thread_id"] == thread["thread_id"]
    tasks = [d["name"] for e, d in events if e == "tasks"]
    assert tasks == ["a", "b", "c"]


def test_the_sync_client_streams(sync_client: Any) -> None:
    thread = sync_client.threads.create()
    parts = list(sync_client.runs.stream(thread["thread_id"], "steps", input={"n": 0}))
    assert parts[-1].event == "end"
    assert [p.data for p in parts if p.event == "values"][-1] == STEPS_DONE


async def test_stream_v2_parts(client: Any) -> None:
    thread = await client.threads.create()
    parts = [
        p
        async for p in client.runs.stream(
            thread["thread_id"], "hitl", input={"n": 0}, stream_mode="values", version="v2"
        )
    ]
    last = [p for p in parts if p["type"] == "values"][-1]
    assert last["interrupts"][0]["value"] == {"question": "approve?", "n": 1}


async def test_join_stream_replays_a_finished_run(client: Any) -> None:
    thread = await client.threads.create()
    run = await client.runs.create(thread["thread_id"], "steps", input={"n": 0})
    await client.runs.join(thread["thread_id"], run["run_id"])
    events = await events_of(client.runs.join_stream(thread["thread_id"], run["run_id"]))
    assert events[-1][0] == "end"
    assert [d for e, d in events if e == "values"][-1] == STEPS_DONE


async def test_stream_refuses_an_unknown_mode_with_422(server: Server) -> None:
    with server.http() as http:
        tid = http.post("/threads", json={}).json()["thread_id"]
        response = http.post(
            f"/threads/{tid}/runs/stream", json={"assistant_id": "steps", "stream_mode": "bogus"}
        )
    assert response.status_code == 422
    assert response.json()["field"].startswith("stream_mode")


# -- interrupts and resume ---------------------------------------------------------------------


async def test_an_interrupt_is_resumed_with_a_command(client: Any) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    result = await client.runs.wait(tid, "hitl", input={"n": 0})
    assert result["__interrupt__"][0]["value"] == {"question": "approve?", "n": 1}
    waiting = await client.threads.get(tid)
    assert waiting["status"] == "interrupted"
    (pending,) = waiting["interrupts"].values()
    assert pending[0]["value"] == {"question": "approve?", "n": 1}
    state = await client.threads.get_state(tid)
    assert state["next"] == ["ask"]
    assert state["interrupts"][0]["value"]["question"] == "approve?"
    assert state["tasks"][0]["interrupts"][0]["id"] == pending[0]["id"]
    inbox = await client.threads.search(status="interrupted", ids=[tid])
    assert inbox[0]["values"] == {"steps": ["a"], "n": 1}
    final = await client.runs.wait(tid, "hitl", command={"resume": "yes"})
    assert final == {"steps": ["a", "ask", "c"], "n": 3, "answer": "yes"}
    assert (await client.threads.get(tid))["status"] == "idle"


async def test_a_suspended_run_is_interrupted_without_a_cancel_reason(client: Any) -> None:
    thread = await client.threads.create()
    run = await client.runs.create(thread["thread_id"], "hitl", input={"n": 0})
    done = await wait_status(client, thread["thread_id"], run["run_id"], "interrupted", "success")
    assert done["status"] == "interrupted"
    assert done["cancel_reason"] is None


async def test_resume_on_a_thread_that_is_not_waiting_is_a_409(client: Any) -> None:
    thread = await client.threads.create()
    await client.runs.wait(thread["thread_id"], "steps", input={"n": 0})
    with pytest.raises(ConflictError):
        await client.runs.create(thread["thread_id"], "steps", command={"resume": 1})


async def test_a_goto_the_graph_cannot_honour_is_refused_with_422(client: Any) -> None:
    thread = await client.threads.create()
    await client.runs.wait(thread["thread_id"], "steps", input={"n": 0})
    for goto in ("nowhere", ["b", "c"]):
        with pytest.raises(UnprocessableEntityError) as caught:
            await client.runs.create(thread["thread_id"], "steps", command={"goto": goto})
        assert caught.value.body["field"] == "command.goto"


# -- failures, busy threads, cancel --------------------------------------------------------


async def test_a_failed_run_leaves_the_thread_in_error(client: Any) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    result = await client.runs.wait(tid, "steps", input={"fail": True}, raise_error=False)
    assert "node b failed" in result["__error__"]["message"]
    assert (await client.threads.get(tid))["status"] == "error"
    state = await client.threads.get_state(tid)
    assert state["tasks"][0]["name"] == "b"
    assert "node b failed" in state["tasks"][0]["error"]
    events = await events_of(client.runs.stream(tid, "steps", input={"fail": True}))
    assert [e for e, _ in events][-2:] == ["error", "end"]
    with pytest.raises(Exception, match="node b failed"):
        await client.runs.wait(tid, "steps", input={"fail": True})


async def test_a_running_thread_is_busy_and_reject_is_a_409(client: Any) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    run = await client.runs.create(tid, "steps", input={"sleep": 1.0})
    assert (await client.threads.get(tid))["status"] == "busy"
    assert tid in [t["thread_id"] for t in await client.threads.search(status="busy", ids=[tid])]
    with pytest.raises(ConflictError) as caught:
        await client.runs.create(tid, "steps", input={}, multitask_strategy="reject")
    assert caught.value.body["code"] == "thread_busy"
    await client.runs.join(tid, run["run_id"])
    assert (await client.threads.get(tid))["status"] == "idle"


async def test_cancel_stops_a_run_and_says_who_cancelled_it(client: Any) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    run = await client.runs.create(tid, "steps", input={"sleep": 1.0})
    await wait_status(client, tid, run["run_id"], "running")
    cancelled = await client.runs.cancel(tid, run["run_id"], wait=True)
    assert cancelled["status"] == "interrupted"
    assert cancelled["cancel_reason"] == "cancelled by alice"
    after = await client.threads.get(tid)
    assert after["status"] != "interrupted"  # cancelled is not "waiting for a person"
    assert after["interrupts"] == {}


async def test_enqueue_runs_one_after_the_other(client: Any) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    first = await client.runs.create(tid, "steps", input={"n": 0, "sleep": 0.3})
    second = await client.runs.create(
        tid, "steps", input={"sleep": 0}, multitask_strategy="enqueue"
    )
    assert await client.runs.join(tid, second["run_id"]) == {
        "steps": ["a", "b", "c", "a", "b", "c"],
        "n": 6,
        "sleep": 0,
    }
    assert (await client.runs.get(tid, first["run_id"]))["status"] == "success"


async def test_deleting_a_thread_cancels_its_active_runs(client: Any) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    run = await client.runs.create(tid, "steps", input={"sleep": 1.0})
    await wait_status(client, tid, run["run_id"], "running")
    await client.threads.delete(tid)
    with pytest.raises(NotFoundError):
        await client.threads.get(tid)
    with pytest.raises(NotFoundError):
        await client.runs.get(tid, run["run_id"])


async def test_an_ended_run_is_deleted_and_an_active_one_is_a_409(client: Any) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    run = await client.runs.create(tid, "steps", input={"sleep": 1.0})
    with pytest.raises(ConflictError):
        await client.runs.delete(tid, run["run_id"])
    await client.runs.join(tid, run["run_id"])
    await client.runs.delete(tid, run["run_id"])
    with pytest.raises(NotFoundError):
        await client.runs.get(tid, run["run_id"])


# -- checkpoints and durability -------------------------------------------------------------


async def test_a_run_from_a_checkpoint_replays_or_branches(client: Any) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    await client.runs.wait(tid, "steps", input={"n": 0})
    history = await client.threads.get_history(tid)
    after_a = next(s for s in history if s["values"].get("n") == 1)
    cid = after_a["checkpoint"]["checkpoint_id"]
    replay = await client.runs.wait(tid, "steps", checkpoint_id=cid)
    assert replay == STEPS_DONE
    branch = await client.runs.wait(
        tid,
        "steps",
        input={"n": 100},
        checkpoint_id=str(uuid.uuid4()),  # checkpoint's keys win over checkpoint_id
        checkpoint={"thread_id": tid, "checkpoint_ns": "", "checkpoint_id": cid},
    )
    assert branch["n"] == 103
    assert branch["steps"] == ["a", "a", "b", "c"]


async def test_a_checkpoint_id_that_is_not_a_uuid_is_a_422(client: Any) -> None:
    thread = await client.threads.create()
    with pytest.raises(UnprocessableEntityError) as caught:
        await client.runs.create(thread["thread_id"], "steps", checkpoint_id="abc")
    assert caught.value.body["field"] == "checkpoint_id"


async def test_durability_exit_writes_one_checkpoint_per_run(client: Any) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    assert await client.runs.wait(tid, "steps", input={"n": 0}, durability="exit") == STEPS_DONE
    assert len(await client.threads.get_history(tid)) == 1


async def test_checkpoint_during_false_means_exit_and_durability_wins(client: Any) -> None:
    one = (await client.threads.create())["thread_id"]
    two = (await client.threads.create())["thread_id"]
    with pytest.warns(DeprecationWarning):
        await client.runs.wait(one, "steps", input={"n": 0}, checkpoint_during=False)
    with pytest.warns(DeprecationWarning):
        await client.runs.wait(
            two, "steps", input={"n": 0}, checkpoint_during=False, durability="sync"
        )
    assert len(await client.threads.get_history(one)) == 1
    assert len(await client.threads.get_history(two)) == 4
    run = (await client.runs.list(two))[0]
    assert run["kwargs"]["durability"] == "sync"


def test_an_unknown_durability_is_a_422(server: Server) -> None:
    with server.http() as http:
        tid = http.post("/threads", json={}).json()["thread_id"]
        response = http.post(
            f"/threads/{tid}/runs", json={"assistant_id": "steps", "durability": "later"}
        )
    assert response.status_code == 422
    assert response.json()["field"] == "durability"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        # Breakpoints are honoured (tests/api/test_breakpoints.py), at a node the graph has.
        ("interrupt_before", ["nowhere"]),
        ("interrupt_after", ["nowhere"]),
        ("feedback_keys", ["score"]),
        ("langsmith_tracer", {"project_name": "p"}),
        ("surprise", 1),
    ],
)
def test_fields_it_cannot_honour_are_refused_with_422(
    server: Server, field: str, value: Any
) -> None:
    with server.http() as http:
        tid = http.post("/threads", json={}).json()["thread_id"]
        response = http.post(f"/threads/{tid}/runs", json={"assistant_id": "steps", field: value})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field


# -- if_not_exists, stateless, batch ---------------------------------------------------------


async def test_if_not_exists_create_makes_the_thread(client: Any) -> None:
    tid = f"new-{uuid.uuid4()}"
    with pytest.raises(httpx.HTTPStatusError) as caught:  # wait raises plain httpx errors
        await client.runs.wait(tid, "steps", input={"n": 0})
    assert caught.value.response.status_code == 404
    assert (
        await client.runs.wait(tid, "steps", input={"n": 0}, if_not_exists="create") == STEPS_DONE
    )
    assert (await client.threads.get(tid))["metadata"]["owner"] == "alice"


async def test_stateless_runs_wait_and_stream(client: Any) -> None:
    assert await client.runs.wait(None, "steps", input={"n": 0}) == STEPS_DONE
    events = await events_of(client.runs.stream(None, "steps", input={"n": 0}))
    assert [d for e, d in events if e == "values"][-1] == STEPS_DONE


async def test_a_stateless_background_run_keeps_its_thread(client: Any) -> None:
    run = await client.runs.create(None, "steps", input={"n": 0})
    assert await client.runs.join(run["thread_id"], run["run_id"]) == STEPS_DONE


def test_a_batch_creates_several_runs(sync_client: Any) -> None:
    tid = sync_client.threads.create()["thread_id"]
    runs = sync_client.runs.create_batch(
        [
            {"thread_id": tid, "assistant_id": "steps", "input": {"n": 0}},
            {"assistant_id": "steps", "input": {"n": 5}},
        ]
    )
    assert len(runs) == 2
    assert sync_client.runs.join(tid, runs[0]["run_id"]) == STEPS_DONE


async def test_prune_never_expires_a_thread_mid_run(server: Server, client: Any) -> None:
    from tests.api.test_threads import _expire

    thread = await client.threads.create(ttl=1)
    tid = thread["thread_id"]
    run = await client.runs.create(tid, "steps", input={"sleep": 1.0})
    _expire(server, tid)
    with server.http() as http:
        assert http.post("/threads/prune").status_code == 200
        assert http.post("/threads/prune", json={"thread_ids": [tid]}).json()["pruned_count"] == 0
    assert (await client.threads.get(tid))["status"] == "busy"
    await client.runs.join(tid, run["run_id"])
    with server.http() as http:
        assert http.post("/threads/prune").json()["deleted"] >= 1
    with pytest.raises(NotFoundError):
        await client.threads.get(tid)


async def test_join_stream_on_a_thread_follows_its_runs_live(client: Any) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    stream = await client.threads.join_stream(tid, stream_mode=["run_modes", "lifecycle"])
    first = await stream.__anext__()
    assert first.event == "metadata"
    run = await client.runs.create(tid, "steps", input={"n": 0}, stream_mode="values")
    seen: list[tuple[str, Any]] = []
    async with asyncio.timeout(20):
        async for part in stream:
            seen.append((part.event, part.data))
            if part.event == "lifecycle" and part.data["status"] == "success":
                break
    await stream.aclose()
    statuses = [d["status"] for e, d in seen if e == "lifecycle"]
    assert statuses[0] in ("pending", "running")
    assert statuses[-1] == "success"
    assert all(d["run_id"] == run["run_id"] for e, d in seen if e == "lifecycle")
    assert [d for e, d in seen if e == "values"][-1] == STEPS_DONE


async def test_list_returns_only_the_selected_fields(client: Any) -> None:
    thread = await client.threads.create()
    await client.runs.wait(thread["thread_id"], "steps", input={"n": 0})
    (run,) = await client.runs.list(thread["thread_id"], select=["status"])
    assert run == {"run_id": run["run_id"], "status": "success"}


async def test_a_stream_with_on_disconnect_cancel_cancels_the_run_when_the_client_leaves(
    client: Any, tmp_path: Path
) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    # Node b waits at a gate the test opens only once the server has cancelled the run
    # (the cancel is cooperative: it lands before node c), however loaded the machine.
    gate = tmp_path / "gate"
    stream = client.runs.stream(tid, "steps", input={"gate": str(gate)}, on_disconnect="cancel")
    first = await stream.__anext__()
    assert first.event == "metadata"
    run_id = first.data["run_id"]
    await stream.aclose()  # the client goes away mid-run
    await wait_cancel_asked(client, tid, run_id)
    gate.touch()
    run = await wait_status(client, tid, run_id, "interrupted", "success")
    assert run["status"] == "interrupted"
    assert run["cancel_reason"] == "cancelled by alice"


async def test_a_stream_continues_the_run_by_default_when_the_client_leaves(client: Any) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    stream = client.runs.stream(tid, "steps", input={"n": 0, "sleep": 0.5})
    first = await stream.__anext__()
    await stream.aclose()
    assert await client.runs.join(tid, first.data["run_id"]) == {
        "steps": ["a", "b", "c"],
        "n": 3,
        "sleep": 0.5,
    }
