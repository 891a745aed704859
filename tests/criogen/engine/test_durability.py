"""Durability modes write exactly the checkpoints the spec says.

- ``sync``: after every step, before the next step starts.
- ``async``: after every step, in the background while the next step runs; all of
  them are durable before ``run`` returns.
- ``exit``: once, when the run completes, fails or suspends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from criogen import START, Storage, Workflow, suspend
from criogen.engine.checkpoints import CheckpointWrite
from criogen.engine.errors import LeaseLost, RunFailed
from criogen.engine.workflows import NodeContext

STEP_SOURCES = [
    ("input", "in_progress"),
    ("step", "in_progress"),
    ("step", "in_progress"),
    ("step", "completed"),
]


def workflow(*, fail_at: str | None = None, ask_at: str | None = None) -> Workflow:
    """START -> a -> b -> c; ``fail_at`` raises there, ``ask_at`` suspends there."""

    def node(name: str) -> Any:
        def run(state: dict[str, Any]) -> dict[str, Any]:
            if name == fail_at:
                raise RuntimeError(f"{name} failed")
            if name == ask_at:
                return {"steps": [name], "answer": suspend("ok?")}
            return {"steps": [name]}

        return run

    wf = Workflow(reducers={"steps": "append"})
    for name in ("a", "b", "c"):
        wf.add_node(name, node(name))
    wf.add_edge(START, "a").add_edge("a", "b").add_edge("b", "c")
    return wf


def sources(storage: Storage, thread_id: str) -> list[tuple[str, str]]:
    return [(cp.source, cp.status) for cp in reversed(storage.history(thread_id))]


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_sync_and_async_write_a_checkpoint_per_step(
    storage: Storage, thread_id: str, durability: str
) -> None:
    app = workflow().compile(storage=storage, durability=durability)

    result = app.thread(thread_id).run({"x": 1})

    # Everything is durable when run() returns, in async mode too.
    assert sources(storage, thread_id) == STEP_SOURCES
    assert storage.head(thread_id) == result.checkpoint
    states = [cp.state for cp in reversed(storage.history(thread_id))]
    assert states == [
        {"x": 1},
        {"x": 1, "steps": ["a"]},
        {"x": 1, "steps": ["a", "b"]},
        {"x": 1, "steps": ["a", "b", "c"]},
    ]


def test_sync_writes_each_checkpoint_before_the_next_step_starts(
    storage: Storage, thread_id: str
) -> None:
    seen: list[int] = []

    def b(state: dict[str, Any]) -> dict[str, Any]:
        head = storage.head(thread_id)
        seen.append(head.version if head else 0)
        return {"steps": ["b"]}

    wf = Workflow(reducers={"steps": "append"})
    wf.add_node("a", lambda s: {"steps": ["a"]}).add_node("b", b)
    wf.add_edge(START, "a").add_edge("a", "b")

    wf.compile(storage=storage, durability="sync").thread(thread_id).run()

    assert seen == [2]  # input and step a were durable when b started


def test_async_writes_in_the_background_while_the_next_step_runs(
    storage: Storage, thread_id: str
) -> None:
    writers: list[tuple[int, str]] = []

    def listener(writes: Sequence[CheckpointWrite]) -> None:
        for w in writes:
            writers.append((w.checkpoint.version, threading.current_thread().name))

    storage.add_listener(listener)
    try:
        workflow().compile(storage=storage, durability="async").thread(thread_id).run()
    finally:
        storage.remove_listener(listener)

    assert sorted(v for v, _ in writers) == [1, 2, 3, 4]
    by_version = dict(writers)
    main = threading.current_thread().name
    if storage.supports_background_writes:
        # The last one goes through the same queue (order), and run() waits for it.
        assert all(by_version[v].startswith("criogen-writer") for v in (1, 2, 3, 4))
    else:  # memory writes are instant: nothing to overlap
        assert all(by_version[v] == main for v in (1, 2, 3, 4))


def test_exit_writes_one_checkpoint_when_the_run_completes(
    storage: Storage, thread_id: str
) -> None:
    th = workflow().compile(storage=storage, durability="exit").thread(thread_id)

    first = th.run({"x": 1})
    second = th.run({"x": 2})

    assert sources(storage, thread_id) == [("step", "completed"), ("step", "completed")]
    assert first.checkpoint.version == 1
    assert first.state == {"x": 1, "steps": ["a", "b", "c"]}
    assert second.checkpoint.version == 2
    assert second.checkpoint.parent_id == first.checkpoint.id
    assert th.state == {"x": 2, "steps": ["a", "b", "c", "a", "b", "c"]}


def test_exit_writes_one_failure_checkpoint_when_the_run_fails(
    storage: Storage, thread_id: str
) -> None:
    th = workflow(fail_at="c").compile(storage=storage, durability="exit").thread(thread_id)

    with pytest.raises(RunFailed) as exc:
        th.run({"x": 1})

    assert sources(storage, thread_id) == [("failure", "failed")]
    failed = exc.value.checkpoint
    assert failed.version == 1
    assert failed.state == {"x": 1, "steps": ["a", "b"]}  # what the run did before c
    assert failed.next == ("c",)
    assert storage.head(thread_id) == failed


def test_exit_writes_one_checkpoint_at_a_suspend_and_one_when_resumed(
    storage: Storage, thread_id: str
) -> None:
    th = workflow(ask_at="b").compile(storage=storage, durability="exit").thread(thread_id)

    paused = th.run({"x": 1})
    assert sources(storage, thread_id) == [("suspend", "suspended")]
    assert paused.state == {"x": 1, "steps": ["a"]}

    done = th.resume("yes")

    assert sources(storage, thread_id) == [("suspend", "suspended"), ("step", "completed")]
    assert done.state == {"x": 1, "steps": ["a", "b", "c"], "answer": "yes"}
    assert storage.head(thread_id).state == done.state  # type: ignore[union-attr]


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_step_modes_write_failure_and_suspend_checkpoints_too(
    storage: Storage, thread_id: str, durability: str
) -> None:
    failing = workflow(fail_at="c").compile(storage=storage, durability=durability)
    with pytest.raises(RunFailed):
        failing.thread(thread_id + "-f").run()
    asking = workflow(ask_at="c").compile(storage=storage, durability=durability)
    asking.thread(thread_id + "-s").run()

    assert sources(storage, thread_id + "-f") == [*STEP_SOURCES[:3], ("failure", "failed")]
    assert sources(storage, thread_id + "-s") == [*STEP_SOURCES[:3], ("suspend", "suspended")]


def test_a_run_may_choose_its_own_durability(storage: Storage, thread_id: str) -> None:
    th = workflow().compile(storage=storage, durability="sync").thread(thread_id)

    th.run({"x": 1}, durability="exit")

    assert sources(storage, thread_id) == [("step", "completed")]


# -- app.run(): the run's first write creates its fresh thread --------------------------


def spying(storage: Storage, seen: list[Any], *, fail: bool = False) -> Workflow:
    """START -> spy -> end: spy notes what storage knows of its thread while it runs."""

    def spy(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        info = storage.thread_info(ctx.thread_id)
        seen.append(None if info is None else (info.head_version, info.lease_id == ctx.run_id))
        if fail:
            raise RuntimeError("spy failed")
        return {"steps": ["spy"]}

    wf = Workflow(reducers={"steps": "append"})
    wf.add_node("spy", spy)
    wf.add_edge(START, "spy")
    return wf


@pytest.mark.parametrize(
    ("durability", "while_running"),
    [("sync", [(1, True)]), ("exit", [None])],
)
def test_app_run_creates_its_fresh_thread_with_its_first_write(
    storage: Storage, durability: str, while_running: list[Any]
) -> None:
    seen: list[Any] = []
    app = spying(storage, seen).compile(storage=storage, durability=durability)

    result = app.run({"x": 1})

    # sync: the input checkpoint created the thread, held by the run, before the step;
    # exit: nothing is written until the run ends, the thread included.
    assert seen == while_running
    info = storage.thread_info(result.thread_id)
    assert info is not None and (info.head_version, info.lease_id) == (
        result.checkpoint.version,
        None,
    )
    assert storage.head(result.thread_id) == result.checkpoint
    assert result.state == {"x": 1, "steps": ["spy"]}
    # The thread goes on as any other: its next run takes the lease first.
    assert app.thread(result.thread_id).run({"x": 2}).state["steps"] == ["spy", "spy"]


def test_app_run_in_async_mode_creates_the_thread_in_the_background(storage: Storage) -> None:
    seen: list[Any] = []
    app = spying(storage, seen).compile(storage=storage, durability="async")

    result = app.run({"x": 1})

    # Whether the input's write had committed when the step looked depends on timing.
    assert seen[0] in (None, (1, True))
    assert [cp.source for cp in storage.history(result.thread_id)] == ["step", "input"]
    assert storage.thread_info(result.thread_id).lease_id is None  # type: ignore[union-attr]


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_a_fresh_thread_that_fails_keeps_its_failure(storage: Storage, durability: str) -> None:
    seen: list[Any] = []
    app = spying(storage, seen, fail=True).compile(storage=storage, durability=durability)

    with pytest.raises(RunFailed) as failed:
        app.run({"x": 1})

    thread_id = failed.value.checkpoint.thread_id
    head = storage.head(thread_id)
    assert head == failed.value.checkpoint and head.status == "failed"
    assert storage.thread_info(thread_id).lease_id is None  # type: ignore[union-attr]


def test_a_fresh_thread_taken_while_its_run_ran_fails_the_run_and_keeps_the_taker(
    storage: Storage,
) -> None:
    taken: list[str] = []

    def usurp(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        # Someone learns the id and starts on it before the run's one write (exit).
        assert storage.acquire(ctx.thread_id, "usurper", seconds=30)
        taken.append(ctx.thread_id)
        return {"steps": ["usurp"]}

    wf = Workflow(reducers={"steps": "append"})
    wf.add_node("usurp", usurp)
    wf.add_edge(START, "usurp")
    app = wf.compile(storage=storage, durability="exit")

    with pytest.raises(LeaseLost, match="created by someone else"):
        app.run({"x": 1})

    info = storage.thread_info(taken[0])
    assert info is not None and (info.head_version, info.lease_id) == (0, "usurper")
    storage.release(taken[0], "usurper")


def test_a_fresh_async_run_keeps_its_lease_alive_past_the_lease_time(storage: Storage) -> None:
    seen: list[Any] = []

    def slow(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        # Longer than the 3 s lease: only the heartbeat's renewals (every second) keep it.
        time.sleep(4.5)
        info = storage.thread_info(ctx.thread_id)
        seen.append(None if info is None else info.lease_id == ctx.run_id)
        return {"steps": ["slow"]}

    wf = Workflow(reducers={"steps": "append"})
    wf.add_node("slow", slow)
    wf.add_edge(START, "slow")
    app = wf.compile(storage=storage, durability="async", lease_seconds=3)

    result = app.run({"x": 1})

    assert seen == [True]
    assert result.state["steps"] == ["slow"]
