"""Claims: an operator says "I'm on it" about a suspended thread, takes it over from
another operator, or lets it go.

A claim holds the thread's *current* suspension: it is made on the head version the
thread has when claiming (see :class:`~criogen.storage.models.Claim`), so answering,
rewinding or resuming the thread ends it without any call here. Each claim, take-over
and release writes one audit event (``claim``, ``claim_taken_over``,
``claim_released``) in its transaction; after commit, one ``claim.changed`` event goes
to the ``inbox`` group, which every live console page joins.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from criogen import events
from criogen.engine.errors import Conflict, NotSuspended, ThreadNotFound
from criogen.registry import storage
from criogen.storage.models import Claim, Thread

__all__ = ["CLAIM_ACTIONS", "claim_thread", "release_claim"]

CLAIM_ACTIONS = ("claim", "claim_taken_over", "claim_released")
"""The audit actions this module writes."""


def _name(user: Any) -> str:
    return str(user.get_username())


def claim_thread(thread_id: str, *, by: Any, door: str, take_over: bool = False) -> Claim:
    """Make ``by`` the holder of the thread's current suspension and return the claim.

    Claiming a thread one already holds changes nothing (no audit, no event). A thread
    another operator holds is refused with :class:`~criogen.engine.errors.Conflict`
    (naming the holder) unless ``take_over``; a take-over is audited with the previous
    holder. Raises ThreadNotFound, or NotSuspended when nothing waits on the thread.
    """
    with transaction.atomic():
        # The thread row's lock serializes claims of one thread (PostgreSQL; SQLite
        # transactions here are IMMEDIATE, so writers are serialized anyway): of two
        # operators claiming at once, the second sees the first's claim and is refused.
        thread = Thread.objects.select_for_update().filter(pk=thread_id).first()
        if thread is None:
            raise ThreadNotFound(f"thread {thread_id!r} does not exist", thread_id=thread_id)
        if thread.head_status != "suspended":
            raise NotSuspended(
                f"thread {thread_id!r} is not waiting for anyone: nothing to claim",
                thread_id=thread_id,
            )
        current = Claim.objects.select_related("user").filter(thread=thread).first()
        held = current if current is not None and current.version == thread.head_version else None
        if held is not None and held.user_id == by.pk:
            return held
        if held is not None and not take_over:
            raise Conflict(
                f"thread {thread_id!r} is claimed by {_name(held.user)} since "
                f"{held.since:%Y-%m-%d %H:%M:%S %Z}; take it over to work on it",
                thread_id=thread_id,
                claimed_by=_name(held.user),
            )
        claim, _ = Claim.objects.update_or_create(
            thread=thread,
            defaults={"user": by, "since": timezone.now(), "version": thread.head_version},
        )
        details: dict[str, Any] = {"version": thread.head_version}
        if held is not None:
            details["from"] = _name(held.user)
        storage().record_audit(
            "claim_taken_over" if held is not None else "claim",
            thread_id=thread.pk,
            actor=_name(by),
            door=door,
            before=thread.head_id,
            details=details,
        )
        _announce_on_commit(thread.pk)
    return claim


def release_claim(thread_id: str, *, by: Any, door: str) -> bool:
    """Let go of ``by``'s claim on the thread; False (and nothing written) when ``by``
    does not hold its current suspension."""
    with transaction.atomic():
        thread = Thread.objects.select_for_update().filter(pk=thread_id).first()
        if thread is None:
            raise ThreadNotFound(f"thread {thread_id!r} does not exist", thread_id=thread_id)
        deleted, _ = Claim.objects.filter(
            thread=thread, user=by, version=thread.head_version
        ).delete()
        if not deleted:
            return False
        storage().record_audit(
            "claim_released",
            thread_id=thread.pk,
            actor=_name(by),
            door=door,
            before=thread.head_id,
            details={"version": thread.head_version},
        )
        _announce_on_commit(thread.pk)
    return True


def _announce_on_commit(thread_id: str) -> None:
    """Tell live pages after commit (a rolled-back claim tells nobody)."""
    event = {"type": "claim.changed", "thread_id": thread_id}
    transaction.on_commit(lambda: events.send(events.INBOX_GROUP, event))
