"""In-memory storage: the reference implementation. Tests and notebooks only.

Everything lives in this process and is gone when it ends. It keeps values exactly
as the SQL backend does (JSON text, deltas) so both behave the same.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from criogen.engine.checkpoints import Checkpoint, CheckpointId, CheckpointWrite, ThreadId
from criogen.engine.errors import (
    AlreadyDecided,
    CheckpointNotFound,
    LeaseLost,
    StorageError,
    ThreadNotFound,
)
from criogen.engine.store import (
    AuditRecord,
    DecisionRecord,
    DocumentRecord,
    EffectRecord,
    FactRecord,
    Storage,
    ThreadInfo,
    ValueRow,
    build_state,
    reachable_values,
    value_rows_for,
)

__all__ = ["MemoryStorage"]


@dataclass
class _Thread:
    checkpoints: list[Checkpoint] = field(default_factory=list)
    """Without states (rebuilt on read), oldest first (versions ascending)."""
    values: dict[tuple[str, int], ValueRow] = field(default_factory=dict)
    lease_id: str | None = None
    lease_expires: float = 0.0
    updated: float = field(default_factory=time.monotonic)
    audit_from: int = 0
    """Where this thread's audit trail starts in the store's list: the events before
    belong to an earlier thread of the same id (deleted, then created again)."""


def _version(cp: Checkpoint) -> int:
    return cp.version


class MemoryStorage(Storage):
    """Storage in this process's memory. Tests and notebooks only."""

    def __init__(self, url: str | None = None, **options: Any) -> None:
        self.url = "memory://"
        self._threads: dict[str, _Thread] = {}
        self._lock = threading.RLock()
        self._init_options(options)
        # Agent tables (decisions, effects, facts, documents, audit), under the same lock.
        self._decisions: dict[str, list[DecisionRecord]] = {}
        self._effects: dict[str, EffectRecord] = {}
        self._facts: dict[str, FactRecord] = {}
        self._documents: dict[tuple[str, str], DocumentRecord] = {}
        self._audit: list[AuditRecord] = []

    def _new_thread(self, thread_id: str) -> _Thread:
        """A new, empty thread (under the lock): its audit trail starts now."""
        thread = self._threads[thread_id] = _Thread(audit_from=len(self._audit))
        return thread

    # -- leases ----------------------------------------------------------------------

    def acquire(self, thread_id: str, lease_id: str, *, seconds: float) -> bool:
        now = time.monotonic()
        with self._lock:
            thread = self._threads.get(thread_id) or self._new_thread(thread_id)
            if thread.lease_id not in (None, lease_id) and thread.lease_expires > now:
                return False
            thread.lease_id, thread.lease_expires = lease_id, now + seconds
            return True

    def renew(self, thread_id: str, lease_id: str, *, seconds: float) -> bool:
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is None or thread.lease_id != lease_id:
                return False
            thread.lease_expires = time.monotonic() + seconds
            return True

    def release(self, thread_id: str, lease_id: str) -> None:
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is not None and thread.lease_id == lease_id:
                thread.lease_id, thread.lease_expires = None, 0.0

    def thread_info(self, thread_id: str) -> ThreadInfo | None:
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is None:
                return None
            head = thread.checkpoints[-1] if thread.checkpoints else None
            alive = thread.lease_id is not None and thread.lease_expires > time.monotonic()
            return ThreadInfo(
                thread_id=thread_id,
                head_version=head.version if head else 0,
                head_status=head.status if head else None,
                lease_id=thread.lease_id if alive else None,
            )

    # -- checkpoints -----------------------------------------------------------------

    def write(self, writes: Sequence[CheckpointWrite], *, lease_id: str | None) -> None:
        with self._lock:
            # Check every write first so that a refused batch changes nothing.
            heads: dict[str, int] = {}
            created: dict[str, _Thread] = {}
            for w in writes:
                cp = w.checkpoint
                if w.new_thread is not None and cp.thread_id not in created:
                    if cp.thread_id in self._threads:
                        raise LeaseLost(
                            f"thread {cp.thread_id!r} was created by someone else while "
                            f"run {lease_id} started on it; nothing was written.",
                            thread_id=cp.thread_id,
                        )
                    created[cp.thread_id] = _Thread(
                        audit_from=len(self._audit),
                        lease_id=lease_id,
                        lease_expires=time.monotonic() + w.new_thread if lease_id else 0.0,
                    )
                thread = created.get(cp.thread_id) or self._threads.get(cp.thread_id)
                if thread is None:
                    thread = self._new_thread(cp.thread_id)
                if lease_id is not None and thread.lease_id != lease_id:
                    raise LeaseLost(
                        f"run {lease_id} no longer holds thread {cp.thread_id!r}; "
                        "another run took it over.",
                        thread_id=cp.thread_id,
                    )
                head = heads.get(
                    cp.thread_id, thread.checkpoints[-1].version if thread.checkpoints else 0
                )
                if w.after != head or cp.version <= w.after:
                    raise StorageError(
                        f"thread {cp.thread_id!r} is at version {head}, not {w.after}: "
                        "another write got there first.",
                        thread_id=cp.thread_id,
                    )
                heads[cp.thread_id] = cp.version
            self._threads.update(created)
            for w in writes:
                cp = w.checkpoint
                thread = self._threads[cp.thread_id]
                for key, version, kind, data, prev in value_rows_for(w):
                    thread.values[(key, version)] = ValueRow(kind, data, prev)
                thread.checkpoints.append(replace(cp, state={}))
                if w.touch:
                    thread.updated = time.monotonic()
                if w.audit is not None and self.audit_enabled:
                    self._audit.append(w.audit)

    def _load(self, thread: _Thread, cp: Checkpoint) -> Checkpoint:
        return replace(cp, state=build_state(cp.value_versions, thread.values))

    def head(self, thread_id: str) -> Checkpoint | None:
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is None or not thread.checkpoints:
                return None
            return self._load(thread, thread.checkpoints[-1])

    def get_checkpoint(self, thread_id: str, checkpoint_id: str) -> Checkpoint:
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is not None:
                for cp in reversed(thread.checkpoints):
                    if cp.id == checkpoint_id:
                        return self._load(thread, cp)
        raise CheckpointNotFound(
            f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}; list them with history().",
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
        )

    def history(
        self, thread_id: str, *, limit: int | None = None, before: int | None = None
    ) -> list[Checkpoint]:
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is None:
                return []
            cps = thread.checkpoints
            end = len(cps) if before is None else bisect_left(cps, before, key=_version)
            start = 0 if limit is None else max(0, end - limit)
            return [self._load(thread, cp) for cp in reversed(cps[start:end])]

    def delete_thread(self, thread_id: str, *, audit: AuditRecord | None = None) -> bool:
        with self._lock:
            # Decisions and effects go with their thread, as the ORM's foreign keys cascade.
            self._decisions.pop(thread_id, None)
            for key in [k for k, e in self._effects.items() if e.thread_id == thread_id]:
                del self._effects[key]
            deleted = self._threads.pop(thread_id, None) is not None
            if deleted and audit is not None and self.audit_enabled:
                self._audit.append(audit)
            return deleted

    def thread_ids(self, *, limit: int = 100, offset: int = 0) -> list[str]:
        with self._lock:
            ordered = sorted(self._threads, key=lambda t: self._threads[t].updated, reverse=True)
            return ordered[offset : offset + limit]

    # -- history maintenance -----------------------------------------------------------

    def rollback_run(self, thread_id: str, run_id: str) -> int:
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is None:
                return 0
            low = min(
                (cp.version for cp in thread.checkpoints if cp.run_id == run_id), default=None
            )
            if low is None:
                return 0
            kept = [cp for cp in thread.checkpoints if cp.version < low]
            deleted = len(thread.checkpoints) - len(kept)
            thread.checkpoints = kept
            thread.values = {k: v for k, v in thread.values.items() if k[1] < low}
            thread.updated = time.monotonic()
            return deleted

    def compact_thread(self, thread_id: str, *, audit: AuditRecord | None = None) -> int:
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is None or not thread.checkpoints:
                if thread is not None and audit is not None and self.audit_enabled:
                    self._audit.append(audit)
                return 0
            head = thread.checkpoints[-1]
            keep = reachable_values(head.value_versions, thread.values)
            deleted = len(thread.checkpoints) - 1
            thread.checkpoints = [head]
            thread.values = {k: v for k, v in thread.values.items() if k in keep}
            if audit is not None and self.audit_enabled:
                self._audit.append(audit)
            return deleted

    def copy_thread(
        self, thread_id: str, new_thread_id: str, *, audit: AuditRecord | None = None
    ) -> str | None:
        with self._lock:
            source = self._threads.get(thread_id)
            if source is None:
                raise ThreadNotFound(f"no thread {thread_id!r}.", thread_id=thread_id)
            if new_thread_id in self._threads:
                raise StorageError(
                    f"thread {new_thread_id!r} exists already; copy to a new id.",
                    thread_id=new_thread_id,
                )
            ids = {cp.id: CheckpointId(str(uuid.uuid4())) for cp in source.checkpoints}
            copy = self._new_thread(new_thread_id)
            copy.checkpoints, copy.values = (
                [
                    replace(
                        cp,
                        id=ids[cp.id],
                        thread_id=ThreadId(new_thread_id),
                        parent_id=ids.get(cp.parent_id, cp.parent_id) if cp.parent_id else None,
                    )
                    for cp in source.checkpoints
                ],
                dict(source.values),
            )
            head_id = copy.checkpoints[-1].id if copy.checkpoints else None
            if audit is not None and self.audit_enabled:
                self._audit.append(replace(audit, after=head_id))
            return head_id

    # -- agents ------------------------------------------------------------------------

    def write_decisions(
        self,
        writes: Sequence[CheckpointWrite],
        decisions: Sequence[DecisionRecord],
        *,
        lease_id: str | None,
    ) -> None:
        with self._lock:
            for d in decisions:
                for old in self._decisions.get(d.thread_id, ()):
                    if (old.version, old.call_id) == (d.version, d.call_id):
                        raise AlreadyDecided(
                            f"call {d.call_id!r} of thread {d.thread_id!r} (v{d.version}) was "
                            f"already decided by {old.actor or 'someone'} at "
                            f"{old.decided_at.isoformat()}.",
                            thread_id=d.thread_id,
                            decided_by=old.actor,
                            decided_at=old.decided_at.isoformat(),
                        )
            self.write(writes, lease_id=lease_id)  # raises before anything is stored
            for d in decisions:
                self._decisions.setdefault(d.thread_id, []).append(d)

    def decisions(self, thread_id: str, *, version: int | None = None) -> list[DecisionRecord]:
        with self._lock:
            found = [
                d
                for d in self._decisions.get(thread_id, ())
                if version is None or d.version == version
            ]
        return sorted(found, key=lambda d: (d.decided_at, d.version), reverse=True)

    def begin_effect(self, effect: EffectRecord) -> EffectRecord | None:
        with self._lock:
            existing = self._effects.get(effect.key)
            if existing is not None:
                return existing
            self._effects[effect.key] = effect
            return None

    def retry_effect(self, key: str) -> None:
        with self._lock:
            effect = self._effects[key]
            self._effects[key] = replace(effect, attempts=effect.attempts + 1)

    def finish_effect(self, key: str, *, status: str, result: str) -> None:
        with self._lock:
            effect = self._effects[key]
            self._effects[key] = replace(
                effect, status=status, result=result, finished_at=datetime.now(UTC)
            )

    def get_effect(self, key: str) -> EffectRecord | None:
        with self._lock:
            return self._effects.get(key)

    def effects(self, thread_id: str) -> list[EffectRecord]:
        with self._lock:
            found = [e for e in self._effects.values() if e.thread_id == thread_id]
        return sorted(found, key=lambda e: e.created_at)

    def add_fact(self, namespace: str, subject: str, text: str) -> FactRecord:
        fact = FactRecord(str(uuid.uuid4()), namespace, subject, text)
        with self._lock:
            self._facts[fact.id] = fact
        return fact

    def facts(self, namespace: str, subject: str) -> list[FactRecord]:
        with self._lock:
            found = [
                f for f in self._facts.values() if (f.namespace, f.subject) == (namespace, subject)
            ]
        return sorted(found, key=lambda f: f.created_at)

    def get_fact(self, fact_id: str) -> FactRecord | None:
        with self._lock:
            return self._facts.get(fact_id)

    def update_fact(self, fact_id: str, text: str) -> FactRecord | None:
        with self._lock:
            fact = self._facts.get(fact_id)
            if fact is None:
                return None
            fact = self._facts[fact_id] = replace(fact, text=text, updated_at=datetime.now(UTC))
            return fact

    def delete_fact(self, fact_id: str) -> bool:
        with self._lock:
            return self._facts.pop(fact_id, None) is not None

    def put_document(
        self, collection: str, doc_id: str, text: str, metadata: Mapping[str, Any]
    ) -> DocumentRecord:
        doc = DocumentRecord(collection, doc_id, text, dict(metadata))
        with self._lock:
            self._documents[(collection, doc_id)] = doc
        return doc

    def get_document(self, collection: str, doc_id: str) -> DocumentRecord | None:
        with self._lock:
            return self._documents.get((collection, doc_id))

    def delete_document(self, collection: str, doc_id: str) -> bool:
        with self._lock:
            return self._documents.pop((collection, doc_id), None) is not None

    def documents(
        self, collection: str, *, limit: int = 100, offset: int = 0
    ) -> list[DocumentRecord]:
        with self._lock:
            found = [d for (c, _), d in self._documents.items() if c == collection]
        return sorted(found, key=lambda d: d.created_at)[offset : offset + limit]

    def search_documents(
        self, collection: str, query: str, *, limit: int = 5
    ) -> list[DocumentRecord]:
        return rank_by_words(self.documents(collection, limit=1_000_000), query, limit)

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
        if not self.audit_enabled:
            return
        event = AuditRecord(
            action, thread_id, actor, dict(details or {}), door=door, before=before, after=after
        )
        with self._lock:
            self._audit.append(event)

    def audit_events(self, *, thread_id: str | None = None, limit: int = 100) -> list[AuditRecord]:
        with self._lock:
            # A thread's events since it was created (all of them once it is deleted):
            # the rule of the ORM's audit_events.
            thread = self._threads.get(thread_id) if thread_id is not None else None
            events = self._audit[thread.audit_from :] if thread is not None else self._audit
            found = [e for e in events if thread_id is None or e.thread_id == thread_id]
        return list(reversed(found))[:limit]


_WORD = re.compile(r"\w+", re.UNICODE)


def rank_by_words(docs: Sequence[DocumentRecord], query: str, limit: int) -> list[DocumentRecord]:
    """Documents containing every word of ``query`` (case-insensitive substrings), ranked
    by how often the words occur: the search of stores that cannot index the text."""
    words = [w.lower() for w in _WORD.findall(query)]
    if not words:
        return []
    scored: list[tuple[float, int, DocumentRecord]] = []
    for index, doc in enumerate(docs):
        text = doc.text.lower()
        counts = [text.count(w) for w in words]
        if all(counts):
            scored.append((float(sum(counts)), -index, doc))
    scored.sort(key=lambda item: (item[0], item[1]), reverse=True)
    return [replace(doc, score=score) for score, _, doc in scored[:limit]]
