"""Threads for the REST API: reads (status, search, state, history) and the writes that
are not runs (create, update, delete, copy, prune, update_state).

This is the HTTP <-> engine translation for threads: it turns engine checkpoints into
the JSON shapes ``langgraph_sdk`` expects (``Thread``, ``ThreadState``) and applies the
rules of the threads page (``spec/threads-rest-api.txt``). Every function takes the
caller's :class:`~api.auth.Principal`; a thread the caller may not see raises
:class:`~criogen.engine.errors.ThreadNotFound`, exactly like one that does not exist
(:func:`criogen.selectors.thread_for`). Reads go through :mod:`criogen.selectors`,
changes through :mod:`criogen.services.threads`.

REST status, derived from the head and the runs (one SQL expression, so that search can
filter and count by it):

- ``busy``: a run is pending or running on the thread, or a live lease holds it;
- ``interrupted``: the head is ``suspended`` (waiting for a person);
- ``error``: the head is ``failed``;
- ``idle``: anything else (no checkpoint yet, completed, or in progress with no run).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from django.conf import settings

from api.auth import Principal
from criogen import selectors
from criogen.engine.checkpoints import Checkpoint
from criogen.engine.checkpoints import check_thread_id as engine_check_thread_id
from criogen.engine.errors import CheckpointNotFound, InvalidArgument, ThreadNotFound
from criogen.engine.state import encode
from criogen.services import threads as services

if TYPE_CHECKING:
    from criogen.storage.models import Thread

__all__ = [
    "copy_thread",
    "create_thread",
    "delete_thread",
    "get_state",
    "history",
    "load_thread",
    "prune_expired",
    "prune_threads",
    "state_at",
    "thread_out",
    "update_state",
    "update_thread",
]


def storage() -> Any:
    """The process's shared storage (the one the runner and events use)."""
    from criogen.registry import storage as shared

    return shared()


# -- loading and status -------------------------------------------------------------------


def load_thread(who: Principal, thread_id: str, *, for_update: bool = False) -> Thread:
    """The thread ``thread_id`` with its REST status if the caller may see it; else
    ThreadNotFound (404). :func:`criogen.selectors.thread_for`."""
    return selectors.thread_for(who, thread_id, write=for_update, status=True)


def check_visible(who: Principal, thread_id: str) -> None:
    """ThreadNotFound (404) unless the thread exists and the caller may see it: what
    :func:`load_thread` checks, in one index lookup without the status."""
    selectors.check_thread_for(who, thread_id)


def task_id(checkpoint_id: str, node: str) -> str:
    """A stable id for the task that runs ``node`` after ``checkpoint_id``."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"criogen:task:{checkpoint_id}:{node}"))


def interrupt_out(interrupt: Mapping[str, Any]) -> dict[str, Any]:
    """An engine interrupt as LangGraph's ``Interrupt``: ``{"id", "value", …}``.

    ``value`` is the suspension's payload (for an agent's approval, LangChain's
    ``HITLRequest``); ``reason``, ``node`` and the other engine fields come along.
    """
    out = {k: v for k, v in interrupt.items() if k not in ("payload", "id")}
    return {"id": interrupt.get("id"), "value": interrupt.get("payload"), **out}


def thread_interrupts(head: Checkpoint | None) -> dict[str, list[dict[str, Any]]]:
    """The head's pending interrupts keyed by task id (the SDK ``Thread.interrupts``)."""
    if head is None or head.status != "suspended":
        return {}
    out: dict[str, list[dict[str, Any]]] = {}
    for interrupt in head.interrupts:
        key = task_id(head.id, str(interrupt.get("node", "")))
        out.setdefault(key, []).append(interrupt_out(interrupt))
    return out


def thread_out(
    row: Thread, *, head: Checkpoint | None = None, load_head: bool = True
) -> dict[str, Any]:
    """A thread row as the SDK's ``Thread``."""
    if head is None and load_head and row.head_version:
        head = storage().head(row.id)
    status = getattr(row, "rest_status", None) or selectors.thread_status(row)
    return {
        "thread_id": row.id,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "state_updated_at": row.updated_at,
        "metadata": row.metadata or {},
        "status": status,
        "values": head.state if head is not None else None,
        "interrupts": thread_interrupts(head),
        "config": {},
        "context": {},
        "ttl": _ttl_out(row),
    }


def _ttl_out(row: Thread) -> dict[str, Any] | None:
    if row.ttl_minutes is None:
        return None
    return {
        "ttl": row.ttl_minutes,
        "strategy": row.ttl_strategy,
        "expires_at": row.expires_at,
    }


# -- create / update / delete ------------------------------------------------------------


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
        who=who, thread_id=thread_id, metadata=metadata, if_exists=if_exists, ttl=ttl
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
    return services.update_thread(who=who, thread_id=thread_id, metadata=metadata, ttl=ttl)


def delete_thread(who: Principal, thread_id: str) -> None:
    """Delete the thread: cancel its active runs, then remove its runs, state and
    whole checkpoint history (DELETE /threads/{id})."""
    selectors.thread_for(who, thread_id)
    services.delete_thread(thread_id=thread_id, by=who.name or "api", door="api")


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


# -- state and history --------------------------------------------------------------------


def _checkpoint_ref(thread_id: str, checkpoint_id: str | None) -> dict[str, Any]:
    return {
        "thread_id": thread_id,
        "checkpoint_ns": "",
        "checkpoint_id": checkpoint_id,
        "checkpoint_map": None,
    }


def state_out(
    thread_id: str, cp: Checkpoint | None, *, select: list[str] | None = None
) -> dict[str, Any]:
    """A checkpoint as the SDK's ``ThreadState``.

    ``metadata`` carries the engine's metadata plus ``source``, ``status``, ``step``,
    ``version``, ``run_id`` and ``thread_id``. ``tasks`` are the nodes that run next,
    each with its interrupts, its error (for a failure) and its result if it finished.
    """
    if cp is None:
        state: dict[str, Any] = {
            "values": {},
            "next": [],
            "tasks": [],
            "interrupts": [],
            "checkpoint": _checkpoint_ref(thread_id, None),
            "metadata": {},
            "created_at": None,
            "parent_checkpoint": None,
        }
    else:
        done = cp.tasks.get("done", {}) if isinstance(cp.tasks, dict) else {}
        error = cp.error or {}
        interrupts = [interrupt_out(i) for i in cp.interrupts] if cp.status == "suspended" else []
        tasks = []
        for node in cp.next:
            failed_here = cp.status == "failed" and error.get("node") in (node, None)
            tasks.append(
                {
                    "id": task_id(cp.id, node),
                    "name": node,
                    "error": error.get("message") if failed_here else None,
                    "interrupts": [i for i in interrupts if i.get("node") == node],
                    "checkpoint": None,
                    "state": None,
                    "result": done.get(node),
                }
            )
        state = {
            "values": cp.state,
            "next": list(cp.next),
            "tasks": tasks,
            "interrupts": interrupts,
            "checkpoint": _checkpoint_ref(thread_id, cp.id),
            "metadata": {
                **cp.metadata,
                "source": cp.source,
                "status": cp.status,
                "step": cp.metadata.get("step", cp.version - 1),
                "version": cp.version,
                "run_id": cp.run_id,
                "thread_id": thread_id,
                **({"error": cp.error} if cp.error else {}),
            },
            "created_at": cp.created_at.isoformat(),
            "parent_checkpoint": _checkpoint_ref(thread_id, cp.parent_id) if cp.parent_id else None,
        }
    return _select(state, select)


def _select(state: dict[str, Any], select: list[str] | None) -> dict[str, Any]:
    if not select:
        return state
    out: dict[str, Any] = {}
    for name in select:
        if name.startswith("values."):
            key = name[len("values.") :]
            values = out.setdefault("values", {})
            if key in state["values"]:
                values[key] = state["values"][key]
        elif name in state:
            out[name] = state[name]
        else:
            raise InvalidArgument(
                f"select has {name!r}; use {', '.join(state)} or values.<key>.", field="select"
            )
    return out


def check_checkpoint_id(value: Any, field: str = "checkpoint_id") -> str:
    """A checkpoint id must be a UUID (422 otherwise, before any lookup)."""
    try:
        return str(uuid.UUID(str(value)))
    except (ValueError, TypeError, AttributeError):
        raise InvalidArgument(
            f"{field} {value!r} is not a UUID; checkpoint ids are UUIDs (see get_history).",
            field=field,
        ) from None


def get_state(who: Principal, thread_id: str, *, select: list[str] | None = None) -> dict[str, Any]:
    """The thread's current state (its head)."""
    selectors.check_thread_for(who, thread_id)
    return state_out(thread_id, storage().head(thread_id), select=select)


def state_at(
    who: Principal, thread_id: str, checkpoint_id: str, *, select: list[str] | None = None
) -> dict[str, Any]:
    """The state at one checkpoint of the thread (404 if it has no such checkpoint)."""
    selectors.check_thread_for(who, thread_id)
    cid = check_checkpoint_id(checkpoint_id)
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
    selectors.check_thread_for(who, thread_id)
    cap = int(getattr(settings, "CRIOGEN_MAX_SEARCH_LIMIT", 1000))
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1 or limit > cap:
        raise InvalidArgument(f"limit is {limit!r}; use 1 to {cap}.", field="limit")
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
        page = store.history(thread_id, limit=batch if not metadata else 100, before=version)
        if not page:
            break
        for cp in page:
            state = state_out(thread_id, cp, select=None if metadata else select)
            if metadata and not _metadata_match(state, metadata):
                continue
            # Bounded in bytes as well as in count: past the budget the page ends early
            # (always with at least one state) and the client pages on with ``before``.
            size = len(encode(cp.state)) if budget else 0
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
    if checkpoint_id is not None:
        cid = check_checkpoint_id(checkpoint_id)
        head = storage().head(thread_id)
        if head is None or head.id != cid:
            raise InvalidArgument(
                "update_state writes after the head only; rewind with a run from "
                f"checkpoint {cid!r} first.",
                field="checkpoint_id",
            )
    cp = services.update_thread_state(
        thread_id=thread_id, values=values, as_node=as_node, by=who.name or "api", door="api"
    )
    return {"checkpoint": _checkpoint_ref(thread_id, cp.id)}
