"""The REST state and history of a thread that runs a LangGraph graph: LangGraph's own
checkpoints, one per LangGraph step (:mod:`criogen.langgraph.states`), instead of the
bridge's Criogen checkpoints. :mod:`api.threads.reads` dispatches here for such a
thread; everything else reads Criogen's checkpoints."""

from __future__ import annotations

from typing import Any

from api.threads.shapes import _select, storage
from criogen import selectors
from criogen.engine.errors import CheckpointNotFound, GraphNotFound

__all__ = ["bridged_graph", "langgraph_history", "langgraph_state"]


def bridged_graph(thread_id: str) -> Any | None:
    """The compiled LangGraph graph the thread runs, or None when it runs one of
    Criogen's own graphs (or none). No query when no LangGraph graph is registered."""
    from criogen.registry import get_graph, serves_langgraph

    if not serves_langgraph():
        return None
    graph_id = selectors.thread_graph_id(thread_id)
    if graph_id is None:
        return None
    try:
        graph = get_graph(graph_id)
    except GraphNotFound:
        return None
    return graph.compiled if getattr(graph, "kind", None) == "langgraph" else None


def _suspensions(thread_id: str) -> tuple[dict[str, Any], ...]:
    head = storage().head(thread_id)
    if head is None or head.status != "suspended":
        return ()
    return tuple(head.interrupts)


def _empty(thread_id: str) -> dict[str, Any]:
    return {
        "values": {},
        "next": [],
        "tasks": [],
        "interrupts": [],
        "checkpoint": {
            "thread_id": thread_id,
            "checkpoint_ns": "",
            "checkpoint_id": None,
            "checkpoint_map": None,
        },
        "metadata": {},
        "created_at": None,
        "parent_checkpoint": None,
    }


def langgraph_state(
    compiled: Any,
    thread_id: str,
    checkpoint_id: str | None = None,
    *,
    select: list[str] | None = None,
) -> dict[str, Any]:
    """The LangGraph state now, or at ``checkpoint_id`` (CheckpointNotFound, a 404,
    when LangGraph has no such checkpoint on the thread)."""
    from criogen.langgraph.states import thread_state

    state = thread_state(compiled, thread_id, checkpoint_id, suspensions=_suspensions(thread_id))
    if state is None:
        if checkpoint_id is not None:
            raise CheckpointNotFound(
                f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}.",
                thread_id=thread_id,
                checkpoint_id=checkpoint_id,
            )
        state = _empty(thread_id)
    return _select(state, select)


def langgraph_history(
    compiled: Any,
    thread_id: str,
    *,
    limit: int,
    before: str | None = None,
    metadata: dict[str, Any] | None = None,
    select: list[str] | None = None,
    at: str | None = None,
) -> list[dict[str, Any]]:
    """LangGraph's checkpoints newest first, filtered as LangGraph's server filters
    them (``at``: that one checkpoint)."""
    from criogen.langgraph.states import thread_history

    found = thread_history(
        compiled,
        thread_id,
        limit=limit,
        before=before,
        at=at,
        metadata=metadata,
        suspensions=_suspensions(thread_id),
    )
    return [_select(state, select) for state in found]
