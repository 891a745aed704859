"""Rewind: a ``fork`` checkpoint that copies an earlier one; history keeps everything.

A fork head never means "the process died": ``run()`` on an in_progress or failed fork
starts a new turn, ``retry()`` continues it, ``resume()`` answers a suspended fork.
"""

from __future__ import annotations

from typing import Any

import pytest

from criogen import START, Storage, Workflow, suspend
from criogen.engine.checkpoints import new_id
from criogen.engine.errors import CheckpointNotFound, RunFailed, ThreadSuspended


def steps_workflow(*, ask: bool = False, fail: list[bool] | None = None) -> Workflow:
    """START -> a -> b -> c; b suspends with ``ask``, c raises while ``fail`` is [True]."""

    def b(state: dict[str, Any]) -> dict[str, Any]:
        if ask:
            return {"steps": ["b"], "answer": suspend("ok?")}
        return {"steps": ["b"]}

    def c(state: dict[str, Any]) -> dict[str, Any]:
        if fail and fail[0]:
            raise RuntimeError("c broke")
        return {"steps": ["c"], "n": state.get("n", 0) + 1}

    wf = Workflow(reducers={"steps": "append"})
    wf.add_node("a", lambda s: {"steps": ["a"]})
    wf.add_node("b", b)
    wf.add_node("c", c)
    wf.add_edge(START, "a").add_edge("a", "b").add_edge("b", "c")
    return wf


def test_rewind_writes_a_fork_with_the_state_of_that_checkpoint(
    storage: Storage, thread_id: str
) -> None:
    th = steps_workflow().compile(storage=storage, durability="sync").thread(thread_id)
    th.run({"n": 0})
    old_line = th.history()
    after_a = old_line[2]  # v2: the step after a
    assert after_a.state == {"n": 0, "steps": ["a"]}

    fork = th.rewind(after_a.id)

    assert th.head == fork
    assert (fork.version, fork.source) == (5, "fork")
    assert fork.state == after_a.state
    assert (fork.status, fork.next) == (after_a.status, after_a.next)
    assert fork.parent_id == after_a.id  # a branch off v2, not a step after v4
    assert fork.metadata["forked_from"] == after_a.id
    assert fork.metadata["forked_version"] == 2
    assert th.history()[1:] == old_line  # the old line is kept as it was


def test_the_next_run_continues_from_the_fork(storage: Storage, thread_id: str) -> None:
    th = steps_workflow().compile(storage=storage).thread(thread_id)
    first = th.run({"n": 0})
    th.run({"n": 10})
    th.rewind(first.checkpoint.id)  # back to the end of the first turn (completed)

    again = th.run({"extra": True})

    assert again.state == {
        "n": 2,  # 1 at the end of the first turn, +1 by c
        "extra": True,
        "steps": ["a", "b", "c", "a", "b", "c"],
    }
    versions = [cp.version for cp in th.history()]
    assert versions == list(range(len(versions), 0, -1))  # nothing deleted, nothing reused
    assert th.checkpoint(first.checkpoint.id) == first.checkpoint


def test_run_on_an_in_progress_fork_starts_a_new_turn_and_retry_continues_it(
    storage: Storage, thread_id: str
) -> None:
    app = steps_workflow().compile(storage=storage)
    th = app.thread(thread_id)
    th.run({"n": 0})
    after_a = th.history()[2]

    th.rewind(after_a.id)
    new_turn = th.run({"n": 5})  # not ThreadInterrupted: a fork is no dead process
    assert new_turn.state == {"n": 6, "steps": ["a", "a", "b", "c"]}

    th.rewind(after_a.id)
    continued = th.retry()  # the forked turn goes on from b
    assert continued.state == {"n": 1, "steps": ["a", "b", "c"]}


def test_rewind_to_a_failure_gives_a_failed_fork_that_retry_continues(
    storage: Storage, thread_id: str
) -> None:
    broken = [True]
    th = steps_workflow(fail=broken).compile(storage=storage).thread(thread_id)
    with pytest.raises(RunFailed) as exc:
        th.run({"n": 0})
    with pytest.raises(RunFailed):
        th.run({"n": 100})  # a new turn over the failure, which fails too
    broken[0] = False

    fork = th.rewind(exc.value.checkpoint.id)
    assert (fork.status, fork.error) == ("failed", None)
    result = th.retry()

    assert result.state == {"n": 1, "steps": ["a", "b", "c"]}


def test_resume_answers_a_suspended_fork(storage: Storage, thread_id: str) -> None:
    th = steps_workflow(ask=True).compile(storage=storage).thread(thread_id)
    paused = th.run({"n": 0})
    th.resume("first answer")

    fork = th.rewind(paused.checkpoint.id)
    assert fork.status == "suspended"
    assert fork.interrupts == paused.checkpoint.interrupts
    with pytest.raises(ThreadSuspended):
        th.run({"n": 1})
    done = th.resume("second answer")

    assert done.state == {"n": 1, "steps": ["a", "b", "c"], "answer": "second answer"}


def test_rewind_to_an_unknown_checkpoint_raises_checkpoint_not_found(
    storage: Storage, thread_id: str
) -> None:
    th = steps_workflow().compile(storage=storage).thread(thread_id)
    th.run({"n": 0})
    other = steps_workflow().compile(storage=storage).thread(thread_id + "-other")
    foreign = other.run({"n": 0}).checkpoint

    for missing in (new_id(), foreign.id):
        with pytest.raises(CheckpointNotFound) as exc:
            th.rewind(missing)
        assert exc.value.code == "checkpoint_not_found"
        assert exc.value.details["checkpoint_id"] == missing
    assert len(th.history()) == 4  # nothing written


def test_rewind_in_exit_mode_still_writes_the_fork(storage: Storage, thread_id: str) -> None:
    th = steps_workflow().compile(storage=storage, durability="exit").thread(thread_id)
    first = th.run({"n": 0})
    th.run({"n": 5})

    fork = th.rewind(first.checkpoint.id)

    assert th.head == fork
    assert fork.state == first.state
    assert [cp.source for cp in th.history()] == ["fork", "step", "step"]
