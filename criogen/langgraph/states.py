"""The state and history of a bridged thread as LangGraph's server gives them.

A thread of a LangGraph graph has two histories: the bridge's Criogen checkpoints (one
per turn, interrupt and answer, which the runner, the leases and the operator verbs
use) and LangGraph's own checkpoints in the ``criogen_lg_*`` tables, one per LangGraph
step. The REST state and history of such a thread are LangGraph's: each entry is a
``StateSnapshot`` of the compiled graph read through :class:`CriogenSaver`, shaped as
LangGraph's server shapes its ``ThreadState`` (``values``, ``next``, ``tasks`` with
their interrupts, ``checkpoint``, ``parent_checkpoint``, ``metadata`` with ``source``,
``step`` and ``parents``, ``created_at``, ``interrupts``), values as JSON.

A pending interrupt that the bridge suspended on carries, next to LangGraph's ``id``
and ``value``, the suspension's own fields (``reason``, ``calls`` with their
arguments' ``digest`` for a tool approval, ``schema``…), so that a client binds its
decision as it does for Criogen's own threads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from criogen.langgraph.bridge import jsonable

__all__ = ["langgraph_config", "snapshot_out", "step_rows", "thread_history", "thread_state"]


def langgraph_config(thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    """The LangGraph config naming the thread's root namespace (and a checkpoint)."""
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _reference(config: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A checkpoint config as the REST ``checkpoint`` object (None without an id)."""
    configurable = (config or {}).get("configurable") or {}
    if not configurable.get("thread_id") or not configurable.get("checkpoint_id"):
        return None
    out = {
        "thread_id": configurable["thread_id"],
        "checkpoint_ns": configurable.get("checkpoint_ns") or "",
        "checkpoint_id": configurable["checkpoint_id"],
    }
    if configurable.get("checkpoint_map") is not None:
        out["checkpoint_map"] = configurable["checkpoint_map"]
    return out


def _interrupt(interrupt: Any, suspended: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    out = {"id": interrupt.id, "value": jsonable(interrupt.value)}
    found = suspended.get(interrupt.id)
    if found:
        # The bridge's suspension on this interrupt: its reason, calls and digests.
        extra = {k: v for k, v in found.items() if k not in ("id", "payload", "value")}
        out.update(extra)
    return out


def snapshot_out(
    snapshot: Any, suspended: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """A LangGraph ``StateSnapshot`` as the REST ``ThreadState``. ``suspended``: the
    bridge's pending suspensions keyed by their LangGraph interrupt id."""
    found = suspended or {}
    tasks = []
    for task in snapshot.tasks:
        child = task.state
        nested = child is not None and hasattr(child, "values")
        tasks.append(
            {
                "id": task.id,
                "name": task.name,
                "path": jsonable(list(task.path)),
                "error": _error(task.error),
                "interrupts": [_interrupt(i, found) for i in task.interrupts],
                "checkpoint": (_reference(child) if child is not None and not nested else None),
                "state": snapshot_out(child, found) if nested else None,
                "result": jsonable(getattr(task, "result", None)),
            }
        )
    return {
        "values": jsonable(dict(snapshot.values) if snapshot.values else {}),
        "next": list(snapshot.next),
        "tasks": tasks,
        "interrupts": [_interrupt(i, found) for i in getattr(snapshot, "interrupts", ())],
        "checkpoint": _reference(snapshot.config),
        "parent_checkpoint": _reference(snapshot.parent_config),
        "metadata": jsonable(dict(snapshot.metadata or {})),
        "created_at": snapshot.created_at,
        # LangGraph's server still sends these two (deprecated there).
        "checkpoint_id": (snapshot.config or {}).get("configurable", {}).get("checkpoint_id"),
        "parent_checkpoint_id": (
            (snapshot.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        ),
    }


def _error(error: Any) -> str | None:
    if error is None:
        return None
    if isinstance(error, BaseException):
        return f"{type(error).__name__}({str(error)!r})"
    return str(error)


def _suspended(interrupts: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {str(i["interrupt_id"]): i for i in interrupts if i.get("interrupt_id")}


def thread_state(
    compiled: Any,
    thread_id: str,
    checkpoint_id: str | None = None,
    *,
    suspensions: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any] | None:
    """The thread's LangGraph state: its newest checkpoint, or ``checkpoint_id``; None
    when LangGraph has no such checkpoint. ``suspensions``: the bridge's pending
    interrupts (the Criogen head's), whose fields join LangGraph's interrupts."""
    snapshot = compiled.get_state(langgraph_config(thread_id, checkpoint_id))
    if snapshot.created_at is None:
        return None
    return snapshot_out(snapshot, _suspended(suspensions))


def thread_history(
    compiled: Any,
    thread_id: str,
    *,
    limit: int,
    before: str | None = None,
    at: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    suspensions: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """LangGraph's checkpoints of the thread's root graph, newest first, as LangGraph's
    server lists them: at most ``limit``, older than the checkpoint ``before``, whose
    metadata holds every pair of ``metadata``; ``at`` names one checkpoint (the
    history is that one, as LangGraph's ``checkpoint`` filter does)."""
    found = _suspended(suspensions)
    history = compiled.get_state_history(
        langgraph_config(thread_id, at),
        filter=dict(metadata) if metadata else None,
        before=langgraph_config(thread_id, before) if before else None,
        limit=limit,
    )
    return [snapshot_out(snapshot, found) for snapshot in history]


def step_rows(compiled: Any, thread_id: str, *, limit: int) -> list[dict[str, Any]]:
    """LangGraph's newest ``limit`` checkpoints of the thread's root graph, for the
    operator console: ``step``, ``source``, ``ran`` (the nodes whose writes made it:
    the tasks of the checkpoint before it, for a ``loop`` step), ``next``, ``waiting``
    (an interrupt is pending there), ``created_at`` and ``checkpoint_id``."""
    found = list(compiled.get_state_history(langgraph_config(thread_id), limit=limit + 1))
    rows = []
    for index, snapshot in enumerate(found[:limit]):
        older = found[index + 1] if index + 1 < len(found) else None
        source = snapshot.metadata.get("source")
        rows.append(
            {
                "step": snapshot.metadata.get("step"),
                "source": source,
                "ran": list(older.next) if older is not None and source == "loop" else [],
                "next": list(snapshot.next),
                "waiting": bool(snapshot.interrupts),
                "created_at": snapshot.created_at,
                "checkpoint_id": snapshot.config["configurable"]["checkpoint_id"],
            }
        )
    return rows
