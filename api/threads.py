"""Threads for the REST API: reads (status, search, state, history) and the writes that
are not runs (create, update, delete, copy, prune, update_state).

This is the HTTP <-> engine translation for threads: it turns engine checkpoints into
the JSON shapes ``langgraph_sdk`` expects (``Thread``, ``ThreadState``) and applies the
rules of the threads page (``spec/threads-rest-api.txt``). Every function takes the
caller's :class:`~api.auth.Principal`; a thread the caller may not see raises
:class:`~criogen.engine.errors.ThreadNotFound`, exactly like one that does not exist.

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
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connections, transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from api.auth import Principal
from api.errors import Conflict
from criogen.engine.checkpoints import Checkpoint
from criogen.engine.checkpoints import check_thread_id as engine_check_thread_id
from criogen.engine.errors import CheckpointNotFound, InvalidArgument, ThreadNotFound
from criogen.selectors import filter_metadata, filter_status, thread_heads, with_status
from criogen.storage.models import Checkpoint as CheckpointRow
from criogen.storage.models import Thread
from criogen.storage.models.threads import TTL_STRATEGIES

__all__ = [
    "copy_thread",
    "count_threads",
    "create_thread",
    "delete_thread",
    "get_state",
    "history",
    "load_thread",
    "prune_expired",
    "prune_threads",
    "search_threads",
    "state_at",
    "thread_out",
    "update_state",
    "update_thread",
]

THREAD_STATUSES = ("idle", "busy", "interrupted", "error")
MAX_TTL_MINUTES = 52_560_000  # 100 years: the column and datetime arithmetic stay in range
SORT_FIELDS = {
    "thread_id": "id",
    "status": "rest_status",
    "created_at": "created_at",
    "updated_at": "updated_at",
    "state_updated_at": "updated_at",
}


def storage() -> Any:
    """The process's shared storage (the one the runner and events use)."""
    from criogen.registry import storage as shared

    return shared()


# -- loading and status -------------------------------------------------------------------


def load_thread(who: Principal, thread_id: str, *, for_update: bool = False) -> Thread:
    """The thread ``thread_id`` if the caller may see it; else ThreadNotFound (404)."""
    qs = who.scope(with_status())
    if for_update:
        qs = qs.select_for_update()
    row = qs.filter(pk=thread_id).first()
    if row is None:
        raise ThreadNotFound(f"thread {thread_id!r} not found.", thread_id=thread_id)
    return row


def check_visible(who: Principal, thread_id: str) -> None:
    """ThreadNotFound (404) unless the thread exists and the caller may see it: what
    :func:`load_thread` checks, in one index lookup without the status."""
    if not who.scope(Thread.objects.filter(pk=thread_id)).exists():
        raise ThreadNotFound(f"thread {thread_id!r} not found.", thread_id=thread_id)


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
    status = getattr(row, "rest_status", None) or _status_of(row)
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


def _status_of(row: Thread) -> str:
    fresh = with_status().filter(pk=row.pk).values_list("rest_status", flat=True).first()
    return fresh or "idle"


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


def parse_ttl(ttl: Any) -> tuple[int, str] | None:
    """``ttl`` as minutes or ``{"ttl": minutes, "strategy": "delete"|"keep_latest"}``."""
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
    if (
        isinstance(minutes, bool)
        or not isinstance(minutes, int | float)
        or minutes <= 0
        or minutes > MAX_TTL_MINUTES
        or minutes != int(minutes)
    ):
        raise InvalidArgument(
            f"ttl is {minutes!r}: give a whole number of minutes from 1 to {MAX_TTL_MINUTES}.",
            field="ttl.ttl" if isinstance(ttl, Mapping) else "ttl",
        )
    if strategy not in TTL_STRATEGIES:
        raise InvalidArgument(
            f"ttl.strategy is {strategy!r}; use 'delete' or 'keep_latest'.",
            field="ttl.strategy",
        )
    return int(minutes), strategy


def default_ttl() -> tuple[int, str] | None:
    """The server-wide TTL for threads created without one (``CRIOGEN_THREAD_TTL``)."""
    minutes = getattr(settings, "CRIOGEN_THREAD_TTL", None)
    if not minutes:
        return None
    return parse_ttl({"ttl": minutes, "strategy": settings.CRIOGEN_THREAD_TTL_STRATEGY})


def apply_ttl(row: Thread, ttl: tuple[int, str] | None) -> None:
    """Set the thread's TTL policy and its expiry (``ttl`` minutes from now)."""
    if ttl is None:
        return
    row.ttl_minutes, row.ttl_strategy = ttl
    row.expires_at = timezone.now() + timedelta(minutes=ttl[0])


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
    who: Principal,
    *,
    thread_id: str | None = None,
    metadata: dict[str, Any] | None = None,
    if_exists: str | None = None,
    ttl: Any = None,
    supersteps: list[dict[str, Any]] | None = None,
) -> Thread:
    """Create a thread (POST /threads).

    An explicit ``thread_id`` must be 1–255 non-blank characters; ``None`` makes a UUID.
    ``if_exists``: ``raise`` (default) answers 409 for a known id, ``do_nothing``
    returns the existing thread (if the caller may see it; else it is still a 409, as
    the id is taken). ``metadata.owner`` is set to the caller (another value is a
    422).
    """
    policy = if_exists or "raise"
    if policy not in ("raise", "do_nothing"):
        raise InvalidArgument(
            f"if_exists is {if_exists!r}; use 'raise' or 'do_nothing'.", field="if_exists"
        )
    tid = str(uuid.uuid4()) if thread_id is None else check_thread_id(thread_id)
    meta = _check_metadata(metadata)
    parsed_ttl = parse_ttl(ttl)
    graph_id = meta.get("graph_id")
    if supersteps and not graph_id:
        raise InvalidArgument(
            "supersteps need the thread's graph: pass graph_id (or metadata.graph_id).",
            field="supersteps",
        )
    if who.name is not None:
        _check_owner(meta, who.name)
        meta["owner"] = who.name
    if thread_id is None and not supersteps:
        # A new UUID: one INSERT, no lookup first. A thread just created has no run,
        # no lease and no checkpoint, so it is idle.
        row = Thread(id=tid, metadata=meta, owner=who.user)
        apply_ttl(row, parsed_ttl or default_ttl())
        row.save(force_insert=True)
        row.rest_status = "idle"  # type: ignore[attr-defined]
        return row
    with transaction.atomic():
        existing = Thread.objects.select_for_update().filter(pk=tid).first()
        if existing is not None:
            visible = who.is_operator or existing.owner_id == who.user_id
            if policy == "do_nothing" and visible:
                return load_thread(who, tid)
            raise Conflict(
                f"thread {tid!r} already exists; pass if_exists='do_nothing' to get it "
                "instead, or choose another id.",
                field="thread_id",
                thread_id=tid,
            )
        row = Thread(id=tid, metadata=meta, owner=who.user)
        apply_ttl(row, parsed_ttl or default_ttl())
        try:
            with transaction.atomic():
                row.save(force_insert=True)
        except IntegrityError:
            # Created concurrently (SQLite does not lock a missing row): same answer as
            # if it had existed when we looked.
            if policy == "do_nothing":
                return load_thread(who, tid)
            raise Conflict(f"thread {tid!r} already exists.", field="thread_id") from None
    if supersteps:
        for i, step in enumerate(supersteps):
            for j, update in enumerate(step.get("updates") or []):
                if update.get("command") is not None:
                    raise InvalidArgument(
                        "supersteps updates with a command are not supported; send values.",
                        field=f"supersteps.{i}.updates.{j}.command",
                    )
                update_state(who, tid, values=update.get("values"), as_node=update.get("as_node"))
    return load_thread(who, tid)


def update_thread(
    who: Principal, thread_id: str, *, metadata: dict[str, Any] | None, ttl: Any = None
) -> Thread:
    """Merge ``metadata`` into the thread's and (re)set its TTL (PATCH /threads/{id});
    ``metadata.owner`` cannot change (422)."""
    meta = _check_metadata(metadata)
    parsed_ttl = parse_ttl(ttl)
    with transaction.atomic():
        # Locked so that two concurrent PATCHes merge instead of losing a key.
        row = load_thread(who, thread_id, for_update=True)
        if who.name is not None:
            _check_owner(meta, (row.metadata or {}).get("owner"))
        row.metadata = {**(row.metadata or {}), **meta}
        apply_ttl(row, parsed_ttl)
        row.updated_at = timezone.now()
        row.save(
            update_fields=["metadata", "ttl_minutes", "ttl_strategy", "expires_at", "updated_at"]
        )
    return load_thread(who, thread_id)


def delete_thread(who: Principal, thread_id: str) -> None:
    """Delete the thread: cancel its active runs, then remove its runs, state and
    whole checkpoint history (DELETE /threads/{id})."""
    from criogen.services.threads import delete_thread as delete

    load_thread(who, thread_id)
    delete(thread_id=thread_id, by=who.name or "api", door="api")


def copy_thread(who: Principal, thread_id: str) -> Thread:
    """A new thread (new UUID) with the same metadata and the whole history, owned by
    the caller (POST /threads/{id}/copy)."""
    from criogen.services.threads import copy_thread as copy

    load_thread(who, thread_id)
    new_id = copy(thread_id=thread_id, owner=who.user, by=who.name or "api", door="api")
    return load_thread(who, new_id)


# -- TTL and prune ----------------------------------------------------------------------


def _prune_one(row: Thread, strategy: str, *, by: str | None) -> str | None:
    """Apply ``strategy`` to one thread; return "deleted"/"pruned", or None if skipped."""
    from criogen.services.threads import prune_thread

    return prune_thread(thread_id=row.pk, strategy=strategy, by=by or "api", door="api")


def prune_expired(who: Principal) -> dict[str, int]:
    """Apply the caller's expired TTL policies now: ``{"deleted": n, "pruned": n}``."""
    now = timezone.now()
    counts = {"deleted": 0, "pruned": 0}
    qs = who.scope(Thread.objects.filter(expires_at__isnull=False, expires_at__lte=now))
    for row in qs:
        outcome = _prune_one(row, row.ttl_strategy or "delete", by=who.name)
        if outcome:
            counts[outcome] += 1
    return counts


def prune_threads(who: Principal, thread_ids: Iterable[str], strategy: str) -> dict[str, int]:
    """Prune the named threads now (the SDK's ``threads.prune``)."""
    if strategy not in TTL_STRATEGIES:
        raise InvalidArgument(
            f"strategy is {strategy!r}; use 'delete' or 'keep_latest'.", field="strategy"
        )
    counts = {"deleted": 0, "pruned": 0}
    for tid in thread_ids:
        row = who.scope(Thread.objects.all()).filter(pk=tid).first()
        if row is None:
            continue
        outcome = _prune_one(row, strategy, by=who.name)
        if outcome:
            counts[outcome] += 1
    return {**counts, "pruned_count": counts["deleted"] + counts["pruned"]}


# -- search -------------------------------------------------------------------------------


def search_limit(limit: int | None) -> int:
    """``limit`` checked against ``CRIOGEN_MAX_SEARCH_LIMIT`` (omitted: min(20, cap))."""
    cap = int(getattr(settings, "CRIOGEN_MAX_SEARCH_LIMIT", 1000))
    if limit is None:
        return min(20, cap)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1 or limit > cap:
        raise InvalidArgument(
            f"limit is {limit!r}; use 1 to {cap} (CRIOGEN_MAX_SEARCH_LIMIT).", field="limit"
        )
    return limit


def _filtered(
    who: Principal,
    *,
    metadata: dict[str, Any] | None,
    status: str | None,
    ids: list[str] | None,
) -> QuerySet[Thread]:
    qs = who.scope(Thread.objects.all())
    if status is None:
        qs = with_status(qs)
    else:
        if status not in THREAD_STATUSES:
            raise InvalidArgument(
                f"status is {status!r}; use idle, busy, interrupted or error.", field="status"
            )
        qs = filter_status(qs, status)  # annotates rest_status too, on the same instant
    if ids:
        qs = qs.filter(pk__in=list(ids))
    return filter_metadata(qs, metadata or {})


def _values_match(state: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> bool:
    if state is None:
        return False
    return all(k in state and state[k] == v for k, v in wanted.items())


def search_threads(
    who: Principal,
    *,
    metadata: dict[str, Any] | None = None,
    values: dict[str, Any] | None = None,
    status: str | None = None,
    ids: list[str] | None = None,
    limit: int | None = None,
    offset: int = 0,
    sort_by: str | None = None,
    sort_order: str | None = None,
) -> list[tuple[Thread, Checkpoint | None]]:
    """Threads matching every filter, with their heads; newest first by default."""
    limit = search_limit(limit)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidArgument(f"offset is {offset!r}; use 0 or more.", field="offset")
    field = SORT_FIELDS.get(sort_by or "created_at")
    if field is None:
        raise InvalidArgument(
            f"sort_by is {sort_by!r}; use one of {', '.join(SORT_FIELDS)}.", field="sort_by"
        )
    if (sort_order or "desc") not in ("asc", "desc"):
        raise InvalidArgument(f"sort_order is {sort_order!r}; use asc or desc.", field="sort_order")
    # Ties (threads created in one transaction share created_at) go by id, in the same
    # direction: then an index on (field, id) gives the page in order and the database
    # stops after it, where a mixed order would sort every matching thread first.
    descending = (sort_order or "desc") == "desc"
    order = [F(f).desc() if descending else F(f).asc() for f in (field, "id")]
    listed = _filtered(who, metadata=None, status=status, ids=ids).order_by(*order)
    qs = filter_metadata(listed, metadata or {})
    store = storage()
    if not values:
        rows = None
        if metadata:
            rows = _page_from_window(listed, metadata, field, descending, offset, limit)
        if rows is None:
            rows = list(qs[offset : offset + limit])
        heads = thread_heads(rows)
        return [(row, heads.get(row.id)) for row in rows]
    # State values live in checkpoints, not in the thread row: filter the candidates by
    # their head state, in pages, until the window is full.
    out: list[tuple[Thread, Checkpoint | None]] = []
    skipped = 0
    for row in qs.exclude(head_version=0).iterator(chunk_size=200):
        head = store.head(row.id)
        if not _values_match(head.state if head else None, values):
            continue
        if skipped < offset:
            skipped += 1
            continue
        out.append((row, head))
        if len(out) >= limit:
            break
    return out


WINDOW_PER_ROW = 20
"""How many of the newest threads a metadata search reads per row it returns before
it falls back to the metadata index (:func:`_page_from_window`)."""
WINDOW_MAX = 2000


def _page_from_window(
    unfiltered: QuerySet[Thread],
    metadata: Mapping[str, Any],
    field: str,
    descending: bool,
    offset: int,
    limit: int,
) -> list[Thread] | None:
    """The page of a metadata search read from the first threads of ``unfiltered`` in
    page order (every other filter applied), in one statement; None when those do not
    hold the whole page, or the database is not PostgreSQL.

    A value many threads carry is where the metadata index is slowest: it yields every
    thread with the value, all of which the database sorts for a page of twenty; and the
    planner, which cannot tell how common a JSON value is, may not walk the list index
    instead. Read as a derived table, the window is that walk, bounded: the first
    ``WINDOW_PER_ROW`` rows per row wanted, in page order. As the window is a prefix of
    the list in its own order, the first matches in it are the first matches overall;
    when it holds fewer than the page needs, the caller asks the index. The status is
    computed for the page's rows only, with the window's own instant.
    """
    need = offset + limit
    size = need * WINDOW_PER_ROW
    db = unfiltered.db
    if size > WINDOW_MAX or field == "rest_status" or connections[db].vendor != "postgresql":
        return None
    window = unfiltered[:size].query
    status_sql, status_params = window.get_compiler(using=db).compile(
        window.annotations["rest_status"]
    )
    window.set_annotation_mask(())  # the window carries the rows, the page their status
    inner_sql, inner_params = window.get_compiler(using=db).as_sql()
    # The metadata conditions, as filter_metadata writes them for the whole table.
    probe = filter_metadata(Thread.objects.using(db), metadata).query
    probe.get_initial_alias()
    where_sql, where_params = probe.get_compiler(using=db).compile(probe.where)
    direction = "DESC" if descending else "ASC"
    table = Thread._meta.db_table
    sql = (
        f'SELECT "{table}".*, {status_sql} AS "rest_status"'  # noqa: S608
        f' FROM ({inner_sql}) AS "{table}" WHERE {where_sql}'
        f' ORDER BY "{table}"."{field}" {direction}, "{table}"."id" {direction}'
        " LIMIT %s OFFSET %s"
    )
    params = [*status_params, *inner_params, *where_params, limit, offset]
    rows = list(Thread.objects.raw(sql, params, using=db))
    return rows if len(rows) == limit else None


def count_threads(
    who: Principal,
    *,
    metadata: dict[str, Any] | None = None,
    values: dict[str, Any] | None = None,
    status: str | None = None,
    ids: list[str] | None = None,
) -> int:
    """How many threads match (POST /threads/count; a search's ``X-Pagination-Total``)."""
    qs = _filtered(who, metadata=metadata, status=status, ids=ids)
    if not values:
        return qs.count()
    store = storage()
    return sum(
        1
        for row in qs.exclude(head_version=0).iterator(chunk_size=200)
        if _values_match(getattr(store.head(row.id), "state", None), values)
    )


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
    check_visible(who, thread_id)
    return state_out(thread_id, storage().head(thread_id), select=select)


def state_at(
    who: Principal, thread_id: str, checkpoint_id: str, *, select: list[str] | None = None
) -> dict[str, Any]:
    """The state at one checkpoint of the thread (404 if it has no such checkpoint)."""
    check_visible(who, thread_id)
    cid = check_checkpoint_id(checkpoint_id)
    return state_out(thread_id, storage().get_checkpoint(thread_id, cid), select=select)


def _version_of(thread_id: str, checkpoint_id: str) -> int:
    version = (
        CheckpointRow.objects.filter(thread_id=thread_id, id=checkpoint_id)
        .values_list("version", flat=True)
        .first()
    )
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
    check_visible(who, thread_id)
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
    if not metadata:
        cps = store.history(thread_id, limit=limit, before=version)
        return [state_out(thread_id, cp, select=select) for cp in cps]
    out: list[dict[str, Any]] = []
    while len(out) < limit:
        page = store.history(thread_id, limit=100, before=version)
        if not page:
            break
        for cp in page:
            state = state_out(thread_id, cp)
            if _metadata_match(state, metadata):
                out.append(_select(state, select))
                if len(out) >= limit:
                    break
        version = page[-1].version
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
    from criogen.services.threads import update_thread_state

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
    cp = update_thread_state(
        thread_id=thread_id, values=values, as_node=as_node, by=who.name or "api", door="api"
    )
    return {"checkpoint": _checkpoint_ref(thread_id, cp.id)}
