"""History maintenance: rolling a run back, compacting a thread to its head, copying a
thread. Not the hot path: the ORM is fine here. Each runs in one transaction (a
savepoint inside the caller's), so a failure changes nothing.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from criogen.engine.errors import StorageError, ThreadNotFound
from criogen.engine.store import AuditRecord, ValueRow, reachable_values
from criogen.storage.orm.audit import OrmAudit

__all__ = ["OrmMaintenance"]


class OrmMaintenance(OrmAudit):
    """Rollback, compaction and copy of a thread's checkpoints and value rows."""

    def rollback_run(self, thread_id: str, run_id: str) -> int:
        from criogen.storage.models import Checkpoint, Thread, Value

        with transaction.atomic(using=self.alias):
            checkpoints = Checkpoint.objects.using(self.alias).filter(thread_id=thread_id)
            versions = checkpoints.filter(run_id=run_id).values_list("version", flat=True)
            low = min(versions, default=None)
            if low is None:
                return 0
            # The run held the thread while it wrote, so its checkpoints are the newest;
            # anything after its first one goes with them.
            deleted, _ = checkpoints.filter(version__gte=low).delete()
            Value.objects.using(self.alias).filter(thread_id=thread_id, version__gte=low).delete()
            prev = checkpoints.order_by("-version").first()
            Thread.objects.using(self.alias).filter(pk=thread_id).update(
                head_version=prev.version if prev else 0,
                head_id=prev.id if prev else "",
                head_status=prev.status if prev else "",
                updated_at=timezone.now(),
            )
        return int(deleted)

    def compact_thread(self, thread_id: str, *, audit: AuditRecord | None = None) -> int:
        from criogen.storage.models import Checkpoint, Thread, Value

        with transaction.atomic(using=self.alias):
            # The thread row, locked: no write moves the head while the rest goes.
            thread = (
                Thread.objects.using(self.alias).select_for_update().filter(pk=thread_id).first()
            )
            if thread is None:
                return 0
            deleted = 0
            head = self.head(thread_id) if thread.head_version else None
            if head is not None:
                values = Value.objects.using(self.alias).filter(thread_id=thread_id)
                rows = {
                    (key, version): ValueRow(kind, "", prev)
                    for key, version, kind, prev in values.filter(
                        state_key__in=list(head.value_versions)
                    ).values_list("state_key", "version", "kind", "prev")
                }
                keep = reachable_values(head.value_versions, rows)
                deleted, _ = (
                    Checkpoint.objects.using(self.alias)
                    .filter(thread_id=thread_id, version__lt=head.version)
                    .delete()
                )
                stale = [
                    pk
                    for pk, key, version in values.values_list("pk", "state_key", "version")
                    if (key, version) not in keep
                ]
                values.filter(pk__in=stale).delete()
            if audit is not None:
                self._insert_audit([audit])
        return int(deleted)

    def copy_thread(
        self, thread_id: str, new_thread_id: str, *, audit: AuditRecord | None = None
    ) -> str | None:
        from criogen.storage.models import Checkpoint, Thread, Value

        db = self.alias
        source = Thread.objects.using(db).filter(pk=thread_id).first()
        if source is None:
            raise ThreadNotFound(f"no thread {thread_id!r}.", thread_id=thread_id)
        try:
            with transaction.atomic(using=db):
                rows = list(
                    Checkpoint.objects.using(db).filter(thread_id=thread_id).order_by("version")
                )
                ids = {row.id: str(uuid.uuid4()) for row in rows}
                head_id = ids.get(source.head_id) or None
                # The copy's audit trail starts with the event of the copy.
                born = timezone.now()
                if audit is not None:
                    born = min(born, audit.created_at)
                Thread.objects.using(db).create(
                    id=new_thread_id,
                    created_at=born,
                    updated_at=born,
                    head_version=source.head_version,
                    head_id=head_id or "",
                    head_status=source.head_status,
                )
                Checkpoint.objects.using(db).bulk_create(
                    Checkpoint(
                        id=ids[row.id],
                        thread_id=new_thread_id,
                        version=row.version,
                        run_id=row.run_id,
                        source=row.source,
                        status=row.status,
                        parent_id=ids.get(row.parent_id or "", row.parent_id),
                        created_at=row.created_at,
                        body=row.body,
                    )
                    for row in rows
                )
                Value.objects.using(db).bulk_create(
                    Value(
                        thread_id=new_thread_id,
                        state_key=v.state_key,
                        version=v.version,
                        kind=v.kind,
                        prev=v.prev,
                        data=v.data,
                    )
                    for v in Value.objects.using(db).filter(thread_id=thread_id).iterator()
                )
                self._copy_langgraph(thread_id, new_thread_id)
                if audit is not None:
                    self._insert_audit([replace(audit, after=head_id)])
        except IntegrityError as exc:
            raise StorageError(
                f"thread {new_thread_id!r} exists already; copy to a new id.",
                thread_id=new_thread_id,
            ) from exc
        return head_id

    def _copy_langgraph(self, thread_id: str, new_thread_id: str) -> None:
        """The LangGraph checkpoints, channel values and pending writes of a thread
        running a LangGraph graph (``criogen_lg_*``), under the new thread with the same
        checkpoint ids, as LangGraph's own ``copy_thread`` does. Rows are copied as
        stored (sealed ones stay sealed)."""
        from criogen.storage.models.langgraph import (
            LangGraphBlob,
            LangGraphCheckpoint,
            LangGraphWrite,
        )

        models: tuple[type[Any], ...] = (LangGraphBlob, LangGraphCheckpoint, LangGraphWrite)
        for model in models:
            manager = model.objects.using(self.alias)
            copies = []
            for row in manager.filter(thread_id=thread_id).order_by("pk").iterator():
                row.pk = None
                row.thread_id = new_thread_id
                copies.append(row)
            if copies:
                manager.bulk_create(copies, batch_size=500)
