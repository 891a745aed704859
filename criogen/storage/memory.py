"""In-memory storage: the reference implementation. Tests and notebooks only.

Everything lives in this process and is gone when it ends. It keeps values exactly
as the SQL backend does (JSON text, deltas) so both behave the same.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from criogen.engine.checkpoints import Checkpoint, CheckpointWrite
from criogen.engine.errors import CheckpointNotFound, LeaseLost, StorageError
from criogen.storage.base import Storage, ThreadInfo, ValueRow, build_state, value_rows_for

__all__ = ["MemoryStorage"]


@dataclass
class _Thread:
    checkpoints: list[Checkpoint] = field(default_factory=list)
    """Without states (rebuilt on read), oldest first (versions ascending)."""
    values: dict[tuple[str, int], ValueRow] = field(default_factory=dict)
    lease_id: str | None = None
    lease_expires: float = 0.0
    updated: float = field(default_factory=time.monotonic)


def _version(cp: Checkpoint) -> int:
    return cp.version


class MemoryStorage(Storage):
    """Storage in this process's memory. Tests and notebooks only."""

    def __init__(self, url: str | None = None, **options: Any) -> None:
        self.url = "memory://"
        self._threads: dict[str, _Thread] = {}
        self._lock = threading.RLock()

    # -- leases ----------------------------------------------------------------------

    def acquire(self, thread_id: str, lease_id: str, *, seconds: float) -> bool:
        now = time.monotonic()
        with self._lock:
            thread = self._threads.setdefault(thread_id, _Thread())
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
            for w in writes:
                cp = w.checkpoint
                thread = self._threads.get(cp.thread_id)
                if thread is None:
                    thread = self._threads[cp.thread_id] = _Thread()
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
            for w in writes:
                cp = w.checkpoint
                thread = self._threads[cp.thread_id]
                for key, version, kind, data, prev in value_rows_for(w):
                    thread.values[(key, version)] = ValueRow(kind, data, prev)
                thread.checkpoints.append(replace(cp, state={}))
                thread.updated = time.monotonic()

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
            for cp in reversed(thread.checkpoints if thread else []):
                if cp.id == checkpoint_id:
                    return self._load(thread, cp)  # type: ignore[arg-type]
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

    def delete_thread(self, thread_id: str) -> bool:
        with self._lock:
            return self._threads.pop(thread_id, None) is not None

    def thread_ids(self, *, limit: int = 100, offset: int = 0) -> list[str]:
        with self._lock:
            ordered = sorted(self._threads, key=lambda t: self._threads[t].updated, reverse=True)
            return ordered[offset : offset + limit]
