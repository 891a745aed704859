"""Thread actions that do not start a run: create, update, rewind, TTL policy, and the
TTL sweep.

The sweep applies each expired thread's policy (``settings``-free, per thread):

- ``delete``: the thread, its runs and its checkpoints are removed;
- ``keep_latest``: its history is compacted to the head (older checkpoints and the
  stored values the head no longer reads are deleted) and the TTL re-arms.

A thread with a pending or running run, or a live lease, is never touched: a later
sweep picks it up once its runs have settled.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from criogen.engine.checkpoints import Checkpoint as CheckpointData
from criogen.engine.checkpoints import check_thread_id
from criogen.engine.errors import (
    CheckpointNotFound,
    Conflict,
    InvalidArgument,
    ThreadBusy,
    ThreadNotFound,
)
from criogen.engine.store import AuditRecord
from criogen.engine.threads import check_door
from criogen.registry import get_graph, storage
from criogen.selectors import EVERY_OWNER, Who, check_thread_for, owner_seen_by, thread_for
from criogen.storage.models import Run, Thread
from criogen.storage.models.runs import ACTIVE_RUN_STATUSES
from criogen.storage.models.threads import TTL_STRATEGIES

if TYPE_CHECKING:
    from criogen.storage.orm import OrmStorage

__all__ = [
    "MAX_TTL_MINUTES",
    "TTL_STRATEGIES",
    "adopt_thread",
    "compact_thread",
    "copy_thread",
    "create_thread",
    "default_ttl",
    "delete_thread",
    "parse_ttl",
    "prune_thread",
    "rewind_thread",
    "set_thread_ttl",
    "sweep_threads",
    "update_thread",
    "update_thread_state",
]

logger = logging.getLogger("criogen.services.threads")

SYSTEM = "system"
"""The actor of what the server does by itself (a TTL's expiry)."""

MAX_TTL_MINUTES = 52_560_000  # 100 years: the column and datetime arithmetic stay in range


def orm_storage() -> OrmStorage:
    """:func:`storage`, which in the project is the ORM's (``Storage.default()``): for
    the writes that take the project's own rows (a thread's)."""
    return cast("OrmStorage", storage())


def _thread_graph(thread_id: str) -> Any:
    """The graph the thread runs (agent, workflow or LangGraph graph), from its
    assistant: one read of its last run."""
    from criogen.services.runs import _thread_assistant

    return get_graph(_thread_assistant(thread_id).graph_id)


def _bridged(graph: Any, thread_id: str) -> tuple[Any, Any] | None:
    """(the bridge thread, the compiled LangGraph graph) when ``graph`` is a LangGraph
    graph; None for Criogen's own graphs."""
    if getattr(graph, "kind", None) != "langgraph":
        return None
    return graph.thread(thread_id), graph.compiled


def _langgraph_checkpoint_id(thread_id: str, checkpoint_id: str) -> str:
    """A LangGraph checkpoint id as given; one of the bridge's own checkpoints (what the
    dashboard's timeline lists) as LangGraph's newest checkpoint when it was written:
    the graph's state at that point."""
    from criogen.storage.models.langgraph import LangGraphCheckpoint

    try:
        bridge = storage().get_checkpoint(thread_id, checkpoint_id)
    except CheckpointNotFound:
        return checkpoint_id  # LangGraph's (fork_thread says if it has none such)
    found = (
        LangGraphCheckpoint.objects.filter(
            thread_id=thread_id, checkpoint_ns="", created_at__lte=bridge.created_at
        )
        .order_by("-checkpoint_id")
        .values_list("checkpoint_id", flat=True)
        .first()
    )
    if found is None:
        raise CheckpointNotFound(
            f"thread {thread_id!r}: checkpoint {checkpoint_id!r} is from before the "
            "LangGraph graph's first step; there is nothing to rewind to.",
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
            field="checkpoint_id",
        )
    return str(found)


def _refuse_busy(thread_id: str, doing: str) -> None:
    if not Thread.objects.filter(pk=thread_id).exists():
        raise ThreadNotFound(f"no thread {thread_id!r}.", thread_id=thread_id)
    if Run.objects.filter(thread_id=thread_id, status__in=ACTIVE_RUN_STATUSES).exists():
        raise ThreadBusy(
            f"thread {thread_id!r} has a run in progress; cancel it or wait before {doing}.",
            thread_id=thread_id,
        )


def rewind_thread(
    *,
    thread_id: str,
    checkpoint_id: str,
    by: str | None = None,
    door: str = "python",
    expected: str | None = None,
) -> CheckpointData:
    """Fork the thread from one of its checkpoints: a new head with that checkpoint's
    state (history keeps everything), audited as ``rewind`` by ``by`` from ``door``.

    ``expected``: the head the caller saw; if the thread moved on (a second click of
    the same button), StaleHead and nothing is written. Raises ThreadNotFound,
    CheckpointNotFound, and ThreadBusy (409) while a run is pending or running.
    """
    _refuse_busy(thread_id, "rewinding")
    graph = _thread_graph(thread_id)
    if (bridged := _bridged(graph, thread_id)) is not None:
        # A LangGraph thread rewinds LangGraph's own history: a copy of its checkpoint
        # ``checkpoint_id`` becomes the newest, and the next run goes on from it.
        from criogen.langgraph.verbs import COPY, fork_thread

        checkpoint = fork_thread(
            *bridged,
            action="rewind",
            checkpoint_id=_langgraph_checkpoint_id(thread_id, checkpoint_id),
            values=None,
            as_node=COPY,
            by=by,
            door=door,
            expected=expected,
            details={"checkpoint_id": checkpoint_id},
        )
        _touch(thread_id)
        return checkpoint
    thread = graph.thread(thread_id)
    checkpoint = thread.rewind(checkpoint_id, by=by, door=door, expected=expected, on_busy="fail")
    _touch(thread_id)
    logger.info("thread %r rewound to %s by %s", thread_id, checkpoint_id, by or "unknown")
    return checkpoint  # type: ignore[no-any-return]


def update_thread_state(
    *,
    thread_id: str,
    values: Any,
    as_node: str | None = None,
    by: str | None = None,
    door: str = "python",
    expected: str | None = None,
    checkpoint_id: str | None = None,
) -> CheckpointData:
    """Merge ``values`` into the thread's state as a ``fork`` checkpoint (agents and
    workflows alike), audited as ``update_state`` by ``by`` from ``door``.

    ``as_node`` (workflows): as if that node had just run. ``expected``: the head the
    caller saw (StaleHead if it moved on). Raises InvalidArgument naming the field,
    ThreadBusy (409) while a run holds the thread.

    A thread running a LangGraph graph forks LangGraph's own history instead, as
    LangGraph's ``update_state`` does: from its checkpoint ``checkpoint_id`` (the
    newest when None), ``values`` applied by the graph's reducers as if ``as_node``
    wrote them; the next run goes on from that fork. ``checkpoint_id`` is only for
    such threads (InvalidArgument otherwise).
    """
    if values is not None and not isinstance(values, dict):
        raise InvalidArgument(
            "values must be a JSON object of the state keys to change (or null).",
            field="values",
        )
    graph = _thread_graph(thread_id)
    if (bridged := _bridged(graph, thread_id)) is not None:
        from criogen.langgraph.verbs import fork_thread

        _refuse_busy(thread_id, "updating its state")
        checkpoint = fork_thread(
            *bridged,
            action="update_state",
            checkpoint_id=checkpoint_id,
            values=values,
            as_node=as_node,
            by=by,
            door=door,
            expected=expected,
            details={"keys": sorted(values or {}), "values": values or {}}
            | ({"as_node": as_node} if as_node else {}),
        )
        _touch(thread_id)
        return checkpoint
    if checkpoint_id is not None:
        raise InvalidArgument(
            "checkpoint_id: only a LangGraph thread's state is updated from an older "
            "checkpoint; rewind this thread to it first.",
            field="checkpoint_id",
        )
    thread = graph.thread(thread_id)
    checkpoint = thread.update_state(
        values or {}, as_node=as_node, by=by, door=door, expected=expected, on_busy="fail"
    )
    _touch(thread_id)
    return checkpoint  # type: ignore[no-any-return]


def delete_thread(
    *, thread_id: str, by: str | None = None, door: str = "python", who: Who | None = None
) -> bool:
    """Delete the thread: cancel its active runs, wait for their lease to go, then
    remove its runs, state and whole history; one ``delete`` audit event (kept).
    False when there was no such thread.

    ``who``: the caller, who must be able to see the thread (the rule of
    :func:`criogen.selectors.check_thread_for`): a thread they may not see, or none,
    raises ThreadNotFound and changes nothing. On the ORM storage that is checked in the
    statement that deletes an idle thread."""
    from criogen.services.runs import cancel_active_runs

    event = AuditRecord("delete", thread_id, by, {}, door=check_door(door))
    store = storage()
    # Most threads have no run in progress: then the thread goes, with its event, in
    # one round trip and nothing is read first (not even who may see it, on the ORM).
    narrowed = getattr(store, "delete_idle_thread_for", None)
    if who is None:
        deleted = store.delete_idle_thread(thread_id, audit=event)
    elif narrowed is None:
        check_thread_for(who, thread_id)
        deleted = store.delete_idle_thread(thread_id, audit=event)
    else:
        deleted = narrowed(thread_id, owner=_owner_seen_by(who, thread_id), audit=event)
        if deleted is False:
            # Missing, or another user's: the rule says which answer (ThreadNotFound),
            # unless the thread is there by now (created since), which was not deleted.
            check_thread_for(who, thread_id)
    if deleted is not None:
        return deleted
    # Busy (and, with ``who``, visible to them): the slow path.
    cancel_active_runs(thread_id, by=by or door, door=door)
    _wait_released(thread_id)
    head = store.head(thread_id)
    event = replace(event, before=head.id if head is not None else None)
    return bool(store.delete_thread(thread_id, audit=event))


def _owner_seen_by(who: Who, thread_id: str) -> Any:
    """The owner a thread needs for ``who`` to see it (a user's primary key; None: any
    owner, for operators), as :func:`criogen.selectors.owner_seen_by` tells it;
    ThreadNotFound for a caller who sees no thread at all."""
    seen = owner_seen_by(who)
    if seen is None:
        check_thread_for(who, thread_id)  # raises: such a caller sees no thread
    return None if seen is EVERY_OWNER else seen


def _wait_released(thread_id: str, timeout: float = 10.0) -> None:
    """Wait (briefly) until no live lease holds the thread, so that a run that was
    just cancelled does not write a checkpoint into a deleted thread."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while time.monotonic() < deadline:
        info = storage().thread_info(thread_id)
        if info is None or info.lease_id is None:
            return
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def copy_thread(
    *, thread_id: str, owner: Any = None, by: str | None = None, door: str = "python"
) -> str:
    """A new thread (new UUID) with the same metadata and the whole history; returns
    its id. ``owner`` (a user) owns the copy, else the source's owner does.

    Checkpoints get new ids (their parent links follow); state values are copied as
    stored, so the copy costs what the original does. One ``copy`` audit event, on
    the new thread, naming the source.
    """
    check_door(door)
    source = Thread.objects.filter(pk=thread_id).first()
    if source is None:
        raise ThreadNotFound(f"no thread {thread_id!r}.", thread_id=thread_id)
    new_id = str(uuid.uuid4())
    event = AuditRecord("copy", new_id, by, {"from": thread_id}, door=door)
    with transaction.atomic():
        storage().copy_thread(thread_id, new_id, audit=event)
        Thread.objects.filter(pk=new_id).update(
            metadata={
                **(source.metadata or {}),
                **({"owner": owner.get_username()} if owner is not None else {}),
            },
            owner=owner if owner is not None else source.owner,
            ttl_minutes=source.ttl_minutes,
            ttl_strategy=source.ttl_strategy,
            expires_at=source.expires_at,
        )
    return new_id


def prune_thread(
    *, thread_id: str, strategy: str, by: str | None = None, door: str = "python"
) -> str | None:
    """Apply a TTL ``strategy`` to one thread now: ``"deleted"`` (the thread is
    deleted, audited as ``delete``) or ``"pruned"`` (its history compacted to the head,
    audited as ``prune``); None when it was skipped because a run is active."""
    if strategy not in TTL_STRATEGIES:
        raise InvalidArgument(
            f"strategy is {strategy!r}; use 'delete' or 'keep_latest'.", field="strategy"
        )
    check_door(door)
    if Run.objects.filter(thread_id=thread_id, status__in=ACTIVE_RUN_STATUSES).exists():
        return None  # never expire a thread mid-run: a later sweep picks it up
    if strategy == "delete":
        return "deleted" if delete_thread(thread_id=thread_id, by=by, door=door) else None
    row = Thread.objects.filter(pk=thread_id).values_list("ttl_minutes", flat=True).first()
    pruned = compact_thread(thread_id=thread_id, rearm_minutes=row, by=by, door=door)
    return "pruned" if pruned else None


def _touch(thread_id: str) -> None:
    Thread.objects.filter(pk=thread_id).update(updated_at=timezone.now())


# -- TTL ---------------------------------------------------------------------------------


def _check_ttl(minutes: Any, strategy: Any, *, field: str) -> tuple[int, str]:
    if (
        isinstance(minutes, bool)
        or not isinstance(minutes, int | float)
        or minutes <= 0
        or minutes > MAX_TTL_MINUTES
        or minutes != int(minutes)
    ):
        raise InvalidArgument(
            f"ttl is {minutes!r}: give a whole number of minutes from 1 to {MAX_TTL_MINUTES}.",
            field=field,
        )
    _check_strategy(strategy)
    return int(minutes), strategy


def _check_strategy(strategy: Any) -> None:
    if strategy not in TTL_STRATEGIES:
        raise InvalidArgument(
            f"ttl.strategy is {strategy!r}; use 'delete' or 'keep_latest'.",
            field="ttl.strategy",
        )


def parse_ttl(ttl: Any) -> tuple[int, str] | None:
    """A time to live as the REST API and Python take it: minutes, or ``{"ttl":
    minutes, "strategy": "delete"|"keep_latest"}`` (strategy default ``delete``); None
    for None. Raises InvalidArgument naming the field (``ttl``, ``ttl.ttl``,
    ``ttl.strategy``)."""
    if ttl is None:
        return None
    strategy = "delete"
    minutes = ttl
    if isinstance(ttl, Mapping):
        minutes = ttl.get("ttl")
        strategy = ttl.get("strategy") or "delete"
        unknown = set(ttl) - {"ttl", "strategy"}
        if unknown:
            raise InvalidArgument(
                f"ttl has unknown keys {sorted(unknown)}; use {{'ttl', 'strategy'}}.",
                field=f"ttl.{sorted(unknown)[0]}",
            )
    return _check_ttl(minutes, strategy, field="ttl.ttl" if isinstance(ttl, Mapping) else "ttl")


def default_ttl() -> tuple[int, str] | None:
    """The server-wide TTL for threads created without one (``CRIOGEN_THREAD_TTL``)."""
    minutes = getattr(settings, "CRIOGEN_THREAD_TTL", None)
    if not minutes:
        return None
    return parse_ttl({"ttl": minutes, "strategy": settings.CRIOGEN_THREAD_TTL_STRATEGY})


def _apply_ttl(row: Thread, ttl: tuple[int, str] | None) -> None:
    """Set the row's TTL policy and its expiry (``ttl`` minutes from now); not saved."""
    if ttl is None:
        return
    row.ttl_minutes, row.ttl_strategy = ttl
    row.expires_at = timezone.now() + timedelta(minutes=ttl[0])


def set_thread_ttl(
    *,
    thread: Thread,
    minutes: int | None,
    strategy: str = "delete",
    by: str | None = None,
    door: str = "python",
) -> Thread:
    """Give ``thread`` a time to live of ``minutes`` from now (None: never expires),
    audited as ``set_ttl`` by ``by`` from ``door``. Raises InvalidArgument for minutes
    that are not a whole positive number or an unknown strategy."""
    check_door(door)
    _check_strategy(strategy)
    with transaction.atomic():
        if minutes is None:
            thread.ttl_minutes, thread.ttl_strategy, thread.expires_at = None, strategy, None
        else:
            _apply_ttl(thread, _check_ttl(minutes, strategy, field="ttl"))
        thread.save(update_fields=["ttl_minutes", "ttl_strategy", "expires_at"])
        storage().record_audit(
            "set_ttl",
            thread_id=thread.pk,
            actor=by,
            door=door,
            details={"ttl_minutes": thread.ttl_minutes, "strategy": thread.ttl_strategy},
        )
    return thread


# -- create and update --------------------------------------------------------------------


def _owner_name(owner: Any) -> str | None:
    return str(owner.get_username()) if owner is not None else None


def _check_metadata(metadata: Any, field: str = "metadata") -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise InvalidArgument(f"{field} must be a JSON object.", field=field)
    return dict(metadata)


def _check_owner(meta: dict[str, Any], owner: Any) -> None:
    """Refuse (422) a ``metadata.owner`` other than the server's value ``owner``: it
    names who the thread belongs to, so only the server writes it (the same value,
    as a client that sends back what it read, is fine)."""
    if "owner" in meta and meta["owner"] != owner:
        raise InvalidArgument(
            f"metadata.owner is set by the server (this thread's is {owner!r}); "
            "leave it out or send the same value.",
            field="metadata.owner",
        )


def create_thread(
    *,
    who: Who,
    thread_id: str | None = None,
    metadata: Any = None,
    if_exists: str | None = None,
    ttl: Any = None,
    by: str | None = None,
    door: str = "python",
) -> Thread:
    """Create a thread owned by ``who.user`` (POST /threads), audited as ``create`` by
    ``by`` (default: the owner's user name) from ``door``.

    ``thread_id``: 1–255 non-blank characters; None makes a UUID. ``if_exists``:
    ``raise`` (default) refuses a known id with Conflict (409); ``do_nothing`` returns
    the existing thread if ``who`` may see it (else it is still a Conflict: the id is
    taken). ``metadata.owner`` is set to the owner's user name (another value is
    InvalidArgument). ``ttl`` as :func:`parse_ttl` takes it; without one the server's
    :func:`default_ttl` applies.

    A thread made here has no run, lease or checkpoint: a new one comes back with
    ``rest_status`` "idle"; an existing one (``do_nothing``) without it.
    """
    check_door(door)
    policy = if_exists or "raise"
    if policy not in ("raise", "do_nothing"):
        raise InvalidArgument(
            f"if_exists is {if_exists!r}; use 'raise' or 'do_nothing'.", field="if_exists"
        )
    tid = str(uuid.uuid4()) if thread_id is None else check_thread_id(thread_id)
    meta = _check_metadata(metadata)
    ttl_policy = parse_ttl(ttl) or default_ttl()
    name = _owner_name(who.user)
    if name is not None:
        _check_owner(meta, name)
        meta["owner"] = name
    row = Thread(id=tid, metadata=meta, owner=who.user)
    _apply_ttl(row, ttl_policy)

    event = AuditRecord(
        "create",
        tid,
        by or name,
        {"metadata": meta, "ttl_minutes": row.ttl_minutes},
        door=door,
    )
    if thread_id is None:
        # A new UUID: no lookup first; the row and its event in one round trip.
        orm_storage().insert_audited(row, event)
        row.rest_status = "idle"  # type: ignore[attr-defined]
        return row
    with transaction.atomic():
        existing = Thread.objects.select_for_update().filter(pk=tid).first()
        if existing is not None:
            if policy == "do_nothing":
                try:
                    return thread_for(who, tid)
                except ThreadNotFound:
                    pass  # another user's id: taken all the same
            raise Conflict(
                f"thread {tid!r} already exists; pass if_exists='do_nothing' to get it "
                "instead, or choose another id.",
                field="thread_id",
                thread_id=tid,
            )
        try:
            with transaction.atomic():
                orm_storage().insert_audited(row, event)
        except IntegrityError:
            # Created concurrently (SQLite does not lock a missing row): same answer as
            # if it had existed when we looked.
            if policy == "do_nothing":
                return thread_for(who, tid)
            raise Conflict(f"thread {tid!r} already exists.", field="thread_id") from None
    row.rest_status = "idle"  # type: ignore[attr-defined]
    return row


def update_thread(
    *,
    who: Who,
    thread_id: str,
    metadata: Any = None,
    ttl: Any = None,
    by: str | None = None,
    door: str = "python",
) -> Thread:
    """Merge ``metadata`` into the thread's and (re)set its TTL (PATCH /threads/{id}),
    audited as ``update`` by ``by`` (default: ``who``'s user name) from ``door``;
    ``metadata.owner`` cannot change (InvalidArgument). ThreadNotFound unless ``who``
    may see the thread."""
    check_door(door)
    meta = _check_metadata(metadata)
    ttl_policy = parse_ttl(ttl)
    with transaction.atomic():
        # Locked so that two concurrent updates merge instead of losing a key.
        row = thread_for(who, thread_id, write=True, status=True)
        if _owner_name(who.user) is not None:
            _check_owner(meta, (row.metadata or {}).get("owner"))
        row.metadata = {**(row.metadata or {}), **meta}
        _apply_ttl(row, ttl_policy)
        row.updated_at = timezone.now()
        row.save(
            update_fields=["metadata", "ttl_minutes", "ttl_strategy", "expires_at", "updated_at"]
        )
        storage().record_audit(
            "update",
            thread_id=thread_id,
            actor=by or _owner_name(who.user),
            door=door,
            details={"metadata": meta, "ttl_minutes": row.ttl_minutes},
        )
    return row


def adopt_thread(*, thread_id: str, owner: Any) -> None:
    """For a thread a run has just created (``if_not_exists="create"``, stateless):
    record ``owner``'s user name as the ``owner`` metadata, and give it the server's
    default TTL."""
    row = Thread.objects.filter(pk=thread_id).first()
    if row is None:
        return
    name = _owner_name(owner)
    if name is not None and "owner" not in (row.metadata or {}):
        row.metadata = {**(row.metadata or {}), "owner": name}
    ttl = default_ttl()
    if row.ttl_minutes is None and ttl is not None:
        _apply_ttl(row, ttl)
    row.save(update_fields=["metadata", "ttl_minutes", "ttl_strategy", "expires_at"])


def sweep_threads(*, now: datetime | None = None, limit: int = 500) -> dict[str, int]:
    """Apply the TTL policy of every expired, settled thread.

    Returns ``{"deleted": n, "pruned": m}`` (the REST ``/threads/prune`` shape).
    """
    now = now or timezone.now()
    active = Run.objects.filter(thread_id=OuterRef("pk"), status__in=ACTIVE_RUN_STATUSES)
    due = (
        Thread.objects.filter(expires_at__lte=now)
        .filter(~Exists(active))
        .order_by("expires_at")
        .values_list("pk", "ttl_strategy", "ttl_minutes")[:limit]
    )
    deleted = pruned = 0
    for thread_id, strategy, minutes in list(due):
        try:
            if strategy == "keep_latest":
                if compact_thread(
                    thread_id=thread_id,
                    rearm_minutes=minutes,
                    now=now,
                    by=SYSTEM,
                    door="deadline",
                ):
                    pruned += 1
            elif _delete_expired(thread_id, now):
                deleted += 1
        except Exception:
            logger.exception("TTL sweep of thread %r failed", thread_id)
    return {"deleted": deleted, "pruned": pruned}


def _settled(thread_id: str) -> Any:
    """The thread row locked, if no run or lease is active on it (else None)."""
    thread = Thread.objects.select_for_update().filter(pk=thread_id).first()
    if thread is None or thread.lease_alive:
        return None
    if Run.objects.filter(thread_id=thread_id, status__in=ACTIVE_RUN_STATUSES).exists():
        return None
    return thread


def _delete_expired(thread_id: str, now: datetime) -> bool:
    with transaction.atomic():
        thread = _settled(thread_id)
        if thread is None or thread.expires_at is None or thread.expires_at > now:
            return False
        # The ORM cascade removes runs, checkpoints and values with the thread.
        thread.delete()
        storage().record_audit(
            "delete",
            thread_id=thread_id,
            actor=SYSTEM,
            door="deadline",
            details={"reason": "ttl"},
            before=thread.head_id or None,
        )
    logger.info("TTL: deleted thread %r", thread_id)
    return True


def compact_thread(
    *,
    thread_id: str,
    rearm_minutes: int | None = None,
    now: datetime | None = None,
    by: str | None = None,
    door: str = "python",
) -> bool:
    """Delete every checkpoint of the thread but its head, and the stored values the head
    does not read; re-arm the TTL for ``rearm_minutes``; one ``prune`` audit event.
    False if the thread is busy."""
    now = now or timezone.now()
    store = storage()
    with transaction.atomic():
        thread = _settled(thread_id)
        if thread is None:
            return False
        head = store.head(thread_id) if thread.head_version else None
        kept = head.id if head is not None else None
        event = AuditRecord(
            "prune", thread_id, by, {"kept": kept}, door=check_door(door), before=kept, after=kept
        )
        store.compact_thread(thread_id, audit=event)
        thread.expires_at = now + timedelta(minutes=rearm_minutes) if rearm_minutes else None
        thread.save(update_fields=["expires_at"])
    _compact_langgraph(thread_id)
    logger.info("TTL: compacted thread %r to its head", thread_id)
    return True


def _compact_langgraph(thread_id: str) -> None:
    """A thread running a LangGraph graph keeps LangGraph's newest checkpoint too (per
    namespace, with its writes and the channel values it reads). The saver writes on
    its own connection: after the compaction's transaction, so SQLite's one writer is
    free."""
    from criogen.storage.models.langgraph import LangGraphCheckpoint

    if not LangGraphCheckpoint.objects.filter(thread_id=thread_id).exists():
        return
    from criogen.registry import langgraph_saver

    langgraph_saver().prune([thread_id], strategy="keep_latest")
