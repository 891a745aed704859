"""``/threads``: create, get, update, delete, copy, count, search, prune, state, history.

Binding: ``spec/threads-rest-api.txt``; paths, bodies and fields as ``langgraph_sdk``
calls them. Each endpoint parses, calls one function of :mod:`api.threads` (or, for
search and count, :mod:`criogen.selectors`) and returns its result.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from django.http import HttpRequest, HttpResponse
from ninja import Query, Router, Status

from api import threads
from api.aio import Plan, db, db_ahead, plan_ahead
from api.auth import Principal, principal
from api.render import trusted_response
from api.schemas import (
    ErrorOut,
    HistoryIn,
    PruneOut,
    StateCheckpointIn,
    ThreadCountIn,
    ThreadCreateIn,
    ThreadOut,
    ThreadPatchIn,
    ThreadPruneIn,
    ThreadSearchIn,
    ThreadStateOut,
    UpdateStateIn,
    UpdateStateOut,
)
from api.threads.shapes import THREAD_FIELDS, search_thread_out, state_dump, thread_dump
from criogen import selectors
from criogen.engine.errors import InvalidArgument

router = Router(tags=["threads"])

ERRORS: dict[int, Any] = {404: ErrorOut, 409: ErrorOut, 422: ErrorOut}


def _root_namespace(checkpoint: Any, field: str) -> None:
    """Criogen graphs have no subgraphs: only the root namespace ``""`` exists."""
    if checkpoint is not None and checkpoint.checkpoint_ns not in ("", None):
        raise InvalidArgument(
            f"{field} is {checkpoint.checkpoint_ns!r}; Criogen graphs have no subgraphs, "
            "use '' (the root).",
            field=field,
        )


def _ttl(value: Any) -> Any:
    return value.model_dump() if hasattr(value, "model_dump") else value


@router.post(
    "",
    response={200: ThreadOut, **ERRORS},
    operation_id="create_thread",
    summary="Create a thread",
)
async def create_thread(request: HttpRequest, payload: ThreadCreateIn) -> dict[str, Any]:
    """Create a thread. An explicit ``thread_id`` must be 1–255 non-blank characters
    (else 422); an existing one is a 409 unless ``if_exists="do_nothing"``."""
    return await db_ahead(request, _create_thread, principal(request), payload)


def _create_thread(who: Principal, payload: ThreadCreateIn) -> dict[str, Any]:
    row = threads.create_thread(
        who,
        thread_id=payload.thread_id,
        metadata=payload.metadata,
        if_exists=payload.if_exists,
        ttl=_ttl(payload.ttl),
        supersteps=[s.model_dump() for s in payload.supersteps] if payload.supersteps else None,
    )
    return threads.thread_out(row)


@router.post(
    "/search",
    response={200: list[ThreadOut], **ERRORS},
    exclude_unset=True,
    operation_id="search_threads",
    summary="Search threads",
)
async def search_threads(request: HttpRequest, payload: ThreadSearchIn) -> HttpResponse:
    """Threads by metadata, state values, status and ids; ``limit`` 1 to
    ``CRIOGEN_MAX_SEARCH_LIMIT`` (default min(20, cap)), ``offset``, ``sort_by``.

    As LangGraph's server, when more threads follow this page the answer carries
    ``X-Pagination-Next`` (the next offset) and ``X-Pagination-Total`` one more than it
    (at least that many match); on the last page ``X-Pagination-Total`` is how many
    match. ``POST /threads/count`` counts them exactly."""
    if payload.extract and len(payload.extract) > 10:
        raise InvalidArgument("extract takes at most 10 paths.", field="extract")
    out, total = await db(_search_threads, principal(request), payload)
    answer = trusted_response([thread_dump(item, unset=True) for item in out])
    answer["X-Pagination-Total"] = str(total)
    if payload.offset + len(out) < total:
        answer["X-Pagination-Next"] = str(payload.offset + len(out))
    return answer


def _search_threads(who: Principal, payload: ThreadSearchIn) -> tuple[list[dict[str, Any]], int]:
    found, total = selectors.search_page(
        who,
        metadata=payload.metadata,
        values=payload.values,
        status=payload.status,
        ids=payload.ids,
        limit=payload.limit,
        offset=payload.offset,
        sort_by=payload.sort_by,
        sort_order=payload.sort_order,
    )
    out = []
    for row, head in found:
        item = search_thread_out(row, head)
        if payload.extract:
            item["extracted"] = {k: _extract(item, path) for k, path in payload.extract.items()}
        out.append(_only(item, payload.select))
    return out, total


@router.post(
    "/count", response={200: int, **ERRORS}, operation_id="count_threads", summary="Count threads"
)
async def count_threads(request: HttpRequest, payload: ThreadCountIn) -> int:
    """How many threads match the filters (same filters as search)."""
    return await db(
        selectors.count_threads,
        principal(request),
        metadata=payload.metadata,
        values=payload.values,
        status=payload.status,
    )


@router.post(
    "/prune",
    response={200: PruneOut, **ERRORS},
    operation_id="prune_threads",
    summary="Prune threads",
)
async def prune_threads(
    request: HttpRequest, payload: ThreadPruneIn | None = None
) -> dict[str, Any]:
    """Without a body: apply the caller's expired TTL policies now and answer
    ``{"deleted", "pruned"}``. With ``{"thread_ids", "strategy"}`` (the SDK): prune
    those threads and answer ``pruned_count`` too. Threads with active runs are skipped."""
    who = principal(request)
    if payload is None:
        return await db(threads.prune_expired, who)
    return await db(threads.prune_threads, who, payload.thread_ids, payload.strategy)


@router.get(
    "/{thread_id}",
    response={200: ThreadOut, **ERRORS},
    operation_id="get_thread",
    summary="Get a thread",
)
async def get_thread(
    request: HttpRequest, thread_id: str, include: str | None = None
) -> HttpResponse:
    """One thread with its status, values and pending interrupts."""
    if include:
        unknown = [f for f in include.split(",") if f.strip() not in ("ttl", "")]
        if unknown:
            raise InvalidArgument(f"include has {unknown[0]!r}; only 'ttl'.", field="include")
    return await db_ahead(request, _get_thread, principal(request), thread_id)


@plan_ahead("GET", "get_thread")
def _plan_get_thread(request: HttpRequest, who: Principal) -> Plan | None:
    """The read of :func:`get_thread`, made in the token check's hop (api.aio)."""
    return _get_thread, (who, request.resolver_match.kwargs["thread_id"]), {}  # type: ignore[union-attr]


def _get_thread(who: Principal, thread_id: str) -> HttpResponse:
    row = threads.load_thread(who, thread_id)
    return trusted_response(thread_dump(threads.thread_out(row), unset=False))


def _state(fn: Any, *args: Any, **kwargs: Any) -> HttpResponse:
    """``fn(*args, **kwargs)``'s ``ThreadState`` (a list of them for history) as the
    answer, on the API's database threads."""
    out = fn(*args, **kwargs)
    if isinstance(out, list):
        return trusted_response([state_dump(state) for state in out])
    return trusted_response(state_dump(out))


@router.patch(
    "/{thread_id}",
    response={200: ThreadOut, 204: None, **ERRORS},
    operation_id="patch_thread",
    summary="Update a thread",
)
async def patch_thread(request: HttpRequest, thread_id: str, payload: ThreadPatchIn) -> Any:
    """Merge ``metadata`` into the thread's and (re)set its TTL. ``Prefer:
    return=minimal`` answers 204 without a body."""
    minimal = "return=minimal" in request.headers.get("Prefer", "")
    out = await db(_patch_thread, principal(request), thread_id, payload, minimal)
    return Status(204, None) if minimal else out


def _patch_thread(
    who: Principal, thread_id: str, payload: ThreadPatchIn, minimal: bool
) -> dict[str, Any] | None:
    row = threads.update_thread(who, thread_id, metadata=payload.metadata, ttl=_ttl(payload.ttl))
    return None if minimal else threads.thread_out(row)


@router.delete(
    "/{thread_id}",
    response={204: None, **ERRORS},
    operation_id="delete_thread",
    summary="Delete a thread",
)
async def delete_thread(request: HttpRequest, thread_id: str) -> Status[None]:
    """Cancel the thread's active runs and remove it with its whole history."""
    await db_ahead(request, threads.delete_thread, principal(request), thread_id)
    return Status(204, None)


@plan_ahead("DELETE", "get_thread")
def _plan_delete_thread(request: HttpRequest, who: Principal) -> Plan | None:
    """The deletion of :func:`delete_thread`, made in the token check's hop (api.aio).

    A write, where the other plans are reads: it is made ahead only because nothing
    between the token check and the endpoint can turn the request away. Its one
    parameter is the path's thread id, a string django-ninja takes as it is, and the
    API has no throttles; so a request whose token passes always makes this very call,
    once, and its errors (404) are the endpoint's."""
    return threads.delete_thread, (who, request.resolver_match.kwargs["thread_id"]), {}  # type: ignore[union-attr]


@router.post(
    "/{thread_id}/copy",
    response={200: ThreadOut, **ERRORS},
    operation_id="copy_thread",
    summary="Copy a thread",
)
async def copy_thread(request: HttpRequest, thread_id: str) -> dict[str, Any]:
    """A new thread with this one's metadata and whole history."""
    return await db(_copy_thread, principal(request), thread_id)


def _copy_thread(who: Principal, thread_id: str) -> dict[str, Any]:
    return threads.thread_out(threads.copy_thread(who, thread_id))


@router.get(
    "/{thread_id}/state",
    response={200: ThreadStateOut, **ERRORS},
    exclude_unset=True,
    operation_id="get_thread_state",
    summary="Get the thread's state",
)
async def get_state(
    request: HttpRequest,
    thread_id: str,
    subgraphs: bool = False,
    select: list[str] | None = Query(None),  # noqa: B008 - ninja's parameter marker
) -> HttpResponse:
    """The head: ``values``, ``next``, ``tasks``, ``interrupts``, ``checkpoint``,
    ``metadata``, ``created_at``, ``parent_checkpoint``."""
    return await db_ahead(
        request, _state, threads.get_state, principal(request), thread_id, select=select
    )


@plan_ahead("GET", "get_state")
def _plan_get_state(request: HttpRequest, who: Principal) -> Plan | None:
    """The read of :func:`get_state` without ``select`` (what the SDK asks), made in the
    token check's hop (api.aio)."""
    if "select" in request.GET:
        return None
    thread_id = request.resolver_match.kwargs["thread_id"]  # type: ignore[union-attr]
    return _state, (threads.get_state, who, thread_id), {"select": None}


@router.post(
    "/{thread_id}/state",
    response={200: UpdateStateOut, **ERRORS},
    exclude_unset=True,
    operation_id="update_thread_state",
    summary="Update the thread's state",
)
async def update_state(
    request: HttpRequest, thread_id: str, payload: UpdateStateIn
) -> dict[str, Any]:
    """Write a checkpoint with ``values`` merged by the graph's reducers, as if
    ``as_node`` had just run."""
    checkpoint_id = payload.checkpoint_id
    if payload.checkpoint is not None and payload.checkpoint.checkpoint_id:
        checkpoint_id = payload.checkpoint.checkpoint_id  # keys in checkpoint win
    if isinstance(payload.values, list):
        raise InvalidArgument(
            "values must be a JSON object (a list of updates is not supported).",
            field="values",
        )
    return await db(
        threads.update_state,
        principal(request),
        thread_id,
        values=payload.values,
        as_node=payload.as_node,
        checkpoint_id=checkpoint_id,
    )


@router.post(
    "/{thread_id}/state/checkpoint",
    response={200: ThreadStateOut, **ERRORS},
    exclude_unset=True,
    operation_id="post_thread_state_at_checkpoint",
    summary="Get the state at a checkpoint",
)
async def state_at_checkpoint(
    request: HttpRequest, thread_id: str, payload: StateCheckpointIn
) -> HttpResponse:
    """The state at ``checkpoint.checkpoint_id`` (the head if it is null)."""
    who = principal(request)
    _root_namespace(payload.checkpoint, "checkpoint.checkpoint_ns")
    cid = payload.checkpoint.checkpoint_id
    if not cid:
        return await db(_state, threads.get_state, who, thread_id, select=payload.select)
    return await db(_state, threads.state_at, who, thread_id, cid, select=payload.select)


@router.get(
    "/{thread_id}/state/{checkpoint_id}",
    response={200: ThreadStateOut, **ERRORS},
    exclude_unset=True,
    operation_id="get_thread_state_at_checkpoint",
    summary="Get the state at a checkpoint",
)
async def state_at(
    request: HttpRequest,
    thread_id: str,
    checkpoint_id: str,
    subgraphs: bool = False,
    select: list[str] | None = Query(None),  # noqa: B008 - ninja's parameter marker
) -> HttpResponse:
    """The state at one checkpoint (a UUID; else 422)."""
    return await db(
        _state, threads.state_at, principal(request), thread_id, checkpoint_id, select=select
    )


@router.post(
    "/{thread_id}/history",
    response={200: list[ThreadStateOut], **ERRORS},
    exclude_unset=True,
    operation_id="post_thread_history",
    summary="Get the thread's history",
)
async def post_history(request: HttpRequest, thread_id: str, payload: HistoryIn) -> HttpResponse:
    """States newest first: ``limit``, ``checkpoint`` (from this checkpoint back),
    ``before`` (a checkpoint id or object), ``metadata`` (states whose metadata
    contains it)."""
    _root_namespace(payload.checkpoint, "checkpoint.checkpoint_ns")
    before = payload.before
    if before is not None and not isinstance(before, str):
        before = before.checkpoint_id
    return await db_ahead(
        request,
        _state,
        threads.history,
        principal(request),
        thread_id,
        limit=payload.limit,
        before=before,
        metadata=payload.metadata,
        select=payload.select,
        at=payload.checkpoint.checkpoint_id if payload.checkpoint else None,
    )


_HISTORY_FILTERS = ("before", "metadata", "checkpoint", "select")


@plan_ahead("POST", "post_history")
def _plan_post_history(request: HttpRequest, who: Principal) -> Plan | None:
    """The read of :func:`post_history` for a body of ``limit`` alone (what the SDK's
    ``get_history`` sends without filters), made in the token check's hop (api.aio)."""
    try:
        body = orjson.loads(request.body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict) or any(body.get(k) is not None for k in _HISTORY_FILTERS):
        return None
    limit = body.get("limit", 10)
    if type(limit) is not int:
        return None
    thread_id = request.resolver_match.kwargs["thread_id"]  # type: ignore[union-attr]
    kwargs = {"limit": limit, "before": None, "metadata": None, "select": None, "at": None}
    return _state, (threads.history, who, thread_id), kwargs


@router.get(
    "/{thread_id}/history",
    response={200: list[ThreadStateOut], **ERRORS},
    exclude_unset=True,
    operation_id="get_thread_history",
    summary="Get the thread's history",
)
async def get_history(
    request: HttpRequest, thread_id: str, limit: int = 10, before: str | None = None
) -> HttpResponse:
    """States newest first (the GET form: ``limit`` and ``before`` as query params)."""
    return await db_ahead(
        request, _state, threads.history, principal(request), thread_id, limit=limit, before=before
    )


@plan_ahead("GET", "post_history")
def _plan_get_history(request: HttpRequest, who: Principal) -> Plan | None:
    """The read of :func:`get_history` without ``before``, made in the token check's hop
    (api.aio). (The path is named after its first operation, ``post_history``.)"""
    raw = request.GET.get("limit", "10")
    if "before" in request.GET or not raw.isdigit():
        return None
    thread_id = request.resolver_match.kwargs["thread_id"]  # type: ignore[union-attr]
    return _state, (threads.history, who, thread_id), {"limit": int(raw), "before": None}


def _only(item: dict[str, Any], select: list[str] | None) -> dict[str, Any]:
    """``item`` with only the ``select`` fields (all of them without it)."""
    if not select:
        return item
    unknown = [f for f in select if f not in THREAD_FIELDS]
    if unknown:
        raise InvalidArgument(
            f"select has {unknown[0]!r}; use {', '.join(THREAD_FIELDS)}.", field="select"
        )
    return {k: v for k, v in item.items() if k in select or k == "thread_id"}


_PATH_TOKEN = re.compile(r"([^.\[\]]+)|\[(-?\d+)\]")


def _extract(item: dict[str, Any], path: str) -> Any:
    """The value at a path like ``values.messages[-1].content`` (None if absent)."""
    if not path or len(path) > 200:
        raise InvalidArgument(f"extract path {path!r} is not valid.", field="extract")
    value: Any = item
    for key, index in _PATH_TOKEN.findall(path):
        try:
            value = value[int(index)] if index else value[key]
        except (KeyError, IndexError, TypeError):
            return None
    return value
