"""The event log of resumable streams (``stream_resumable: true``).

Each row is one Server-Sent Event a run's stream sent, numbered per run from 1 without
gaps, so that a client that lost its connection asks any web process for the events
after the last id it saw (``Last-Event-ID``) and gets exactly those, in order. Rows live
for ``CRIOGEN_STREAM_RETENTION_SECONDS`` after the run's last event, then the sweep
deletes them (:func:`criogen.services.streams.prune_streams`).
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.utils import timezone

from criogen.storage.models.runs import _cipher, open_sealed


class SealedTextField(models.TextField):
    """Text sealed (Fernet) when ``CRIOGEN_ENCRYPTION_KEY`` is set, as the states the
    events carry are everywhere else; plain text otherwise."""

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if value is None or hasattr(value, "as_sql"):
            return value
        cipher = _cipher()
        return cipher.seal(value) if cipher is not None else value

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        return None if value is None else open_sealed(value)


class StreamEvent(models.Model):
    """One event of a resumable run stream."""

    id = models.BigAutoField(primary_key=True)
    run_id = models.UUIDField(help_text="the run whose stream sent it")
    thread_id = models.CharField(max_length=255)
    seq = models.PositiveIntegerField(help_text="the SSE id: 1, 2, 3… per run, no gaps")
    version = models.IntegerField(
        help_text="the thread version the event comes from (the metadata event: the "
        "version before the run's first checkpoint)"
    )
    mode = models.CharField(
        max_length=32,
        blank=True,
        default="",
        help_text="its stream mode; '' for metadata, error and end, which every replay sends",
    )
    event = models.CharField(max_length=64)
    data = SealedTextField(help_text="the event's data line (JSON)")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "criogen_stream_event"
        constraints = [
            # Two processes appending the same run's next events: one insert wins, the
            # other gets an IntegrityError and re-reads (ids never repeat or skip).
            models.UniqueConstraint(fields=["run_id", "seq"], name="stream_event_run_seq"),
        ]
        # The sweep finds old streams by their first event.
        indexes = [models.Index(fields=["seq", "created_at"], name="stream_event_first_idx")]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.event}"
