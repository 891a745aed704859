"""Thread verbs on LangGraph's own checkpoints: ``update_state`` and ``rewind`` of a
bridged thread fork LangGraph's history, as LangGraph's server does.

Each takes the bridge thread's lease (refused while a run holds it), checks the
caller's ``expected`` head (compare-and-set on the bridge's Criogen head), makes the
LangGraph fork through the compiled graph (``update_state`` from the checkpoint named,
or a copy of it for a rewind) and writes one Criogen ``fork`` checkpoint carrying the
forked LangGraph values with exactly one audit event. The thread is then idle: the next
run goes on from LangGraph's fork (the bridge continues a LangGraph checkpoint that
has steps left, and stops again at an interrupt that is still to come).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from criogen.engine.checkpoints import Checkpoint
from criogen.engine.errors import CheckpointNotFound, InvalidArgument
from criogen.engine.state import apply_update
from criogen.engine.threads import check_door, check_expected
from criogen.langgraph.bridge import jsonable
from criogen.langgraph.states import langgraph_config

__all__ = ["COPY", "fork_thread"]

COPY = "__copy__"
"""LangGraph's ``as_node`` for a plain copy of a checkpoint (a rewind)."""


def fork_thread(
    thread: Any,
    compiled: Any,
    *,
    action: str,
    checkpoint_id: str | None,
    values: Mapping[str, Any] | None,
    as_node: str | None,
    by: str | None,
    door: str,
    expected: str | None,
    details: Mapping[str, Any] | None = None,
) -> Checkpoint:
    """Fork LangGraph's checkpoint ``checkpoint_id`` (its newest when None) of the
    bridge thread ``thread``: ``values`` applied by the graph's reducers as if
    ``as_node`` had written them (``COPY``: the checkpoint as it was). Audited as
    ``action`` by ``by`` from ``door``.

    Raises CheckpointNotFound (LangGraph has no such checkpoint on the thread; or none
    yet), InvalidArgument naming ``values`` / ``as_node`` (LangGraph refused the
    update), StaleHead, ThreadBusy.
    """
    check_door(door)
    with thread._active(on_busy="fail") as active:
        head = active.head
        check_expected(thread.id, head, expected)
        source = compiled.get_state(langgraph_config(thread.id, checkpoint_id))
        if source.created_at is None:
            raise CheckpointNotFound(
                f"thread {thread.id!r} has no LangGraph checkpoint "
                f"{checkpoint_id or '(none yet: run it first)'}.",
                thread_id=thread.id,
                checkpoint_id=checkpoint_id,
                field="checkpoint_id",
            )
        try:
            made = compiled.update_state(source.config, dict(values) if values else None, as_node)
        except (ValueError, KeyError, TypeError) as error:
            # LangGraph names what it refused: an unknown node, an ambiguous update, a
            # value its reducer cannot take.
            field = "as_node" if as_node and str(as_node) in str(error) else "values"
            raise InvalidArgument(f"{field}: {error}", field=field) from error
        snapshot = compiled.get_state(made)
        forked = made["configurable"]["checkpoint_id"]
        state, delta = apply_update(
            head.state if head is not None else {},
            jsonable(dict(snapshot.values)),
            {},
            origin=action,
        )
        active.audit = thread._audit_event(
            action,
            by=by,
            door=door,
            details={
                **(details or {}),
                "langgraph_checkpoint_id": forked,
                "forked_from": source.config["configurable"]["checkpoint_id"],
            },
        )
        # A LangGraph fork has no pending interrupt: the thread is idle until a run
        # goes on from it.
        checkpoint = active.write(
            source="fork",
            status="completed",
            state=state,
            delta=delta,
            next=(),
            interrupts=(),
            tasks={},
            metadata={
                "update": action == "update_state",
                "as_node": as_node,
                "langgraph_checkpoint_id": forked,
                "langgraph_next": list(snapshot.next),
                "actor": by,
            },
            updates={as_node or action: dict(values or {})},
            final=True,
        )
    assert checkpoint is not None
    return checkpoint
