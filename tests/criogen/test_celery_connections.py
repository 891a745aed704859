"""Celery tasks keep their database connections as requests do.

Celery's Django fixup closes every connection before and after each task unless
``CELERY_DB_REUSE_MAX`` is set: a new PostgreSQL connection (and server process) for
every run. criogen.settings sets it, and criogen.celery closes around each task only
what ``close_old_connections`` closes after a request (older than ``CONN_MAX_AGE``, or
broken). These drive Celery's own fixup and signals on a real PostgreSQL connection.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery.fixups.django import DjangoWorkerFixup
from celery.signals import task_postrun, task_prerun

from criogen.celery import app

pytestmark = pytest.mark.postgres


@pytest.fixture
def connection(postgres_url: str, django_db_blocker: Any) -> Iterator[Any]:
    """A live connection to the session's PostgreSQL database, young (CONN_MAX_AGE)."""
    from django.db import connections

    from criogen.storage.setup import database_alias

    with django_db_blocker.unblock():
        conn = connections[database_alias(postgres_url)]
        conn.ensure_connection()
        conn.close_at = time.monotonic() + 60
        yield conn
        conn.close()


@pytest.fixture
def task() -> Any:
    from criogen.tasks import execute_run_task

    return execute_run_task


def _around_a_task(fixup: DjangoWorkerFixup, task: Any, connection: Any) -> None:
    """What a worker does around one task: the fixup's hooks and the task signals."""
    fixup.on_task_prerun(sender=task)
    task_prerun.send(sender=task, task_id="t", task=task, args=(), kwargs={})
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    fixup.on_task_postrun(sender=task)
    task_postrun.send(sender=task, task_id="t", task=task, args=(), kwargs={}, retval=None)


def test_a_young_connection_outlives_many_tasks(connection: Any, task: Any) -> None:
    fixup = DjangoWorkerFixup(app)
    assert fixup.db_reuse_max  # criogen.settings.CELERY_DB_REUSE_MAX
    raw = connection.connection
    for _ in range(5):
        _around_a_task(fixup, task, connection)
    assert connection.connection is raw


def test_without_the_setting_celery_would_reconnect_for_every_task(
    connection: Any, task: Any
) -> None:
    fixup = DjangoWorkerFixup(app)
    fixup.db_reuse_max = None  # Celery's default
    raw = connection.connection
    _around_a_task(fixup, task, connection)
    assert connection.connection is not raw


def test_an_old_or_broken_connection_is_closed_around_a_task(connection: Any, task: Any) -> None:
    connection.close_at = time.monotonic() - 1  # older than CONN_MAX_AGE
    task_postrun.send(sender=task, task_id="t", task=task, args=(), kwargs={}, retval=None)
    assert connection.connection is None
    connection.ensure_connection()
    connection.close_at = time.monotonic() + 60
    connection.errors_occurred = True
    connection.connection.close()  # the server went away
    task_prerun.send(sender=task, task_id="t", task=task, args=(), kwargs={})
    assert connection.connection is None


def test_an_eager_task_leaves_the_callers_connection_alone(connection: Any, task: Any) -> None:
    connection.close_at = time.monotonic() - 1
    raw = connection.connection
    task.push_request(is_eager=True)
    try:
        task_prerun.send(sender=task, task_id="t", task=task, args=(), kwargs={})
    finally:
        task.pop_request()
    assert connection.connection is raw
