"""Who may see or act on a thread: one rule for every door.

Operators (staff, or holders of ``criogen.operate``) see every thread; anyone else only
the threads they own, and another user's thread is not found, exactly as if it did not
exist. :func:`thread_for` loads one thread that way, :func:`visible_threads` narrows a
list.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from django.db import router
from django.db.models import QuerySet

from criogen.engine.checkpoints import Checkpoint
from criogen.engine.errors import ThreadNotFound
from criogen.selectors.status import with_status
from criogen.storage.models import Run, Thread
from criogen.storage.rows import Columns, columns, fetch_rows

__all__ = [
    "Viewer",
    "Who",
    "can_operate",
    "check_thread_for",
    "expired_threads",
    "EVERY_OWNER",
    "narrowed",
    "owner_seen_by",
    "thread_exists_for",
    "thread_for",
    "viewer",
    "visible_history",
    "visible_runs",
    "visible_threads",
]


class Who(Protocol):
    """Whoever asks: the REST API's ``Principal``, or a dashboard user as a
    :class:`Viewer`."""

    @property
    def user(self) -> Any:
        """The user (None only for the anonymous operator of a server with auth off)."""

    @property
    def is_operator(self) -> bool:
        """Staff, or a holder of ``criogen.operate``: sees and acts on every thread."""


@dataclass(frozen=True)
class Viewer:
    """A signed-in user as a :class:`Who` (see :func:`viewer`)."""

    user: Any
    is_operator: bool


def can_operate(user: Any) -> bool:
    """Whether ``user`` is an operator: staff, or the ``criogen.operate`` permission."""
    if user is None or not user.is_authenticated:
        return False
    return bool(user.is_staff or user.has_perm("criogen.operate"))


def viewer(user: Any) -> Viewer:
    """``user`` (a dashboard request's) as a :class:`Who`."""
    return Viewer(user=user, is_operator=can_operate(user))


class _EveryOwner:
    def __repr__(self) -> str:
        return "EVERY_OWNER"


EVERY_OWNER: Any = _EveryOwner()
"""What :func:`owner_seen_by` answers for an operator: threads of every owner."""


def owner_seen_by(who: Who) -> Any:
    """The owner a thread must have for ``who`` to see it: the rule of this module, in
    one place for every query that applies it (the ORM's filters here, the hand-written
    statements of this module, of the search and of a thread's delete).

    :data:`EVERY_OWNER` for an operator; the primary key of ``who``'s user for anyone
    else signed in; None for a caller who sees no thread at all (signed out)."""
    if who.is_operator:
        return EVERY_OWNER
    user = who.user
    if user is None or not getattr(user, "is_authenticated", True):
        return None
    return user.pk


def narrowed(who: Who, qs: QuerySet[Any], owner: str) -> QuerySet[Any]:
    """``qs`` narrowed to the rows ``who`` may see: all of them for operators, else the
    ones whose ``owner`` field (a path to a user) is ``who``'s user."""
    seen = owner_seen_by(who)
    if seen is EVERY_OWNER:
        return qs
    if seen is None:
        return qs.none()
    return qs.filter(**{owner: seen})


def _may_see(who: Who, owner_id: Any) -> bool:
    """The rule of :func:`visible_threads`, for a thread whose owner is known."""
    seen = owner_seen_by(who)
    return seen is EVERY_OWNER or (seen is not None and owner_id == seen)


def visible_threads(who: Who, qs: QuerySet[Thread] | None = None) -> QuerySet[Thread]:
    """``qs`` (default: every thread) narrowed to the threads ``who`` may see: all of
    them for operators, else the ones ``who`` owns."""
    return narrowed(who, Thread.objects.all() if qs is None else qs, "owner")


def visible_runs(who: Who, qs: QuerySet[Run] | None = None) -> QuerySet[Run]:
    """``qs`` (default: every run) narrowed to the runs of threads ``who`` may see."""
    return narrowed(who, Run.objects.all() if qs is None else qs, "thread__owner")


def _not_found(thread_id: str) -> ThreadNotFound:
    return ThreadNotFound(f"thread {thread_id!r} not found.", thread_id=thread_id)


def thread_for(
    who: Who,
    thread_id: str,
    *,
    write: bool = False,
    status: bool = False,
    owner: bool = False,
) -> Thread:
    """The thread ``thread_id`` if ``who`` may see and act on it; else ThreadNotFound
    (a 404: another user's thread looks exactly like one that does not exist).

    ``write``: the caller is about to change the row: it is locked
    (``SELECT … FOR UPDATE``) until the caller's transaction ends, so that two
    concurrent writers take turns. ``status``: the row carries ``rest_status``
    (:func:`with_status`), computed in the same statement. ``owner``: its owner comes
    along in the same statement.
    """
    if status and not write and not owner:
        found = _thread_with_status(who, thread_id)
        if found is not None:
            if not found:
                raise _not_found(thread_id)
            return found[0]
    qs = visible_threads(who, with_status() if status else None)
    if owner:
        qs = qs.select_related("owner")
    if write:
        qs = qs.select_for_update()
    row = qs.filter(pk=thread_id).first()
    if row is None:
        raise _not_found(thread_id)
    return row


# -- one thread with its status, compiled once ------------------------------------------
# Every GET /threads/{id} loads its thread with the status rule's CASE (with_status).
# Built and compiled by the ORM on each request that cost ~1.5 ms of CPU, several times
# what the database takes to answer it. The queryset is compiled once per database and
# rule (operator or owner) with marker values for the thread, the owner and the
# instant; each request puts its own values in their places and runs the statement
# (prepared on PostgreSQL), so the rule itself stays where it lives (with_status).

_THREAD_MARK = "criogen:compiled:thread-id"
_OWNER_MARK = -918_273_645
_NOW_MARK = -9.182736455e300


@dataclass(frozen=True)
class _StatusStatement:
    sql: str
    params: tuple[Any, ...]
    slots: tuple[tuple[int, str], ...]
    """(index in ``params``, ``"thread"`` / ``"owner"`` / ``"now"``)."""
    columns: Columns


_status_statements: dict[tuple[str, bool], _StatusStatement | None] = {}


def _status_statement(alias: str, operator: bool) -> _StatusStatement | None:
    """The compiled statement of :func:`thread_for` with ``status``, or None when the
    compiled query is not the shape expected (then the ORM runs it as usual)."""
    key = (alias, operator)
    if key in _status_statements:
        return _status_statements[key]
    qs = with_status(Thread.objects.using(alias).filter(pk=_THREAD_MARK), now=_NOW_MARK)
    if not operator:
        qs = qs.filter(owner_id=_OWNER_MARK)
    compiler = qs[:1].query.get_compiler(alias)
    sql, params = compiler.as_sql()
    cols = columns(Thread, alias)
    n = len(cols.fields)
    slots = tuple(
        (i, name)
        for i, value in enumerate(params)
        for name, mark in (("thread", _THREAD_MARK), ("owner", _OWNER_MARK), ("now", _NOW_MARK))
        if type(value) is type(mark) and value == mark
    )
    names = [name for _, name in slots]
    expected = (
        len(compiler.select) == n + 1
        and compiler.annotation_col_map == {"rest_status": n}
        and names.count("thread") == 1
        and names.count("owner") == (0 if operator else 1)
        and "now" in names
    )
    statement = _StatusStatement(sql, tuple(params), slots, cols) if expected else None
    _status_statements[key] = statement
    return statement


def _thread_with_status(who: Who, thread_id: str) -> list[Thread] | None:
    """``[thread]`` with ``rest_status`` if ``who`` may see it, ``[]`` if not, None when
    the compiled statement does not apply."""
    seen = owner_seen_by(who)
    if seen is None:
        return []
    alias = router.db_for_read(Thread)
    statement = _status_statement(alias, seen is EVERY_OWNER)
    if statement is None:
        return None
    now = time.time()
    values = {"thread": str(thread_id), "now": now}
    if seen is not EVERY_OWNER:
        values["owner"] = seen
    params = list(statement.params)
    for index, name in statement.slots:
        params[index] = values[name]
    rows = fetch_rows(alias, statement.sql, params)
    if not rows:
        return []
    n = len(statement.columns.fields)
    row = statement.columns.instance(rows[0][:n])
    row.rest_status = rows[0][n]
    return [row]


def check_thread_for(who: Who, thread_id: str) -> None:
    """What :func:`thread_for` checks, without loading the row: one probe of the
    primary key index, for reads that need the permission only (state, history).

    Every state and history request makes this check, so it is one hand-written
    statement (the rule of :func:`_may_see`, in SQL): built by the ORM it cost more
    CPU than the head read that follows it (bench/NOTES.md, 2026-12-01)."""
    params: list[Any] = [str(thread_id)]
    sql = _CHECK_SQL
    seen = owner_seen_by(who)
    if seen is None:
        raise _not_found(thread_id)
    if seen is not EVERY_OWNER:
        sql = _CHECK_OWNER_SQL
        params.append(seen)
    if not fetch_rows(router.db_for_read(Thread), sql, params):
        raise _not_found(thread_id)


def visible_history(
    who: Who, thread_id: str, *, limit: int | None = None, before: int | None = None
) -> list[Checkpoint]:
    """The thread's checkpoints newest first, as ``storage().history`` reads them, if
    ``who`` may see the thread; else ThreadNotFound, as :func:`check_thread_for`.

    The state and history reads begin here. On the ORM storage the permission is checked
    in the same statement as the read (``history_for``); only an empty answer (no such
    thread, another user's, or no checkpoints) costs the index probe of
    :func:`check_thread_for` after it. Anywhere else, the probe comes first."""
    from criogen.registry import storage

    store = storage()
    read = getattr(store, "history_for", None)
    if read is None:
        check_thread_for(who, thread_id)
        return list(store.history(thread_id, limit=limit, before=before))
    seen = owner_seen_by(who)
    if seen is None:
        raise _not_found(thread_id)
    owner = None if seen is EVERY_OWNER else seen
    found: list[Checkpoint] = read(thread_id, owner=owner, limit=limit, before=before)
    if not found:
        check_thread_for(who, thread_id)
    return found


_THREAD_TABLE = Thread._meta.db_table
_CHECK_SQL = (
    f'SELECT 1 FROM "{_THREAD_TABLE}"'  # noqa: S608 - identifiers from the model
    f' WHERE "{Thread._meta.pk.column}" = %s'  # type: ignore[union-attr]
)
_CHECK_OWNER_SQL = f'{_CHECK_SQL} AND "{Thread._meta.get_field("owner").column}" = %s'  # type: ignore[union-attr]
_OWNER_SQL = (
    f'SELECT "{Thread._meta.get_field("owner").column}" FROM "{_THREAD_TABLE}"'  # type: ignore[union-attr]  # noqa: S608
    f' WHERE "{Thread._meta.pk.column}" = %s'  # type: ignore[union-attr]
)


def thread_exists_for(who: Who, thread_id: str) -> bool:
    """Whether the thread exists (False: there is none yet, so the caller may create it
    under this id); ThreadNotFound when it exists and is another user's."""
    # Hand-written for the reason check_thread_for is: every run created over the API
    # makes this probe.
    owners = fetch_rows(router.db_for_read(Thread), _OWNER_SQL, [str(thread_id)])
    if not owners:
        return False
    if not _may_see(who, owners[0][0]):
        raise _not_found(thread_id)
    return True


def expired_threads(who: Who) -> QuerySet[Thread]:
    """The threads ``who`` may see whose time to live has passed."""
    from django.utils import timezone

    now = timezone.now()
    return visible_threads(
        who, Thread.objects.filter(expires_at__isnull=False, expires_at__lte=now)
    )
