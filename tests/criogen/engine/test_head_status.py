"""The spec's head-status table, row by row, through ``Workflow`` on every backend.

| Head        | run()                                   | What to call            |
| completed   | starts a new turn                       | anything                |
| suspended   | fails: thread_suspended                 | resume                  |
| failed      | starts a new turn; the failed one stays | retry() continues it    |
| in_progress, no run alive (process died) | fails: thread_interrupted | retry() |

The last row is proved with a real process killed with SIGKILL in the middle of a node.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from criogen import START, Storage, Workflow
from criogen.engine.errors import (
    NothingToRetry,
    NotSuspended,
    RunFailed,
    ThreadBusy,
    ThreadInterrupted,
    ThreadSuspended,
)
from tests.criogen.engine.workflow_process import HANG_ENV, build

SCRIPT = Path(__file__).with_name("workflow_process.py")


class ProcessDied(BaseException):
    """Stands for the process going away mid-node: no failure checkpoint is written."""


def flaky_workflow(trouble: list[type[BaseException]]) -> Workflow:
    """START -> prepare -> work -> finish; ``work`` raises ``trouble.pop()`` while any."""

    def work(state: dict[str, Any]) -> dict[str, Any]:
        if trouble:
            raise trouble.pop()("the work node broke")
        return {"steps": ["work"]}

    wf = Workflow(reducers={"steps": "append"})
    wf.add_node("prepare", lambda s: {"steps": ["prepare"]})
    wf.add_node("work", work)
    wf.add_node("finish", lambda s: {"steps": ["finish"]})
    wf.add_edge(START, "prepare").add_edge("prepare", "work").add_edge("work", "finish")
    return wf


# -- completed ------------------------------------------------------------------------


def test_a_completed_head_starts_a_new_turn(storage: Storage, thread_id: str) -> None:
    th = flaky_workflow([]).compile(storage=storage).thread(thread_id)
    first = th.run({"turn": 1})

    second = th.run({"turn": 2})

    assert first.status == second.status == "completed"
    assert second.run_id != first.run_id
    assert second.state == {
        "turn": 2,
        "steps": ["prepare", "work", "finish", "prepare", "work", "finish"],
    }
    new_input = th.history()[3]
    assert (new_input.version, new_input.source, new_input.parent_id) == (
        5,
        "input",
        first.checkpoint.id,
    )
    with pytest.raises(NothingToRetry) as exc:
        th.retry()
    assert exc.value.code == "nothing_to_retry"
    with pytest.raises(NotSuspended) as not_suspended:
        th.resume("yes")
    assert not_suspended.value.code == "not_suspended"


# -- suspended ------------------------------------------------------------------------


def test_a_suspended_head_refuses_a_new_turn_until_resumed(
    storage: Storage, thread_id: str
) -> None:
    th = build().compile(storage=storage).thread(thread_id)
    paused = th.run({"amount": 42})
    assert paused.status == "suspended"
    [interrupt] = paused.interrupts
    assert (interrupt["node"], interrupt["reason"], interrupt["payload"]) == (
        "ask",
        "approve?",
        {"amount": 42},
    )

    with pytest.raises(ThreadSuspended) as exc:
        th.run({"amount": 1})

    assert exc.value.code == "thread_suspended"
    assert exc.value.thread_id == thread_id
    assert "resume()" in exc.value.message
    assert th.head == paused.checkpoint  # nothing written
    with pytest.raises(NothingToRetry):
        th.retry()
    done = th.resume({"ok": True})
    assert done.status == "completed"
    assert done.state["answer"] == {"ok": True}
    assert done.state["steps"] == ["prepare", "work", "ask", "done"]
    assert th.run({"amount": 7}).status == "suspended"  # a new turn is allowed again


# -- failed ---------------------------------------------------------------------------


def test_a_failed_head_starts_a_new_turn_and_leaves_the_failed_one_as_it_was(
    storage: Storage, thread_id: str
) -> None:
    th = flaky_workflow([RuntimeError]).compile(storage=storage).thread(thread_id)
    with pytest.raises(RunFailed) as exc:
        th.run({"turn": 1})
    failed = exc.value.checkpoint
    assert (failed.source, failed.status, failed.next) == ("failure", "failed", ("work",))

    again = th.run({"turn": 2})

    assert again.status == "completed"
    assert again.state == {"turn": 2, "steps": ["prepare", "prepare", "work", "finish"]}
    assert th.checkpoint(failed.id) == failed
    assert failed in th.history()
    with pytest.raises(NothingToRetry):
        th.retry()


def test_retry_continues_the_failed_turn(storage: Storage, thread_id: str) -> None:
    th = flaky_workflow([RuntimeError]).compile(storage=storage).thread(thread_id)
    with pytest.raises(RunFailed) as exc:
        th.run({"turn": 1})

    result = th.retry()

    assert result.status == "completed"
    assert result.state == {"turn": 1, "steps": ["prepare", "work", "finish"]}
    assert [(cp.source, cp.status) for cp in reversed(th.history())] == [
        ("input", "in_progress"),
        ("step", "in_progress"),
        ("failure", "failed"),
        ("step", "in_progress"),
        ("step", "completed"),
    ]
    assert th.history()[1].parent_id == exc.value.checkpoint.id


# -- in_progress, no live run -----------------------------------------------------------


def test_an_in_progress_head_without_a_live_run_is_interrupted_and_retry_continues(
    storage: Storage, thread_id: str
) -> None:
    th = flaky_workflow([ProcessDied]).compile(storage=storage, durability="sync").thread(thread_id)
    with pytest.raises(ProcessDied):
        th.run({"turn": 1})
    head = th.head
    assert head is not None
    assert (head.version, head.source, head.status, head.next) == (
        2,
        "step",
        "in_progress",
        ("work",),
    )

    with pytest.raises(ThreadInterrupted) as exc:
        th.run({"turn": 2})

    assert exc.value.code == "thread_interrupted"
    assert "retry()" in exc.value.message
    assert th.head == head  # nothing written
    result = th.retry()
    assert result.status == "completed"
    assert result.state == {"turn": 1, "steps": ["prepare", "work", "finish"]}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_process_killed_mid_node_leaves_the_thread_interrupted_and_retry_continues(
    backend: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    thread_id: str,
    django_db_blocker: Any,
) -> None:
    url = str(request.getfixturevalue(f"{backend}_url"))
    marker = tmp_path / "inside-work"
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", HANG_ENV)}
    with django_db_blocker.unblock():
        storage = Storage(url)  # migrated here, so the child process only checks
        th = build().compile(storage=storage, durability="sync").thread(thread_id)
        child = subprocess.Popen(
            [sys.executable, str(SCRIPT), "hang", url, thread_id, str(marker)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while not marker.exists():
                if child.poll() is not None or time.monotonic() > deadline:
                    out, err = child.communicate(timeout=5)
                    pytest.fail(f"the child never reached node 'work': {out}\n{err}")
                time.sleep(0.05)
            # Alive: its run holds the thread, and its heartbeat keeps the lease going.
            head = th.head
            assert head is not None
            assert (head.version, head.source, head.status, head.next) == (
                2,
                "step",
                "in_progress",
                ("work",),
            )
            assert storage.thread_info(thread_id).lease_id == head.run_id  # type: ignore[union-attr]
            time.sleep(1.2)  # longer than the child's 1 s lease: only renewals keep it
            with pytest.raises(ThreadBusy):
                th.run({"amount": 1}, on_busy="fail")

            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=10)
        finally:
            if child.poll() is None:
                child.kill()
            child.communicate(timeout=10)
        assert child.returncode == -signal.SIGKILL
        assert int(marker.read_text()) == child.pid

        started = time.monotonic()
        with pytest.raises(ThreadInterrupted):
            th.run({"amount": 1})  # waits for the dead run's lease to lapse, then refuses
        assert time.monotonic() - started < 5
        assert th.head == head

        resumed = th.retry()
        assert resumed.status == "suspended"  # work ran again here, then ask suspended
        assert resumed.state["steps"] == ["prepare", "work"]
        assert resumed.state["pid"] == os.getpid()
        done = th.resume("approved")
        assert done.state == {
            "amount": 42,
            "steps": ["prepare", "work", "ask", "done"],
            "pid": os.getpid(),
            "answer": "approved",
            "done_pid": os.getpid(),
        }
        history = list(reversed(th.history()))
        assert [cp.version for cp in history] == list(range(1, len(history) + 1))
        assert {cp.run_id for cp in history[:2]} == {head.run_id}
        assert head.run_id not in {cp.run_id for cp in history[2:]}
        storage.close()
