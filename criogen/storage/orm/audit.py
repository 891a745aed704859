"""The audit trail (``AuditEvent``): append-only, written in the transaction of the
change it records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from criogen.engine.store import (
    AuditRecord,
)
from criogen.storage.orm.base import OrmBase

__all__ = ["OrmAudit", "of_earlier_thread"]


def of_earlier_thread() -> Any:
    """True for an audit event written before the row of its thread was created: it
    belongs to an earlier thread of the same id (deleted, then created again), which the
    thread of today does not show. The one rule for every reader of a thread's audit
    trail (:meth:`OrmAudit.audit_events`, the dashboard's audit page); the events of a
    thread that no longer exists all stay readable under its id.

    A boolean expression over ``AuditEvent`` rows: ``qs.exclude(of_earlier_thread())``.
    """
    from django.db.models import Exists, OuterRef

    from criogen.storage.models import Thread

    return Exists(
        Thread.objects.filter(pk=OuterRef("thread_id"), created_at__gt=OuterRef("created_at"))
    )


class OrmAudit(OrmBase):
    """The audit trail: who did what to which thread (when ``audit`` is on)."""

    def record_audit(
        self,
        action: str,
        *,
        thread_id: str | None = None,
        actor: str | None = None,
        details: Mapping[str, Any] | None = None,
        door: str = "",
        before: str | None = None,
        after: str | None = None,
    ) -> None:
        self._insert_audit(
            [
                AuditRecord(
                    action,
                    thread_id,
                    actor,
                    dict(details or {}),
                    door=door,
                    before=before,
                    after=after,
                )
            ]
        )

    def _insert_audit(self, events: Sequence[AuditRecord]) -> None:
        """Insert audit events (inside the caller's transaction, when it has one)."""
        if not self.audit_enabled or not events:
            return
        from criogen.storage.models import AuditEvent

        AuditEvent.objects.using(self.alias).bulk_create(
            [
                AuditEvent(
                    created_at=e.created_at,
                    action=e.action,
                    thread_id=e.thread_id or "",
                    actor=e.actor,
                    door=e.door,
                    before=e.before or "",
                    after=e.after or "",
                    details=self._json_in(dict(e.details)),
                )
                for e in events
            ]
        )

    def audit_events(self, *, thread_id: str | None = None, limit: int = 100) -> list[AuditRecord]:
        from criogen.storage.models import AuditEvent

        qs = AuditEvent.objects.using(self.alias).all()
        if thread_id is not None:
            qs = qs.filter(thread_id=thread_id).exclude(of_earlier_thread())
        return [
            AuditRecord(
                e.action,
                e.thread_id or None,
                e.actor,
                self._json_out(e.details) or {},
                e.created_at,
                door=e.door,
                before=e.before or None,
                after=e.after or None,
            )
            for e in qs.order_by("-created_at", "-id")[:limit]
        ]
