"""The record of outbound calls: one row per attempt to deliver a webhook or an e-mail."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

OUTBOUND_KINDS = [
    ("run", "run webhook"),
    ("cron", "cron run webhook"),
    ("reminder", "deadline reminder webhook"),
    ("notify", "notification webhook (suspension, reminder, overdue)"),
    ("email", "reminder or notification e-mail"),
]
OUTBOUND_OUTCOMES = [
    ("delivered", "delivered"),
    ("failed", "failed"),
    ("refused", "refused by the outbound policy"),
    ("dropped", "dropped: the sender's queue was full"),
]


class OutboundAttempt(models.Model):
    """One attempt of :mod:`criogen.outbound` to deliver a call.

    Written by the sender only, after the attempt ended; a call retried three times
    has three rows with ``attempt`` 1, 2, 3. The ids are plain values, not foreign
    keys: the record outlives the run, thread or cron it was about.
    """

    kind = models.CharField(max_length=16, choices=OUTBOUND_KINDS)
    target = models.CharField(
        max_length=2048,
        help_text="the URL without its query or credentials (they may hold secrets); "
        "for an e-mail, the recipients",
    )
    attempt = models.PositiveIntegerField(default=1, help_text="1 for the first try")
    outcome = models.CharField(max_length=16, choices=OUTBOUND_OUTCOMES)
    status_code = models.PositiveIntegerField(null=True, blank=True, help_text="HTTP status")
    error = models.TextField(blank=True, default="")
    duration_ms = models.FloatField(default=0.0)
    retry_at = models.DateTimeField(
        null=True, blank=True, help_text="when the next attempt is due (none: the last one)"
    )
    run_id = models.CharField(max_length=36, blank=True, default="")
    thread_id = models.CharField(max_length=255, blank=True, default="")
    cron_id = models.CharField(max_length=36, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "criogen_outbound_attempt"
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["created_at"], name="criogen_outbound_created_idx"),
            models.Index(fields=["run_id"], name="criogen_outbound_run_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.target} #{self.attempt}: {self.outcome}"
