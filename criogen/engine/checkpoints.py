"""Checkpoints: the saved state of a run at one moment, and snapshots of them.

A thread is a line of checkpoints, version 1, 2, 3… (one per write, per thread); the
newest is the head. Storage keeps each checkpoint with only what changed since its
parent (see :mod:`criogen.engine.state`), and rebuilds ``state`` when it is read.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, NewType

from criogen.engine.errors import InvalidArgument, InvalidSnapshot
from criogen.engine.state import Delta

__all__ = [
    "Checkpoint",
    "CheckpointId",
    "CheckpointWrite",
    "RunId",
    "Source",
    "Status",
    "ThreadId",
    "check_thread_id",
    "from_snapshot",
    "new_id",
    "to_snapshot",
]

ThreadId = NewType("ThreadId", str)
RunId = NewType("RunId", str)
CheckpointId = NewType("CheckpointId", str)

Source = Literal["input", "step", "suspend", "failure", "fork"]
Status = Literal["in_progress", "suspended", "completed", "failed"]

SOURCES: tuple[str, ...] = ("input", "step", "suspend", "failure", "fork")
STATUSES: tuple[str, ...] = ("in_progress", "suspended", "completed", "failed")
SNAPSHOT_FORMAT = 1


def check_thread_id(value: Any, field: str = "thread_id") -> ThreadId:
    """Return ``value`` as a thread id if it is 1–255 characters, not all blank and
    without NUL (PostgreSQL text cannot hold it); else raise InvalidArgument."""
    if not isinstance(value, str) or not value.strip() or len(value) > 255 or "\x00" in value:
        shown = value if not isinstance(value, str) or len(value) < 40 else value[:40] + "…"
        raise InvalidArgument(
            f"{field} {shown!r} must be 1–255 characters, not all blank, without NUL.",
            field=field,
        )
    return ThreadId(value)


_VARIANT = {f"{n:x}": f"{n & 0x3 | 0x8:x}" for n in range(16)}
"""A random hex digit -> the same two low bits under RFC 4122's variant bits (10)."""


def new_id() -> str:
    """A new random UUID as a string (checkpoint and run ids).

    What ``str(uuid.uuid4())`` gives (16 random bytes, the version and variant bits
    set, lower-case hex in 8-4-4-4-12), without building a ``UUID`` object: a run
    makes several, one per checkpoint.
    """
    h = os.urandom(16).hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}"


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The saved state of a run at one moment, with what is needed to continue it."""

    id: CheckpointId
    """Random UUID (string)."""
    thread_id: ThreadId
    """The thread this checkpoint belongs to."""
    run_id: RunId | None
    """The run that wrote it (``None`` for a fork written by rewind outside a run)."""
    version: int
    """1 for the first checkpoint of the thread, +1 for every write after it."""
    source: Source
    """Why it was written: ``input``, ``step``, ``suspend``, ``failure`` or ``fork``."""
    status: Status
    """``in_progress``, ``suspended``, ``completed`` or ``failed``."""
    state: dict[str, Any]
    """The whole state (JSON object) at this moment. Do not modify it."""
    next: tuple[str, ...] = ()
    """The nodes (or agent phase) that run next; empty when completed."""
    interrupts: tuple[dict[str, Any], ...] = ()
    """Pending suspensions, each ``{"id", "node", "reason", "payload", …}``."""
    tasks: dict[str, Any] = field(default_factory=dict)
    """Work finished inside the step that stopped (``done`` writes, ``resumes`` given)."""
    error: dict[str, Any] | None = None
    """For a failure: ``{"type", "message", "node", "traceback"}``."""
    parent_id: CheckpointId | None = None
    """The checkpoint this one follows (for a fork: the checkpoint it copies)."""
    created_at: datetime = field(default_factory=utcnow)
    """When it was written (UTC)."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Free JSON about the write (``step``, ``writes``, ``actor``…)."""
    value_versions: dict[str, int] = field(default_factory=dict)
    """Storage bookkeeping: for each key, the version whose write holds its value."""
    value_bases: dict[str, int] = field(default_factory=dict)
    """Storage bookkeeping: for each key, the version where the rows that build its
    value start (its last whole value, or its first appended items), so a read is one
    index range scan per key; 0 when unknown (the read then starts at the beginning)."""

    def to_dict(self) -> dict[str, Any]:
        """The checkpoint as plain JSON (``created_at`` as ISO 8601)."""
        data = asdict(self)
        data["next"] = list(self.next)
        data["interrupts"] = list(self.interrupts)
        data["created_at"] = self.created_at.isoformat()
        return data


@dataclass(frozen=True, slots=True)
class CheckpointWrite:
    """One checkpoint as the engine hands it to storage: the checkpoint and its delta."""

    checkpoint: Checkpoint
    """What to store; ``checkpoint.state`` is for the caller, storage stores ``delta``."""
    delta: Delta
    """What changed since ``after``'s state; keys not in it keep their value version."""
    after: int
    """The head version this write expects (normally ``checkpoint.version - 1``)."""
    prev_versions: dict[str, int]
    """For each appended key, the value version its items are appended to."""
    updates: dict[str, Any] | None = None
    """What each node of the step returned, ``{node: update}``; not stored, only passed
    to listeners (streaming ``updates`` mode)."""
    audit: Any = None
    """The audit event (a ``storage.base.AuditRecord``) of the person's action that
    wrote this checkpoint, stored in the same transaction; None for a run's steps."""
    new_thread: float | None = None
    """Set on the first write of a run that creates its thread (a thread id the engine
    made up, so no row exists yet): storage inserts the thread row with this write, held
    by the write's lease for this many seconds, instead of moving an existing head. The
    write fails with LeaseLost, writing nothing, if the thread exists by then."""
    touch: bool = True
    """Whether the write moves the thread's ``updated_at``. False only for a run's step
    that follows another of the same run in the same status (``in_progress``): the
    thread's lists order by ``updated_at``, and not moving it lets the database update
    the head without rewriting the thread's list indexes. A run moves it when it starts
    writing and when it ends, as every other change to a thread does."""


def to_snapshot(checkpoint: Checkpoint) -> dict[str, Any]:
    """A checkpoint as a self-contained, plain-JSON snapshot (``result.snapshot``)."""
    data = checkpoint.to_dict()
    data.pop("value_versions")
    data.pop("value_bases")
    return {"criogen_snapshot": SNAPSHOT_FORMAT, "checkpoint": data}


def from_snapshot(snapshot: Any) -> Checkpoint:
    """Rebuild the checkpoint of a snapshot made by :func:`to_snapshot`.

    Raises :class:`InvalidSnapshot` naming the first field that is missing or wrong.
    """
    if not isinstance(snapshot, dict) or snapshot.get("criogen_snapshot") != SNAPSHOT_FORMAT:
        raise InvalidSnapshot(
            "not a Criogen snapshot: pass the dict from result.snapshot or error.snapshot "
            f"(it has 'criogen_snapshot': {SNAPSHOT_FORMAT}).",
            field="criogen_snapshot",
        )
    data = snapshot.get("checkpoint")
    if not isinstance(data, dict):
        raise InvalidSnapshot("snapshot['checkpoint'] must be an object.", field="checkpoint")

    def need(name: str, kind: type | tuple[type, ...]) -> Any:
        value = data.get(name)
        if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
            raise InvalidSnapshot(
                f"snapshot['checkpoint'][{name!r}] is missing or has the wrong type.",
                field=f"checkpoint.{name}",
            )
        return value

    try:
        uuid.UUID(need("id", str))
    except ValueError as exc:
        raise InvalidSnapshot(
            f"snapshot['checkpoint']['id'] is not a UUID: {exc}.", field="checkpoint.id"
        ) from exc
    try:
        created_at = datetime.fromisoformat(need("created_at", str))
    except ValueError as exc:
        raise InvalidSnapshot(
            f"snapshot['checkpoint']['created_at'] is not an ISO 8601 time: {exc}.",
            field="checkpoint.created_at",
        ) from exc
    thread_id = need("thread_id", str)
    try:
        check_thread_id(thread_id, "snapshot['checkpoint']['thread_id']")
    except InvalidArgument as exc:
        raise InvalidSnapshot(exc.message, field="checkpoint.thread_id") from exc
    for name, value, allowed in (
        ("source", need("source", str), SOURCES),
        ("status", need("status", str), STATUSES),
    ):
        if value not in allowed:
            raise InvalidSnapshot(
                f"snapshot has {name} {value!r}, which Criogen never writes "
                f"(one of {', '.join(allowed)}).",
                field=f"checkpoint.{name}",
            )
    source, status = data["source"], data["status"]
    interrupts = need("interrupts", list)
    for i, interrupt in enumerate(interrupts):
        if not (
            isinstance(interrupt, dict)
            and isinstance(interrupt.get("id"), str)
            and isinstance(interrupt.get("node"), str)
        ):
            raise InvalidSnapshot(
                f"snapshot['checkpoint']['interrupts'][{i}] must be an object with string "
                "'id' and 'node'.",
                field="checkpoint.interrupts",
            )
    nxt = need("next", list)
    if not all(isinstance(name, str) for name in nxt):
        raise InvalidSnapshot(
            "snapshot['checkpoint']['next'] must be a list of node names.",
            field="checkpoint.next",
        )
    version = need("version", int)
    if version < 1:
        raise InvalidSnapshot("snapshot version must be 1 or more.", field="checkpoint.version")
    from criogen.engine.state import check_json

    state = need("state", dict)
    try:
        check_json(state, "snapshot state")
    except Exception as exc:
        raise InvalidSnapshot(str(exc), field="checkpoint.state") from exc
    error = data.get("error")
    run_id = data.get("run_id")
    parent_id = data.get("parent_id")
    return Checkpoint(
        id=CheckpointId(data["id"]),
        thread_id=ThreadId(thread_id),
        run_id=RunId(run_id) if isinstance(run_id, str) else None,
        version=version,
        source=source,
        status=status,
        state=state,
        next=tuple(nxt),
        interrupts=tuple(interrupts),
        tasks=need("tasks", dict),
        error=error if isinstance(error, dict) else None,
        parent_id=CheckpointId(parent_id) if isinstance(parent_id, str) else None,
        created_at=created_at,
        metadata=need("metadata", dict),
    )
