"""The Celery application: ``celery -A criogen worker`` / ``celery -A criogen beat``.

Configured from Django settings with the ``CELERY_`` prefix (broker
``CELERY_BROKER_URL``, Redis by default). Tasks are in :mod:`criogen.tasks`. Importing
``criogen`` does not import this module (a plain script needs neither Django nor
Celery); Celery finds it as ``criogen.celery`` by itself.

When the worker begins a warm shutdown (SIGTERM), every run it executes stops after
its current step, checkpoints, and is handed back to the queue. Use the ``threads``
pool (``--pool threads``) for that: with ``prefork`` the runs finish first.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import task_postrun, task_prerun, worker_shutting_down

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "criogen.settings")

app = Celery("criogen")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["criogen"], related_name="tasks")


@worker_shutting_down.connect
def hand_back_runs(**kwargs: Any) -> None:
    """SIGTERM: stop the runs of this worker after their current step."""
    from criogen.runner import request_shutdown

    request_shutdown()


@task_prerun.connect
@task_postrun.connect
def recycle_connections(sender: Any = None, **kwargs: Any) -> None:
    """Around each task, close this thread's database connections that are older than
    ``CONN_MAX_AGE`` or broken, as Django does around each request. (Celery's own
    fixup would close them all; ``CELERY_DB_REUSE_MAX`` holds it back.) Not for eager
    tasks: they run inside the caller's transaction."""
    if getattr(getattr(sender, "request", None), "is_eager", False):
        return
    from django.db import close_old_connections

    close_old_connections()
