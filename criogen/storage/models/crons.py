"""Crons: schedules that start runs (the timer that fires them is
:mod:`criogen.services.crons`).

The table keeps the name it had when the model lived in the ``api`` app
(``api_cron``): moving the model into the core changed no data.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

__all__ = ["Cron"]


def _now() -> Any:
    # Module-level: inside Cron the field named ``timezone`` hides django.utils.timezone.
    return timezone.now()


class Cron(models.Model):
    """A schedule that starts runs: on a thread, or stateless (a new thread each time).

    ``payload`` holds the run's fields (input, config, context, metadata, webhook,
    multitask_strategy, stream_mode, durability…) exactly as each fired run gets them.
    ``next_run_date`` is claimed with a conditional UPDATE before a run is created, so
    two timers (web processes, Celery beat) never fire one tick twice.
    """

    cron_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    assistant_id = models.CharField(max_length=64, help_text="The assistant's UUID.")
    thread = models.ForeignKey(
        "criogen.Thread",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="crons",
        help_text="Empty: each run is stateless (a thread of its own).",
    )
    schedule = models.CharField(max_length=255, help_text="5-field cron expression.")
    timezone = models.CharField(max_length=64, default="UTC")
    payload = models.JSONField(default=dict, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    on_run_completed = models.CharField(
        max_length=8, default="delete", help_text="Stateless runs: delete or keep their thread."
    )
    end_time = models.DateTimeField(null=True, blank=True)
    enabled = models.BooleanField(default=True)
    next_run_date = models.DateTimeField(null=True, blank=True, db_index=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="criogen_crons",
    )
    created_at = models.DateTimeField(default=_now)
    updated_at = models.DateTimeField(default=_now)

    class Meta:
        db_table = "api_cron"  # its name from when it lived in the api app
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.schedule} ({self.cron_id})"
