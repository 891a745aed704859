"""criogen.selectors: runs of a thread, run by id, derived thread status."""

from __future__ import annotations

import time
import uuid

import pytest

from criogen.selectors import RunNotFound, get_run, runs_for_thread, thread_status, thread_statuses
from criogen.services.assistants import resolve_assistant
from criogen.storage.models import Run, Thread

pytestmark = pytest.mark.django_db


def add_run(thread: Thread, status: str) -> Run:
    return Run.objects.create(
        thread=thread,
        assistant=resolve_assistant(assistant_id="steps"),
        graph_id="steps",
        status=status,
    )


@pytest.mark.parametrize(
    ("head_status", "run_status", "lease", "expected"),
    [
        ("", None, False, "idle"),
        ("completed", "success", False, "idle"),
        ("completed", "pending", False, "busy"),
        ("suspended", "running", False, "busy"),
        ("completed", None, True, "busy"),
        ("suspended", "interrupted", False, "interrupted"),
        ("failed", "error", False, "error"),
        ("in_progress", "interrupted", False, "idle"),
    ],
)
def test_it_derives_the_thread_status(
    thread_id: str, head_status: str, run_status: str | None, lease: bool, expected: str
) -> None:
    thread = Thread.objects.create(
        id=thread_id,
        head_status=head_status,
        lease_id="r" if lease else None,
        lease_expires=time.time() + 30 if lease else 0,
    )
    if run_status:
        add_run(thread, run_status)

    assert thread_status(thread) == expected
    assert thread_statuses([thread]) == {thread_id: expected}


def test_it_lists_a_threads_runs_newest_first_and_finds_one(thread_id: str) -> None:
    thread = Thread.objects.create(id=thread_id)
    runs = [add_run(thread, s) for s in ("success", "error", "pending")]

    assert [r.pk for r in runs_for_thread(thread_id=thread_id)] == [r.pk for r in runs[::-1]]
    assert [r.status for r in runs_for_thread(thread_id=thread_id, status="error")] == ["error"]
    assert get_run(run_id=str(runs[0].pk), thread_id=thread_id).pk == runs[0].pk


@pytest.mark.parametrize("run_id", ["nope", str(uuid.uuid4())])
def test_an_unknown_run_is_run_not_found(thread_id: str, run_id: str) -> None:
    with pytest.raises(RunNotFound) as caught:
        get_run(run_id=run_id)
    assert caught.value.code == "run_not_found"


def test_a_run_on_another_thread_is_not_found(thread_id: str) -> None:
    run = add_run(Thread.objects.create(id=thread_id), "success")
    Thread.objects.create(id="other")

    with pytest.raises(RunNotFound):
        get_run(run_id=str(run.pk), thread_id="other")
