"""Celery tasks: thin wrappers that take ids and call the runner or a service.

``execute_run_task`` is acknowledged late and rejected back to the queue when its
worker is lost, so a crash never loses a run; the run's own claim (a conditional
UPDATE) makes a duplicate delivery harmless.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from celery.exceptions import Reject


@shared_task(
    name="criogen.tasks.execute_run_task",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
)
def execute_run_task(run_id: str) -> str | None:
    """Execute the run; when a shutdown stopped it, put the message back on the queue."""
    from criogen.runner import HANDED_BACK, execute_run

    status = execute_run(run_id)
    if status == HANDED_BACK:
        raise Reject("worker shutting down; run handed back", requeue=True)
    return status


@shared_task(name="criogen.tasks.reap_expired_task", ignore_result=True)
def reap_expired_task() -> dict[str, list[str]]:
    """Re-queue runs whose worker died (Celery beat runs this every few seconds)."""
    from criogen.runner import reap_expired

    return reap_expired()


@shared_task(name="criogen.tasks.sweep_threads_task", ignore_result=True)
def sweep_threads_task() -> dict[str, int]:
    """Apply the TTL policy of expired threads and delete old resumable-stream logs and
    outbound attempt records (Celery beat)."""
    from criogen.outbound import prune_attempts
    from criogen.services.streams import prune_streams
    from criogen.services.threads import sweep_threads

    return {**sweep_threads(), "streams": prune_streams(), "outbound": prune_attempts()}


@shared_task(name="criogen.tasks.fire_deadlines_task", ignore_result=True)
def fire_deadlines_task() -> dict[str, int]:
    """Apply due suspension defaults and send due reminders (Celery beat)."""
    from criogen.services.deadlines import fire_deadlines

    return fire_deadlines()


@shared_task(name="criogen.tasks.fire_crons_task", ignore_result=True)
def fire_crons_task() -> list[str]:
    """Create the runs of every due cron (Celery beat runs this every few seconds)."""
    from criogen.services.crons import fire_due_crons

    return fire_due_crons()


# The task's name from when crons lived in the api app: a Celery beat still running
# with an older schedule (or messages already queued) sends this name, so workers
# keep accepting it. The claim on each cron's tick makes both names safe at once.
@shared_task(name="api.tasks.fire_crons_task", ignore_result=True)
def fire_crons_legacy_task() -> list[str]:
    """``api.tasks.fire_crons_task``, the old name of :func:`fire_crons_task`."""
    from criogen.services.crons import fire_due_crons

    return fire_due_crons()


@shared_task(name="criogen.tasks.deliver_outbound_task", ignore_result=True)
def deliver_outbound_task(call: dict[str, Any]) -> None:
    """One attempt of an outbound call (a webhook or an e-mail, see
    :mod:`criogen.outbound`); a retryable failure queues the next attempt after its
    backoff."""
    from criogen.outbound import deliver_data, next_attempt

    retry_in = deliver_data(call)
    if retry_in is not None:
        deliver_outbound_task.apply_async(args=[next_attempt(call)], countdown=retry_in)
