"""Snapshots: a paused or failed run held by the caller as plain JSON, resumed later."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from criogen import START, Storage, Workflow, suspend
from criogen.engine.errors import InvalidSnapshot, RunFailed


def approval(broken: list[bool] | None = None) -> Workflow:
    """START -> prepare -> ask -> finish; ``finish`` raises while ``broken`` is [True]."""

    def ask(state: dict[str, Any]) -> dict[str, Any]:
        return {"steps": ["ask"], "answer": suspend("approve?", {"amount": state["amount"]})}

    def finish(state: dict[str, Any]) -> dict[str, Any]:
        if broken and broken[0]:
            raise ConnectionError("the ledger is down")
        return {"steps": ["finish"]}

    wf = Workflow(reducers={"steps": "append"})
    wf.add_node("prepare", lambda s: {"steps": ["prepare"]})
    wf.add_node("ask", ask)
    wf.add_node("finish", finish)
    wf.add_edge(START, "prepare").add_edge("prepare", "ask").add_edge("ask", "finish")
    return wf


def through_json(snapshot: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(snapshot))  # type: ignore[no-any-return]


def test_a_suspended_run_without_storage_returns_a_plain_json_snapshot() -> None:
    result = approval().compile().run({"amount": 42})

    assert result.status == "suspended"
    snapshot = result.snapshot
    assert through_json(snapshot) == snapshot
    assert snapshot["criogen_snapshot"] == 1
    checkpoint = snapshot["checkpoint"]
    assert checkpoint["id"] == result.checkpoint.id
    assert checkpoint["thread_id"] == result.thread_id
    assert checkpoint["status"] == "suspended"
    assert checkpoint["state"] == {"amount": 42, "steps": ["prepare"]}
    assert checkpoint["next"] == ["ask"]
    assert checkpoint["interrupts"][0]["payload"] == {"amount": 42}
    assert "value_versions" not in checkpoint  # storage bookkeeping stays in storage
    assert "value_bases" not in checkpoint


def test_resume_continues_a_snapshot_in_a_fresh_storage(storage: Storage) -> None:
    wf = approval()
    paused = wf.compile().run({"amount": 42})
    snapshot = through_json(paused.snapshot)

    app = wf.compile(storage=storage)
    done = app.resume(snapshot, {"approved": True})

    assert done.status == "completed"
    assert done.thread_id == paused.thread_id
    assert done.state == {
        "amount": 42,
        "steps": ["prepare", "ask", "finish"],
        "answer": {"approved": True},
    }
    # The snapshot became the thread's first checkpoint; the run continued after it.
    history = list(reversed(app.thread(paused.thread_id).history()))
    assert history[0].id == paused.checkpoint.id
    assert history[0].state == paused.state
    assert [cp.version for cp in history] == list(
        range(paused.checkpoint.version, done.checkpoint.version + 1)
    )


def test_resume_continues_a_snapshot_in_the_same_app() -> None:
    app = approval().compile()
    paused = app.run({"amount": 1})

    done = app.resume(through_json(paused.snapshot), "yes")

    assert done.state["answer"] == "yes"


def test_a_failed_run_gives_an_error_snapshot_that_resume_retries(storage: Storage) -> None:
    broken = [True]
    wf = approval(broken)
    app = wf.compile()
    paused = app.run({"amount": 5})
    with pytest.raises(RunFailed) as exc:
        app.resume(paused.snapshot, "ok")
    snapshot = through_json(exc.value.snapshot)  # type: ignore[arg-type]
    assert snapshot["checkpoint"]["status"] == "failed"
    assert snapshot["checkpoint"]["error"]["message"] == "the ledger is down"
    assert snapshot["checkpoint"]["next"] == ["finish"]

    broken[0] = False
    done = wf.compile(storage=storage).resume(snapshot)

    assert done.status == "completed"
    assert done.state == {"amount": 5, "steps": ["prepare", "ask", "finish"], "answer": "ok"}


def test_resume_refuses_a_snapshot_of_a_thread_that_has_moved_on() -> None:
    app = approval().compile()
    paused = app.run({"amount": 1})
    app.resume(paused.snapshot, "yes")

    with pytest.raises(InvalidSnapshot) as exc:
        app.resume(paused.snapshot, "again")

    assert exc.value.code == "invalid_snapshot"
    assert exc.value.details["field"] == "checkpoint.id"


def test_resume_refuses_a_snapshot_of_a_completed_run() -> None:
    done = approval().compile().run({"amount": 1})
    snapshot = approval().compile().resume(done.snapshot, "yes").snapshot

    with pytest.raises(InvalidSnapshot) as exc:
        approval().compile().resume(snapshot)

    assert exc.value.details["field"] == "checkpoint.status"


def test_resume_refuses_a_snapshot_of_another_workflow_and_writes_nothing(
    storage: Storage,
) -> None:
    paused = approval().compile().run({"amount": 1})
    other = Workflow().add_node("x", lambda s: None).add_edge(START, "x")
    app = other.compile(storage=storage)

    with pytest.raises(InvalidSnapshot) as exc:
        app.resume(paused.snapshot, "yes")

    assert exc.value.details["field"] == "checkpoint.next"
    assert storage.thread_info(paused.thread_id) is None


def _snapshot() -> dict[str, Any]:
    return through_json(approval().compile().run({"amount": 1}).snapshot)


def _broken(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    snap = copy.deepcopy(_snapshot())
    target = snap
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return snap


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("criogen_snapshot",), 2, "criogen_snapshot"),
        (("criogen_snapshot",), KeyError, "criogen_snapshot"),
        (("checkpoint",), "not an object", "checkpoint"),
        (("checkpoint", "id"), "not-a-uuid", "checkpoint.id"),
        (("checkpoint", "id"), KeyError, "checkpoint.id"),
        (("checkpoint", "created_at"), "yesterday", "checkpoint.created_at"),
        (("checkpoint", "thread_id"), 7, "checkpoint.thread_id"),
        (("checkpoint", "thread_id"), "   ", "checkpoint.thread_id"),
        (("checkpoint", "source"), "magic", "checkpoint.source"),
        (("checkpoint", "status"), "paused", "checkpoint.status"),
        (("checkpoint", "version"), 0, "checkpoint.version"),
        (("checkpoint", "version"), True, "checkpoint.version"),
        (("checkpoint", "version"), "3", "checkpoint.version"),
        (("checkpoint", "state"), [1, 2], "checkpoint.state"),
        (("checkpoint", "state"), {"x": float("nan")}, "checkpoint.state"),
        (("checkpoint", "next"), "ask", "checkpoint.next"),
        (("checkpoint", "next"), [1], "checkpoint.next"),
        (("checkpoint", "interrupts"), [{"node": "ask"}], "checkpoint.interrupts"),
        (("checkpoint", "tasks"), None, "checkpoint.tasks"),
        (("checkpoint", "metadata"), [], "checkpoint.metadata"),
    ],
)
def test_resume_refuses_a_malformed_snapshot_naming_the_field(
    path: tuple[str, ...], value: Any, field: str
) -> None:
    snapshot = _broken(path, value)
    app = approval().compile()

    with pytest.raises(InvalidSnapshot) as exc:
        app.resume(snapshot, "yes")

    assert exc.value.details["field"] == field
    assert exc.value.to_dict()["code"] == "invalid_snapshot"
    assert app.storage.thread_ids() == []


@pytest.mark.parametrize("bad", [None, "text", [], {"checkpoint": {}}])
def test_resume_refuses_what_is_not_a_snapshot(bad: Any) -> None:
    with pytest.raises(InvalidSnapshot, match="result.snapshot"):
        approval().compile().resume(bad)
