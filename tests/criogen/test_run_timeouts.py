"""Time limits: a run past its limit ends ``timeout`` between two steps, its thread's
head a failure checkpoint carrying TimeoutError; retry continues it. The limit is the
setting, an assistant's or a run's ``config.configurable.run_timeout_seconds``."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from criogen import runner
from criogen.engine.errors import InvalidArgument, RunFailed
from criogen.registry import get_graph
from criogen.services.assistants import create_assistant, resolve_assistant, update_assistant
from criogen.services.runs import create_run, retry_thread, wait_run
from criogen.storage.models import Run, Thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("inprocess_runner")]


def limit(seconds: float) -> dict[str, Any]:
    return {"configurable": {"run_timeout_seconds": seconds}}


def finish(run: Run, timeout: float = 20) -> Run:
    run = wait_run(run=run, timeout=timeout)
    assert run.status not in ("pending", "running"), f"run still {run.status}"
    return run


def test_the_engine_ends_a_run_whose_should_stop_raises_timeout_with_a_failure_checkpoint(
    thread_id: str,
) -> None:
    # Node b sleeps past the deadline; the check before c raises: b is not cut short.
    deadline = time.time() + 0.2

    def should_stop() -> bool:
        if time.time() >= deadline:
            raise TimeoutError("past the time limit")
        return False

    thread = get_graph("steps").thread(thread_id)
    with pytest.raises(RunFailed) as failed:
        thread.run({"n": 0, "sleep": 0.4}, should_stop=should_stop)

    head = failed.value.checkpoint
    assert (head.source, head.status, head.next) == ("failure", "failed", ("c",))
    assert head.error["type"] == "TimeoutError"
    assert head.state["steps"] == ["a", "b"]
    assert thread.retry().state == {"n": 3, "sleep": 0.4, "steps": ["a", "b", "c"]}


def test_a_run_past_its_limit_ends_timeout_and_retry_continues_it(thread_id: str) -> None:
    run = create_run(
        thread_id=thread_id,
        assistant_id="steps",
        if_not_exists="create",
        input={"n": 0, "sleep": 0.5},
        config=limit(0.2),
    )
    run = finish(run)

    assert run.status == "timeout"
    assert (run.error["type"], run.error["code"]) == ("TimeoutError", "timeout")
    assert (
        run.error["message"] == "the run passed its time limit of 0.2 seconds; retry continues it."
    )
    head = get_graph("steps").thread(thread_id).head
    assert head is not None
    assert (head.source, head.status, head.next) == ("failure", "failed", ("c",))
    assert head.error["type"] == "TimeoutError"
    assert head.state["steps"] == ["a", "b"]

    again = finish(retry_thread(thread_id=thread_id))  # the setting's limit: a day

    assert again.status == "success"
    assert get_graph("steps").thread(thread_id).state["steps"] == ["a", "b", "c"]


def test_an_assistants_limit_applies_and_a_runs_own_overrides_it(thread_id: str) -> None:
    assistant = create_assistant(graph_id="steps", config=limit(0.1))
    key = str(assistant.assistant_id)

    first = finish(
        create_run(
            thread_id=thread_id,
            assistant_id=key,
            if_not_exists="create",
            input={"n": 0, "sleep": 0.3},
        )
    )
    assert first.status == "timeout"
    assert first.kwargs["run_timeout_seconds"] == 0.1

    other = f"{thread_id}-2"
    second = finish(
        create_run(
            thread_id=other,
            assistant_id=key,
            if_not_exists="create",
            input={"n": 0, "sleep": 0.3},
            config=limit(60),
        )
    )
    assert second.status == "success"


def test_the_setting_is_the_default_limit(thread_id: str, settings: Any) -> None:
    settings.CRIOGEN_RUN_TIMEOUT_SECONDS = 0.1
    run = finish(
        create_run(
            thread_id=thread_id,
            assistant_id="steps",
            if_not_exists="create",
            input={"n": 0, "sleep": 0.3},
        )
    )
    assert run.status == "timeout"


@pytest.mark.parametrize("value", [0, -1, "10", True, [1]])
def test_a_bad_limit_is_refused_naming_the_field(thread_id: str, value: Any) -> None:
    with pytest.raises(InvalidArgument) as bad:
        create_run(
            thread_id=thread_id,
            assistant_id="steps",
            if_not_exists="create",
            input={},
            config=limit(value),
        )
    assert bad.value.details["field"] == "config.configurable.run_timeout_seconds"

    with pytest.raises(InvalidArgument) as bad:
        create_assistant(graph_id="steps", config=limit(value))
    assert bad.value.details["field"] == "config.configurable.run_timeout_seconds"
    with pytest.raises(InvalidArgument):
        update_assistant(assistant_id="steps", config=limit(value))


def test_the_reaper_ends_a_dead_workers_run_past_its_deadline_in_timeout(thread_id: str) -> None:
    # A worker died mid-run long ago; its run is taken again, and its first check
    # before a step finds the deadline (counted from when it first started) past.
    Thread.objects.create(id=thread_id)
    run = Run.objects.create(
        thread_id=thread_id,
        assistant=resolve_assistant(assistant_id="steps"),
        graph_id="steps",
        input={"n": 0},
        kwargs={"run_timeout_seconds": 60},
        status="running",
        attempts=1,
        lease_expires=0.0,
        started_at=timezone.now() - timedelta(minutes=5),
    )

    assert str(run.pk) in runner.reap_expired()["requeued"]
    run = finish(run)

    assert (run.status, run.attempts) == ("timeout", 2)
    head = get_graph("steps").thread(thread_id).head
    assert head is not None and head.error["type"] == "TimeoutError"
