"""criogen.services.runs: validation, durability, resume/retry, delete, wait."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from criogen.engine.errors import (
    AlreadyDecided,
    CheckpointNotFound,
    InvalidArgument,
    NothingToRetry,
    NotSuspended,
    ThreadBusy,
    ThreadNotFound,
)
from criogen.registry import GraphNotFound, get_graph
from criogen.services.assistants import resolve_assistant
from criogen.services.runs import (
    cancel_run,
    create_run,
    delete_run,
    resolve_durability,
    resume_thread,
    retry_thread,
    wait_run,
)
from criogen.storage.models import Run, Thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("inprocess_runner")]


def make(thread_id: str | None, graph: str = "steps", **options: Any) -> Run:
    options.setdefault("if_not_exists", "create")
    return create_run(thread_id=thread_id, assistant_id=graph, **options)


@pytest.mark.parametrize(
    ("durability", "checkpoint_during", "expected"),
    [
        ("sync", None, "sync"),
        ("exit", True, "exit"),  # durability wins when both are sent
        (None, True, "async"),
        (None, False, "exit"),
        (None, None, "async"),  # the server default
    ],
)
def test_it_resolves_the_durability_of_a_run(
    durability: str | None, checkpoint_during: bool | None, expected: str
) -> None:
    assert resolve_durability(durability, checkpoint_during) == expected


def test_the_server_default_durability_comes_from_settings(settings: Any) -> None:
    settings.CRIOGEN_CHECKPOINT_DURABILITY = "sync"
    assert resolve_durability() == "sync"


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"durability": "fast"}, "durability"),
        ({"checkpoint_during": "yes"}, "checkpoint_during"),
        ({"multitask_strategy": "queue"}, "multitask_strategy"),
        ({"if_not_exists": "maybe"}, "if_not_exists"),
        ({"input": [1, 2]}, "input"),
        ({"input": {"x": float("nan")}}, "input"),
        ({"command": {"jump": "a"}}, "command"),
        ({"command": {"goto": 7}}, "command.goto"),
        ({"command": {"goto": "a", "resume": 1}}, "command.goto"),
        ({"command": {"resume": 1, "update": [1, 2]}}, "command.update"),
        ({"checkpoint_id": "not-a-uuid"}, "checkpoint_id"),
        ({"checkpoint": {"checkpoint_id": "nope"}}, "checkpoint.checkpoint_id"),
        ({"metadata": "x"}, "metadata"),
    ],
)
def test_it_refuses_bad_arguments_naming_the_field(
    thread_id: str, options: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidArgument) as caught:
        make(thread_id, **options)

    assert caught.value.code == "invalid_argument"
    assert caught.value.details["field"] == field
    assert not Run.objects.exists()


def test_it_refuses_an_unknown_thread_unless_asked_to_create_it(thread_id: str) -> None:
    with pytest.raises(ThreadNotFound):
        create_run(thread_id=thread_id, assistant_id="steps", input={})

    run = make(thread_id, input={})
    assert wait_run(run=run, timeout=10).status == "success"


def test_it_refuses_an_unknown_graph_or_assistant(thread_id: str) -> None:
    with pytest.raises(GraphNotFound) as caught:
        make(thread_id, "nope", input={})
    assert caught.value.code == "graph_not_found"
    with pytest.raises(GraphNotFound):
        make(thread_id, str(uuid.uuid4()), input={})


def test_a_stateless_run_gets_a_thread_of_its_own() -> None:
    run = wait_run(run=make(None, input={"n": 1}), timeout=10)

    assert run.status == "success"
    assert run.thread.metadata["stateless"] is True
    assert get_graph("steps").thread(run.thread_id).state["n"] == 4


def test_it_records_the_run_and_the_thread_metadata(thread_id: str) -> None:
    run = make(
        thread_id,
        input={"n": 1},
        metadata={"source": "test"},
        config={"tags": ["x"]},
        webhook="http://127.0.0.1:9/hook",
        durability="exit",
    )
    run = wait_run(run=run, timeout=10)

    assert (run.graph_id, run.durability, run.metadata) == ("steps", "exit", {"source": "test"})
    assert run.kwargs["config"] == {"tags": ["x"]}
    assert run.kwargs["webhook"] == "http://127.0.0.1:9/hook"
    assert Thread.objects.get(pk=thread_id).metadata["graph_id"] == "steps"


def test_resume_thread_answers_the_suspension_on_the_threads_assistant(thread_id: str) -> None:
    wait_run(run=make(thread_id, "hitl", input={}), timeout=10)

    run = wait_run(run=resume_thread(thread_id=thread_id, value="yes", by="alice"), timeout=10)

    assert (run.status, run.graph_id, run.command) == ("success", "hitl", {"resume": "yes"})
    assert run.metadata == {"resumed_by": "alice"}


def test_a_second_answer_while_the_first_is_queued_is_refused_by_name(thread_id: str) -> None:
    from django.db import transaction

    wait_run(run=make(thread_id, "hitl", input={}), timeout=10)
    with transaction.atomic():  # the first answer is queued, not yet running
        first = resume_thread(thread_id=thread_id, value="yes", by="alice")
        with pytest.raises(AlreadyDecided) as caught:
            resume_thread(thread_id=thread_id, value="no", by="bob")
    assert caught.value.details["decided_by"] == "alice"
    assert wait_run(run=first, timeout=10).status == "success"
    assert Run.objects.filter(thread_id=thread_id, command__isnull=False).count() == 1


def test_a_late_second_answer_after_the_first_has_run_is_already_decided(
    thread_id: str,
) -> None:
    wait_run(run=make(thread_id, "hitl", input={}), timeout=10)
    first = resume_thread(thread_id=thread_id, value="yes", by="alice")
    assert wait_run(run=first, timeout=10).status == "success"  # the thread moved on

    with pytest.raises(AlreadyDecided) as caught:
        resume_thread(thread_id=thread_id, value="no", by="bob")
    assert caught.value.details["decided_by"] == "alice"
    assert caught.value.details["run_id"] == str(first.run_id)
    # After a new turn the thread is simply not waiting: nothing to resume.
    wait_run(run=make(thread_id, "hitl", input={}), timeout=10)
    assert resume_thread(thread_id=thread_id, value="again", by="bob") is not None


def _reads(queries: Any, table: str) -> int:
    return sum(
        1 for q in queries if q["sql"].startswith("SELECT") and f'FROM "{table}"' in q["sql"]
    )


@pytest.mark.parametrize("operator", [True, False])
def test_an_answer_reads_the_thread_and_its_assistant_once_before_it_locks_the_thread(
    thread_id: str, operator: bool, settings: Any
) -> None:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from criogen.services.runs import Decider, answer_thread

    settings.CRIOGEN_DECIDERS = {"*": ["owners"]}
    alice = User.objects.create(username="alice")
    wait_run(run=make(thread_id, "hitl", input={}, owner=alice), timeout=10)
    head = Thread.objects.get(pk=thread_id).head_id

    with CaptureQueriesContext(connection) as seen:
        answer_thread(
            thread_id=thread_id,
            value="yes",
            by="alice",
            door="ui",
            expected=head,
            decider=Decider(None if operator else alice, operator),
        )

    # Who may decide, which assistant answers and the compare-and-set need the row
    # once before the transaction and once locked in it; the last run (with its
    # assistant) once; the head checkpoint once (to check the answer's shape).
    assert _reads(seen.captured_queries, "criogen_thread") == 2
    assert _reads(seen.captured_queries, "criogen_assistant") == 0
    assert sum(1 for q in seen.captured_queries if "FROM criogen_checkpoint" in q["sql"]) == 1


def test_an_update_with_a_resume_asks_who_may_decide_once(thread_id: str, settings: Any) -> None:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from criogen.services.runs import Decider

    settings.CRIOGEN_DECIDERS = {"*": ["owners"]}
    alice = User.objects.create(username="alice")
    wait_run(run=make(thread_id, "hitl", input={}, owner=alice), timeout=10)

    with CaptureQueriesContext(connection) as seen:
        run = make(
            thread_id,
            "hitl",
            command={"resume": "yes", "update": {"note": "checked"}},
            by="alice",
            decider=Decider(alice, False),
        )

    assert wait_run(run=run, timeout=10).status == "success"
    # The thread's last run is read once for who may decide (not once per part of the
    # command), and once by the update (the graph whose state it updates).
    last_runs = [
        q
        for q in seen.captured_queries
        if q["sql"].startswith("SELECT")
        and 'FROM "criogen_run"' in q["sql"]
        and q["sql"].endswith('ORDER BY "criogen_run"."created_at" DESC LIMIT 1')
    ]
    assert len(last_runs) == 2


def test_resume_refuses_a_thread_that_is_not_waiting(thread_id: str) -> None:
    wait_run(run=make(thread_id, input={}), timeout=10)

    with pytest.raises(NotSuspended):
        resume_thread(thread_id=thread_id, value=1, by="alice")


def test_retry_thread_continues_a_failed_turn_from_its_last_checkpoint(thread_id: str) -> None:
    failed = wait_run(run=make(thread_id, input={"fail": True}), timeout=10)
    assert failed.status == "error"

    retried = wait_run(run=retry_thread(thread_id=thread_id, by="bob"), timeout=10)

    # The input still says fail, so b fails again; but the turn was continued, not
    # restarted: one input checkpoint, and a ran once.
    assert (retried.status, retried.kwargs["action"]) == ("error", "retry")
    assert retried.error["node"] == "b"
    history = get_graph("steps").thread(thread_id).history()
    assert [c.source for c in history].count("input") == 1
    assert history[0].state["steps"] == ["a"]


def test_retry_refuses_an_unknown_thread() -> None:
    with pytest.raises(ThreadNotFound):
        retry_thread(thread_id="missing", by="bob")


def test_retry_refuses_a_thread_with_nothing_to_retry(thread_id: str) -> None:
    wait_run(run=make(thread_id, input={}), timeout=10)

    with pytest.raises(NothingToRetry):
        retry_thread(thread_id=thread_id, by="bob")


def test_wait_run_returns_the_run_still_active_when_the_timeout_passes(thread_id: str) -> None:
    run = make(thread_id, input={"sleep": 0.5})

    assert wait_run(run=run, timeout=0.05).status in ("pending", "running")
    assert wait_run(run=run, timeout=10).status == "success"


def test_it_deletes_an_ended_run_but_not_an_active_one(thread_id: str) -> None:
    run = make(thread_id, input={"sleep": 0.3})
    with pytest.raises(ThreadBusy):
        delete_run(run=run)

    delete_run(run=wait_run(run=run, timeout=10))
    assert not Run.objects.filter(pk=run.pk).exists()


def test_cancel_refuses_an_unknown_action_and_leaves_ended_runs_alone(thread_id: str) -> None:
    run = wait_run(run=make(thread_id, input={}), timeout=10)
    with pytest.raises(InvalidArgument) as caught:
        cancel_run(run=run, action="explode")
    assert caught.value.details["field"] == "action"

    assert cancel_run(run=run, by="alice").status == "success"


def test_it_refuses_a_checkpoint_that_is_not_on_the_thread(thread_id: str) -> None:
    wait_run(run=make(thread_id, input={}), timeout=10)

    with pytest.raises(CheckpointNotFound) as caught:
        make(thread_id, input={}, checkpoint_id=str(uuid.uuid4()))

    assert caught.value.code == "checkpoint_not_found"
    assert Run.objects.filter(thread_id=thread_id).count() == 1


def test_an_unknown_runner_setting_is_a_configuration_error(settings: Any) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from criogen.runner import enqueue_run

    settings.CRIOGEN_RUNNER = "threads"
    with pytest.raises(ImproperlyConfigured, match="CRIOGEN_RUNNER"):
        enqueue_run(uuid.uuid4())


@pytest.mark.parametrize("path", ["one statement", "orm"])
def test_a_new_turn_on_a_thread_is_written_as_the_orm_writes_it(
    thread_id: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL a turn queued on an existing thread is one statement (the run's
    insert and the thread's metadata, the row locked first); ``orm`` is the path of
    SQLite and of every other case: the rows written are the same."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    if path == "orm":
        monkeypatch.setattr("criogen.services.runs.insert_run", lambda *a, **k: None)
    monkeypatch.setattr("criogen.dispatch.enqueue", lambda run_id, at=None: None)
    Thread.objects.create(id=thread_id, metadata={"team": "ops", "graph_id": "old"})
    resolve_assistant(assistant_id="steps")  # created on first use: not this test's point

    with CaptureQueriesContext(connection) as seen:
        run = make(thread_id, input={"n": 1, "note": "ünïcode"}, metadata={"k": [1, 2]})

    writes = [q["sql"] for q in seen.captured_queries if not q["sql"].startswith("SELECT")]
    if path == "one statement" and connection.vendor == "postgresql":
        assert len(writes) == 1 and "FOR UPDATE" in writes[0]
    loaded = Run.objects.get(pk=run.pk)
    fields = [f.attname for f in Run._meta.concrete_fields]
    assert {f: getattr(run, f) for f in fields} == {f: getattr(loaded, f) for f in fields}
    assert not run._state.adding
    assert (loaded.status, loaded.input, loaded.metadata, loaded.kwargs["door"]) == (
        "pending",
        {"n": 1, "note": "ünïcode"},
        {"k": [1, 2]},
        "api",
    )
    thread = Thread.objects.get(pk=thread_id)
    assert thread.metadata == {
        "team": "ops",
        "graph_id": "steps",
        "assistant_id": str(run.assistant_id),
    }
    assert thread.updated_at >= run.created_at


def test_a_new_turn_on_a_missing_thread_is_refused_or_creates_it(thread_id: str) -> None:
    with pytest.raises(ThreadNotFound):
        make(thread_id, input={}, if_not_exists="reject")
    assert not Run.objects.filter(thread_id=thread_id).exists()

    run = make(thread_id, input={}, if_not_exists="create")
    assert wait_run(run=run, timeout=10).status == "success"
    assert Thread.objects.get(pk=thread_id).metadata["graph_id"] == "steps"
