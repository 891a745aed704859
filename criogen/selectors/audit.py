"""The audit log, read: who did what to which thread, and who answered a suspension."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Exists, OuterRef

from criogen.selectors.checkpoints import checkpoint_body, open_json
from criogen.selectors.visibility import Who, visible_threads
from criogen.storage.models import AuditEvent, Decision, Run, Thread
from criogen.storage.models import Checkpoint as CheckpointRow
from criogen.storage.orm.audit import of_earlier_thread

__all__ = ["audit_events", "who_decided"]

NOT_ANSWERS = ("notify", "deadline_reminder")
"""Audit actions written about a suspension that do not answer it."""


def who_decided(thread: Thread, checkpoint_id: str) -> tuple[str, datetime | None]:
    """Who answered the suspension ``checkpoint_id`` and when, as far as the records tell.

    An agent's approval leaves ``Decision`` rows (contract 4); a workflow's resume leaves
    the run that resumed it (its ``cancelled_by``/metadata actor) and an audit event. When
    nothing names a person, the time of the checkpoint that followed is still known.
    """
    decision = (
        Decision.objects.filter(thread_id=thread.pk, checkpoint_id=checkpoint_id)
        .order_by("decided_at")
        .first()
    )
    if decision is not None and decision.actor:
        return str(decision.actor), decision.decided_at
    suspended_at = (
        CheckpointRow.objects.filter(pk=checkpoint_id).values_list("created_at", flat=True).first()
    )
    if suspended_at is not None:
        # A run resuming it records who asked for it (the runner may not pass it on to
        # the Decision row, so look here too).
        run = (
            Run.objects.filter(
                thread_id=thread.pk, command__isnull=False, created_at__gte=suspended_at
            )
            .order_by("created_at")
            .first()
        )
        if run is not None and isinstance(run.metadata, dict) and run.metadata.get("resumed_by"):
            at = decision.decided_at if decision is not None else run.created_at
            return str(run.metadata["resumed_by"]), at
    later = (
        CheckpointRow.objects.filter(thread_id=thread.pk, parent_id=checkpoint_id)
        .order_by("version")
        .first()
    )
    at = later.created_at if later is not None else thread.updated_at
    suspended = CheckpointRow.objects.filter(pk=checkpoint_id).values_list("created_at", flat=True)
    since = suspended.first() or at
    # The first person to act on the thread after it suspended is who answered it (the
    # system's notifications and reminders of the suspension answer nothing).
    event = (
        AuditEvent.objects.filter(thread_id=thread.pk, created_at__gte=since)
        .exclude(actor=None)
        .exclude(actor="")
        .exclude(action__in=NOT_ANSWERS)
        .order_by("created_at")
        .first()
    )
    if event is not None:
        return str(event.actor), event.created_at
    if later is not None:
        meta = checkpoint_body(later).get("metadata") or {}
        by = meta.get("actor") or meta.get("decided_by") or meta.get("by") or ""
        return str(by), later.created_at
    return "", at


def audit_events(
    who: Who,
    *,
    actor: str = "",
    action: str = "",
    thread: str = "",
    before: int | None = None,
    limit: int = 100,
) -> list[AuditEvent]:
    """Audit events, newest first, at most ``limit``: of the threads ``who`` may see,
    written since each was created (every event for operators), whose actor, action and
    thread id contain ``actor``, ``action`` and ``thread``, older than the event
    ``before``. Each carries its decoded details as ``details_json``
    (:func:`open_json`)."""
    qs = AuditEvent.objects.all()
    if not who.is_operator:
        # A thread is its id *and* its life: events written before the visible
        # thread was created belong to an earlier thread of the same id (deleted,
        # perhaps another user's) and are never shown to the id's next owner.
        visible = visible_threads(who).filter(pk=OuterRef("thread_id"))
        qs = qs.filter(Exists(visible)).exclude(of_earlier_thread())
    if actor:
        qs = qs.filter(actor__icontains=actor)
    if action:
        qs = qs.filter(action__icontains=action)
    if thread:
        qs = qs.filter(thread_id__icontains=thread)
    if before is not None:
        qs = qs.filter(pk__lt=before)
    events = list(qs.order_by("-pk")[:limit])
    for event in events:
        # Details are JSON text, encrypted at rest when a key is set.
        event.details_json = open_json(event.details)  # type: ignore[attr-defined]
    return events
