"""Checkpoint rows: by id, the ones a run wrote, their decoded bodies, and a thread's
timeline."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from criogen.storage.models import Checkpoint as CheckpointRow
from criogen.storage.models.runs import open_sealed

__all__ = [
    "TimelineEntry",
    "checkpoint_body",
    "checkpoint_row",
    "checkpoint_version",
    "first_run_version",
    "open_json",
    "run_checkpoint_ids",
    "timeline",
]


def checkpoint_version(*, thread_id: str, checkpoint_id: str) -> int | None:
    """The version of the thread's checkpoint ``checkpoint_id`` (None: it has none)."""
    version = (
        CheckpointRow.objects.filter(thread_id=thread_id, id=checkpoint_id)
        .values_list("version", flat=True)
        .first()
    )
    return None if version is None else int(version)


def run_checkpoint_ids(*, thread_id: str, run_id: str, after: int) -> list[str]:
    """Ids of the checkpoints the run wrote on the thread after version ``after``, in
    version order (what a stream has not sent yet)."""
    return list(
        CheckpointRow.objects.filter(thread_id=thread_id, run_id=run_id, version__gt=after)
        .order_by("version")
        .values_list("id", flat=True)
    )


def first_run_version(*, thread_id: str, run_id: str) -> int | None:
    """The version of the first checkpoint the run wrote on the thread (None: none yet)."""
    first = (
        CheckpointRow.objects.filter(thread_id=thread_id, run_id=run_id)
        .order_by("version")
        .values_list("version", flat=True)
        .first()
    )
    return None if first is None else int(first)


def open_json(text: str | None) -> Any:
    """Decode a JSON column the engine wrote (a checkpoint body, an audit event's
    details), opening it first if it is encrypted at rest; None when the text cannot be
    read (no key, the wrong key, or not JSON)."""
    if not text:
        return None
    try:
        return json.loads(open_sealed(text))
    except Exception:  # noqa: BLE001 - unreadable (wrong key): shown as missing, not a crash
        return None


def checkpoint_body(row: CheckpointRow | None) -> dict[str, Any]:
    """The decoded body of a checkpoint row: interrupts, error, metadata… ({} when
    absent or unreadable)."""
    if row is None:
        return {}
    data = open_json(row.body)
    return data if isinstance(data, dict) else {}


def checkpoint_row(*, thread_id: str, checkpoint_id: str) -> CheckpointRow | None:
    """The thread's checkpoint row ``checkpoint_id`` (body undecoded), or None."""
    if not checkpoint_id:
        return None
    return CheckpointRow.objects.filter(thread_id=thread_id, pk=checkpoint_id).first()


@dataclass
class TimelineEntry:
    """One checkpoint as a row of the timeline (no state: that is loaded on demand)."""

    id: str
    version: int
    source: str
    status: str
    created_at: datetime
    run_id: str | None
    parent_id: str | None
    forked_from: int | None = None


def timeline(thread_id: str, *, before: int | None = None, size: int = 100) -> list[TimelineEntry]:
    """Checkpoints of the thread, newest first (older than version ``before``), without
    their bodies (one query)."""
    qs = CheckpointRow.objects.filter(thread_id=thread_id)
    if before is not None:
        qs = qs.filter(version__lt=before)
    rows = qs.order_by("-version").values_list(
        "id", "version", "source", "status", "created_at", "run_id", "parent_id"
    )[:size]
    versions: dict[str, int] = {}
    entries = []
    for cid, version, source, status, created_at, run_id, parent_id in rows:
        versions[cid] = version
        entries.append(TimelineEntry(cid, version, source, status, created_at, run_id, parent_id))
    for entry in entries:
        if entry.source == "fork" and entry.parent_id:
            entry.forked_from = versions.get(entry.parent_id)
    return entries
