"""Reading threads for the REST API: load one the caller may see, its state now or
at a checkpoint, its history."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from django.conf import settings

from api.auth import Principal
from api.render import dumps
from api.threads.langgraph import bridged_graph, langgraph_history, langgraph_state
from api.threads.shapes import _select, state_out, storage
from criogen import selectors
from criogen.engine.errors import CheckpointNotFound, InvalidArgument

if TYPE_CHECKING:
    from criogen.storage.models import Thread

__all__ = [
    "check_checkpoint_id",
    "check_visible",
    "get_state",
    "history",
    "load_thread",
    "state_at",
]


def load_thread(who: Principal, thread_id: str, *, for_update: bool = False) -> Thread:
    """The thread ``thread_id`` with its REST status if the caller may see it; else
    ThreadNotFound (404). :func:`criogen.selectors.thread_for`."""
    return selectors.thread_for(who, thread_id, write=for_update, status=True)


def check_visible(who: Principal, thread_id: str) -> None:
    """ThreadNotFound (404) unless the thread exists and the caller may see it: what
    :func:`load_thread` checks, in one index lookup without the status."""
    selectors.check_thread_for(who, thread_id)


def check_checkpoint_id(value: Any, field: str = "checkpoint_id") -> str:
    """A checkpoint id must be a UUID (422 otherwise, before any lookup)."""
    try:
        return str(uuid.UUID(str(value)))
    except (ValueError, TypeError, AttributeError):
        raise InvalidArgument(
            f"{field} {value!r} is not a UUID; checkpoint ids are UUIDs (see get_history).",
            field=field,
        ) from None


def _criogen_only() -> bool:
    """No LangGraph graph is registered, so no thread reads LangGraph's checkpoints
    (:func:`bridged_graph` would answer None without a query): the reads below may
    check visibility in the same statement as the checkpoints they read."""
    from criogen.registry import serves_langgraph

    return not serves_langgraph()


def get_state(who: Principal, thread_id: str, *, select: list[str] | None = None) -> dict[str, Any]:
    """The thread's current state (its head)."""
    if _criogen_only():
        found = selectors.visible_history(who, thread_id, limit=1)
        return state_out(thread_id, found[0] if found else None, select=select)
    selectors.check_thread_for(who, thread_id)
    if (compiled := bridged_graph(thread_id)) is not None:
        return langgraph_state(compiled, thread_id, select=select)
    return state_out(thread_id, storage().head(thread_id), select=select)


def state_at(
    who: Principal, thread_id: str, checkpoint_id: str, *, select: list[str] | None = None
) -> dict[str, Any]:
    """The state at one checkpoint of the thread (404 if it has no such checkpoint)."""
    selectors.check_thread_for(who, thread_id)
    cid = check_checkpoint_id(checkpoint_id)
    if (compiled := bridged_graph(thread_id)) is not None:
        return langgraph_state(compiled, thread_id, cid, select=select)
    return state_out(thread_id, storage().get_checkpoint(thread_id, cid), select=select)


def _version_of(thread_id: str, checkpoint_id: str) -> int:
    version = selectors.checkpoint_version(thread_id=thread_id, checkpoint_id=checkpoint_id)
    if version is None:
        raise CheckpointNotFound(
            f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}.",
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
            field="before",
        )
    return int(version)


def _metadata_match(state: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    meta = state.get("metadata") or {}
    return all(k in meta and meta[k] == v for k, v in wanted.items())


def history(
    who: Principal,
    thread_id: str,
    *,
    limit: int = 10,
    before: str | None = None,
    metadata: dict[str, Any] | None = None,
    select: list[str] | None = None,
    at: str | None = None,
) -> list[dict[str, Any]]:
    """The thread's states, newest first: at most ``limit``, from the checkpoint ``at``
    back (LangGraph's ``checkpoint`` filter), older than the checkpoint ``before``,
    whose metadata contains ``metadata``."""
    cap = int(getattr(settings, "CRIOGEN_MAX_SEARCH_LIMIT", 1000))
    bad_limit = isinstance(limit, bool) or not isinstance(limit, int) or limit < 1 or limit > cap
    # The common request (the newest states, no filter) checks visibility in the
    # statement that reads its first page; every other one checks it first, so that a
    # thread the caller may not see is a 404 before any other error.
    fused = not bad_limit and before is None and at is None and not metadata and _criogen_only()
    if not fused:
        selectors.check_thread_for(who, thread_id)
    if bad_limit:
        raise InvalidArgument(f"limit is {limit!r}; use 1 to {cap}.", field="limit")
    if not fused and (compiled := bridged_graph(thread_id)) is not None:
        return langgraph_history(
            compiled,
            thread_id,
            limit=limit,
            before=None if before is None else check_checkpoint_id(before, "before"),
            metadata=metadata,
            select=select,
            at=None if at is None else check_checkpoint_id(at, "checkpoint.checkpoint_id"),
        )
    version = None
    if before is not None:
        version = _version_of(thread_id, check_checkpoint_id(before, "before"))
    if at is not None:
        field = "checkpoint.checkpoint_id"
        newest = _version_of(thread_id, check_checkpoint_id(at, field)) + 1
        version = newest if version is None else min(version, newest)
    store = storage()
    budget = int(getattr(settings, "CRIOGEN_MAX_HISTORY_BYTES", 32 * 1024 * 1024))
    out: list[dict[str, Any]] = []
    spent = 0
    batch = min(limit, 10)
    while len(out) < limit:
        if fused:
            page = selectors.visible_history(who, thread_id, limit=batch)
            fused = False
        else:
            page = store.history(thread_id, limit=batch if not metadata else 100, before=version)
        if not page:
            break
        for cp in page:
            state = state_out(thread_id, cp, select=None if metadata else select)
            if metadata and not _metadata_match(state, metadata):
                continue
            # Bounded in bytes as well as in count: past the budget the page ends early
            # (always with at least one state) and the client pages on with ``before``.
            size = len(dumps(cp.state)) if budget else 0  # its UTF-8 bytes
            if out and budget and spent + size > budget:
                return out
            spent += size
            out.append(_select(state, select) if metadata else state)
            if len(out) >= limit:
                break
        version = page[-1].version
        if len(page) < (batch if not metadata else 100):
            break
        # Size the next batch by what the states weigh, so large states are read a few
        # at a time instead of a thousand at once.
        average = max(1, spent // max(1, len(out)))
        batch = max(1, min(limit - len(out), 100, (budget - spent) // average if budget else 100))
    return out
