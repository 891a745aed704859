"""Deadlines and reminders on suspensions.

A suspension may carry, on its interrupt (``suspend(..., deadline=, default=, remind=)``
in a workflow node; an agent puts the same keys on its approval interrupt):

- ``deadline``: when the default outcome applies: a duration after the suspension
  (``"90s"``, ``"30m"``, ``"24h"``, ``"7d"``, ``"2w"``, or a number of seconds) or an
  ISO 8601 time;
- ``default``: what then happens: ``"approve"`` / ``"reject"`` (for an agent's
  approval: every pending call approved or rejected; for a workflow: resume with that
  word), ``"fail"`` (the thread's head becomes a failure, ``deadline_passed``),
  ``"wait"`` or none (keep waiting), or for a workflow any other JSON value to resume
  with;
- ``remind``: when to remind operators (same formats): an email to every active
  operator with an address (Django's mail settings) and a POST to the webhook of the
  run that suspended, both sent by :mod:`criogen.outbound`.

:func:`fire_deadlines` applies what is due, each at most once: the
:class:`~criogen.storage.models.DeadlineFiring` row it inserts (unique per suspension
and kind) commits in the same transaction as the resume run or the failure checkpoint,
so a crash during the firing leaves neither and the next sweep fires it again. The
default is an audited decision by ``system``. A reminder's once-row, its
``deadline_reminder`` audit event and the queueing of its calls commit together too.

When a suspension someone claimed passes its deadline (whatever its default), the
assistant's notification channels are told it is overdue, naming the holder, before the
default applies (:func:`~criogen.services.notifications.notify_overdue`); a claimed
suspension without a deadline is overdue ``metadata.notify.claimed_overdue_seconds``
after its claim when the assistant sets it, never otherwise.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from criogen import outbound
from criogen.engine.active_run import ActiveRun
from criogen.engine.checkpoints import new_id
from criogen.engine.errors import CriogenError
from criogen.engine.store import AuditRecord
from criogen.registry import storage
from criogen.services.notifications import (
    claimed_overdue_seconds,
    fire_once,
    notify_overdue,
    notify_reminder,
)
from criogen.storage.models import Claim, DeadlineFiring, Run, Thread
from criogen.storage.models.runs import ACTIVE_RUN_STATUSES

__all__ = ["fire_deadlines", "parse_when"]

logger = logging.getLogger("criogen.services.deadlines")

SYSTEM = "system"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def parse_when(value: Any, base: datetime) -> datetime | None:
    """The moment ``value`` names, counted from ``base`` for a duration; None when it
    is absent or not understood (logged)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return base + timedelta(seconds=float(value))
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            return base + timedelta(seconds=float(match[1]) * _UNITS[match[2]])
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    logger.warning("ignoring the deadline/remind value %r (use '24h', seconds or ISO)", value)
    return None


def fire_deadlines(*, now: datetime | None = None, limit: int = 500) -> dict[str, int]:
    """Apply the due defaults and send the due reminders of suspended threads.

    A claimed suspension past its deadline is also told to the assistant's notification
    channels, once (:func:`~criogen.services.notifications.notify_overdue`). Threads
    with a pending or running run are skipped (a decision is on its way). Returns
    ``{"defaults": n, "reminders": m, "overdue": k}``.
    """
    now = now or timezone.now()
    active = Run.objects.filter(thread_id=OuterRef("pk"), status__in=ACTIVE_RUN_STATUSES)
    suspended = (
        Thread.objects.filter(head_status="suspended")
        .filter(~Exists(active))
        .order_by("updated_at")
        .values_list("pk", flat=True)[:limit]
    )
    ids = list(suspended)
    # One query for the claims of the whole batch (a claim counts on its head version).
    claims = {
        c.thread_id: c for c in Claim.objects.select_related("user").filter(thread_id__in=ids)
    }
    counts = {"defaults": 0, "reminders": 0, "overdue": 0}
    for thread_id in ids:
        try:
            head = storage().head(thread_id)
        except CriogenError:
            logger.exception("cannot read the head of %r", thread_id)
            continue
        if head is None or head.status != "suspended":
            continue
        claim = claims.get(thread_id)
        if claim is not None and claim.version != head.version:
            claim = None
        due = []
        for interrupt in head.interrupts:
            remind_at = parse_when(interrupt.get("remind"), head.created_at)
            if remind_at is not None and remind_at <= now and _remind(head, interrupt):
                counts["reminders"] += 1
            deadline = parse_when(interrupt.get("deadline"), head.created_at)
            if deadline is None or deadline > now:
                continue
            # Told before the default applies: applying it moves the head, ending the claim.
            if claim is not None and notify_overdue(head, interrupt, claim, due=deadline):
                counts["overdue"] += 1
            if interrupt.get("default") not in (None, "wait"):
                due.append(interrupt)
        if claim is not None and _overdue_without_deadline(head, claim, now):
            counts["overdue"] += 1
        if due and _apply_defaults(head, due):
            counts["defaults"] += 1
    return counts


def _overdue_without_deadline(head: Any, claim: Claim, now: datetime) -> bool:
    """A claimed suspension that declares no deadline is overdue
    ``metadata.notify.claimed_overdue_seconds`` after its claim, when the assistant
    sets it (never otherwise)."""
    if any(i.get("deadline") is not None for i in head.interrupts):
        return False
    run = (
        Run.objects.select_related("assistant").filter(pk=head.run_id).first()
        if _is_uuid(head.run_id)
        else None
    )
    seconds = claimed_overdue_seconds(run.assistant) if run is not None else None
    if seconds is None:
        return False
    due = claim.since + timedelta(seconds=seconds)
    return due <= now and notify_overdue(head, None, claim, due=due)


# -- default outcomes --------------------------------------------------------------------


def _resume_value(head: Any, due: list[dict[str, Any]]) -> Any:
    """The resume value that applies the defaults of the ``due`` interrupts."""

    def one(interrupt: dict[str, Any]) -> Any:
        outcome = interrupt.get("default")
        calls = interrupt.get("calls")
        if interrupt.get("reason") == "approval" and isinstance(calls, list):
            if outcome == "approve":
                return {"decisions": [{"type": "approve"} for _ in calls]}
            message = "No decision before the deadline: rejected by the system."
            return {"decisions": [{"type": "reject", "message": message} for _ in calls]}
        return outcome

    if len(head.interrupts) == 1:
        return one(due[0])
    return {interrupt["id"]: one(interrupt) for interrupt in due}


def _apply_defaults(head: Any, due: list[dict[str, Any]]) -> bool:
    from criogen.services.runs import answer_thread

    fail = [i for i in due if i.get("default") == "fail"]
    try:
        with transaction.atomic():
            # Lock the thread: the head must still be this suspension, with no decision
            # on its way, when the firing commits.
            thread = Thread.objects.select_for_update().filter(pk=head.thread_id).first()
            busy = Run.objects.filter(
                thread_id=head.thread_id, status__in=ACTIVE_RUN_STATUSES
            ).exists()
            if thread is None or thread.head_id != head.id or busy:
                return False
            rows = [
                DeadlineFiring(
                    thread=thread,
                    checkpoint_id=head.id,
                    interrupt_id=str(i["id"]),
                    kind="default",
                    outcome=i.get("default"),
                )
                for i in due
            ]
            for row in rows:
                row.save()  # IntegrityError: already fired
            if fail:
                _fail_suspension(head, fail[0])
                run = None
            else:
                run = answer_thread(
                    thread_id=head.thread_id,
                    value=_resume_value(head, due),
                    by=SYSTEM,
                    door="deadline",
                    expected=head.id,
                    metadata={"reason": "deadline"},
                )
                DeadlineFiring.objects.filter(pk__in=[r.pk for r in rows]).update(run=run)
    except IntegrityError:
        return False
    logger.info("deadline passed on %r: applied %s", head.thread_id, [i["default"] for i in due])
    return True


def _fail_suspension(head: Any, interrupt: dict[str, Any]) -> None:
    """Write a failure checkpoint over the suspension (inside the caller's transaction).

    It holds the thread's lease for the write, like any run; ``retry()`` later asks
    again (the suspended node runs anew).
    """
    run_id = new_id()
    active = ActiveRun(storage(), head.thread_id, run_id=run_id, durability="sync", on_busy="fail")
    with active:
        if active.head is None or active.head.id != head.id:
            raise IntegrityError("the suspension was answered meanwhile")
        # The one audit event of this firing, stored with the failure it writes (a
        # default answer is audited by the run that resumes the thread, door deadline).
        active.audit = AuditRecord(
            "deadline_fail",
            head.thread_id,
            SYSTEM,
            {"interrupt_id": interrupt["id"], "reason": interrupt.get("reason")},
            door="deadline",
        )
        active.write(
            source="failure",
            status="failed",
            state=head.state,
            delta={},
            next=head.next,
            tasks=head.tasks,
            error={
                "type": "DeadlinePassed",
                "code": "deadline_passed",
                "message": f"no decision on {interrupt.get('reason')!r} before its deadline.",
                "node": interrupt.get("node"),
            },
            metadata={"actor": SYSTEM, "reason": "deadline", "interrupt_id": interrupt["id"]},
            final=True,
        )


# -- reminders ---------------------------------------------------------------------------


def _remind(head: Any, interrupt: dict[str, Any]) -> bool:
    deadline = interrupt.get("deadline")
    subject = f"Waiting for a decision: {interrupt.get('reason') or 'approval'} ({head.thread_id})"
    body = (
        f"Thread {head.thread_id} has been waiting since {head.created_at:%Y-%m-%d %H:%M} UTC "
        f"for: {interrupt.get('reason')}.\n"
        + (f"Deadline: {deadline} (then: {interrupt.get('default')}).\n" if deadline else "")
    )
    # One transaction: the once-row, the audit event and the calls' enqueueing stand or
    # fall together. The calls leave after the commit: a reminder may be lost in a crash
    # then, never repeated.
    with transaction.atomic():
        if not fire_once(head, str(interrupt["id"]), "reminder"):
            return False  # already reminded
        storage().record_audit(
            "deadline_reminder",
            thread_id=head.thread_id,
            actor=SYSTEM,
            details={"checkpoint_id": head.id, "interrupt_id": str(interrupt["id"])},
        )
        recipients = _operator_emails()
        if recipients:
            outbound.send_email(
                subject=subject, body=body, recipients=recipients, thread_id=head.thread_id
            )
        _post_webhook(head, interrupt, subject)
        notify_reminder(head, interrupt, subject, body)  # the assistant's metadata.notify
    return True


def _operator_emails() -> list[str]:
    users = get_user_model().objects.filter(is_active=True).exclude(email="")
    operators = users.filter(
        Q(is_staff=True)
        | Q(is_superuser=True)
        | Q(
            user_permissions__codename="operate",
            user_permissions__content_type__app_label="criogen",
        )
        | Q(
            groups__permissions__codename="operate",
            groups__permissions__content_type__app_label="criogen",
        )
    )
    return sorted(set(operators.values_list("email", flat=True)))


def _post_webhook(head: Any, interrupt: dict[str, Any], subject: str) -> None:
    run = Run.objects.filter(pk=head.run_id).first() if _is_uuid(head.run_id) else None
    url = (run.kwargs or {}).get("webhook") if run is not None else None
    if not url:
        return
    payload = {
        "event": "reminder",
        "message": subject,
        "thread_id": head.thread_id,
        "run_id": str(run.pk),
        "checkpoint_id": head.id,
        "interrupt": interrupt,
    }
    outbound.send_webhook(
        kind="reminder", url=url, payload=payload, run_id=run.pk, thread_id=head.thread_id
    )


def _is_uuid(value: Any) -> bool:
    import uuid

    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True
