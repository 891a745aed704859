"""Former home of the cron task, now :func:`criogen.tasks.fire_crons_task` (which
also keeps the old task name ``api.tasks.fire_crons_task`` registered)."""

from __future__ import annotations

from criogen.tasks import fire_crons_task

__all__ = ["fire_crons_task"]
