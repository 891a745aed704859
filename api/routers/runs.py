"""Runs: ``/threads/{thread_id}/runs…`` and the stateless ``/runs…``.

Create (background), wait, stream (Server-Sent Events), join, join stream, cancel, get,
list, delete, batch. Runs are created, waited for and cancelled by
:mod:`criogen.services.runs`; the blocking waits run off the event loop.
"""

from __future__ import annotations

import threading
import uuid
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import close_old_connections
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from ninja import Query, Router, Status

from api import runs as api_runs
from api import threads
from api.aio import db, wait_for_run
from api.auth import Principal, principal
from api.schemas import MAX_OFFSET, ErrorOut, RunBatchItemIn, RunCreateIn, RunOut, RunsCancelIn
from criogen import selectors
from criogen.engine.errors import InvalidArgument
from criogen.services.threads import delete_thread

if TYPE_CHECKING:
    from criogen.storage.models import Run

thread_router = Router(tags=["thread runs"])
router = Router(tags=["stateless runs"])

ERRORS: dict[int, Any] = {404: ErrorOut, 409: ErrorOut, 422: ErrorOut}
SSE_RESPONSE = {
    200: {
        "description": "Server-Sent Events: metadata, then one event per checkpoint and "
        "mode, then end.",
        "content": {
            "text/event-stream": {
                "schema": {
                    "type": "object",
                    "properties": {"event": {"type": "string"}, "data": {"type": "string"}},
                }
            }
        },
    }
}


# -- helpers ---------------------------------------------------------------------------------


def _create(
    who: Principal,
    thread_id: str | None,
    payload: RunCreateIn,
    *,
    held: bool = False,
    run_id: uuid.UUID | None = None,
) -> Run:
    """Check the request and create the run (pending; it starts after the commit).
    ``held``: the request waits for the run to end (wait, stream); ``run_id``: the
    new run's id (else a new one)."""
    from criogen.services.runs import Decider, create_run

    api_runs.check_options(payload, held=held)
    existed = False
    if thread_id is not None:
        # Another user's thread is a 404; a missing one is created by the run (or refused).
        existed = selectors.thread_exists_for(who, thread_id)
        if not existed:
            threads.check_thread_id(thread_id)
    command = payload.command.model_dump(exclude_unset=True) if payload.command else None
    command = {k: v for k, v in (command or {}).items() if v is not None} or None
    input_ = payload.input
    if command:
        # As LangGraph's server: a non-empty command wins, the input is ignored (chat
        # front ends resume with input {} and a command).
        input_ = None
    checkpoint = payload.checkpoint.model_dump(exclude_unset=True) if payload.checkpoint else None
    metadata = payload.metadata
    if command is not None:
        # The token's owner answers the interrupt: recorded as the decision's actor
        # (the runner reads resumed_by), never taken from what the client sent.
        metadata = {**(metadata or {}), "resumed_by": who.name or "api"}
    run = create_run(
        thread_id=thread_id,
        assistant_id=payload.assistant_id,
        input=input_,
        command=command,
        checkpoint_id=payload.checkpoint_id,
        checkpoint=checkpoint,
        durability=payload.durability,
        checkpoint_during=payload.checkpoint_during,
        multitask_strategy=payload.multitask_strategy or "enqueue",
        metadata=metadata,
        config=payload.config,
        context=payload.context,
        webhook=payload.webhook,
        if_not_exists=payload.if_not_exists or "reject",
        stream_mode=api_runs.stream_modes(payload.stream_mode),
        stream_subgraphs=bool(payload.stream_subgraphs),
        stream_resumable=bool(payload.stream_resumable),
        interrupt_before=payload.interrupt_before,
        interrupt_after=payload.interrupt_after,
        owner=who.user,
        by=who.name or "api",
        door="api",
        decider=Decider(who.user, who.is_operator),
        after_seconds=payload.after_seconds,
        run_id=run_id,
    )
    api_runs.claim_owner(who, run.thread_id, created=not existed)
    return run


def _location(run: Run, stateless: bool = False) -> str:
    if stateless or run.thread_id is None:
        return f"/runs/{run.run_id}"
    return f"/threads/{run.thread_id}/runs/{run.run_id}"


def _wait(run: Run, timeout: float | None = None) -> Run:
    """wait_run on a worker thread; its database connection is closed afterwards."""
    from criogen.services.runs import wait_run

    try:
        return wait_run(run=run, timeout=timeout)
    finally:
        close_old_connections()


def _stateless_cleanup(run: Run, on_completion: str | None, default: str, by: Any) -> Any:
    """What to do with a stateless run's thread when the run has ended: with
    ``on_completion="delete"``, the one delete verb, audited as the run's caller."""
    if (on_completion or default) != "delete" or run.thread_id is None:
        return None
    thread_id = run.thread_id

    def delete() -> None:
        delete_thread(thread_id=thread_id, by=by, door="api")

    return delete


def _delete_when_done(run: Run, cleanup: Any) -> None:
    """For a background stateless run with ``on_completion="delete"``."""

    def watch() -> None:
        _wait(run)
        try:
            cleanup()
        finally:
            close_old_connections()

    threading.Thread(target=watch, name=f"criogen-cleanup-{run.run_id}", daemon=True).start()


async def _wait_response(
    who: Principal, thread_id: str | None, payload: RunCreateIn
) -> HttpResponse:
    if payload.on_disconnect == "cancel":
        raise InvalidArgument(
            "on_disconnect='cancel' is supported on streams only; wait runs continue.",
            field="on_disconnect",
        )
    run = await db(_create, who, thread_id, payload, held=True)
    cleanup = (
        _stateless_cleanup(run, payload.on_completion, "delete", who.name)
        if thread_id is None
        else None
    )
    run = await wait_for_run(run, fields=api_runs.RESULT_FIELDS)
    result = await db(api_runs.run_result, run)
    if cleanup is not None:
        await db(cleanup)
    response = JsonResponse(result, safe=False, json_dumps_params={"default": str})
    response["Content-Location"] = _location(run, stateless=thread_id is None)
    return response


async def _stream_response(
    who: Principal, thread_id: str | None, payload: RunCreateIn
) -> HttpResponse:
    from channels.layers import get_channel_layer

    from criogen.events import thread_group

    modes = api_runs.stream_modes(payload.stream_mode)
    # Subscribe before the run exists, so that its first events cannot be missed (a
    # bridged LangGraph graph's chunks are live only); a stateless run's thread is
    # named after the run, whose id is chosen here for that.
    run_id = uuid.uuid4()
    group = thread_group(thread_id if thread_id is not None else str(run_id))
    layer = get_channel_layer()
    name = await layer.new_channel()
    await layer.group_add(group, name)
    channel = (layer, name)
    try:
        run = await db(_create, who, thread_id, payload, held=True, run_id=run_id)
    except BaseException:
        await layer.group_discard(group, name)
        raise
    cleanup = (
        _stateless_cleanup(run, payload.on_completion, "delete", who.name)
        if thread_id is None
        else None
    )
    if payload.stream_resumable:
        # The log is written by a producer that outlives this response; the client
        # reads it like any reconnecting one (from the start).
        await _start_log(run, modes, channel, cleanup)
        body = api_runs.log_stream(
            run_id=str(run.run_id),
            thread_id=str(run.thread_id),
            after=0,
            modes=None,
            run_modes=modes,
            cancel_on_disconnect=payload.on_disconnect == "cancel",
            cancelled_by=who.name,
        )
        return _sse_response(body, run)
    body = api_runs.sse_stream(
        run_id=str(run.run_id),
        thread_id=str(run.thread_id),
        modes=modes,
        channel=channel,
        cancel_on_disconnect=payload.on_disconnect == "cancel",
        cancelled_by=who.name,
        after_end=cleanup,
    )
    return _sse_response(body, run)


async def _start_log(
    run: Run | dict[str, Any],
    modes: list[str],
    channel: tuple[Any, str] | None,
    cleanup: Any,
) -> None:
    """Open a resumable run's log and start its producer on this event loop."""
    if isinstance(run, dict):
        run_id, thread_id = str(run["run_id"]), str(run["thread_id"])
    else:
        run_id, thread_id = str(run.run_id), str(run.thread_id)
    try:
        await db(api_runs.open_log, run_id, thread_id)
    except BaseException:
        if channel is not None:
            from criogen.events import thread_group

            await channel[0].group_discard(thread_group(thread_id), channel[1])
        raise
    api_runs.start_producer(
        run_id=run_id, thread_id=thread_id, modes=modes, channel=channel, after_end=cleanup
    )


def _sse_response(body: Any, run: Run | None = None) -> StreamingHttpResponse:
    """A stream's response: where to reconnect (``Location``, with ``Last-Event-ID``
    for a resumable run) and where the run is (``Content-Location``), on the thread
    even for a stateless run (its thread exists while it runs)."""
    response = StreamingHttpResponse(body, content_type="text/event-stream")
    response["Cache-Control"] = "no-store"
    response["X-Accel-Buffering"] = "no"  # proxies must not buffer the stream
    if run is not None and run.thread_id is not None:
        response["Location"] = f"/threads/{run.thread_id}/runs/{run.run_id}/stream"
        response["Content-Location"] = f"/threads/{run.thread_id}/runs/{run.run_id}"
    return response


# -- runs on a thread ------------------------------------------------------------------------


@thread_router.post(
    "/{thread_id}/runs",
    response={200: RunOut, **ERRORS},
    operation_id="create_run",
    summary="Create a background run",
)
async def create_run(
    request: HttpRequest, response: HttpResponse, thread_id: str, payload: RunCreateIn
) -> dict[str, Any]:
    """Start a run in the background; answer the run (``pending``). With
    ``stream_resumable`` its events are logged for ``join_stream``."""
    run = await db(_create, principal(request), thread_id, payload)
    if payload.stream_resumable:
        await _start_log(run, api_runs.stream_modes(payload.stream_mode), None, None)
    response["Content-Location"] = _location(run)
    return api_runs.run_out(run)


@thread_router.post(
    "/{thread_id}/runs/wait",
    response={200: dict[str, Any], **ERRORS},
    operation_id="wait_run",
    summary="Create a run and wait for its result",
)
async def wait_run(request: HttpRequest, thread_id: str, payload: RunCreateIn) -> HttpResponse:
    """Run and answer the thread's values when it ends (``__interrupt__`` when it
    suspended, ``__error__`` when it failed)."""
    return await _wait_response(principal(request), thread_id, payload)


@thread_router.post(
    "/{thread_id}/runs/stream",
    response={404: ErrorOut, 409: ErrorOut, 422: ErrorOut},
    openapi_extra={"responses": SSE_RESPONSE},
    operation_id="stream_run",
    summary="Create a run and stream it",
)
async def stream_run(request: HttpRequest, thread_id: str, payload: RunCreateIn) -> HttpResponse:
    """Run and stream its checkpoints as Server-Sent Events in the requested modes."""
    return await _stream_response(principal(request), thread_id, payload)


@thread_router.get(
    "/{thread_id}/runs",
    response={200: list[RunOut], **ERRORS},
    exclude_unset=True,
    operation_id="list_runs",
    summary="List a thread's runs",
)
async def list_runs(
    request: HttpRequest,
    thread_id: str,
    limit: int = 10,
    offset: int = 0,
    status: str | None = None,
    select: list[str] | None = Query(None),  # noqa: B008 - ninja's parameter marker
) -> list[dict[str, Any]]:
    """The thread's runs, newest first."""
    return await db(_list_runs, principal(request), thread_id, limit, offset, status, select)


def _list_runs(
    who: Principal,
    thread_id: str,
    limit: int,
    offset: int,
    status: str | None,
    select: list[str] | None,
) -> list[dict[str, Any]]:
    from criogen.selectors import runs_for_thread

    threads.load_thread(who, thread_id)
    cap = int(settings.CRIOGEN_MAX_SEARCH_LIMIT)
    if limit < 1 or limit > cap:
        raise InvalidArgument(f"limit is {limit}; use 1 to {cap}.", field="limit")
    if offset < 0 or offset > MAX_OFFSET:
        raise InvalidArgument(f"offset is {offset}; use 0 to {MAX_OFFSET}.", field="offset")
    statuses = ("pending", "running", "success", "error", "interrupted", "timeout")
    if status and status not in statuses:
        raise InvalidArgument(f"status is {status!r}; use {', '.join(statuses)}.", field="status")
    runs = runs_for_thread(thread_id=thread_id, status=status or None, limit=limit, offset=offset)
    fields = [f for f in (select or []) if f]
    unknown = [f for f in fields if f not in RunOut.model_fields]
    if unknown:
        raise InvalidArgument(
            f"select has {unknown[0]!r}; use {', '.join(RunOut.model_fields)}.", field="select"
        )
    out = [api_runs.run_out(run) for run in runs]
    if fields:
        out = [{k: v for k, v in r.items() if k in fields or k == "run_id"} for r in out]
    return out


@thread_router.get(
    "/{thread_id}/runs/{run_id}",
    response={200: RunOut, **ERRORS},
    operation_id="get_run",
    summary="Get a run",
)
async def get_run(request: HttpRequest, thread_id: str, run_id: str) -> dict[str, Any]:
    """One run of the thread."""
    run = await db(api_runs.load_run, principal(request), thread_id, run_id)
    return api_runs.run_out(run)


@thread_router.delete(
    "/{thread_id}/runs/{run_id}",
    response={204: None, **ERRORS},
    operation_id="delete_run",
    summary="Delete a run",
)
async def delete_run(request: HttpRequest, thread_id: str, run_id: str) -> Status[None]:
    """Delete an ended run (an active one is a 409: cancel it first)."""
    await db(_delete_run, principal(request), thread_id, run_id)
    return Status(204, None)


def _delete_run(who: Principal, thread_id: str, run_id: str) -> None:
    from criogen.services.runs import delete_run as delete

    delete(run=api_runs.load_run(who, thread_id, run_id))


@thread_router.post(
    "/{thread_id}/runs/{run_id}/cancel",
    response={200: RunOut, **ERRORS},
    operation_id="cancel_run",
    summary="Cancel a run",
)
async def cancel_run(
    request: HttpRequest,
    thread_id: str,
    run_id: str,
    wait: bool = False,
    action: str = "interrupt",
) -> dict[str, Any]:
    """Cancel a pending or running run (``action`` interrupt keeps its checkpoints,
    rollback deletes them); ``wait=1`` answers once it has stopped. The run ends
    ``interrupted`` with ``cancel_reason`` set, so it never looks like it waits for a
    person."""
    from criogen.services.runs import cancel_run as cancel

    who = principal(request)
    run = await db(api_runs.load_run, who, thread_id, run_id)
    run = await db(cancel, run=run, action=action, by=who.name or "api")
    if wait:
        run = await wait_for_run(run, 60.0)
    return api_runs.run_out(run)


@thread_router.get(
    "/{thread_id}/runs/{run_id}/join",
    response={200: dict[str, Any], **ERRORS},
    operation_id="join_run",
    summary="Wait for a run and get its result",
)
async def join_run(request: HttpRequest, thread_id: str, run_id: str) -> HttpResponse:
    """Wait until the run ends; answer like ``wait``."""
    run = await db(api_runs.load_run, principal(request), thread_id, run_id, api_runs.RESULT_FIELDS)
    run = await wait_for_run(run, fields=api_runs.RESULT_FIELDS)
    return JsonResponse(
        await db(api_runs.run_result, run),
        safe=False,
        json_dumps_params={"default": str},
    )


@thread_router.get(
    "/{thread_id}/runs/{run_id}/stream",
    response={404: ErrorOut, 422: ErrorOut},
    openapi_extra={"responses": SSE_RESPONSE},
    operation_id="join_run_stream",
    summary="Stream a run that already exists",
)
async def join_run_stream(
    request: HttpRequest,
    thread_id: str,
    run_id: str,
    stream_mode: list[str] | None = Query(None),  # noqa: B008 - ninja's parameter marker
    cancel_on_disconnect: bool = False,
) -> HttpResponse:
    """The run's events from its first checkpoint on (a finished run replays them and
    ends), in ``stream_mode`` (default: the modes the run was created with).

    A run streamed with ``stream_resumable`` is read from its event log: the events
    after the ``Last-Event-ID`` header (absent, ``-1`` or ``0``: all of them), each with
    its ``id:``, then the new ones live; ``stream_mode`` filters them."""
    who = principal(request)
    after = api_runs.last_event_id(request.headers.get("Last-Event-ID"))
    run = await db(api_runs.load_run, who, thread_id, run_id)
    wanted = [m for m in (stream_mode or []) if m]
    run_modes = api_runs.stream_modes((run.kwargs or {}).get("stream_mode"))
    modes = api_runs.stream_modes(wanted) if wanted else run_modes
    if await db(api_runs.has_log, str(run.run_id)):
        body = api_runs.log_stream(
            run_id=str(run.run_id),
            thread_id=thread_id,
            after=after,
            modes=modes if wanted else None,
            run_modes=run_modes,
            cancel_on_disconnect=cancel_on_disconnect,
            cancelled_by=who.name,
        )
        return _sse_response(body, run)
    body = api_runs.sse_stream(
        run_id=str(run.run_id),
        thread_id=thread_id,
        modes=modes,
        cancel_on_disconnect=cancel_on_disconnect,
        cancelled_by=who.name,
    )
    return _sse_response(body, run)


@thread_router.get(
    "/{thread_id}/stream",
    response={404: ErrorOut, 422: ErrorOut, 429: ErrorOut},
    openapi_extra={"responses": SSE_RESPONSE},
    operation_id="join_thread_stream",
    summary="Follow a thread live",
)
async def join_thread_stream(
    request: HttpRequest,
    thread_id: str,
    stream_mode: list[str] | None = Query(None),  # noqa: B008 - ninja's parameter marker
) -> HttpResponse:
    """The thread's live events (``run_modes``, ``lifecycle``, ``state_update``; default
    ``run_modes``) until the client disconnects. Nothing is replayed."""
    await db(threads.load_thread, principal(request), thread_id)
    modes = [m for m in (stream_mode or []) if m] or ["run_modes"]
    for mode in modes:
        if mode not in ("run_modes", "lifecycle", "state_update"):
            raise InvalidArgument(
                f"stream_mode has {mode!r}; use run_modes, lifecycle or state_update.",
                field="stream_mode",
            )
    who = principal(request)
    user = who.user_id if who.user is not None else "local"
    release = api_runs.stream_slots.take(user, thread_id)  # 429 too_many_streams
    response = _sse_response(
        api_runs.thread_stream(thread_id=thread_id, modes=modes, release=release)
    )
    # Also when the client leaves before the stream starts (the generator never runs).
    response._resource_closers.append(release)
    return response


# -- stateless runs ----------------------------------------------------------------------------


@router.post(
    "",
    response={200: RunOut, **ERRORS},
    operation_id="create_stateless_run",
    summary="Create a stateless background run",
)
async def create_stateless_run(
    request: HttpRequest, response: HttpResponse, payload: RunCreateIn
) -> dict[str, Any]:
    """A run on a new thread of its own. ``on_completion`` ``keep`` (the default here)
    keeps that thread; ``delete`` removes it when the run ends."""
    who = principal(request)
    run = await db(_create, who, None, payload)
    cleanup = _stateless_cleanup(run, payload.on_completion, "keep", who.name)
    if cleanup is not None:
        _delete_when_done(run, cleanup)
    response["Content-Location"] = _location(run, stateless=True)
    return api_runs.run_out(run)


@router.post(
    "/wait",
    response={200: dict[str, Any], **ERRORS},
    operation_id="wait_stateless_run",
    summary="Run statelessly and wait for the result",
)
async def wait_stateless_run(request: HttpRequest, payload: RunCreateIn) -> HttpResponse:
    """Run on a new thread and answer its final values; the thread is deleted after
    unless ``on_completion="keep"``."""
    return await _wait_response(principal(request), None, payload)


@router.post(
    "/stream",
    response={404: ErrorOut, 409: ErrorOut, 422: ErrorOut},
    openapi_extra={"responses": SSE_RESPONSE},
    operation_id="stream_stateless_run",
    summary="Run statelessly and stream it",
)
async def stream_stateless_run(request: HttpRequest, payload: RunCreateIn) -> HttpResponse:
    """Run on a new thread and stream it; the thread is deleted after unless
    ``on_completion="keep"``."""
    return await _stream_response(principal(request), None, payload)


@router.post(
    "/batch",
    response={200: list[RunOut], **ERRORS},
    operation_id="create_runs_batch",
    summary="Create several background runs",
)
async def create_batch(request: HttpRequest, payload: list[RunBatchItemIn]) -> list[dict[str, Any]]:
    """Each item is a background run (on ``thread_id``, or stateless without it)."""
    out = await db(_create_batch, principal(request), payload)
    for item, run in zip(payload, out, strict=True):
        if item.stream_resumable:
            await _start_log(run, api_runs.stream_modes(item.stream_mode), None, None)
    return out


def _create_batch(who: Principal, payload: list[RunBatchItemIn]) -> list[dict[str, Any]]:
    out = []
    for item in payload:
        data = item.model_dump(exclude_unset=True)
        thread_id = data.pop("thread_id", None)
        run = _create(who, thread_id, RunCreateIn(**data))
        out.append(api_runs.run_out(run))
    return out


@router.post(
    "/cancel",
    response={204: None, **ERRORS},
    operation_id="cancel_runs",
    summary="Cancel several runs",
)
async def cancel_many(
    request: HttpRequest, payload: RunsCancelIn, action: str = "interrupt"
) -> Status[None]:
    """Cancel the named runs, or the thread's runs with ``status`` (pending, running,
    all)."""
    await db(_cancel_many, principal(request), payload, action)
    return Status(204, None)


def _cancel_many(who: Principal, payload: RunsCancelIn, action: str) -> None:
    from criogen.services.runs import cancel_run as cancel

    if not payload.run_ids and not payload.thread_id and not payload.status:
        raise InvalidArgument("name run_ids, a thread_id or a status.", field="run_ids")
    if payload.thread_id:
        selectors.thread_for(who, payload.thread_id)
    runs = selectors.active_runs_for(
        who,
        thread_id=payload.thread_id or None,
        run_ids=[_uuid(r) for r in payload.run_ids] if payload.run_ids else None,
        status=payload.status if payload.status in ("pending", "running") else None,
    )
    for run in runs:
        cancel(run=run, action=action, by=who.name or "api")


def _uuid(value: str) -> str:
    import uuid

    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise InvalidArgument(f"run id {value!r} is not a UUID.", field="run_ids") from None
