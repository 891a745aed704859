"""Tables for threads and checkpoints.

The engine reads and writes these tables with raw SQL on its hot path
(:mod:`criogen.storage.orm`); the models define the schema, the migrations and the
admin, and serve every other query. Checkpoint payloads (``body``, ``Value.data``) are
JSON text that the engine encodes itself, and may be encrypted at rest.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex
from django.db import models
from django.db.models.fields.json import KeyTransform
from django.utils import timezone

from criogen.storage.models.fields import RowIdField

HEAD_STATUSES = [
    ("in_progress", "in progress"),
    ("suspended", "suspended"),
    ("completed", "completed"),
    ("failed", "failed"),
]
SOURCES = [(s, s) for s in ("input", "step", "suspend", "failure", "fork")]
TTL_STRATEGIES = ("delete", "keep_latest")
"""What a thread's expiry does: delete it, or compact its history to the head."""


class PostgresGinIndex(GinIndex):
    """A GIN index on PostgreSQL, and nothing on the other databases (SQLite has no GIN,
    and what it would serve, ``@>`` on JSON, is only used on PostgreSQL)."""

    def create_sql(self, model: Any, schema_editor: Any, using: str = "", **kwargs: Any) -> Any:
        if schema_editor.connection.vendor != "postgresql":
            return ""
        return super().create_sql(model, schema_editor, using=using, **kwargs)

    def remove_sql(self, model: Any, schema_editor: Any, **kwargs: Any) -> Any:
        if schema_editor.connection.vendor != "postgresql":
            return ""
        return super().remove_sql(model, schema_editor, **kwargs)


class Thread(models.Model):
    """A named line of checkpoints; its newest checkpoint is the head."""

    id = models.CharField(primary_key=True, max_length=255)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    metadata = models.JSONField(default=dict, blank=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="criogen_threads",
        # No index of its own: the owner's list indexes (owner_new_idx, ...) begin with
        # it, and every index is one more entry to write per thread row written.
        db_index=False,
    )
    # The head, copied from the newest checkpoint in the same transaction that
    # writes it, so that listing threads by status never reads checkpoints.
    head_version = models.PositiveIntegerField(default=0)
    head_id = models.CharField(max_length=36, blank=True, default="")
    head_status = models.CharField(max_length=16, blank=True, default="", choices=HEAD_STATUSES)
    # The run holding the thread and until when (Unix time): a lease, renewed by the
    # run's heartbeat, so another process can tell a live run from a dead one.
    lease_id = models.CharField(max_length=64, null=True, blank=True)
    lease_expires = models.FloatField(default=0.0)
    # Time to live (the REST ``ttl``): the sweep applies ``ttl_strategy`` once
    # ``expires_at`` passes. ``db_default`` because the engine inserts threads with raw
    # SQL that does not name these columns.
    ttl_minutes = models.PositiveIntegerField(null=True, blank=True)
    ttl_strategy = models.CharField(
        max_length=16,
        choices=[(name, name.replace("_", " ")) for name in TTL_STRATEGIES],
        default="delete",
        db_default="delete",
    )
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "criogen_thread"
        indexes = [
            # Every list index ends with the id, the tie-break of each list's order
            # (threads created in one transaction share created_at): then a page is a
            # walk of the index that stops after it, not a sort of every match.
            # The inbox (suspended threads, oldest first) and "recently updated" lists.
            models.Index(
                fields=["head_status", "updated_at", "id"], name="criogen_thread_status_idx"
            ),
            models.Index(fields=["updated_at", "id"], name="criogen_thread_updated_idx"),
            # Search's default order (newest first), for operators and for each owner;
            # and each owner's "recently updated" list (keyset pages of the dashboard).
            models.Index(fields=["created_at", "id"], name="criogen_thread_created_idx"),
            # The owner's lists index only owned threads (a query by owner implies it):
            # the threads a script or a worker makes have none, and their rows then cost
            # no entry in these (migration 0024).
            models.Index(
                fields=["owner", "created_at", "id"],
                name="criogen_thread_owner_new_idx",
                condition=models.Q(owner__isnull=False),
            ),
            models.Index(
                fields=["owner", "updated_at", "id"],
                name="criogen_thread_owner_upd_idx",
                condition=models.Q(owner__isnull=False),
            ),
            # An owner's threads waiting for someone or failed (status filters, a user's
            # inbox): a few percent of the rows, so a small partial index.
            models.Index(
                fields=["owner", "head_status", "created_at", "id"],
                name="criogen_thread_owner_wait_idx",
                condition=models.Q(head_status__in=["suspended", "failed"], owner__isnull=False),
            ),
            # The TTL sweep's order: only threads with a time to live.
            models.Index(
                fields=["expires_at"],
                name="criogen_thread_expires_idx",
                condition=models.Q(expires_at__isnull=False),
            ),
            # The inbox filtered by assistant (its count and its page): the suspended
            # threads whose graph_id, or assistant_id, is that assistant.
            models.Index(
                KeyTransform("graph_id", "metadata"),
                name="criogen_thread_wait_graph_idx",
                condition=models.Q(head_status="suspended"),
            ),
            models.Index(
                KeyTransform("assistant_id", "metadata"),
                name="criogen_thread_wait_asst_idx",
                condition=models.Q(head_status="suspended"),
            ),
            # Threads a run's lease holds (the "busy" status filter).
            models.Index(
                fields=["lease_expires"],
                name="criogen_thread_leased_idx",
                condition=models.Q(lease_id__isnull=False),
            ),
            # Metadata filters (``metadata @> {...}``): one GIN entry per key and value.
            PostgresGinIndex(
                fields=["metadata"], opclasses=["jsonb_path_ops"], name="criogen_thread_meta_gin"
            ),
        ]

    def __str__(self) -> str:
        return self.id

    @property
    def lease_alive(self) -> bool:
        """Whether a run holds the thread right now."""
        return bool(self.lease_id) and self.lease_expires > timezone.now().timestamp()

    @property
    def lease_expires_at(self) -> datetime | None:
        """The lease's expiry as a datetime (None when no run holds it)."""
        if not self.lease_id:
            return None
        return datetime.fromtimestamp(self.lease_expires, UTC)


class Checkpoint(models.Model):
    """One saved moment of a thread. ``(thread, version)`` is unique: that constraint is
    what makes "one writer per thread" safe whatever the locks do."""

    id = models.CharField(primary_key=True, max_length=36)
    # No index of its own: the unique (thread, version) begins with it, and a
    # checkpoint write is one index entry fewer (see migration 0020).
    thread = models.ForeignKey(
        Thread, on_delete=models.CASCADE, related_name="checkpoints", db_index=False
    )
    version = models.PositiveIntegerField()
    run_id = models.CharField(max_length=64, null=True, blank=True, db_index=True)
    source = models.CharField(max_length=16, choices=SOURCES)
    status = models.CharField(max_length=16, choices=HEAD_STATUSES)
    parent_id = models.CharField(max_length=36, null=True, blank=True)
    created_at = models.DateTimeField()
    body = models.TextField(help_text="JSON: next, interrupts, tasks, error, metadata, values")

    class Meta:
        db_table = "criogen_checkpoint"
        constraints = [
            models.UniqueConstraint(
                fields=["thread", "version"], name="criogen_checkpoint_thread_version"
            )
        ]

    def __str__(self) -> str:
        return f"{self.thread_id} v{self.version}"

    @property
    def body_json(self) -> dict[str, Any] | None:
        """The decoded body, or None when it is encrypted."""
        try:
            data = json.loads(self.body)
        except ValueError:
            return None
        return data if isinstance(data, dict) else None


class Value(models.Model):
    """A stored value of one state key: the whole value (``s``) or items appended (``a``)
    to the row of version ``prev``. Only changed keys get a row (see storage.base)."""

    id = RowIdField(primary_key=True)
    """The rowid: nothing refers to it (reads go by thread, key and version), and each
    checkpoint write's commit skips the page of ``sqlite_sequence``."""
    thread = models.ForeignKey(
        Thread, on_delete=models.CASCADE, related_name="state_values", db_index=False
    )
    state_key = models.CharField(max_length=255)
    version = models.PositiveIntegerField()
    kind = models.CharField(max_length=1, choices=[("s", "set"), ("a", "append")])
    prev = models.PositiveIntegerField(null=True, blank=True)
    data = models.TextField()

    class Meta:
        db_table = "criogen_value"
        constraints = [
            models.UniqueConstraint(
                fields=["thread", "state_key", "version"], name="criogen_value_key_version"
            )
        ]

    def __str__(self) -> str:
        return f"{self.thread_id}.{self.state_key}@v{self.version}"
