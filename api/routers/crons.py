"""Crons: ``/threads/{thread_id}/runs/crons`` and ``/runs/crons…`` — create on a thread
or stateless, update, delete, search, count. A cron belongs to its creator (operators
see all); another user's cron is a 404."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from django.http import HttpRequest
from ninja import Router, Schema, Status
from pydantic import Field

from api import threads
from api.auth import Principal, principal
from api.schemas import MAX_OFFSET, ErrorOut, In, JsonObject, StreamModeName
from criogen import selectors
from criogen.engine.errors import InvalidArgument
from criogen.outbound import check_webhook_url
from criogen.services import crons

if TYPE_CHECKING:
    from criogen.storage.models import Cron

thread_router = Router(tags=["crons"])
router = Router(tags=["crons"])

ERRORS: dict[int, Any] = {404: ErrorOut, 409: ErrorOut, 422: ErrorOut}


class CronFieldsIn(In):
    """What a cron's runs get, and when they fire."""

    input: JsonObject | None = None
    metadata: JsonObject | None = None
    config: JsonObject | None = None
    context: JsonObject | None = None
    webhook: str | None = None
    multitask_strategy: Literal["reject", "interrupt", "rollback", "enqueue"] | None = None
    stream_mode: StreamModeName | list[StreamModeName] | None = None
    stream_subgraphs: bool | None = None
    stream_resumable: bool | None = None
    durability: Literal["sync", "async", "exit"] | None = None
    after_seconds: Any = Field(
        None,
        description="Each fired run is a delayed run: it starts this many seconds after "
        "its tick; a whole number from 0 to a year (else 422).",
    )
    interrupt_before: Any = Field(None, description="Not supported: non-empty is a 422.")
    interrupt_after: Any = Field(None, description="Not supported: non-empty is a 422.")
    end_time: datetime | None = None
    enabled: bool | None = None
    timezone: str | None = Field(None, description="IANA name; default UTC.")
    on_run_completed: Literal["delete", "keep"] | None = None


class CronCreateIn(CronFieldsIn):
    """POST /runs/crons and /threads/{thread_id}/runs/crons."""

    assistant_id: str
    schedule: str = Field(description="5-field cron expression, e.g. '*/5 * * * *'.")
    checkpoint_during: bool | None = Field(
        None, description="Deprecated: true means durability async, false exit."
    )


class CronPatchIn(CronFieldsIn):
    """PATCH /runs/crons/{cron_id}: the fields given replace the old ones."""

    schedule: str | None = None


class CronSearchIn(In):
    """POST /runs/crons/search."""

    assistant_id: str | None = None
    thread_id: str | None = None
    enabled: bool | None = None
    metadata: JsonObject | None = None
    limit: int = Field(10, ge=1, le=1000)
    offset: int = Field(0, ge=0, le=MAX_OFFSET)
    sort_by: (
        Literal[
            "cron_id",
            "assistant_id",
            "thread_id",
            "created_at",
            "updated_at",
            "next_run_date",
            "end_time",
        ]
        | None
    ) = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[str] | None = None


class CronCountIn(In):
    """POST /runs/crons/count."""

    assistant_id: str | None = None
    thread_id: str | None = None
    metadata: JsonObject | None = None


class CronOut(Schema):
    """A cron (LangGraph ``Cron``)."""

    cron_id: str
    assistant_id: str
    thread_id: str | None
    on_run_completed: str | None = None
    end_time: datetime | None = None
    schedule: str
    timezone: str | None
    created_at: datetime
    updated_at: datetime
    payload: JsonObject
    user_id: str | None = None
    next_run_date: datetime | None = None
    metadata: JsonObject
    enabled: bool


def cron_out(cron: Cron) -> dict[str, Any]:
    """A cron as the SDK's ``Cron``."""
    return {
        "cron_id": str(cron.cron_id),
        "assistant_id": cron.assistant_id,
        "thread_id": cron.thread_id,
        "on_run_completed": cron.on_run_completed if cron.thread_id is None else None,
        "end_time": cron.end_time,
        "schedule": cron.schedule,
        "timezone": cron.timezone,
        "created_at": cron.created_at,
        "updated_at": cron.updated_at,
        "payload": cron.payload or {},
        "user_id": str(cron.user_id) if cron.user_id is not None else None,
        "next_run_date": cron.next_run_date,
        "metadata": cron.metadata or {},
        "enabled": cron.enabled,
    }


def load_cron(who: Principal, cron_id: str) -> Cron:
    """The caller's cron (operators: any), else 404 (:func:`criogen.selectors.cron_for`)."""
    return selectors.cron_for(who, cron_id)


def _refuse_unsupported(payload: CronFieldsIn) -> None:
    for name in ("interrupt_before", "interrupt_after"):
        if getattr(payload, name):
            raise InvalidArgument(f"{name} is not supported.", field=name)
    if payload.stream_resumable:
        raise InvalidArgument("stream_resumable is not supported.", field="stream_resumable")


def _payload(payload: CronFieldsIn, durability: str | None) -> dict[str, Any]:
    data = payload.model_dump(exclude_unset=True)
    out = {k: data[k] for k in crons.PAYLOAD_FIELDS if k in data and data[k] is not None}
    if durability is not None:
        out["durability"] = durability
    return out


def _create(who: Principal, thread_id: str | None, payload: CronCreateIn) -> dict[str, Any]:
    from criogen.services.runs import resolve_durability

    _refuse_unsupported(payload)
    check_webhook_url(payload.webhook)
    crons.check_schedule(payload.schedule)
    crons.check_timezone(payload.timezone)
    if thread_id is not None:
        threads.load_thread(who, thread_id)
    # Resolved once, by the rule runs use: durability wins, checkpoint_during is the
    # deprecated form; every fired run gets the result.
    mode = resolve_durability(payload.durability, payload.checkpoint_during)
    cron = crons.create_cron(
        assistant_id=payload.assistant_id,
        thread_id=thread_id,
        schedule=payload.schedule,
        timezone=payload.timezone,
        payload=_payload(payload, mode),
        metadata=payload.metadata,
        on_run_completed=payload.on_run_completed,
        end_time=payload.end_time,
        enabled=payload.enabled,
        owner=who.user,
    )
    return cron_out(cron)


@thread_router.post(
    "/{thread_id}/runs/crons",
    response={200: CronOut, **ERRORS},
    operation_id="create_thread_cron",
    summary="Create a cron on a thread",
)
def create_for_thread(
    request: HttpRequest, thread_id: str, payload: CronCreateIn
) -> dict[str, Any]:
    """Each tick starts a run on this thread."""
    return _create(principal(request), thread_id, payload)


@router.post(
    "", response={200: CronOut, **ERRORS}, operation_id="create_cron", summary="Create a cron"
)
def create_cron(request: HttpRequest, payload: CronCreateIn) -> dict[str, Any]:
    """Each tick starts a stateless run (``on_run_completed``: delete its thread after,
    the default, or keep it)."""
    return _create(principal(request), None, payload)


def _assistant_key(assistant_id: str | None) -> str | None:
    """An assistant filter as crons store it: the assistant's UUID (a graph id names its
    default assistant)."""
    if not assistant_id:
        return None
    from criogen.services.assistants import resolve_assistant

    return str(resolve_assistant(assistant_id=assistant_id).assistant_id)


@router.post(
    "/search",
    response={200: list[CronOut], **ERRORS},
    operation_id="search_crons",
    summary="Search crons",
)
def search_crons(request: HttpRequest, payload: CronSearchIn) -> list[dict[str, Any]]:
    """The caller's crons by assistant, thread, enabled and metadata."""
    found = selectors.search_crons(
        principal(request),
        assistant_id=_assistant_key(payload.assistant_id),
        thread_id=payload.thread_id,
        enabled=payload.enabled,
        metadata=payload.metadata,
        sort_by=payload.sort_by,
        sort_order=payload.sort_order,
        limit=payload.limit,
        offset=payload.offset,
    )
    return [cron_out(c) for c in found]


@router.post(
    "/count", response={200: int, **ERRORS}, operation_id="count_crons", summary="Count crons"
)
def count_crons(request: HttpRequest, payload: CronCountIn) -> int:
    """How many of the caller's crons match."""
    return selectors.count_crons(
        principal(request),
        assistant_id=_assistant_key(payload.assistant_id),
        thread_id=payload.thread_id,
        metadata=payload.metadata,
    )


# After /search and /count: Django tries URL patterns in order.
@router.patch(
    "/{cron_id}",
    response={200: CronOut, **ERRORS},
    operation_id="patch_cron",
    summary="Update a cron",
)
def patch_cron(request: HttpRequest, cron_id: str, payload: CronPatchIn) -> dict[str, Any]:
    """Replace the given fields; a new schedule or time zone moves the next run."""
    from criogen.services.runs import resolve_durability

    cron = load_cron(principal(request), cron_id)
    _refuse_unsupported(payload)
    check_webhook_url(payload.webhook)
    data = payload.model_dump(exclude_unset=True)
    given = {name: data[name] for name in ("schedule", "timezone", "end_time") if name in data}
    mode = resolve_durability(payload.durability) if payload.durability else None
    cron = crons.update_cron(
        cron=cron,
        payload=_payload(payload, mode),
        metadata=payload.metadata,
        enabled=payload.enabled,
        on_run_completed=payload.on_run_completed,
        **given,
    )
    return cron_out(cron)


@router.delete(
    "/{cron_id}",
    response={204: None, **ERRORS},
    operation_id="delete_cron",
    summary="Delete a cron",
)
def delete_cron(request: HttpRequest, cron_id: str) -> Status[None]:
    """Delete the cron (runs it started stay)."""
    crons.delete_cron(cron=load_cron(principal(request), cron_id))
    return Status(204, None)
