"""criogen.services.streams: the event log of resumable streams — ids, races, sealing
and the retention sweep (also through ``criogen_sweep``)."""

from __future__ import annotations

import io
import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from criogen.engine.crypto import generate_key
from criogen.services.runs import create_run, wait_run
from criogen.services.streams import (
    append_stream_events,
    prune_streams,
    stream_events_after,
    stream_tail,
)
from criogen.storage.models import Run, StreamEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("inprocess_runner")]

EVENTS = [(0, "", "metadata", '{"run_id":"x"}'), (1, "values", "values", '{"n":1}')]


def ended_run(thread_id: str) -> str:
    run = create_run(
        thread_id=thread_id, assistant_id="steps", input={"n": 0}, if_not_exists="create"
    )
    assert wait_run(run=run, timeout=10).status == "success"
    return str(run.run_id)


def age(run_id: str, seconds: float) -> None:
    StreamEvent.objects.filter(run_id=run_id).update(
        created_at=timezone.now() - timedelta(seconds=seconds)
    )


def test_ids_follow_on_and_a_second_writer_of_the_same_ids_gets_none(thread_id: str) -> None:
    run_id = str(uuid.uuid4())
    assert append_stream_events(run_id=run_id, thread_id=thread_id, after=0, events=EVENTS) == [
        1,
        2,
    ]
    # Another process that read the same tail: its insert loses, nothing is doubled.
    assert append_stream_events(run_id=run_id, thread_id=thread_id, after=1, events=EVENTS) is None
    end = [(1, "", "end", "null")]
    assert append_stream_events(run_id=run_id, thread_id=thread_id, after=2, events=end) == [3]
    tail = stream_tail(run_id=run_id)
    assert tail is not None and (tail.seq, tail.version, tail.ended) == (3, 1, True)
    assert [e.seq for e in stream_events_after(run_id=run_id, after=0)] == [1, 2, 3]
    assert [e.event for e in stream_events_after(run_id=run_id, after=0, modes=["updates"])] == [
        "metadata",
        "end",
    ]
    assert [e.seq for e in stream_events_after(run_id=run_id, after=2)] == [3]


def test_the_events_are_sealed_at_rest_when_a_key_is_set(thread_id: str, settings: Any) -> None:
    settings.CRIOGEN_ENCRYPTION_KEY = generate_key()
    run_id = str(uuid.uuid4())
    append_stream_events(run_id=run_id, thread_id=thread_id, after=0, events=EVENTS)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT data FROM criogen_stream_event WHERE run_id = %s ORDER BY seq",
            [uuid.UUID(run_id).hex if connection.vendor == "sqlite" else run_id],
        )
        stored = [row[0] for row in cursor.fetchall()]
    assert len(stored) == 2
    assert all("run_id" not in s and '"n"' not in s for s in stored)
    assert [e.data for e in stream_events_after(run_id=run_id, after=0)] == [
        '{"run_id":"x"}',
        '{"n":1}',
    ]


def test_the_sweep_deletes_a_settled_log_past_its_retention(thread_id: str, settings: Any) -> None:
    settings.CRIOGEN_STREAM_RETENTION_SECONDS = 60
    run_id = ended_run(thread_id)
    append_stream_events(run_id=run_id, thread_id=thread_id, after=0, events=EVENTS)
    age(run_id, 30)
    assert prune_streams() == 0  # within its retention
    age(run_id, 61)
    assert prune_streams() == 1
    assert stream_tail(run_id=run_id) is None


def test_an_active_runs_log_is_kept_however_old(thread_id: str, settings: Any) -> None:
    settings.CRIOGEN_STREAM_RETENTION_SECONDS = 60
    run_id = ended_run(thread_id)
    append_stream_events(run_id=run_id, thread_id=thread_id, after=0, events=EVENTS)
    age(run_id, 3600)
    Run.objects.filter(pk=run_id).update(status="running")
    assert prune_streams() == 0
    Run.objects.filter(pk=run_id).update(status="success")
    assert prune_streams() == 1


def test_a_log_with_a_recent_event_is_kept(thread_id: str, settings: Any) -> None:
    settings.CRIOGEN_STREAM_RETENTION_SECONDS = 60
    run_id = str(uuid.uuid4())  # a run deleted since: nothing holds its log but time
    append_stream_events(run_id=run_id, thread_id=thread_id, after=0, events=EVENTS)
    age(run_id, 3600)
    append_stream_events(
        run_id=run_id, thread_id=thread_id, after=2, events=[(1, "", "end", "null")]
    )
    assert prune_streams() == 0
    age(run_id, 61)
    assert prune_streams() == 1


def test_criogen_sweep_prunes_the_logs_too(thread_id: str, settings: Any) -> None:
    settings.CRIOGEN_STREAM_RETENTION_SECONDS = 0
    run_id = ended_run(thread_id)
    append_stream_events(run_id=run_id, thread_id=thread_id, after=0, events=EVENTS)
    age(run_id, 1)
    out = io.StringIO()
    call_command("criogen_sweep", "--no-reap", "--no-deadlines", stdout=out)
    assert json.loads(out.getvalue())["streams"] == 1
    assert stream_tail(run_id=run_id) is None


def test_the_admin_lists_a_runs_log(thread_id: str) -> None:
    from django.contrib.auth.models import User
    from django.test import Client

    run_id = str(uuid.uuid4())
    append_stream_events(run_id=run_id, thread_id=thread_id, after=0, events=EVENTS)
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    page = client.get("/admin/criogen/streamevent/", {"q": run_id})
    assert page.status_code == 200
    assert [e.seq for e in page.context["cl"].result_list] == [1, 2]
    row = page.context["cl"].result_list[0]
    assert client.get(f"/admin/criogen/streamevent/{row.pk}/change/").status_code == 200


def test_celery_beats_sweep_task_prunes_the_logs_too(thread_id: str, settings: Any) -> None:
    from criogen.tasks import sweep_threads_task

    settings.CRIOGEN_STREAM_RETENTION_SECONDS = 0
    run_id = ended_run(thread_id)
    append_stream_events(run_id=run_id, thread_id=thread_id, after=0, events=EVENTS)
    age(run_id, 1)
    assert sweep_threads_task()["streams"] == 1
    assert stream_tail(run_id=run_id) is None
