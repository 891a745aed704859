"""The background runner, in-process: execute, outcomes, multitask strategies, cancel,
durability, crash recovery through the reaper, and live events."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from criogen import outbound, runner
from criogen.engine.errors import RunCancelled, ThreadBusy
from criogen.events import INBOX_GROUP, run_group, thread_group
from criogen.registry import get_graph
from criogen.services.assistants import resolve_assistant
from criogen.services.runs import cancel_run, create_run, wait_run
from criogen.storage.models import Checkpoint, Run, Thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("inprocess_runner")]


def start(thread_id: str, graph: str = "steps", **options: Any) -> Run:
    options.setdefault("if_not_exists", "create")
    return create_run(thread_id=thread_id, assistant_id=graph, **options)


def finish(run: Run, timeout: float = 20) -> Run:
    run = wait_run(run=run, timeout=timeout)
    assert run.status not in ("pending", "running"), f"run still {run.status}"
    return run


def state(thread_id: str) -> dict[str, Any]:
    return get_graph("steps").thread(thread_id).state


def wait_for_version(thread_id: str, version: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while Thread.objects.filter(pk=thread_id, head_version__gte=version).count() == 0:
        assert time.monotonic() < deadline, f"thread never reached v{version}"
        time.sleep(0.02)


def test_it_runs_a_workflow_in_the_background_to_success(thread_id: str) -> None:
    run = finish(start(thread_id, input={"n": 0}))

    assert (run.status, run.error, run.attempts, run.cancelled_by) == ("success", None, 1, None)
    assert run.started_at is not None and run.ended_at is not None
    assert state(thread_id) == {"n": 3, "steps": ["a", "b", "c"]}


def test_a_suspended_run_ends_interrupted_waiting_for_input_and_resumes(thread_id: str) -> None:
    first = finish(start(thread_id, "hitl", input={"n": 0}))
    assert (first.status, first.cancelled_by) == ("interrupted", None)

    second = finish(create_run(thread_id=thread_id, assistant_id="hitl", command={"resume": "ok"}))

    assert second.status == "success"
    assert get_graph("hitl").thread(thread_id).state["answer"] == "ok"


def test_a_failing_node_ends_the_run_in_error_with_its_code(thread_id: str) -> None:
    run = finish(start(thread_id, input={"fail": True}))

    assert run.status == "error"
    assert run.error["code"] == "run_failed"
    assert run.error["node"] == "b"
    assert "fail=true" in run.error["message"]
    # A RunError record without its traceback, with the error's details.
    assert run.error["type"] == "RunFailed"
    assert run.error["thread_id"] == thread_id
    assert "traceback" not in run.error


def test_an_unknown_graph_in_a_stored_run_ends_it_in_error(thread_id: str) -> None:
    run = start(thread_id, input={})
    finish(run)
    runner.drain(timeout=10)  # the runner is done with the thread (it looks for a next run)
    Run.objects.filter(pk=run.pk).update(status="pending", graph_id="gone")

    assert runner.execute_run(run.pk) == "error"
    run.refresh_from_db()
    assert run.error["code"] == "graph_not_found"
    assert (run.error["type"], run.error["graph_id"], run.error["node"]) == (
        "GraphNotFound",
        "gone",
        None,
    )


def test_a_run_is_claimed_once_and_an_ended_run_not_again(thread_id: str) -> None:
    run = finish(start(thread_id, input={}))
    runner.drain(timeout=10)

    assert runner.execute_run(run.pk) is None
    run.refresh_from_db()
    assert run.attempts == 1


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "encrypted"])
@pytest.mark.parametrize("path", ["returning", "orm"])
def test_the_claim_takes_one_statement_and_returns_the_row_as_the_orm_reads_it(
    thread_id: str, sealed: bool, path: str, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One ``UPDATE … RETURNING``; ``orm`` is the path of databases without it (SQLite
    before 3.35): the same claim in two statements."""
    from cryptography.fernet import Fernet
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    if sealed:
        settings.CRIOGEN_ENCRYPTION_KEY = Fernet.generate_key().decode()
    if path == "orm":
        monkeypatch.setitem(runner._claim_statements, Run.objects.db, None)
    monkeypatch.setattr("criogen.dispatch.enqueue", lambda run_id: None)
    first = start(thread_id, input={"n": 1, "note": "ünïcode"}, metadata={"k": [1, 2]})
    second = start(thread_id, input={"n": 2})

    with CaptureQueriesContext(connection) as queries:
        claimed = runner._claim(str(first.pk))
    assert len(queries.captured_queries) == (1 if path == "returning" else 2)
    assert claimed is not None and not claimed._state.adding
    loaded = Run.objects.get(pk=first.pk)
    fields = [f.attname for f in Run._meta.concrete_fields]
    assert {f: getattr(claimed, f) for f in fields} == {f: getattr(loaded, f) for f in fields}
    assert (claimed.status, claimed.attempts, claimed.input) == (
        "running",
        1,
        {"n": 1, "note": "ünïcode"},
    )
    assert runner._claim(str(first.pk)) is None  # running, with a live lease
    assert runner._claim(str(second.pk)) is None  # its thread's earlier run has not ended

    Run.objects.filter(pk=first.pk).update(lease_expires=time.time() - 1)  # a dead worker
    again = runner._claim(str(first.pk))
    assert again is not None and again.attempts == 2


def test_enqueued_runs_on_one_thread_execute_one_after_another_in_order(thread_id: str) -> None:
    runs = [start(thread_id, input={"sleep": 0.2} if i == 0 else {}) for i in range(3)]
    runs = [finish(r) for r in runs]

    assert [r.status for r in runs] == ["success"] * 3
    for earlier, later in zip(runs, runs[1:], strict=False):
        assert earlier.ended_at <= later.started_at
    assert state(thread_id)["steps"] == ["a", "b", "c"] * 3


def test_reject_refuses_a_second_run_while_the_thread_is_busy(thread_id: str) -> None:
    first = start(thread_id, input={"sleep": 0.5})

    with pytest.raises(ThreadBusy) as caught:
        start(thread_id, input={}, multitask_strategy="reject")

    assert caught.value.code == "thread_busy"
    assert finish(first).status == "success"
    assert Run.objects.filter(thread_id=thread_id).count() == 1


def test_interrupt_cancels_the_running_run_and_keeps_its_checkpoints(thread_id: str) -> None:
    first = start(thread_id, input={"sleep": 0.8}, durability="sync")
    wait_for_version(thread_id, 2)
    time.sleep(0.3)  # a is done, b sleeps

    second = start(thread_id, input={"n": 100}, multitask_strategy="interrupt")
    first, second = finish(first), finish(second)

    assert (first.status, first.cancelled_by, first.cancel_action) == (
        "interrupted",
        f"run:{second.pk}",
        "interrupt",
    )
    assert second.status == "success"
    # b finished its step before the cancel took effect; c never ran for the first run.
    assert Checkpoint.objects.filter(thread_id=thread_id, run_id=str(first.pk)).count() == 3
    assert state(thread_id)["steps"] == ["a", "b", "a", "b", "c"]


def test_rollback_cancels_the_running_run_and_deletes_its_checkpoints(thread_id: str) -> None:
    finish(start(thread_id, input={"n": 0}))
    first = start(thread_id, input={"sleep": 0.6}, durability="sync")
    wait_for_version(thread_id, 6)

    second = start(thread_id, input={}, multitask_strategy="rollback")
    first, second = finish(first), finish(second)

    assert (first.status, first.cancel_action) == ("interrupted", "rollback")
    assert second.status == "success"
    assert not Checkpoint.objects.filter(thread_id=thread_id, run_id=str(first.pk)).exists()
    assert state(thread_id)["steps"] == ["a", "b", "c", "a", "b", "c"]
    versions = list(
        Checkpoint.objects.filter(thread_id=thread_id)
        .order_by("version")
        .values_list("version", flat=True)
    )
    assert versions == list(range(1, len(versions) + 1))


def test_a_person_cancels_a_running_run_which_stops_before_its_next_step(thread_id: str) -> None:
    run = start(thread_id, input={"sleep": 0.5}, durability="sync")
    wait_for_version(thread_id, 2)

    cancel_run(run=run, by="alice")
    run = finish(run)

    assert (run.status, run.cancelled_by) == ("interrupted", "alice")
    assert "c" not in state(thread_id)["steps"]


def test_cancelling_a_pending_run_ends_it_at_once_and_the_next_one_runs(thread_id: str) -> None:
    first = start(thread_id, input={"sleep": 0.4})
    queued = start(thread_id, input={})
    last = start(thread_id, input={"n": 50})

    queued = cancel_run(run=queued, action="rollback", by="bob")

    assert (queued.status, queued.cancelled_by, queued.started_at) == ("interrupted", "bob", None)
    assert finish(first).status == "success"
    assert finish(last).status == "success"


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_each_durability_mode_writes_as_documented(thread_id: str, durability: str) -> None:
    run = finish(start(thread_id, input={}, durability=durability))

    written = Checkpoint.objects.filter(thread_id=thread_id, run_id=str(run.pk)).count()
    assert run.durability == durability
    assert written == (1 if durability == "exit" else 4)
    assert state(thread_id)["steps"] == ["a", "b", "c"]


def _crash_after_first_step(thread_id: str, durability: str) -> Run:
    """A run that a 'dead worker' left running after node a: the run row says running
    with an expired lease; the checkpoints are what the engine wrote before dying."""
    Thread.objects.create(id=thread_id)
    run = Run.objects.create(
        thread_id=thread_id,
        assistant=resolve_assistant(assistant_id="steps"),
        graph_id="steps",
        input={"n": 0},
        durability=durability,
        status="running",
        attempts=1,
        lease_expires=0.0,
    )
    steps = iter([False, True])
    with pytest.raises(RunCancelled):
        get_graph("steps").thread(thread_id).run(
            {"n": 0}, run_id=str(run.pk), durability=durability, should_stop=lambda: next(steps)
        )
    return run


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_the_reaper_requeues_a_dead_run_which_continues_from_its_last_checkpoint(
    thread_id: str, durability: str
) -> None:
    run = _crash_after_first_step(thread_id, durability)
    assert Thread.objects.get(pk=thread_id).head_version == 2

    reaped = runner.reap_expired()
    run = finish(run)

    assert str(run.pk) in reaped["requeued"]
    assert (run.status, run.attempts) == ("success", 2)
    versions = Checkpoint.objects.filter(thread_id=thread_id, run_id=str(run.pk))
    assert sorted(versions.values_list("version", flat=True)) == [1, 2, 3, 4]
    assert state(thread_id) == {"n": 3, "steps": ["a", "b", "c"]}


def test_the_reaper_restarts_a_dead_exit_run_from_the_state_before_it(thread_id: str) -> None:
    run = _crash_after_first_step(thread_id, "exit")
    assert Thread.objects.get(pk=thread_id).head_version == 0  # exit wrote nothing

    runner.reap_expired()
    run = finish(run)

    assert (run.status, run.attempts) == ("success", 2)
    assert Checkpoint.objects.filter(thread_id=thread_id).count() == 1
    assert state(thread_id) == {"n": 3, "steps": ["a", "b", "c"]}


def test_the_reaper_leaves_live_runs_alone(thread_id: str) -> None:
    run = start(thread_id, input={"sleep": 0.5})
    wait_for_version(thread_id, 1)

    assert runner.reap_expired() == {"requeued": [], "restarted": []}
    assert finish(run).attempts == 1


def test_a_node_longer_than_the_lease_keeps_its_run_while_the_reaper_runs(
    thread_id: str,
) -> None:
    # The heartbeat renews the leases on a thread of its own, not between steps: node b
    # sleeps through more than three leases (2 s here) and nobody takes its run away.
    run = start(thread_id, input={"sleep": 7}, durability="sync")
    wait_for_version(thread_id, 2)
    deadline = time.monotonic() + 30
    while Run.objects.filter(pk=run.pk, status="running").exists():
        assert runner.reap_expired() == {"requeued": [], "restarted": []}
        assert time.monotonic() < deadline
        time.sleep(0.2)

    run = finish(run)
    assert (run.status, run.attempts, run.hand_backs) == ("success", 1, 0)


def test_re_claims_after_crashes_do_not_use_up_the_hand_back_limit(thread_id: str) -> None:
    first = start(thread_id, input={"sleep": 1})
    second = start(thread_id, input={"n": 0, "sleep": 1.5}, durability="sync")
    # Four workers died holding the second run: the reaper gave it back four times.
    assert Run.objects.filter(pk=second.pk, status="pending").update(attempts=4) == 1
    finish(first)
    deadline = time.monotonic() + 20
    while Checkpoint.objects.filter(run_id=str(second.pk)).count() < 2:
        assert time.monotonic() < deadline, "the second run never got to node b"
        time.sleep(0.02)
    # Its fifth claim loses the thread while node b runs: it hands the run back
    # instead of ending it in error, as its first hand-back.
    Thread.objects.filter(pk=thread_id).update(lease_id="intruder", lease_expires=time.time() + 60)
    while not Run.objects.filter(pk=second.pk, hand_backs=1).exists():
        assert time.monotonic() < deadline, Run.objects.get(pk=second.pk).status
        time.sleep(0.02)
    Thread.objects.filter(pk=thread_id).update(lease_id=None, lease_expires=0)

    second = finish(second)
    assert (second.status, second.error, second.attempts, second.hand_backs) == (
        "success",
        None,
        6,
        1,
    )
    assert state(thread_id)["steps"] == ["a", "b", "c", "a", "b", "c"]


def test_a_shutdown_hands_the_run_back_after_its_current_step(thread_id: str) -> None:
    run = start(thread_id, input={"sleep": 0.8}, durability="sync")
    wait_for_version(thread_id, 2)
    time.sleep(0.3)  # b is sleeping
    try:
        runner.request_shutdown()
        runner.drain(timeout=10)
    finally:
        runner._shutdown.clear()
    run.refresh_from_db()
    assert (run.status, run.attempts) == ("pending", 1)
    assert Thread.objects.get(pk=thread_id).head_version == 3  # b finished and checkpointed

    runner.enqueue_run(run.pk)
    run = finish(run)

    assert (run.status, run.attempts) == ("success", 2)
    assert state(thread_id)["steps"] == ["a", "b", "c"]


def _drain_group(group: str) -> list[dict[str, Any]]:
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(group, channel)
    return [channel]  # type: ignore[list-item]


def _received(channel: str) -> list[dict[str, Any]]:
    from criogen import events

    assert events.flush(), "the event publisher did not drain"  # sending is queued
    layer = get_channel_layer()
    out = []
    while True:
        try:
            out.append(async_to_sync(_receive_now)(layer, channel))
        except TimeoutError:
            return out


async def _receive_now(layer: Any, channel: str) -> dict[str, Any]:
    import asyncio

    return await asyncio.wait_for(layer.receive(channel), 0.05)


def test_it_sends_checkpoint_and_run_events_to_the_thread_run_and_inbox_groups(
    thread_id: str,
) -> None:
    from criogen import events

    events.install()
    (thread_channel,) = _drain_group(thread_group(thread_id))
    (inbox_channel,) = _drain_group(INBOX_GROUP)
    run = start(thread_id, "hitl", input={"n": 0})
    (run_channel,) = _drain_group(run_group(run.pk))
    finish(run)
    resumed = finish(create_run(thread_id=thread_id, assistant_id="hitl", command={"resume": 1}))

    on_thread = _received(thread_channel)
    written = [e for e in on_thread if e["type"] == "checkpoint.written"]
    assert [(e["version"], e["source"], e["status"]) for e in written] == [
        (1, "input", "in_progress"),
        (2, "step", "in_progress"),
        (3, "suspend", "suspended"),
        (4, "step", "in_progress"),
        (5, "step", "completed"),
    ]
    assert written[1]["updates"] == {"a": {"steps": ["a"], "n": 1}}
    assert {e["run_id"] for e in written} == {str(run.pk), str(resumed.pk)}
    changes = [(e["run_id"], e["status"]) for e in on_thread if e["type"] == "run.changed"]
    assert (str(run.pk), "interrupted") in changes and (str(resumed.pk), "success") in changes
    # The inbox hears the thread enter (suspended) and leave (the first step after).
    assert [e["version"] for e in _received(inbox_channel)] == [3, 4]
    assert [e["status"] for e in _received(run_channel)][-1] == "interrupted"


def test_an_ended_run_is_posted_to_its_webhook_with_the_state(
    thread_id: str, settings: Any
) -> None:
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    received: list[dict[str, Any]] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    # Loopback is refused by default (docs/security.md, "Outbound calls"): this test's
    # listener is allowed explicitly.
    settings.CRIOGEN_OUTBOUND_ALLOW = ["127.0.0.1"]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/done"
        run = finish(start(thread_id, input={"n": 0}, webhook=url))
        runner.drain(timeout=10)
        assert outbound.drain(timeout=30)
    finally:
        server.shutdown()
        server.server_close()

    (posted,) = received
    assert (posted["run_id"], posted["thread_id"], posted["status"]) == (
        str(run.pk),
        thread_id,
        "success",
    )
    assert posted["values"] == {"n": 3, "steps": ["a", "b", "c"]}


def test_a_live_run_wrongly_reaped_is_not_run_twice_and_still_completes(thread_id: str) -> None:
    run = start(thread_id, input={"n": 0, "sleep": 0.8}, durability="sync")
    wait_for_version(thread_id, 2)  # b sleeps on the first attempt
    # The worker "stalls": the reaper looks at its lease from a moment past its expiry
    # (renewed or not meanwhile: setting the lease to 0 here raced the heartbeat, which
    # could renew it between that update and the reaper's) and takes the run away.
    assert runner.reap_expired(leases_at=time.time() + 60)["requeued"] == [str(run.pk)]

    run = finish(run, timeout=30)
    runner.drain(timeout=30)

    assert run.status == "success"
    assert run.attempts >= 2
    assert state(thread_id) == {"n": 3, "steps": ["a", "b", "c"], "sleep": 0.8}
    versions = Checkpoint.objects.filter(thread_id=thread_id).values_list("version", flat=True)
    assert sorted(versions) == [1, 2, 3, 4]


def test_a_plain_script_gets_no_event_listener_or_runner(tmp_path: Any) -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        f"from criogen import Storage\n"
        f"Storage('sqlite://{tmp_path}/plain.db')\n"
        "loaded = sorted(m for m in sys.modules if m in "
        "('criogen.events', 'criogen.runner', 'celery', 'channels'))\n"
        "print(loaded)\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_server_exiting_mid_run_hands_the_run_back_after_its_step(tmp_path: Any) -> None:
    import os
    import subprocess
    import sys

    url = f"sqlite://{tmp_path}/exit.db"
    env = {**os.environ, "DATABASE_URL": url, "CRIOGEN_SWEEP_SECONDS": "0"}
    code = (
        "import time\n"
        "from criogen.services.runs import create_run\n"
        "from criogen.storage.models import Thread\n"
        "run = create_run(thread_id='t', assistant_id='steps', input={'sleep': 1},"
        " durability='sync', if_not_exists='create')\n"
        "while not Thread.objects.filter(pk='t', head_version__gte=2).exists():\n"
        "    time.sleep(0.02)\n"
        "time.sleep(0.3)\n"
        "print(run.pk)\n"  # the script ends here, while b sleeps
    )
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=root, env=env, check=True)
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip().splitlines()[-1]

    import sqlite3

    with sqlite3.connect(tmp_path / "exit.db") as db:
        run = db.execute(
            "SELECT status, attempts FROM criogen_run WHERE run_id = ?", [run_id.replace("-", "")]
        ).fetchone()
        (head_version,) = db.execute(
            "SELECT head_version FROM criogen_thread WHERE id = 't'"
        ).fetchone()
    assert run == ("pending", 1)
    assert head_version == 3  # b finished and was checkpointed


@pytest.mark.parametrize("path", ["one statement", "orm"])
def test_a_runs_end_is_one_statement_and_its_threads_next_run_is_handed_over(
    thread_id: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL the run's end is one prepared statement; ``orm`` is SQLite's path:
    the outcome is the same, and the thread's next pending run is read after the end
    has committed (in the same statement, a run queued meanwhile could be missed)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    import criogen.runner.execute
    from criogen.runner.execute import _Outcome

    if path == "orm":
        monkeypatch.setattr(criogen.runner.execute, "end_run", lambda *a, **k: None)
    monkeypatch.setattr("criogen.dispatch.enqueue", lambda run_id, at=None: None)
    enqueued: list[str] = []
    monkeypatch.setattr(
        "criogen.runner.handoff.enqueue_run", lambda run_id, at=None: enqueued.append(str(run_id))
    )
    first = start(thread_id, input={})
    second = start(thread_id, input={})

    with CaptureQueriesContext(connection) as seen:
        assert runner.execute_run(first.pk) == "success"

    first.refresh_from_db()
    assert (first.status, first.error, first.lease_expires) == ("success", None, 0.0)
    assert first.ended_at is not None and first.updated_at == first.ended_at
    assert enqueued == [str(second.pk)]
    statements = [q["sql"] for q in seen.captured_queries]
    ends = [sql for sql in statements if sql.startswith("UPDATE") and "CASE WHEN" in sql]
    expected = 1 if path == "one statement" and connection.vendor == "postgresql" else 0
    assert len(ends) == expected
    # The next run is read after the end, in a statement of its own.
    end = next(i for i, sql in enumerate(statements) if "ended_at" in sql)
    assert any("\"status\" = 'pending'" in sql for sql in statements[end + 1 :]), statements
    # An attempt that lost its run (another attempt took it over) does not end it; the
    # thread's next run is still handed over.
    enqueued.clear()
    Run.objects.filter(pk=second.pk).update(status="running", attempts=2)
    second.attempts = 1  # what the attempt that lost it claimed
    third = start(thread_id, input={})
    monkeypatch.setattr(criogen.runner.execute, "_claim", lambda run_id: second)
    monkeypatch.setattr(criogen.runner.execute, "_drive", lambda run, stop: _Outcome("success"))
    assert runner.execute_run(second.pk) == "success"
    assert Run.objects.get(pk=second.pk).status == "running"
    assert enqueued == [str(third.pk)]


def test_an_attempt_that_ends_late_leaves_the_next_attempts_renewals_alone() -> None:
    from criogen.runner.leases import _Leases

    leases = _Leases()
    leases.add("run-1", 1)
    # The reaper gave the run away and a second attempt started in this process…
    leases.add("run-1", 2)
    # …before the first one noticed and ended: its end must not stop the second's
    # renewals (the run would then look dead a lease later and be taken away again).
    leases.remove("run-1", 1)
    assert leases._runs == {"run-1": 2}
    leases.remove("run-1", 2)
    assert leases._runs == {}
