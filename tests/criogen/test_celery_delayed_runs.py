"""Delayed runs (``after_seconds``) on real Celery workers (Redis broker, PostgreSQL):
the task is sent with a countdown and the run starts at its time, not before; a due
run that no message announces (its message lost, e.g. a broker restarted) is started
by beat's reaper, because the time is on the run's row."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

from django.utils import timezone

# The cluster of real workers from the Celery worker tests: their fixtures (registered
# under their own names, ``cluster``, ``shared_cluster`` and ``cluster_database``) and
# helpers.
from tests.criogen.test_celery_worker import (
    Cluster,
    cluster,
    cluster_database,
    shared_cluster,
    steps_of,
)

# pytest finds the fixtures by these names
__all__ = ["cluster", "cluster_database", "shared_cluster"]


def test_a_delayed_run_starts_on_a_worker_at_its_time(cluster: Cluster) -> None:  # noqa: F811
    thread_id = f"delayed-{uuid.uuid4().hex[:8]}"
    run_id = cluster.create_run(thread_id, input={"n": 0}, after_seconds=2)
    run = cluster.run(run_id)
    assert run.status == "pending"
    assert run.not_before is not None
    assert run.not_before >= run.created_at + timedelta(seconds=2)
    time.sleep(1)
    assert cluster.run(run_id).status == "pending"
    cluster.wait("the run to end", lambda: cluster.run(run_id).status == "success")
    run = cluster.run(run_id)
    assert run.started_at >= run.not_before
    assert steps_of(cluster, thread_id) == {"n": 3, "steps": ["a", "b", "c"]}


def test_beat_starts_a_due_delayed_run_whose_message_was_lost(cluster: Cluster) -> None:  # noqa: F811
    from criogen.storage.models import Assistant, Run, Thread

    thread_id = f"lost-{uuid.uuid4().hex[:8]}"
    now = timezone.now()
    # A delayed run as a server wrote it before it went away: committed, never enqueued
    # (no message on the queue), due a moment ago.
    thread = Thread.objects.using(cluster.alias).create(id=thread_id)
    assistant = Assistant.objects.using(cluster.alias).create(graph_id="steps")
    run = Run.objects.using(cluster.alias).create(
        thread=thread,
        assistant_id=assistant.pk,
        graph_id="steps",
        input={"n": 0},
        kwargs={"config": {}, "context": {}, "stream_mode": None, "webhook": None},
        created_at=now - timedelta(seconds=1),
        updated_at=now - timedelta(seconds=1),
        not_before=now,
    )
    time.sleep(0.5)
    assert cluster.run(run.pk).status == "pending"  # nobody knows of it yet
    beat = cluster.start_beat()
    try:
        cluster.wait("the run to end", lambda: cluster.run(run.pk).status == "success")
    finally:
        beat.terminate()
        beat.wait(10)
    assert steps_of(cluster, thread_id) == {"n": 3, "steps": ["a", "b", "c"]}
