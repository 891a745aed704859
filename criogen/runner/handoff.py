"""Handing a committed run to whoever executes it, as ``settings.CRIOGEN_RUNNER``
says: the in-process pool (:mod:`criogen.runner.inprocess`) or a Celery worker (the
task ``criogen.tasks.execute_run_task``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from criogen.storage.models import Run

__all__ = ["enqueue_run", "start_next"]


def enqueue_run(run_id: Any, *, at: datetime | None = None) -> None:
    """Have the run executed off this thread, as ``settings.CRIOGEN_RUNNER`` says.

    Call it after the run's row is committed (``transaction.on_commit``). Enqueuing a
    run twice is harmless: only one claim succeeds. ``at`` (a delayed run's
    ``not_before``) hands it over at that time: the in-process runner's timer, or a
    Celery countdown. Those are for punctuality only: the claim refuses a run before
    its ``not_before``, and the reaper starts due runs that nobody started (after a
    restart the timer is gone, a broker may have lost the message).
    """
    mode = settings.CRIOGEN_RUNNER
    delay = 0.0 if at is None else (at - timezone.now()).total_seconds()
    if mode == "inprocess":
        # Imported here: the pool executes runs (criogen.runner.execute), which hand
        # their thread's next run back here.
        from criogen.runner.inprocess import _schedule, _submit

        if delay > 0:
            _schedule(str(run_id), delay)
        else:
            _submit(str(run_id))
    elif mode == "celery":
        from criogen.celery import app

        options: dict[str, Any] = {"countdown": delay} if delay > 0 else {}
        app.send_task("criogen.tasks.execute_run_task", args=[str(run_id)], **options)
    else:
        raise ImproperlyConfigured(f"CRIOGEN_RUNNER={mode!r}; use 'inprocess' or 'celery'.")


def start_next(thread_id: str) -> str | None:
    """Enqueue the oldest pending run of the thread, if any (a delayed one for its
    time); return its id."""
    nxt = (
        Run.objects.filter(thread_id=thread_id, status="pending")
        .order_by("created_at")
        .values_list("pk", "not_before")
        .first()
    )
    if nxt is not None:
        enqueue_run(nxt[0], at=nxt[1])
        return str(nxt[0])
    return None
