"""Every error the engine raises, each with a stable ``code``.

Callers branch on the class or on ``code`` (the REST API and the dashboard show it);
the message says what to do next. The tree::

    CriogenError
    ├── ThreadError
    │   ├── ThreadSuspended        thread_suspended
    │   ├── ThreadInterrupted      thread_interrupted
    │   ├── ThreadBusy             thread_busy
    │   ├── ThreadNotFound         thread_not_found
    │   ├── NotSuspended           not_suspended
    │   ├── NothingToRetry         nothing_to_retry
    │   ├── LeaseLost              lease_lost
    │   ├── AlreadyDecided         already_decided
    │   └── StaleHead              stale_head
    ├── NotAllowedToDecide         not_allowed_to_decide
    ├── StateTooLarge              state_too_large
    ├── CheckpointNotFound         checkpoint_not_found
    ├── InvalidState               invalid_state
    ├── InvalidSnapshot            invalid_snapshot
    ├── InvalidGraph               invalid_graph
    ├── InvalidArgument            invalid_argument
    ├── UnknownStorageUrl          unknown_storage_url
    ├── StorageError               storage_error
    ├── MaxStepsExceeded           max_steps_exceeded
    ├── RunCancelled               run_cancelled
    └── RunFailed                  run_failed
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AlreadyDecided",
    "CheckpointNotFound",
    "CriogenError",
    "InvalidArgument",
    "InvalidGraph",
    "InvalidSnapshot",
    "InvalidState",
    "LeaseLost",
    "MaxStepsExceeded",
    "NotAllowedToDecide",
    "NotSuspended",
    "NothingToRetry",
    "RunCancelled",
    "RunFailed",
    "StaleHead",
    "StateTooLarge",
    "StorageError",
    "ThreadBusy",
    "ThreadError",
    "ThreadInterrupted",
    "ThreadNotFound",
    "ThreadSuspended",
    "UnknownStorageUrl",
]


class CriogenError(Exception):
    """Base class of every Criogen error.

    Attributes:
        code: stable, machine-readable name of the error (``thread_suspended``…).
        message: what went wrong and what to do about it.
        details: extra JSON-plain facts (thread id, field name…) for APIs and logs.
    """

    code: str = "criogen_error"
    checkpoint: Any = None
    """For an error that stopped a run: the failure checkpoint it wrote (else None)."""
    snapshot: dict[str, Any] | None = None
    """That checkpoint as plain JSON, for ``app.resume(snapshot)`` without storage."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        """The error as plain JSON: ``{"code", "message", **details}``."""
        return {"code": self.code, "message": self.message, **self.details}


class ThreadError(CriogenError):
    """An operation that the thread's head does not allow now."""

    code = "thread_error"

    def __init__(self, message: str, *, thread_id: str, **details: Any) -> None:
        super().__init__(message, thread_id=thread_id, **details)
        self.thread_id = thread_id


class ThreadSuspended(ThreadError):
    """The head is suspended: answer it (approve, reject, decide, resume) first."""

    code = "thread_suspended"


class ThreadInterrupted(ThreadError):
    """The head is ``in_progress`` but no run is alive (its process died): call retry()."""

    code = "thread_interrupted"


class ThreadBusy(ThreadError):
    """Another run holds the thread (``on_busy="fail"``, or waiting timed out)."""

    code = "thread_busy"


class ThreadNotFound(ThreadError):
    """No thread with this id exists in the storage."""

    code = "thread_not_found"


class NotSuspended(ThreadError):
    """resume/approve/reject on a thread whose head is not suspended."""

    code = "not_suspended"


class NothingToRetry(ThreadError):
    """retry() on a thread whose head is neither failed nor interrupted."""

    code = "nothing_to_retry"


class LeaseLost(ThreadError):
    """The run's lease expired and another run took the thread; this run stopped."""

    code = "lease_lost"


class AlreadyDecided(ThreadError):
    """The suspension was already answered (by another operator or process)."""

    code = "already_decided"


class StaleHead(ThreadError):
    """The thread moved on since the caller looked at it: its head is no longer the
    checkpoint the caller acted on (``expected``). Nothing was changed.

    ``details`` name the ``expected`` and ``current`` head checkpoint ids and, when
    known, who moved it (``moved_by``) and how (``moved_by_action``).
    """

    code = "stale_head"


class NotAllowedToDecide(CriogenError):
    """The caller may see the thread but not answer its suspension: by default only
    operators decide; an assistant may let its threads' owners, or named groups,
    decide too (``metadata.deciders``). Nothing was changed (403 over HTTP)."""

    code = "not_allowed_to_decide"


class StateTooLarge(CriogenError):
    """A person's input or update would make the thread's state larger than the
    storage's ``max_state_bytes``; nothing of it was stored. ``details`` give the
    ``size`` it would have had and the ``limit`` (413 over HTTP)."""

    code = "state_too_large"


class CheckpointNotFound(CriogenError):
    """No checkpoint with this id on this thread."""

    code = "checkpoint_not_found"


class InvalidState(CriogenError):
    """A state update that is not a JSON object with string keys; nothing was written."""

    code = "invalid_state"


class InvalidSnapshot(CriogenError):
    """A snapshot passed to resume() that is not one Criogen produced."""

    code = "invalid_snapshot"


class InvalidGraph(CriogenError):
    """A workflow graph that cannot run (unknown node, no entry, bad route)."""

    code = "invalid_graph"


class InvalidArgument(CriogenError):
    """An argument with a value the engine does not accept (durability, on_busy…)."""

    code = "invalid_argument"


class UnknownStorageUrl(CriogenError):
    """A storage URL whose scheme is not memory, sqlite or postgres."""

    code = "unknown_storage_url"


class StorageError(CriogenError):
    """The database refused or lost a write; the thread is left as it was."""

    code = "storage_error"


class MaxStepsExceeded(CriogenError):
    """A run took more steps than its ``max_steps`` (a loop in the graph?)."""

    code = "max_steps_exceeded"


class RunCancelled(CriogenError):
    """The run's ``should_stop`` said stop: it stopped between two steps.

    What it wrote so far stays (with ``exit`` durability: nothing was written); the
    thread's head is the last step's checkpoint, so retry() would continue from it.
    """

    code = "run_cancelled"


class RunFailed(CriogenError):
    """A node raised: the run stopped and wrote a ``failure`` checkpoint.

    Attributes:
        checkpoint: the failure checkpoint (the thread's new head).
        snapshot: the same checkpoint as plain JSON, for ``resume``/``retry`` without storage.
        node: the node that raised, if known.
    The original exception is chained as ``__cause__``.
    """

    code = "run_failed"

    def __init__(
        self,
        message: str,
        *,
        checkpoint: Any = None,
        snapshot: dict[str, Any] | None = None,
        **details: Any,
    ) -> None:
        super().__init__(message, **details)
        self.checkpoint = checkpoint
        self.snapshot = snapshot
