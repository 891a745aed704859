"""One run per thread: a second call waits (``on_busy="wait"``) or fails (``"fail"``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from criogen import START, NodeContext, Storage, Workflow
from criogen.engine.errors import LeaseLost, ThreadBusy


def gated_workflow(gate: threading.Event, inside: threading.Event) -> Workflow:
    """START -> hold -> after; ``hold`` waits for ``gate`` the first time it runs."""

    def hold(state: dict[str, Any]) -> dict[str, Any]:
        if not gate.is_set():
            inside.set()
            assert gate.wait(20), "the test never opened the gate"
        return {"steps": [f"hold:{state['who']}"]}

    wf = Workflow(reducers={"steps": "append"})
    wf.add_node("hold", hold)
    wf.add_node("after", lambda s: {"steps": [f"after:{s['who']}"]})
    wf.add_edge(START, "hold").add_edge("hold", "after")
    return wf


def appender(name: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def node(state: dict[str, Any]) -> dict[str, Any]:
        return {"steps": [name]}

    return node


def in_thread(fn: Callable[[], Any], storage: Storage) -> tuple[threading.Thread, list[Any]]:
    """Run ``fn`` on a new thread; its result or exception lands in the returned list."""
    out: list[Any] = []

    def target() -> None:
        try:
            out.append(fn())
        except BaseException as exc:
            out.append(exc)
        finally:
            storage.close()  # this thread's database connection

    thread = threading.Thread(target=target)
    thread.start()
    return thread, out


def test_a_second_run_waits_for_the_first_then_runs(storage: Storage, thread_id: str) -> None:
    gate, inside = threading.Event(), threading.Event()
    app = gated_workflow(gate, inside).compile(storage=storage, durability="sync")
    th = app.thread(thread_id)
    first, first_out = in_thread(lambda: th.run({"who": "first"}), storage)
    assert inside.wait(20)

    threading.Timer(0.3, gate.set).start()
    started = time.monotonic()
    second = th.run({"who": "second"})  # on_busy="wait" is the default
    waited = time.monotonic() - started
    first.join(20)

    assert waited >= 0.25
    assert first_out[0].status == second.status == "completed"
    assert second.state["steps"] == [
        "hold:first",
        "after:first",
        "hold:second",
        "after:second",
    ]


def test_on_busy_fail_raises_thread_busy_at_once(storage: Storage, thread_id: str) -> None:
    gate, inside = threading.Event(), threading.Event()
    app = gated_workflow(gate, inside).compile(storage=storage, durability="sync")
    th = app.thread(thread_id)
    first, first_out = in_thread(lambda: th.run({"who": "first"}), storage)
    assert inside.wait(20)
    try:
        before = th.head
        started = time.monotonic()
        with pytest.raises(ThreadBusy) as exc:
            th.run({"who": "second"}, on_busy="fail")
        assert time.monotonic() - started < 0.5
        assert exc.value.code == "thread_busy"
        assert exc.value.thread_id == thread_id
        assert th.head == before  # the refused run wrote nothing
    finally:
        gate.set()
        first.join(20)
    assert first_out[0].state["steps"] == ["hold:first", "after:first"]
    assert len(th.history()) == 3


def test_on_busy_fail_can_be_the_compiled_default(storage: Storage, thread_id: str) -> None:
    gate, inside = threading.Event(), threading.Event()
    app = gated_workflow(gate, inside).compile(storage=storage, on_busy="fail")
    th = app.thread(thread_id)
    first, _ = in_thread(lambda: th.run({"who": "first"}), storage)
    assert inside.wait(20)
    try:
        with pytest.raises(ThreadBusy):
            th.run({"who": "second"})
        with pytest.raises(ThreadBusy):
            th.retry()
        with pytest.raises(ThreadBusy):
            th.rewind("any-checkpoint")
    finally:
        gate.set()
        first.join(20)


def test_waiting_gives_up_with_thread_busy_after_busy_timeout(
    storage: Storage, thread_id: str
) -> None:
    gate, inside = threading.Event(), threading.Event()
    app = gated_workflow(gate, inside).compile(storage=storage)
    th = app.thread(thread_id)
    first, _ = in_thread(lambda: th.run({"who": "first"}), storage)
    assert inside.wait(20)
    try:
        started = time.monotonic()
        with pytest.raises(ThreadBusy, match="after waiting 0.3s"):
            th.run({"who": "second"}, busy_timeout=0.3)
        assert 0.25 <= time.monotonic() - started < 2
    finally:
        gate.set()
        first.join(20)


def test_concurrent_runs_on_one_thread_write_contiguous_versions(
    storage: Storage, thread_id: str
) -> None:
    wf = Workflow(reducers={"steps": "append"})
    for name in ("a", "b", "c"):
        wf.add_node(name, appender(name))
    wf.add_edge(START, "a").add_edge("a", "b").add_edge("b", "c")
    app = wf.compile(storage=storage, durability="async")
    th = app.thread(thread_id)
    runs = 6
    barrier = threading.Barrier(runs)

    def one() -> Any:
        barrier.wait(10)
        return th.run({"n": 1})

    started = [in_thread(one, storage) for _ in range(runs)]
    for thread, _ in started:
        thread.join(60)
    results = [out[0] for _, out in started]

    assert all(r.status == "completed" for r in results), results
    history = list(reversed(th.history()))
    assert [cp.version for cp in history] == list(range(1, 4 * runs + 1))
    # Each run's four checkpoints are together: runs never interleave on one thread.
    run_ids = [cp.run_id for cp in history]
    blocks = [run_ids[i : i + 4] for i in range(0, len(run_ids), 4)]
    assert all(len(set(block)) == 1 for block in blocks)
    assert {block[0] for block in blocks} == {r.run_id for r in results}
    assert th.state["steps"] == ["a", "b", "c"] * runs


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_a_run_whose_lease_was_taken_over_stops_with_lease_lost_and_writes_nothing_more(
    storage: Storage, thread_id: str, durability: str
) -> None:
    def stolen(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        # What a lease that lapsed (a stalled process) looks like to its run: another
        # run takes the thread while this node is still working.
        storage.release(thread_id, ctx.run_id)
        assert storage.acquire(thread_id, "the-other-run", seconds=30)
        return {"steps": ["stolen"]}

    wf = Workflow(reducers={"steps": "append"})
    wf.add_node("first", appender("first"))
    wf.add_node("stolen", stolen)
    wf.add_node("last", appender("last"))
    wf.add_edge(START, "first").add_edge("first", "stolen").add_edge("stolen", "last")
    th = wf.compile(storage=storage, durability=durability).thread(thread_id)

    with pytest.raises(LeaseLost) as exc:
        th.run()

    assert exc.value.code == "lease_lost"
    assert exc.value.thread_id == thread_id
    versions = [cp.version for cp in th.history()]
    if durability == "sync":
        assert versions == [2, 1]  # the step of "stolen" and after were never written
    elif durability == "async":
        # Queued writes that had not landed when the lease went are refused with it.
        assert versions in ([], [1], [2, 1])
    else:
        assert versions == []
    assert storage.thread_info(thread_id).lease_id == "the-other-run"  # type: ignore[union-attr]


def test_a_run_whose_head_cannot_be_read_gives_the_thread_back(thread_id: str) -> None:
    from criogen.engine.active_run import ActiveRun
    from criogen.engine.memory_store import MemoryStorage

    class Unreadable(MemoryStorage):
        def head(self, thread_id: str) -> Any:
            raise OSError("disk gone")

    storage = Unreadable()
    with pytest.raises(OSError), ActiveRun(storage, thread_id):
        pass
    info = storage.thread_info(thread_id)
    assert info is not None and info.lease_id is None
