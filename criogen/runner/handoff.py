"""Handing a committed run to whoever executes it, as ``settings.CRIOGEN_RUNNER``
says: the in-process pool (:mod:`criogen.runner.inprocess`) or a Celery worker (the
task ``criogen.tasks.execute_run_task``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from criogen.storage.models import Run

__all__ = ["enqueue_run", "start_next"]


def enqueue_run(run_id: Any) -> None:
    """Have the run executed off this thread, as ``settings.CRIOGEN_RUNNER`` says.

    Call it after the run's row is committed (``transaction.on_commit``). Enqueuing a
    run twice is harmless: only one claim succeeds.
    """
    mode = settings.CRIOGEN_RUNNER
    if mode == "inprocess":
        # Imported here: the pool executes runs (criogen.runner.execute), which hand
        # their thread's next run back here.
        from criogen.runner.inprocess import _submit

        _submit(str(run_id))
    elif mode == "celery":
        from criogen.celery import app

        app.send_task("criogen.tasks.execute_run_task", args=[str(run_id)])
    else:
        raise ImproperlyConfigured(f"CRIOGEN_RUNNER={mode!r}; use 'inprocess' or 'celery'.")


def start_next(thread_id: str) -> str | None:
    """Enqueue the oldest pending run of the thread, if any; return its id."""
    nxt = (
        Run.objects.filter(thread_id=thread_id, status="pending")
        .order_by("created_at")
        .values_list("pk", flat=True)
        .first()
    )
    if nxt is not None:
        enqueue_run(nxt)
        return str(nxt)
    return None
