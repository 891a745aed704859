"""Tables for assistants and runs (the REST ``/assistants`` and ``/runs`` resources).

A run is one execution of a graph on a thread. The runner claims a run with a
conditional ``UPDATE`` (``pending`` -> ``running``) and keeps a lease on the row
(``lease_expires``) alive while it works, so the reaper can tell a run whose worker
died from a live one. State changes go through :mod:`criogen.services.runs` and
:mod:`criogen.runner`; these models only hold the data.

What a run was asked and what it answered (``input``, ``command``, ``metadata``,
``kwargs``, ``error``) is user data: with ``CRIOGEN_ENCRYPTION_KEY`` set it is sealed
at rest like states and checkpoints (:class:`SealedJSONField`).
"""

from __future__ import annotations

import json
import os
import uuid
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from criogen.engine.crypto import ENV_VAR, Cipher, open_without_key
from criogen.storage.models.threads import Thread

RUN_STATUSES = [
    (s, s) for s in ("pending", "running", "success", "error", "interrupted", "timeout")
]
ACTIVE_RUN_STATUSES = ("pending", "running")
"""A run in one of these has not ended: its thread counts as busy."""
MULTITASK_STRATEGIES = [(s, s) for s in ("reject", "interrupt", "rollback", "enqueue")]
DURABILITIES = [(s, s) for s in ("sync", "async", "exit")]
CANCEL_ACTIONS = [(s, s) for s in ("interrupt", "rollback")]


@lru_cache(maxsize=8)
def _cipher_for(key: str | None) -> Cipher | None:
    return Cipher(key) if key else None


def _cipher() -> Cipher | None:
    """The cipher of ``CRIOGEN_ENCRYPTION_KEY`` (the setting, else the environment), as
    :meth:`criogen.storage.orm.OrmStorage` picks it for states and checkpoints."""
    key = getattr(settings, "CRIOGEN_ENCRYPTION_KEY", None) or os.environ.get(ENV_VAR) or None
    return _cipher_for(key)


def sealing() -> bool:
    """Whether an encryption key is configured (new user data is sealed)."""
    return _cipher() is not None


def open_sealed(text: str) -> str:
    """Stored text opened with the configured key(s): plain text as it is; raises
    :class:`~criogen.engine.crypto.EncryptionKeyInvalid` when no key opens it."""
    cipher = _cipher()
    return cipher.open(text) if cipher is not None else open_without_key(text)


class SealedJSONField(models.JSONField):
    """A JSON value kept in a text column, sealed (Fernet) when a key is configured.

    The column holds the JSON text, or its Fernet token when ``CRIOGEN_ENCRYPTION_KEY``
    is set; reading opens either, so rows written before encryption was turned on stay
    readable, and a sealed row read without the right key raises
    :class:`~criogen.engine.crypto.EncryptionKeyInvalid` (``encryption_key_invalid``)
    rather than returning garbage. Python ``None`` is SQL ``NULL`` (``isnull`` lookups
    work); JSON path lookups do not, since the database cannot look inside ciphertext.
    """

    def get_internal_type(self) -> str:
        return "TextField"

    def db_type(self, connection: Any) -> str | None:
        return models.TextField().db_type(connection)

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if hasattr(value, "as_sql"):
            return value
        if value is None:
            return None
        text = json.dumps(value, cls=self.encoder)
        cipher = _cipher()
        return cipher.seal(text) if cipher is not None else text

    def get_db_prep_save(self, value: Any, connection: Any) -> Any:
        if hasattr(value, "as_sql"):
            return value
        return self.get_db_prep_value(value, connection)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        if value is None:
            return None
        return json.loads(open_sealed(value), cls=self.decoder)


class Assistant(models.Model):
    """A configured graph: which graph runs, with which config and context."""

    assistant_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    graph_id = models.CharField(max_length=255, db_index=True)
    name = models.CharField(max_length=255, blank=True, default="")
    description = models.TextField(blank=True, default="")
    config = models.JSONField(default=dict, blank=True)
    context = models.JSONField(default=dict, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "criogen_assistant"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name or self.graph_id


class Run(models.Model):
    """One execution of a graph on a thread, from ``pending`` to an end status."""

    run_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    thread = models.ForeignKey(
        Thread, null=True, blank=True, on_delete=models.CASCADE, related_name="runs"
    )
    assistant = models.ForeignKey(Assistant, on_delete=models.CASCADE, related_name="runs")
    graph_id = models.CharField(max_length=255)
    status = models.CharField(max_length=16, choices=RUN_STATUSES, default="pending")
    input = SealedJSONField(null=True, blank=True)
    command = SealedJSONField(null=True, blank=True)
    checkpoint_id = models.CharField(max_length=36, null=True, blank=True)
    durability = models.CharField(max_length=8, choices=DURABILITIES, default="async")
    multitask_strategy = models.CharField(
        max_length=16, choices=MULTITASK_STRATEGIES, default="enqueue"
    )
    metadata = SealedJSONField(default=dict, blank=True)
    kwargs = SealedJSONField(
        default=dict, blank=True, help_text="config, context, stream_mode, webhook, …"
    )
    error = SealedJSONField(null=True, blank=True)
    # Who cancelled the run and how: a run "interrupted" with cancelled_by set was
    # stopped by a person or a newer run; without it, it is waiting for input.
    cancelled_by = models.CharField(max_length=255, null=True, blank=True)
    cancel_action = models.CharField(max_length=16, choices=CANCEL_ACTIONS, null=True, blank=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="criogen_runs",
    )
    # Execution bookkeeping, written by the runner only.
    attempts = models.PositiveIntegerField(default=0, help_text="times a worker claimed it")
    hand_backs = models.PositiveIntegerField(
        default=0,
        db_default=0,  # rows inserted with SQL (the scale bench's seeder) get 0 too
        help_text="times a worker gave it back after losing its database connection, its "
        "thread's lease or a write (re-claims after a crash and shutdowns do not count)",
    )
    worker = models.CharField(max_length=255, blank=True, default="")
    lease_expires = models.FloatField(default=0.0, help_text="Unix time; renewed while running")
    not_before = models.DateTimeField(
        null=True,
        blank=True,
        help_text="a delayed run (after_seconds): no worker claims it before this time",
    )
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "criogen_run"
        ordering = ["-created_at"]
        permissions = [("operate", "Can act on threads and runs")]
        indexes = [
            # "Runs of a thread" and "is the thread busy / who is next" (oldest first).
            models.Index(fields=["thread", "status", "created_at"], name="criogen_run_thread_idx"),
            # The reaper scans running runs by lease expiry.
            models.Index(fields=["status", "lease_expires"], name="criogen_run_status_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id} ({self.status})"

    @property
    def is_active(self) -> bool:
        """Whether the run has not ended yet (pending or running)."""
        return self.status in ACTIVE_RUN_STATUSES

    @property
    def lease_alive(self) -> bool:
        """Whether a worker holds the run right now."""
        return self.status == "running" and self.lease_expires > timezone.now().timestamp()


class DeadlineFiring(models.Model):
    """A suspension's reminder, default outcome or notification (of the suspension, or
    of its claim's being overdue), fired once.

    The unique constraint is the "once": the row is inserted in the same transaction
    as the resume run (or the failure) it records, so a crash in the middle leaves
    neither, and a second sweep cannot fire the same suspension again.
    """

    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="deadline_firings")
    checkpoint_id = models.CharField(max_length=36)
    interrupt_id = models.CharField(max_length=64)
    kind = models.CharField(
        max_length=16,
        choices=[
            ("reminder", "reminder"),
            ("default", "default outcome"),
            ("notify", "notification of the suspension"),
            ("overdue", "notification of a claimed suspension past its deadline"),
        ],
    )
    outcome = models.JSONField(null=True, blank=True, help_text="the default applied")
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL)
    fired_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "criogen_deadline_firing"
        ordering = ["-fired_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["checkpoint_id", "interrupt_id", "kind"], name="criogen_deadline_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.thread_id} {self.interrupt_id}"
