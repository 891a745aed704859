"""Request and response bodies, named ``XIn`` / ``XOut``.

Shapes follow what ``langgraph_sdk`` sends and reads. Request bodies forbid unknown
fields: a field the server would otherwise ignore is refused with 422 naming it, so
nothing a client sends is silently dropped.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from ninja import Schema
from pydantic import BaseModel, ConfigDict, Field

JsonObject = dict[str, Any]


class In(Schema):
    """Base of request bodies: unknown fields are a 422."""

    model_config = ConfigDict(extra="forbid")


# -- errors -------------------------------------------------------------------------------


class ErrorOut(Schema):
    """The one error body (``application/problem+json``)."""

    status: int
    title: str
    detail: str = Field(description="What went wrong; langgraph_sdk shows this text.")
    code: str = Field(description="Stable error code (thread_not_found, validation_error…).")
    field: str | None = Field(None, description="The offending input field, if any.")

    model_config = ConfigDict(extra="allow")


# -- threads ------------------------------------------------------------------------------


class TtlIn(In):
    """A time to live: minutes, and what to do when it passes."""

    ttl: float = Field(description="Minutes after creation (or the last update).")
    strategy: Literal["delete", "keep_latest"] = "delete"


class CheckpointIn(In):
    """A checkpoint reference, as the SDK's ``Checkpoint``."""

    thread_id: str | None = None
    checkpoint_ns: str | None = ""
    checkpoint_id: str | None = None
    checkpoint_map: JsonObject | None = None


class CheckpointOut(Schema):
    """A checkpoint reference: the thread, namespace ``""`` and the checkpoint id."""

    thread_id: str
    checkpoint_ns: str = ""
    checkpoint_id: str | None
    checkpoint_map: JsonObject | None = None


class StateUpdateIn(In):
    """One update of a superstep (thread copy between deployments)."""

    values: JsonObject | None = None
    command: JsonObject | None = None
    as_node: str | None = None


class SuperstepIn(In):
    """A list of updates applied as one step."""

    updates: list[StateUpdateIn]


class ThreadCreateIn(In):
    """POST /threads."""

    thread_id: str | None = Field(
        None, description="1–255 non-blank characters; omit or null for a server UUID."
    )
    metadata: JsonObject | None = None
    if_exists: Literal["raise", "do_nothing"] | None = None
    ttl: float | TtlIn | None = Field(None, description="Minutes, or {ttl, strategy}.")
    supersteps: list[SuperstepIn] | None = None


class ThreadPatchIn(In):
    """PATCH /threads/{thread_id}: metadata is merged into the thread's."""

    metadata: JsonObject | None = None
    ttl: float | TtlIn | None = None


MAX_OFFSET = 2**63 - 1
"""The largest ``offset`` a database can skip (a signed 64-bit integer): more is a 422,
not a database error."""


class ThreadSearchIn(In):
    """POST /threads/search."""

    metadata: JsonObject | None = None
    values: JsonObject | None = None
    ids: list[str] | None = None
    status: Literal["idle", "busy", "interrupted", "error"] | None = None
    limit: int | None = Field(None, description="1 to CRIOGEN_MAX_SEARCH_LIMIT; default 20.")
    offset: int = Field(0, ge=0, le=MAX_OFFSET)
    sort_by: (
        Literal["thread_id", "status", "created_at", "updated_at", "state_updated_at"] | None
    ) = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[str] | None = None
    extract: dict[str, str] | None = Field(
        None, description="alias -> path such as values.messages[-1] (at most 10)."
    )


class ThreadCountIn(In):
    """POST /threads/count."""

    metadata: JsonObject | None = None
    values: JsonObject | None = None
    status: Literal["idle", "busy", "interrupted", "error"] | None = None


class ThreadPruneIn(In):
    """POST /threads/prune with the SDK's body (no body: apply expired TTLs)."""

    thread_ids: list[str]
    strategy: Literal["delete", "keep_latest"] = "delete"


class PruneOut(Schema):
    """How many threads were deleted and pruned (``pruned_count``: both)."""

    deleted: int
    pruned: int
    pruned_count: int | None = None


class InterruptOut(BaseModel):
    """A pending interrupt: ``value`` is what the graph asked (an HITLRequest for an
    agent's approval); ``reason``, ``node``, ``calls`` (each pending tool call with the
    ``digest`` an answer may bind to) and any other field of the suspension are
    Criogen's, passed through.

    A plain pydantic model, not a ninja ``Schema``: a ``Schema`` reads its input
    through attribute access and drops the fields it does not declare."""

    id: str
    value: Any = None
    node: str | None = None
    reason: str | None = None

    model_config = ConfigDict(extra="allow")


class TtlOut(Schema):
    """A thread's TTL policy."""

    ttl: float
    strategy: str
    expires_at: datetime | None = None


class ThreadOut(Schema):
    """A thread, as the SDK's ``Thread``. With ``select`` (search) only the chosen
    fields are present, so none but ``thread_id`` is required."""

    thread_id: str
    created_at: datetime = None  # type: ignore[assignment]
    updated_at: datetime = None  # type: ignore[assignment]
    state_updated_at: datetime = None  # type: ignore[assignment]
    metadata: JsonObject = None  # type: ignore[assignment]
    status: Literal["idle", "busy", "interrupted", "error"] = None  # type: ignore[assignment]
    values: JsonObject | None = None
    interrupts: dict[str, list[InterruptOut]] = None  # type: ignore[assignment]
    config: JsonObject = None  # type: ignore[assignment]
    context: JsonObject = None  # type: ignore[assignment]
    ttl: TtlOut | None = None
    extracted: JsonObject | None = None


class ThreadTaskOut(Schema):
    """A node that runs next (LangGraph ``ThreadTask``)."""

    id: str
    name: str
    path: list[Any] | None = None
    error: str | None = None
    interrupts: list[InterruptOut] = []
    checkpoint: CheckpointOut | None = None
    state: JsonObject | None = None
    result: Any = None


class ThreadStateOut(Schema):
    """The state at one checkpoint (LangGraph ``ThreadState``)."""

    values: JsonObject | None = None
    next: list[str] | None = None
    tasks: list[ThreadTaskOut] | None = None
    interrupts: list[InterruptOut] | None = None
    checkpoint: CheckpointOut | None = None
    metadata: JsonObject | None = None
    created_at: str | None = None
    parent_checkpoint: CheckpointOut | None = None
    checkpoint_id: str | None = None
    """Deprecated in LangGraph: ``checkpoint.checkpoint_id`` (LangGraph threads only)."""
    parent_checkpoint_id: str | None = None
    """Deprecated in LangGraph: ``parent_checkpoint.checkpoint_id`` (LangGraph threads only)."""


class StateCheckpointIn(In):
    """POST /threads/{thread_id}/state/checkpoint."""

    checkpoint: CheckpointIn
    subgraphs: bool = False
    select: list[str] | None = None


class UpdateStateIn(In):
    """POST /threads/{thread_id}/state."""

    values: JsonObject | list[Any] | None = None
    as_node: str | None = None
    checkpoint: CheckpointIn | None = None
    checkpoint_id: str | None = None


class UpdateStateOut(Schema):
    """The checkpoint that update_state wrote."""

    checkpoint: CheckpointOut


class HistoryIn(In):
    """POST /threads/{thread_id}/history."""

    limit: int = 10
    before: str | CheckpointIn | None = None
    metadata: JsonObject | None = None
    checkpoint: CheckpointIn | None = None
    select: list[str] | None = None


# -- runs ---------------------------------------------------------------------------------

StreamModeName = Literal[
    "values",
    "updates",
    "messages",
    "messages-tuple",
    "events",
    "debug",
    "custom",
    "checkpoints",
    "tasks",
]


class CommandIn(In):
    """``{"resume": value}`` answers the thread's suspension (an HITLResponse for an
    agent's approval); ``update`` changes values first; ``goto: "__end__"`` resolves
    the suspension without running what waited, ``goto: node`` (workflows) continues
    from that node."""

    resume: Any = None
    update: Any = None
    goto: Any = None


class RunCreateIn(In):
    """A run, as ``langgraph_sdk`` sends it to create, wait and stream."""

    assistant_id: str = Field(description="An assistant's UUID, or a graph id.")
    input: JsonObject | None = None
    command: CommandIn | None = None
    metadata: JsonObject | None = None
    config: JsonObject | None = None
    context: JsonObject | None = None
    checkpoint: CheckpointIn | None = Field(
        None, description="Start from this checkpoint; its keys win over checkpoint_id."
    )
    checkpoint_id: str | None = Field(None, description="A UUID (else 422).")
    checkpoint_during: bool | None = Field(
        None, description="Deprecated: true means durability async, false exit."
    )
    durability: Literal["sync", "async", "exit"] | None = None
    interrupt_before: Any = Field(
        None,
        description='Breakpoints: stop before these workflow nodes (a list of names, or "*"); '
        "an unknown node is a 422.",
    )
    interrupt_after: Any = Field(
        None,
        description='Breakpoints: stop after these workflow nodes (a list of names, or "*"); '
        "an unknown node is a 422.",
    )
    webhook: str | None = None
    multitask_strategy: Literal["reject", "interrupt", "rollback", "enqueue"] | None = None
    if_not_exists: Literal["create", "reject"] | None = None
    on_disconnect: Literal["cancel", "continue"] | None = None
    on_completion: Literal["delete", "keep"] | None = None
    stream_mode: StreamModeName | list[StreamModeName] | None = None
    stream_subgraphs: bool | None = None
    stream_resumable: bool | None = Field(
        None,
        description="Keep the run's events, with ids, so that GET "
        "/threads/{thread_id}/runs/{run_id}/stream with Last-Event-ID resumes a dropped "
        "stream on any server process (streams and background runs; ignored by wait).",
    )
    feedback_keys: list[str] | None = None
    after_seconds: Any = Field(
        None,
        description="A delayed run: it stays pending (its thread busy) for this many "
        "seconds, then starts; a whole number from 0 to a year (else 422). Runs queued on the "
        "thread meanwhile run after it.",
        json_schema_extra={
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": 366 * 24 * 3600},
                {"type": "null"},
            ]
        },
    )
    strict_resume: bool | None = None
    langsmith_tracer: JsonObject | None = None


class RunBatchItemIn(RunCreateIn):
    """One run of POST /runs/batch."""

    thread_id: str | None = None


class RunOut(Schema):
    """A run (LangGraph ``Run``). ``cancel_reason`` is null unless a person (or a newer
    run) cancelled it: an ``interrupted`` run without it waits for a person. With
    ``select`` (list) only the chosen fields are present."""

    run_id: str
    thread_id: str | None = None
    assistant_id: str = None  # type: ignore[assignment]
    created_at: datetime = None  # type: ignore[assignment]
    updated_at: datetime = None  # type: ignore[assignment]
    status: Literal["pending", "running", "success", "error", "interrupted", "timeout"] = None  # type: ignore[assignment]
    metadata: JsonObject = None  # type: ignore[assignment]
    multitask_strategy: str = None  # type: ignore[assignment]
    kwargs: JsonObject = None  # type: ignore[assignment]
    cancel_reason: str | None = None
    cancelled_by: str | None = None
    error: JsonObject | None = None


class RunsCancelIn(In):
    """POST /runs/cancel: the runs to cancel."""

    thread_id: str | None = None
    run_ids: list[str] | None = None
    status: Literal["pending", "running", "all"] | None = None


# -- system -------------------------------------------------------------------------------


class OkOut(Schema):
    """Health check."""

    ok: bool


class InfoOut(Schema):
    """Server version and what it supports."""

    version: str
    langgraph_py_version: str | None = None
    flags: JsonObject
    metadata: JsonObject
