"""Tables for agents: approval decisions, the effect ledger, memory, documents, audit.

The engine writes these through :class:`criogen.storage.orm.OrmStorage`; the models
define the schema, the migrations and the admin. Text columns that hold user data
(arguments, results, facts and their subjects, documents, audit details) are JSON or
plain text that may be encrypted at rest (see :mod:`criogen.engine.crypto`); ids,
names, statuses and times stay in clear so they can be indexed and listed.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from django.db import models
from django.db.models import Q
from django.utils import timezone

from criogen.engine.crypto import LookupKey
from criogen.storage.models.threads import Thread

SUBJECT_DIGEST_PURPOSE = "memory subject"
"""The purpose :class:`MemoryFact` subject digests are derived for (``lookup_keys``)."""
DECISION_TYPES = [(t, t) for t in ("approve", "reject", "edit", "respond")]
EFFECT_STATUSES = [(s, s) for s in ("intent", "success", "error")]


class Decision(models.Model):
    """An operator's answer to one pending tool call of a suspended agent run.

    Bound to the exact call it answers: the thread, the version of the suspended
    checkpoint, the call id and a SHA-256 digest of the call's canonical arguments.
    ``(thread, version, call_id)`` is unique: that is what makes two operators racing
    on the same suspension end with exactly one decision. It is inserted in the same
    transaction as the checkpoint that resumes the run.
    """

    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="decisions")
    version = models.PositiveIntegerField(help_text="version of the suspended checkpoint")
    checkpoint_id = models.CharField(max_length=36, help_text="the suspended checkpoint")
    call_id = models.CharField(max_length=255)
    tool = models.CharField(max_length=255)
    digest = models.CharField(max_length=64, help_text="sha256 of the call's canonical args")
    decision = models.CharField(max_length=16, choices=DECISION_TYPES)
    args = models.TextField(blank=True, default="", help_text="JSON of edited args (edit)")
    message = models.TextField(blank=True, default="", help_text="reason (reject) or reply")
    actor = models.CharField(max_length=255, null=True, blank=True)
    decided_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "criogen_decision"
        constraints = [
            models.UniqueConstraint(
                fields=["thread", "version", "call_id"], name="criogen_decision_call"
            )
        ]
        ordering = ["-decided_at"]

    def __str__(self) -> str:
        return f"{self.thread_id} v{self.version} {self.call_id}: {self.decision}"


class Effect(models.Model):
    """The effect ledger: one row per side-effecting tool call, by idempotency key.

    The *intent* (status ``intent``) is committed before the tool runs; the outcome
    (``success`` or ``error`` with the result) is committed after it returns. An intent
    without an outcome means the process died while the tool ran.
    """

    key = models.CharField(primary_key=True, max_length=64, help_text="idempotency key")
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="effects")
    checkpoint_id = models.CharField(max_length=36, help_text="the step that asked for it")
    call_id = models.CharField(max_length=255)
    tool = models.CharField(max_length=255)
    args = models.TextField(help_text="JSON of the arguments the tool ran with")
    status = models.CharField(max_length=16, choices=EFFECT_STATUSES, default="intent")
    result = models.TextField(null=True, blank=True, help_text="the tool message content")
    attempts = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "criogen_effect"
        indexes = [models.Index(fields=["thread", "created_at"], name="criogen_effect_thread_idx")]

    def __str__(self) -> str:
        return f"{self.tool} {self.call_id} ({self.status})"


class MemoryFact(models.Model):
    """A long-term fact about one person (``subject``) in a memory ``namespace``.

    The subject is a person's id (a ``user_id`` value): with an encryption key it is
    sealed like the text, and found through ``subject_digest``, a keyed HMAC of it
    (:func:`criogen.engine.crypto.lookup_keys`, :data:`SUBJECT_DIGEST_PURPOSE`). Without a
    key the subject stays in clear and the digest uses a fixed public key, so lookups
    take the same path either way.
    """

    id = models.CharField(primary_key=True, max_length=36)
    namespace = models.CharField(max_length=255, help_text="the state key, e.g. user_id")
    subject = models.TextField(help_text="its value: whose fact it is (sealed with a key)")
    subject_digest = models.CharField(
        max_length=72, help_text="key id + HMAC-SHA256 of the subject: what lookups match"
    )
    text = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "criogen_memory_fact"
        indexes = [
            # Lookups are by (namespace, digest) in creation order; the digest's key-id
            # prefix also lets a range scan of this index find rows under unknown keys.
            models.Index(
                fields=["namespace", "subject_digest", "created_at"],
                name="criogen_fact_subject_idx",
            )
        ]

    def __str__(self) -> str:
        return f"{self.namespace} fact {self.id}"

    @staticmethod
    def about(namespace: str, subject: str, keys: Sequence[LookupKey]) -> Q:
        """The rows of ``subject`` in ``namespace`` digested under any of ``keys``, and
        every row of ``namespace`` digested under a key that is not among them.

        The latter cannot be matched (their digest needs a key we lack) but must not be
        skipped in silence: their subject does not open, so reading them raises
        EncryptionKeyInvalid, as any sealed row read with the wrong key does. Digests
        are ``[0-9a-f]`` and start with their key's id, so "another key" is the gaps
        between the known ids: a few range scans of the index, not a scan of the
        namespace. Each branch names the namespace so that SQLite, too, plans the OR
        as a union of index searches.
        """
        known = sorted({k.id for k in keys})
        ranges = [{"subject_digest__lt": known[0]}, {"subject_digest__gte": known[-1] + "g"}]
        ranges += [
            {"subject_digest__gte": low + "g", "subject_digest__lt": high}
            for low, high in itertools.pairwise(known)
        ]
        found = Q(namespace=namespace, subject_digest__in=[k.digest(subject) for k in keys])
        for bounds in ranges:
            found |= Q(namespace=namespace, **bounds)
        return found


class Document(models.Model):
    """One document of a named collection, searched with the database's full-text
    search (PostgreSQL ``tsvector``; an FTS5 table kept by triggers on SQLite)."""

    collection = models.CharField(max_length=255)
    doc_id = models.CharField(max_length=255)
    text = models.TextField()
    metadata = models.TextField(default="{}", help_text="JSON")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "criogen_document"
        constraints = [
            models.UniqueConstraint(fields=["collection", "doc_id"], name="criogen_document_id")
        ]

    def __str__(self) -> str:
        return f"{self.collection}/{self.doc_id}"


class AuditEvent(models.Model):
    """Who did what to which thread, and when. Append-only: nothing updates or deletes
    these rows (deleting a thread keeps its audit events, so ``thread_id`` is not a
    foreign key)."""

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.CharField(max_length=255, null=True, blank=True)
    action = models.CharField(max_length=32)
    door = models.CharField(
        max_length=16,
        blank=True,
        default="",
        help_text="Where the action came from: ui, api, python, deadline or cron.",
    )
    thread_id = models.CharField(max_length=255, blank=True, default="", db_index=True)
    before = models.CharField(
        max_length=36, blank=True, default="", help_text="The head checkpoint before the action."
    )
    after = models.CharField(
        max_length=36, blank=True, default="", help_text="The checkpoint the action wrote."
    )
    details = models.TextField(default="{}", help_text="JSON")

    class Meta:
        db_table = "criogen_audit_event"
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor or '-'} {self.action}"
