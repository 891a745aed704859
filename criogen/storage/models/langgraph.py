"""Tables of the LangGraph checkpointer (:class:`criogen.langgraph.CriogenSaver`).

A LangGraph checkpoint is kept in three parts, as LangGraph's PostgreSQL saver keeps
it: the checkpoint row (its body and metadata, with the channel values that are a
string, a number, a boolean or None, and the others whose serialised form is small, as
LangGraph's SQLite saver keeps every value), one blob per *version* of any larger
channel value (a value unchanged between checkpoints is stored once), and the pending
writes of each task of a step. Payloads are what LangGraph's serializer
makes of them (``type`` + bytes); with an encryption key they are sealed
(:mod:`criogen.engine.crypto`) and ``sealed`` is set. Thread ids, namespaces,
checkpoint ids, channel names, versions and run ids stay in clear: they are what the
tables are looked up by.

Each row's thread is a foreign key to :class:`~criogen.storage.models.Thread` without a
database constraint: a thread served by Criogen takes its LangGraph rows with it when
it is deleted (the ORM's cascade), and a saver used on its own (LangGraph's
conformance suite, a script) stores threads Criogen never made.

This module imports nothing from LangGraph: the tables exist, empty, whether or not
the ``langgraph`` extra is installed.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from criogen.storage.models import fields
from criogen.storage.models.threads import Thread

__all__ = ["LangGraphBlob", "LangGraphCheckpoint", "LangGraphWrite", "RowIdField"]


class RowIdField(fields.RowIdField):
    """:class:`~criogen.storage.models.fields.RowIdField` under the import path migration
    0021 gave these tables' ids (a field's path is part of its migration state). Without
    it, each insert also rewrote the row of ``sqlite_sequence``: a fifth of the pages a
    LangGraph run commits."""


def _thread(name: str) -> models.ForeignKey:
    # No constraint, no index of its own: the table's unique key starts with it.
    return models.ForeignKey(
        Thread,
        on_delete=models.CASCADE,
        db_constraint=False,
        db_index=False,
        related_name=name,
    )


class LangGraphCheckpoint(models.Model):
    """One LangGraph checkpoint of a thread's namespace (``""`` for the root graph)."""

    id = RowIdField(primary_key=True)
    thread = _thread("langgraph_checkpoints")
    checkpoint_ns = models.CharField(max_length=255, blank=True, default="")
    checkpoint_id = models.CharField(max_length=64)
    """LangGraph's id (a UUID v6): unique per namespace, and ordered by time."""
    parent_checkpoint_id = models.CharField(max_length=64, blank=True, default="")
    run_id = models.CharField(max_length=64, blank=True, default="")
    """The run that wrote it (from its metadata), for ``delete_for_runs``."""
    type = models.CharField(max_length=32)
    """The serializer's type tag of ``checkpoint``."""
    checkpoint = models.BinaryField()
    """The checkpoint and its metadata, with its values of simple types and, serialised,
    its small values of other types (the larger ones are in the blobs; rows written
    before these were kept inline have none)."""
    sealed = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "criogen_lg_checkpoint"
        constraints = [
            models.UniqueConstraint(
                fields=["thread", "checkpoint_ns", "checkpoint_id"],
                name="criogen_lg_checkpoint_key",
            )
        ]
        indexes = [
            # delete_for_runs; the key's index serves every other lookup (newest first
            # is a backward walk of it). Only checkpoints a run wrote: a graph invoked
            # without a run id (LangGraph on its own) writes no entry.
            models.Index(
                fields=["run_id"], name="criogen_lg_checkpoint_run_idx", condition=~Q(run_id="")
            ),
        ]

    def __str__(self) -> str:
        return f"{self.thread_id} {self.checkpoint_ns or '-'} {self.checkpoint_id}"


class LangGraphBlob(models.Model):
    """A channel's value at one version; checkpoints name the versions they hold."""

    id = RowIdField(primary_key=True)
    thread = _thread("langgraph_blobs")
    checkpoint_ns = models.CharField(max_length=255, blank=True, default="")
    channel = models.CharField(max_length=255)
    version = models.CharField(max_length=64)
    type = models.CharField(max_length=32)
    """The serializer's type tag; ``empty`` for a channel with no value (older rows:
    a version with no value now has no row)."""
    blob = models.BinaryField(null=True)
    sealed = models.BooleanField(default=False)

    class Meta:
        db_table = "criogen_lg_blob"
        constraints = [
            models.UniqueConstraint(
                fields=["thread", "checkpoint_ns", "channel", "version"],
                name="criogen_lg_blob_key",
            )
        ]

    def __str__(self) -> str:
        return f"{self.thread_id} {self.channel}@{self.version}"


class LangGraphWrite(models.Model):
    """A pending write of one task, made after the checkpoint it names."""

    id = RowIdField(primary_key=True)
    thread = _thread("langgraph_writes")
    checkpoint_ns = models.CharField(max_length=255, blank=True, default="")
    checkpoint_id = models.CharField(max_length=64)
    task_id = models.CharField(max_length=255)
    task_path = models.TextField(blank=True, default="")
    idx = models.IntegerField()
    """The write's place in the task's list; negative for LangGraph's special writes
    (error, interrupt, resume, scheduled), which a later call replaces."""
    channel = models.CharField(max_length=255)
    type = models.CharField(max_length=32)
    blob = models.BinaryField()
    sealed = models.BooleanField(default=False)

    class Meta:
        db_table = "criogen_lg_write"
        constraints = [
            models.UniqueConstraint(
                fields=["thread", "checkpoint_ns", "checkpoint_id", "task_id", "idx"],
                name="criogen_lg_write_key",
            )
        ]

    def __str__(self) -> str:
        return f"{self.thread_id} {self.checkpoint_id} {self.task_id}[{self.idx}]"
