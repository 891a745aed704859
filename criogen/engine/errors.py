"""Every error Criogen raises, each with a stable ``code``: one tree, defined here.

Callers branch on the class or on ``code`` (the REST API puts it in the problem+json
``code`` field, the dashboard shows it); the message says what to do next. Codes are a
public contract: a class may move, its code does not change. ``criogen.errors`` is the
public import path; the modules that raise an error also re-export it (e.g.
``criogen.engine.crypto.EncryptionKeyInvalid``). The tree::

    CriogenError                   criogen_error
    ├── ThreadError                thread_error        the thread's head does not allow it now
    │   ├── ThreadSuspended        thread_suspended
    │   ├── ThreadInterrupted      thread_interrupted
    │   ├── ThreadBusy             thread_busy
    │   ├── ThreadNotFound         thread_not_found
    │   ├── NotSuspended           not_suspended
    │   ├── NothingToRetry         nothing_to_retry
    │   ├── LeaseLost              lease_lost
    │   ├── AlreadyDecided         already_decided
    │   ├── StaleDecision          stale_decision
    │   └── StaleHead              stale_head
    ├── NotAllowedToDecide         not_allowed_to_decide
    ├── StateTooLarge              state_too_large
    ├── TooManyStreams             too_many_streams
    ├── CheckpointNotFound         checkpoint_not_found
    ├── RunNotFound                run_not_found
    ├── GraphNotFound              graph_not_found
    ├── FactNotFound               fact_not_found
    ├── DocumentNotFound           document_not_found
    ├── NotFound                   not_found           any other unknown id (REST API)
    ├── Conflict                   conflict            the id exists already (REST API)
    ├── TokenExpired               token_expired       an expired API token (REST API, 401)
    ├── InvalidState               invalid_state
    ├── InvalidSnapshot            invalid_snapshot
    ├── InvalidGraph               invalid_graph
    ├── InvalidArgument            invalid_argument
    ├── InvalidMessage             invalid_message     agents: a transcript message
    ├── InvalidTool                invalid_tool        agents: a tool's definition or result
    ├── InvalidToolCall            invalid_tool_call   agents: a model's tool call
    ├── ModelError                 model_error         agents: the model call failed
    ├── ScriptExhausted            script_exhausted    agents: a ScriptedModel ran out
    ├── UnknownStorageUrl          unknown_storage_url
    ├── StorageError               storage_error
    ├── EncryptionKeyInvalid       encryption_key_invalid
    ├── OutboundRefused            outbound_refused    a webhook the outbound policy refuses
    ├── MaxStepsExceeded           max_steps_exceeded
    ├── RunCancelled               run_cancelled
    └── RunFailed                  run_failed

``InvalidToolCall`` is the model's mistake, not the program's: the Agent shows its message
to the model as an error tool result so that the model can correct the call.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AlreadyDecided",
    "CheckpointNotFound",
    "Conflict",
    "CriogenError",
    "DocumentNotFound",
    "EncryptionKeyInvalid",
    "FactNotFound",
    "GraphNotFound",
    "InvalidArgument",
    "InvalidGraph",
    "InvalidMessage",
    "InvalidSnapshot",
    "InvalidState",
    "InvalidTool",
    "InvalidToolCall",
    "LeaseLost",
    "MaxStepsExceeded",
    "ModelError",
    "NotAllowedToDecide",
    "NotFound",
    "NotSuspended",
    "NothingToRetry",
    "OutboundRefused",
    "RunCancelled",
    "RunFailed",
    "RunNotFound",
    "ScriptExhausted",
    "StaleDecision",
    "StaleHead",
    "StateTooLarge",
    "TooManyStreams",
    "StorageError",
    "ThreadBusy",
    "ThreadError",
    "ThreadInterrupted",
    "ThreadNotFound",
    "ThreadSuspended",
    "TokenExpired",
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


class StaleDecision(ThreadError):
    """A decision for a call that is not pending any more (another version, an unknown
    call id, or arguments other than the ones pending): nothing was decided."""

    code = "stale_decision"


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


class TooManyStreams(CriogenError):
    """A user, or a thread, already has as many live streams open on this server
    process as ``CRIOGEN_STREAMS_PER_USER`` / ``CRIOGEN_STREAMS_PER_THREAD`` allow
    (429 over HTTP); close one first."""

    code = "too_many_streams"


class CheckpointNotFound(CriogenError):
    """No checkpoint with this id on this thread."""

    code = "checkpoint_not_found"


class RunNotFound(CriogenError):
    """No run with this id (on this thread)."""

    code = "run_not_found"


class GraphNotFound(CriogenError):
    """No graph with this id in ``CRIOGEN_ASSISTANTS`` (or it does not import)."""

    code = "graph_not_found"


class FactNotFound(CriogenError):
    """No memory fact with this id (it was deleted, or never existed)."""

    code = "fact_not_found"


class DocumentNotFound(CriogenError):
    """No document with this id in the collection."""

    code = "document_not_found"


class NotFound(CriogenError):
    """An id the caller may not see, or that does not exist (the two look the same).

    The REST API raises it for ids that have no error class of their own (a cron, a
    store item, an assistant)."""

    code = "not_found"


class Conflict(CriogenError):
    """The request conflicts with what exists (``if_exists="raise"`` on a known id…)."""

    code = "conflict"


class TokenExpired(CriogenError):
    """An API token past its ``expires_at`` (401: a real token, but no longer valid)."""

    code = "token_expired"


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


class InvalidMessage(CriogenError):
    """A message could not be read as a transcript message; the message names the bad field."""

    code = "invalid_message"


class InvalidTool(CriogenError):
    """A function cannot be used as a tool (no description, unsupported type hint, bad result)."""

    code = "invalid_tool"


class InvalidToolCall(CriogenError):
    """A tool call's arguments do not fit the tool's parameters; the message names the argument."""

    code = "invalid_tool_call"


class ModelError(CriogenError):
    """The model call failed after the client's retries; the message says what to check.

    ``details["retryable"]`` tells whether trying again later may help (rate limits, server errors,
    timeouts, connection errors) or not (bad request, authentication, unknown model).
    """

    code = "model_error"


class ScriptExhausted(CriogenError):
    """A ScriptedModel was called more times than its script has items."""

    code = "script_exhausted"


class UnknownStorageUrl(CriogenError):
    """A storage URL whose scheme is not memory, sqlite or postgres."""

    code = "unknown_storage_url"


class StorageError(CriogenError):
    """The database refused or lost a write; the thread is left as it was."""

    code = "storage_error"


class EncryptionKeyInvalid(CriogenError):
    """The encryption key is malformed, missing, or not the one the data was sealed with.

    Nothing is written when this is raised: reads fail before the run changes anything.
    """

    code = "encryption_key_invalid"


class OutboundRefused(CriogenError):
    """The outbound policy refused a call: a scheme other than http(s), or an address
    that is internal (loopback, private, link-local, metadata…) and not allowed by
    ``CRIOGEN_OUTBOUND_ALLOW``. Recorded on the attempt; never retried."""

    code = "outbound_refused"


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
