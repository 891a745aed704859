"""The event log of resumable streams: append, read, prune.

A run streamed with ``stream_resumable: true`` has its events written here as they are
sent (:class:`criogen.storage.models.StreamEvent`), numbered 1, 2, 3… per run. Any web
process reads them back for a client that reconnects with ``Last-Event-ID``. The log is
in the database (SQLite or PostgreSQL, like everything else Criogen keeps), so every
web process sees the same one; the sweep deletes a run's log
``CRIOGEN_STREAM_RETENTION_SECONDS`` after its last event (default one hour).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from criogen.storage.models import Run, StreamEvent
from criogen.storage.models.runs import ACTIVE_RUN_STATUSES

__all__ = [
    "LoggedEvent",
    "StreamTail",
    "append_stream_events",
    "append_to_stream_log",
    "open_stream_log",
    "prune_streams",
    "stream_events_after",
    "stream_tail",
]

logger = logging.getLogger("criogen.services.streams")

END_EVENT = "end"


@dataclass(frozen=True)
class LoggedEvent:
    """One event of a run's log."""

    seq: int
    """Its SSE id (1, 2, 3… per run)."""
    version: int
    """The thread version it comes from."""
    mode: str
    """Its stream mode ('' for metadata, error and end)."""
    event: str
    """The SSE event name."""
    data: str
    """The SSE data line (JSON text)."""


@dataclass(frozen=True)
class StreamTail:
    """Where a run's log stands."""

    seq: int
    """The id of its last event."""
    version: int
    """The thread version of its last event."""
    ended: bool
    """Whether its last event is ``end`` (nothing will follow)."""


def stream_tail(*, run_id: str) -> StreamTail | None:
    """The last event of the run's log; None when the run has none (not resumable)."""
    row = (
        StreamEvent.objects.filter(run_id=run_id)
        .order_by("-seq")
        .values_list("seq", "version", "event")
        .first()
    )
    if row is None:
        return None
    return StreamTail(seq=row[0], version=row[1], ended=row[2] == END_EVENT)


def append_stream_events(
    *,
    run_id: str,
    thread_id: str,
    after: int,
    events: Sequence[tuple[int, str, str, str]],
) -> list[int] | None:
    """Append ``events`` (``(version, mode, event, data)`` each) after event ``after``.

    Returns their ids (``after + 1``…), or None when another process appended after
    ``after`` first (the caller re-reads the tail): the unique ``(run_id, seq)`` makes
    that race safe, so ids never repeat and never skip.
    """
    if not events:
        return []
    now = timezone.now()
    rows = [
        StreamEvent(
            run_id=run_id,
            thread_id=thread_id,
            seq=after + i,
            version=version,
            mode=mode,
            event=event,
            data=data,
            created_at=now,
        )
        for i, (version, mode, event, data) in enumerate(events, start=1)
    ]
    try:
        with transaction.atomic():
            StreamEvent.objects.bulk_create(rows)
    except IntegrityError:
        return None
    except DatabaseError as exc:  # SQLite's "database is locked" under a racing writer
        logger.warning("could not append to the stream log of run %s: %s", run_id, exc)
        return None
    return [row.seq for row in rows]


def open_stream_log(*, run_id: str, thread_id: str, version: int) -> None:
    """Start the run's log with ``event: metadata`` (``{"run_id", "attempt"}``) at id 1,
    unless it has begun: the door that streams the run and the run itself (a bridged
    LangGraph graph writing its chunks) may each be first."""
    if stream_tail(run_id=run_id) is not None:
        return
    data = json.dumps({"run_id": run_id, "attempt": 1}, separators=(",", ":"))
    append_stream_events(
        run_id=run_id, thread_id=thread_id, after=0, events=[(version, "", "metadata", data)]
    )


APPEND_ATTEMPTS = 50


def append_to_stream_log(
    *, run_id: str, thread_id: str, events: Sequence[tuple[str, str, str]]
) -> bool:
    """Append ``events`` (``(mode, event, data)`` each) after the log's last event,
    whoever else appends meanwhile (its opening, a reader finishing it), at the
    version of that last event; the log is opened first if it has not been. Returns
    False when the log has ended (nothing may follow ``end``) or could not be
    written after :data:`APPEND_ATTEMPTS` tries."""
    if not events:
        return True
    for attempt in range(APPEND_ATTEMPTS):
        tail = stream_tail(run_id=run_id)
        if tail is None:
            open_stream_log(run_id=run_id, thread_id=thread_id, version=0)
            continue
        if tail.ended:
            return False
        rows = [(tail.version, mode, event, data) for mode, event, data in events]
        if append_stream_events(run_id=run_id, thread_id=thread_id, after=tail.seq, events=rows):
            return True
        time.sleep(min(0.01 * (attempt + 1), 0.2))  # another writer went first: again
    logger.warning("gave up appending %d events to the log of run %s", len(events), run_id)
    return False


def stream_events_after(
    *, run_id: str, after: int, modes: Sequence[str] | None = None, limit: int = 500
) -> list[LoggedEvent]:
    """Up to ``limit`` events of the run's log after id ``after``, in order; with
    ``modes``, only those modes' events (metadata, error and end always)."""
    query = StreamEvent.objects.filter(run_id=run_id, seq__gt=after)
    if modes is not None:
        query = query.filter(mode__in=[*modes, ""])
    return [
        LoggedEvent(seq=r.seq, version=r.version, mode=r.mode, event=r.event, data=r.data)
        for r in query.order_by("seq")[:limit]
    ]


def prune_streams(*, now: datetime | None = None, limit: int = 1000) -> int:
    """Delete the logs of runs that are no longer active and whose last event is older
    than ``CRIOGEN_STREAM_RETENTION_SECONDS``; returns how many runs' logs went."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=int(settings.CRIOGEN_STREAM_RETENTION_SECONDS))
    # Candidates by their first event (indexed), then those whose last one is old too.
    old = list(
        StreamEvent.objects.filter(seq=1, created_at__lt=cutoff)
        .order_by("created_at")
        .values_list("run_id", flat=True)[:limit]
    )
    if not old:
        return 0
    settled = set(
        StreamEvent.objects.filter(run_id__in=old)
        .values("run_id")
        .annotate(last=Max("created_at"))
        .filter(last__lt=cutoff)
        .values_list("run_id", flat=True)
    )
    # A run still going keeps its log, however long ago it started writing.
    settled -= set(
        Run.objects.filter(pk__in=settled, status__in=ACTIVE_RUN_STATUSES).values_list(
            "pk", flat=True
        )
    )
    if settled:
        StreamEvent.objects.filter(run_id__in=settled).delete()
    return len(settled)
