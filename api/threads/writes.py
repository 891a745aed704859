"""The thread writes that are not runs (create, update, delete, copy, prune,
update_state): each parses and authorizes, then calls the one service of its verb in
:mod:`criogen.services.threads`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from api.auth import Principal
from api.threads.langgraph import bridged_graph
from api.threads.reads import check_checkpoint_id, load_thread
from api.threads.shapes import _checkpoint_ref
from criogen import selectors
from criogen.engine.checkpoints import check_thread_id as engine_check_thread_id
from criogen.engine.errors import InvalidArgument, ThreadNotFound
from criogen.services import threads as services

if TYPE_CHECKING:
    from criogen.storage.models import Thread

__all__ = [
    "check_thread_id",
    "copy_thread",
    "create_thread",
    "delete_thread",
    "prune_expired",
    "prune_threads",
    "update_state",
    "update_thread",
]


def check_thread_id(value: Any, field: str = "thread_id") -> str:
    """Return a client-given thread id if the engine accepts it (1–255 characters, not
    all blank, no NUL); the error says how to let the server choose one."""
    try:
        return engine_check_thread_id(value, field)
    except InvalidArgument as exc:
        raise InvalidArgument(
            exc.message + " Omit it or send null to let the server generate a UUID.",
            field=field,
        ) from exc


def create_thread(
    who: Principal,
    *,
    thread_id: str | None = None,
    metadata: dict[str, Any] | None = None,
    if_exists: str | None = None,
    ttl: Any = None,
    supersteps: list[dict[str, Any]] | None = None,
) -> Thread:
    """Create a thread (POST /threads) with :func:`criogen.services.threads.create_thread`,
    then apply ``supersteps`` (each update as :func:`update_state`)."""
    if thread_id is not None:
        check_thread_id(thread_id)
    services.parse_ttl(ttl)
    graph_id = (metadata or {}).get("graph_id")
    if supersteps and not graph_id:
        raise InvalidArgument(
            "supersteps need the thread's graph: pass graph_id (or metadata.graph_id).",
            field="supersteps",
        )
    row = services.create_thread(
        who=who,
        thread_id=thread_id,
        metadata=metadata,
        if_exists=if_exists,
        ttl=ttl,
        by=who.name or "api",
        door="api",
    )
    if not supersteps:
        return row
    for i, step in enumerate(supersteps):
        for j, update in enumerate(step.get("updates") or []):
            if update.get("command") is not None:
                raise InvalidArgument(
                    "supersteps updates with a command are not supported; send values.",
                    field=f"supersteps.{i}.updates.{j}.command",
                )
            update_state(who, row.pk, values=update.get("values"), as_node=update.get("as_node"))
    return load_thread(who, row.pk)


def update_thread(
    who: Principal, thread_id: str, *, metadata: dict[str, Any] | None, ttl: Any = None
) -> Thread:
    """Merge ``metadata`` into the thread's and (re)set its TTL (PATCH /threads/{id});
    ``metadata.owner`` cannot change (422)."""
    return services.update_thread(
        who=who, thread_id=thread_id, metadata=metadata, ttl=ttl, by=who.name or "api", door="api"
    )


def delete_thread(who: Principal, thread_id: str) -> None:
    """Delete the thread: cancel its active runs, then remove its runs, state and
    whole checkpoint history (DELETE /threads/{id}). Who may see the thread is checked
    by the service, in the statement that deletes an idle thread."""
    services.delete_thread(thread_id=thread_id, by=who.name or "api", door="api", who=who)


def copy_thread(who: Principal, thread_id: str) -> Thread:
    """A new thread (new UUID) with the same metadata and the whole history, owned by
    the caller (POST /threads/{id}/copy)."""
    selectors.thread_for(who, thread_id)
    new_id = services.copy_thread(
        thread_id=thread_id, owner=who.user, by=who.name or "api", door="api"
    )
    return load_thread(who, new_id)


# -- TTL and prune ----------------------------------------------------------------------


def _prune_one(thread_id: str, strategy: str, *, by: str | None) -> str | None:
    """Apply ``strategy`` to one thread; return "deleted"/"pruned", or None if skipped."""
    return services.prune_thread(thread_id=thread_id, strategy=strategy, by=by or "api", door="api")


def prune_expired(who: Principal) -> dict[str, int]:
    """Apply the caller's expired TTL policies now: ``{"deleted": n, "pruned": n}``."""
    counts = {"deleted": 0, "pruned": 0}
    for row in selectors.expired_threads(who):
        outcome = _prune_one(row.pk, row.ttl_strategy or "delete", by=who.name)
        if outcome:
            counts[outcome] += 1
    return counts


def prune_threads(who: Principal, thread_ids: Iterable[str], strategy: str) -> dict[str, int]:
    """Prune the named threads now (the SDK's ``threads.prune``)."""
    if strategy not in services.TTL_STRATEGIES:
        raise InvalidArgument(
            f"strategy is {strategy!r}; use 'delete' or 'keep_latest'.", field="strategy"
        )
    counts = {"deleted": 0, "pruned": 0}
    for tid in thread_ids:
        try:
            row = selectors.thread_for(who, tid)
        except ThreadNotFound:
            continue
        outcome = _prune_one(row.pk, strategy, by=who.name)
        if outcome:
            counts[outcome] += 1
    return {**counts, "pruned_count": counts["deleted"] + counts["pruned"]}


def update_state(
    who: Principal,
    thread_id: str,
    *,
    values: Any,
    as_node: str | None = None,
    checkpoint_id: str | None = None,
) -> dict[str, Any]:
    """Write a checkpoint with ``values`` merged by the graph's reducers, as if
    ``as_node`` had just run (POST /threads/{id}/state), audited with the token's
    owner as the actor.

    The thread's graph comes from its ``graph_id`` metadata (set by its first run, or
    given at creation). Returns ``{"checkpoint": {...}}``.
    """
    row = load_thread(who, thread_id)
    graph_id = (row.metadata or {}).get("graph_id")
    if not graph_id:
        raise InvalidArgument(
            f"thread {thread_id!r} has no graph yet: run it once, or create it with "
            "graph_id, before updating its state.",
            field="thread_id",
        )
    if bridged_graph(thread_id) is not None:
        return _update_langgraph_state(who, thread_id, values, as_node, checkpoint_id)
    # checkpoint_id is the head the caller saw: compare-and-set, a 409 stale_head naming
    # the current head when it moved on (to change an older checkpoint, rewind to it
    # with a run from that checkpoint first).
    expected = check_checkpoint_id(checkpoint_id) if checkpoint_id is not None else None
    cp = services.update_thread_state(
        thread_id=thread_id,
        values=values,
        as_node=as_node,
        by=who.name or "api",
        door="api",
        expected=expected,
    )
    return {"checkpoint": _checkpoint_ref(thread_id, cp.id)}


def _update_langgraph_state(
    who: Principal, thread_id: str, values: Any, as_node: str | None, checkpoint_id: str | None
) -> dict[str, Any]:
    """A LangGraph thread, as LangGraph's server: ``checkpoint_id`` is the LangGraph
    checkpoint to fork from (the newest when None); the answer names the fork."""
    cp = services.update_thread_state(
        thread_id=thread_id,
        values=values,
        as_node=as_node,
        by=who.name or "api",
        door="api",
        checkpoint_id=check_checkpoint_id(checkpoint_id) if checkpoint_id is not None else None,
    )
    forked = cp.metadata["langgraph_checkpoint_id"]
    return {"checkpoint": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": forked}}
