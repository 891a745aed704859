"""Operator actions: the dashboard's only way to change anything.

Each function checks what the operator saw against the thread as it is now
(compare-and-set on the head checkpoint), then calls one service of
``criogen.services`` (contracts 1, 2 and 4), which validates, records and enqueues the
change. The result is an :class:`Outcome` the page shows; nothing here raises for a
refusal a person can understand (already decided, not suspended, busy).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from criogen.engine.errors import CriogenError
from criogen.selectors import can_operate, get_run, who_decided
from criogen.services.runs import Decider, answer_thread, cancel_run, retry_thread
from criogen.services.threads import rewind_thread, update_thread_state
from dashboard.answers import field_of
from dashboard.forms import FormError

if TYPE_CHECKING:
    from criogen.storage.models import Thread


@dataclass
class Outcome:
    """What happened, in words for the page, plus a level (``success``, ``warning``, ``error``)."""

    ok: bool
    message: str
    level: str = "success"
    code: str = ""
    decided_by: str = ""
    decided_at: datetime | None = None


def actor(user: Any) -> str:
    """How the audit trail names a dashboard user."""
    return str(user.get_username()) if getattr(user, "is_authenticated", False) else "anonymous"


def _already(thread: Thread, checkpoint_id: str) -> Outcome:
    by, at = who_decided(thread, checkpoint_id)
    when = timezone.localtime(at).strftime("%H:%M:%S %Z") if at else "a moment ago"
    who = by or "another operator"
    return Outcome(
        ok=False,
        message=f"Already decided by {who} at {when}; nothing was changed.",
        level="warning",
        code="already_decided",
        decided_by=by,
        decided_at=at,
    )


def decided_note(by: str, at: datetime | None) -> Outcome:
    """The note a live page shows when the suspension it displayed was answered."""
    when = timezone.localtime(at).strftime("%H:%M:%S %Z") if at else "just now"
    return Outcome(
        ok=True,
        message=f"Decided by {by or 'another operator'} at {when}.",
        level="info",
        code="decided",
        decided_by=by,
        decided_at=at,
    )


def _refused(exc: CriogenError, thread: Thread, checkpoint_id: str) -> Outcome:
    if exc.code == "already_decided":
        by = str(exc.details.get("decided_by") or "")
        at = exc.details.get("decided_at")
        when = at if isinstance(at, datetime) else None
        if isinstance(at, str):
            try:
                when = datetime.fromisoformat(at)
            except ValueError:
                when = None
        stamp = timezone.localtime(when).strftime("%H:%M:%S %Z") if when else str(at or "")
        return Outcome(
            ok=False,
            message=f"Already decided by {by or 'another operator'}"
            + (f" at {stamp}" if stamp else "")
            + "; nothing was changed.",
            level="warning",
            code="already_decided",
            decided_by=by,
            decided_at=when,
        )
    if exc.code == "stale_head" and checkpoint_id and thread.head_status != "suspended":
        # The suspension the operator answered is gone: say who answered it.
        return _already(thread, checkpoint_id)
    if exc.code == "stale_head":
        by = str(exc.details.get("moved_by") or "")
        return Outcome(
            ok=False,
            message="The thread moved on since this page was loaded"
            + (f" ({by} changed it)" if by else "")
            + "; nothing was changed. Reload to see it as it is now.",
            level="warning",
            code="stale_head",
            decided_by=by,
        )
    if exc.code in ("not_suspended", "thread_busy") and checkpoint_id:
        return _already(thread, checkpoint_id)
    return Outcome(ok=False, message=exc.message, level="error", code=exc.code)


def _answer(*, thread: Thread, expected: str, value: Any, user: Any) -> None:
    """Answer the suspension ``expected`` with ``value`` through the one answering
    service (compare-and-set on ``expected`` under the thread's lock: two operators
    clicking at once end with exactly one run; the engine audits the decision)."""
    answer_thread(
        thread_id=thread.pk,
        value=value,
        by=actor(user),
        door="ui",
        expected=expected,
        decider=Decider(user, can_operate(user)),
    )


def resume(*, thread: Thread, expected: str, value: Any, user: Any) -> Outcome:
    """Answer a workflow's suspension with ``value`` (a run resumes it). A value the
    step does not take raises FormError naming the form field."""
    try:
        _answer(thread=thread, expected=expected, value=value, user=user)
    except CriogenError as exc:
        if exc.code == "invalid_argument":
            # The step does not take this value (a typed suspension): say so next to
            # the field the refusal names, and keep what was typed.
            raise FormError(field_of(str(exc.details.get("field") or "")), exc.message) from None
        thread.refresh_from_db()
        return _refused(exc, thread, expected)
    return Outcome(True, "Resumed: a run continues the thread.")


def decide(*, thread: Thread, expected: str, decisions: list[dict[str, Any]], user: Any) -> Outcome:
    """Send an HITL response (contract 4) to an agent waiting for approval."""
    if not decisions:
        return _already(thread, expected)
    try:
        _answer(thread=thread, expected=expected, value={"decisions": decisions}, user=user)
    except CriogenError as exc:
        thread.refresh_from_db()
        return _refused(exc, thread, expected)
    kinds = sorted({d["type"] for d in decisions})
    words = {"approve": "Approved", "reject": "Rejected", "edit": "Edited and approved"}
    summary = ", ".join(words.get(k, k) for k in kinds)
    return Outcome(True, f"{summary}: the agent continues.")


def resolve(*, thread: Thread, expected: str, user: Any) -> Outcome:
    """Close the suspension ``expected`` as resolved by the operator without running
    what waited (the one answering service, ``goto: "__end__"``; audited ``resolve``)."""
    try:
        answer_thread(
            thread_id=thread.pk,
            value=None,
            goto="__end__",
            by=actor(user),
            door="ui",
            expected=expected,
            decider=Decider(user, can_operate(user)),
        )
    except CriogenError as exc:
        thread.refresh_from_db()
        return _refused(exc, thread, expected)
    return Outcome(True, "Resolved: nothing that waited was run; the thread completes.")


def retry(
    *, thread: Thread, user: Any, expected: str | None = None, resumed: bool = False
) -> Outcome:
    """Retry a failed or crashed run from its last checkpoint (the head the operator
    saw: ``expected``); ``resumed``: continue a thread a person paused (a rewind)."""
    try:
        run = retry_thread(thread_id=thread.pk, by=actor(user), door="ui", expected=expected)
    except CriogenError as exc:
        return _refused(exc, thread, "")
    verb = "Continuing" if resumed else "Retrying"
    return Outcome(True, f"{verb}: run {str(run.run_id)[:8]} continues it.")


def rewind(
    *, thread: Thread, checkpoint_id: str, user: Any, expected: str | None = None
) -> Outcome:
    """Fork the thread at ``checkpoint_id`` (a new head; history keeps everything).
    ``expected`` is the head the operator saw: a second click is refused."""
    try:
        cp = rewind_thread(
            thread_id=thread.pk,
            checkpoint_id=checkpoint_id,
            by=actor(user),
            door="ui",
            expected=expected,
        )
    except CriogenError as exc:
        return _refused(exc, thread, "")
    return Outcome(True, f"Rewound: the new head v{cp.version} is a copy of the chosen checkpoint.")


def edit_state(*, thread: Thread, values: Any, user: Any, expected: str | None) -> Outcome:
    """Merge ``values`` into the thread's state (a ``fork`` checkpoint, audited as
    ``update_state``): the way to fix a bad input before Retry. Values the engine
    refuses raise FormError on the ``state`` box, or on the typed form's field
    (``values.<key>``) that a declared state schema refused."""
    try:
        cp = update_thread_state(
            thread_id=thread.pk, values=values, by=actor(user), door="ui", expected=expected
        )
    except CriogenError as exc:
        if exc.code in ("invalid_argument", "invalid_state"):
            named = str(exc.details.get("field") or "")
            raise FormError(
                named if named.startswith("values.") else "state", exc.message
            ) from None
        return _refused(exc, thread, "")
    return Outcome(True, f"State saved as v{cp.version}; retry or continue from it.")


def cancel(*, thread: Thread, run_id: str, user: Any) -> Outcome:
    """Cancel a pending or running run of ``thread`` (it stops before its next step;
    its checkpoints stay)."""
    try:
        run = get_run(run_id=run_id, thread_id=thread.pk)
        run = cancel_run(run=run, by=actor(user), door="ui")
    except CriogenError as exc:
        return _refused(exc, thread, "")
    if run.status == "interrupted":
        return Outcome(True, f"Cancelled run {str(run.run_id)[:8]}.")
    if run.cancel_action:
        return Outcome(
            True, f"Cancelling run {str(run.run_id)[:8]}: it stops before its next step."
        )
    return Outcome(False, f"Run {str(run.run_id)[:8]} had already ended ({run.status}).", "warning")
