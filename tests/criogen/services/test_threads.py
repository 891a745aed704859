"""criogen.services.threads: rewind, TTL policies and the sweep (also the command)."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from criogen.engine.errors import InvalidArgument, ThreadBusy, ThreadNotFound
from criogen.registry import get_graph
from criogen.selectors import viewer as as_viewer
from criogen.services.runs import create_run, wait_run
from criogen.services.threads import (
    delete_thread,
    rewind_thread,
    set_thread_ttl,
    sweep_threads,
)
from criogen.storage.models import AuditEvent, Checkpoint, Run, Thread, Value

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("inprocess_runner")]


def run_turns(thread_id: str, turns: int = 2, **input: Any) -> Thread:
    for _ in range(turns):
        run = create_run(
            thread_id=thread_id, assistant_id="steps", input=dict(input), if_not_exists="create"
        )
        assert wait_run(run=run, timeout=10).status == "success"
    return Thread.objects.get(pk=thread_id)


def expire(thread: Thread, strategy: str, minutes: int = 5) -> None:
    set_thread_ttl(thread=thread, minutes=minutes, strategy=strategy)
    Thread.objects.filter(pk=thread.pk).update(expires_at=timezone.now() - timedelta(seconds=1))


def test_the_sweep_deletes_an_expired_thread_with_its_runs_and_checkpoints(thread_id: str) -> None:
    expire(run_turns(thread_id), "delete")

    assert sweep_threads() == {"deleted": 1, "pruned": 0}
    assert not Thread.objects.filter(pk=thread_id).exists()
    assert not Run.objects.filter(thread_id=thread_id).exists()
    assert not Checkpoint.objects.filter(thread_id=thread_id).exists()
    assert not Value.objects.filter(thread_id=thread_id).exists()


def test_keep_latest_compacts_history_to_the_head_and_rearms(thread_id: str) -> None:
    thread = run_turns(thread_id, turns=3)
    before = get_graph("steps").thread(thread_id).state
    expire(thread, "keep_latest", minutes=10)

    assert sweep_threads() == {"deleted": 0, "pruned": 1}

    thread.refresh_from_db()
    assert Checkpoint.objects.filter(thread_id=thread_id).count() == 1
    assert get_graph("steps").thread(thread_id).state == before
    assert thread.expires_at > timezone.now() + timedelta(minutes=9)
    # Still usable: the next turn appends to the compacted state.
    run_turns(thread_id, turns=1)
    assert get_graph("steps").thread(thread_id).state["steps"] == ["a", "b", "c"] * 4


def test_the_sweep_never_touches_a_thread_with_an_active_run(thread_id: str) -> None:
    thread = run_turns(thread_id, turns=1)
    expire(thread, "delete")
    run = create_run(thread_id=thread_id, assistant_id="steps", input={"sleep": 0.5})

    assert sweep_threads() == {"deleted": 0, "pruned": 0}
    wait_run(run=run, timeout=10)
    assert sweep_threads() == {"deleted": 1, "pruned": 0}


def test_threads_that_have_not_expired_are_left_alone(thread_id: str) -> None:
    set_thread_ttl(thread=run_turns(thread_id, turns=1), minutes=60, strategy="delete")

    assert sweep_threads() == {"deleted": 0, "pruned": 0}


@pytest.mark.parametrize(
    ("minutes", "strategy", "field"),
    [(0, "delete", "ttl"), (5, "archive", "ttl.strategy"), ("5", "delete", "ttl")],
)
def test_it_refuses_a_bad_ttl(thread_id: str, minutes: Any, strategy: str, field: str) -> None:
    thread = Thread.objects.create(id=thread_id)
    with pytest.raises(InvalidArgument) as caught:
        set_thread_ttl(thread=thread, minutes=minutes, strategy=strategy)
    assert caught.value.details["field"] == field


def test_the_sweep_command_reaps_and_sweeps_and_prints_json(thread_id: str) -> None:
    expire(run_turns(thread_id, turns=1), "delete")
    out = io.StringIO()

    call_command("criogen_sweep", stdout=out)

    assert json.loads(out.getvalue()) == {
        "reaped": {"requeued": [], "restarted": []},
        "ttl": {"deleted": 1, "pruned": 0},
        "streams": 0,
        "outbound": 0,
        "deadlines": {"defaults": 0, "reminders": 0, "overdue": 0},
    }


def test_rewind_forks_the_thread_from_an_earlier_checkpoint(thread_id: str) -> None:
    run_turns(thread_id, turns=2)
    first_turn_end = Checkpoint.objects.get(thread_id=thread_id, version=4)

    fork = rewind_thread(thread_id=thread_id, checkpoint_id=first_turn_end.id, by="alice")

    assert fork.source == "fork" and fork.version == 9
    assert get_graph("steps").thread(thread_id).state["steps"] == ["a", "b", "c"]


def test_rewind_refuses_a_busy_thread(thread_id: str) -> None:
    run_turns(thread_id, turns=1)
    run = create_run(thread_id=thread_id, assistant_id="steps", input={"sleep": 0.4})
    with pytest.raises(ThreadBusy):
        rewind_thread(thread_id=thread_id, checkpoint_id="x", by="alice")
    wait_run(run=run, timeout=10)


def test_a_run_from_an_earlier_checkpoint_branches_with_new_input(thread_id: str) -> None:
    run_turns(thread_id, turns=2)
    first_turn_end = Checkpoint.objects.get(thread_id=thread_id, version=4)

    run = create_run(
        thread_id=thread_id,
        assistant_id="steps",
        input={"n": 100},
        checkpoint={"checkpoint_id": first_turn_end.id},
    )

    assert wait_run(run=run, timeout=10).status == "success"
    assert get_graph("steps").thread(thread_id).state == {
        "n": 103,
        "steps": ["a", "b", "c", "a", "b", "c"],
    }


# -- delete for a caller ---------------------------------------------------------------


def test_a_caller_deletes_their_own_thread_and_no_one_elses(
    thread_id: str, owner: Any, stranger: Any, operator: Any
) -> None:
    run_turns(thread_id, turns=1)
    Thread.objects.filter(pk=thread_id).update(owner=owner)

    with pytest.raises(ThreadNotFound, match="not found"):
        delete_thread(thread_id=thread_id, by="sam", door="api", who=as_viewer(stranger))
    assert Thread.objects.filter(pk=thread_id).exists()
    assert not AuditEvent.objects.filter(thread_id=thread_id, action="delete").exists()

    assert delete_thread(thread_id=thread_id, by="alice", door="api", who=as_viewer(owner))
    assert not Thread.objects.filter(pk=thread_id).exists()
    assert AuditEvent.objects.filter(thread_id=thread_id, action="delete").count() == 1
    # Gone: not found for anyone, operators included.
    with pytest.raises(ThreadNotFound):
        delete_thread(thread_id=thread_id, by="olga", door="api", who=as_viewer(operator))


def test_another_users_busy_thread_is_not_found_and_its_runs_go_on(
    thread_id: str, owner: Any, stranger: Any, operator: Any
) -> None:
    run_turns(thread_id, turns=1)
    Thread.objects.filter(pk=thread_id).update(owner=owner)
    Run.objects.filter(thread_id=thread_id).update(status="pending")

    with pytest.raises(ThreadNotFound):
        delete_thread(thread_id=thread_id, by="sam", door="api", who=as_viewer(stranger))
    assert Run.objects.get(thread_id=thread_id).status == "pending"

    # An operator sees every thread: its run is cancelled, then the thread goes.
    assert delete_thread(thread_id=thread_id, by="olga", door="api", who=as_viewer(operator))
    assert not Thread.objects.filter(pk=thread_id).exists()
    assert AuditEvent.objects.filter(thread_id=thread_id, action="delete").count() == 1
