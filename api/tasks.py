"""Celery tasks of the API app (imported by ``ApiConfig.ready`` so workers know them)."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="api.tasks.fire_crons_task", ignore_result=True)
def fire_crons_task() -> list[str]:
    """Create the runs of every due cron (Celery beat runs this every few seconds)."""
    from api.crons import fire_due_crons

    return fire_due_crons()
