"""Database work for the async endpoints: a small pool of threads, each with its own
database connection, and waiting for runs without holding a thread.

Django runs every sync view of an ASGI server on one thread, so one slow query holds up
every other request. The API's hot endpoints are async instead: they parse and
serialise on the event loop and do their database work in :func:`db`, on one of
``CRIOGEN_API_THREADS`` threads (default 8). Each thread keeps its own connection the
way a request does: before every job, a connection older than
``CRIOGEN_API_CONN_MAX_AGE`` (default ``CONN_MAX_AGE``, or 60 s when that is 0) or
left unusable by an error is closed, and with ``CONN_HEALTH_CHECKS`` one that has been
idle for more than a second, or that the server closed, is checked before it is
reused (:mod:`criogen.storage.connections`). The pool bounds the API's connections to
its size.

:func:`plan_ahead` lets a hot read run in the same thread hop as the request's token
check (:func:`run_ahead`, called by :mod:`api.auth`); the endpoint then takes that
answer with :func:`db_ahead` if it asks for exactly the call that was planned, and
otherwise makes its own hop as :func:`db` does.

:func:`wait_for_run` waits for a run to end on the event loop: runs executed in this
process wake it through their ``run.changed`` events; runs executed elsewhere (Celery)
are re-read with a backoff up to one second, as :func:`criogen.services.runs.wait_run`
does.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections
from django.http import HttpRequest

from criogen import events
from criogen.engine.errors import CriogenError
from criogen.selectors import refresh_run
from criogen.services.runs import ENDED
from criogen.storage.connections import close_old_connections, mark_used

if TYPE_CHECKING:
    from criogen.storage.models import Run

__all__ = [
    "AHEAD_SCOPE_KEY",
    "db",
    "db_ahead",
    "max_age",
    "plan_ahead",
    "pool",
    "pool_size",
    "run_ahead",
    "run_job",
    "wait_for_run",
]

T = TypeVar("T")

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def pool_size() -> int:
    """How many threads (and so database connections) the API's pool has."""
    return max(1, int(getattr(settings, "CRIOGEN_API_THREADS", 8)))


def pool() -> ThreadPoolExecutor:
    """The API's pool of database threads (for ``loop.run_in_executor`` with
    :func:`run_job`)."""
    return _pool()


def _pool() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        with _executor_lock:
            if _executor is None:
                _executor = ThreadPoolExecutor(
                    max_workers=pool_size(), thread_name_prefix="criogen-api"
                )
    return _executor


def max_age() -> float | None:
    """How long a pool thread keeps its connection (seconds; None: for ever)."""
    value = getattr(settings, "CRIOGEN_API_CONN_MAX_AGE", 60)
    return None if value is None else float(value)


def _job(fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    # What Django does around a request (close_old_connections), around each job.
    close_old_connections()
    before = {conn.alias: conn.connection for conn in connections.all(initialized_only=True)}
    try:
        return fn(*args, **kwargs)
    finally:
        mark_used()
        for conn in connections.all(initialized_only=True):
            if conn.connection is not None and conn.connection is not before.get(conn.alias):
                # Opened by this job: it lives for the pool's age, not CONN_MAX_AGE
                # (which, at 0, would close it after every job).
                age = max_age()
                conn.close_at = None if age is None else time.monotonic() + age


def run_job(fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    """``fn(*args, **kwargs)`` with the connection bookkeeping of every job of the pool;
    call it on a pool thread."""
    return _job(fn, args, kwargs)


_hop: tuple[ThreadPoolExecutor, Callable[..., Any], Callable[..., Any]] | None = None


def _to_pool() -> Callable[..., Any]:
    """``_job`` as a coroutine function on the pool's threads, made once per pool and
    job function (the adapter keeps no per-call state; building it inspects ``_job``
    every time)."""
    global _hop
    pool = _pool()
    hop = _hop
    if hop is None or hop[0] is not pool or hop[1] is not _job:
        hop = (pool, _job, sync_to_async(_job, thread_sensitive=False, executor=pool))
        _hop = hop
    return hop[2]


async def db(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on a thread of the API's pool (it may use the ORM)."""
    return await _to_pool()(fn, args, kwargs)  # type: ignore[no-any-return]


# -- a read in the token check's hop ---------------------------------------------------
# An authenticated async request hops to the pool twice: the token check (an auth
# callable, which django-ninja awaits before it parses the parameters), then the
# endpoint's own job. For the hot reads each hop is a thread switch each way and Django's
# connection bookkeeping, as much CPU as the read's statements (bench/NOTES.md, "The read
# path in one statement"). So an endpoint may plan, from the raw request, the call it
# will most likely make; the token check's job makes it right after the token, and the
# endpoint, once django-ninja has validated its parameters, takes that answer only if it
# asks for exactly that call (same function, same arguments, the same caller). A
# planned call is a read (made for a request that then fails validation, it changed
# nothing), or a write that nothing between the token check and the endpoint can turn
# away: ``DELETE /threads/{id}``, whose one parameter is the path's id. Its Criogen errors (404, 422) are raised where the endpoint would have raised
# them; any other exception is dropped and the endpoint makes the call itself, as before.

Plan = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]
"""``(fn, args, kwargs)``: a call :func:`db` would make."""

AHEAD_SCOPE_KEY = "criogen.ahead"
"""The ASGI scope's key for a call already made and its outcome, ``(plan, (ok,
value))``: :mod:`api.hot` hands a create or a delete it made to the API's handler this
way when it does not answer itself, so that the endpoint raises its error instead of
writing again (and :func:`run_ahead` plans nothing for that request)."""

_plans: dict[tuple[str, str], Callable[[HttpRequest, Any], Plan | None]] = {}
_AHEAD = "_criogen_ahead"


def plan_ahead(
    method: str, url_name: str
) -> Callable[
    [Callable[[HttpRequest, Any], Plan | None]], Callable[[HttpRequest, Any], Plan | None]
]:
    """Register ``planner(request, who)`` for ``method`` requests to the URL named
    ``url_name`` (django-ninja names a path after its first operation): it returns the
    call the endpoint will make for ``who``, or None to plan nothing."""

    def register(
        planner: Callable[[HttpRequest, Any], Plan | None],
    ) -> Callable[[HttpRequest, Any], Plan | None]:
        _plans[(method, url_name)] = planner
        return planner

    return register


def run_ahead(request: HttpRequest, who: Any) -> None:
    """Make the call planned for ``request`` (on the current pool thread, after its
    token check) and keep its answer on the request for :func:`db_ahead`. Nothing is
    planned for a request whose call :mod:`api.hot` already made (a delete made twice
    would answer a 404 for the thread it deleted)."""
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict) and AHEAD_SCOPE_KEY in scope:
        return
    match = getattr(request, "resolver_match", None)
    planner = _plans.get((request.method or "", match.url_name)) if match else None
    if planner is None:
        return
    plan = planner(request, who)
    if plan is None:
        return
    fn, args, kwargs = plan
    try:
        outcome: tuple[bool, Any] = (True, fn(*args, **kwargs))
    except CriogenError as exc:
        outcome = (False, exc)
    except Exception:  # noqa: BLE001 - the endpoint makes the call again, in its own job
        return
    setattr(request, _AHEAD, (plan, outcome))


async def db_ahead(request: HttpRequest, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``await db(fn, *args, **kwargs)``, or the answer of that very call if the
    request's token check already made it (:func:`run_ahead`), or :mod:`api.hot` did
    (:data:`AHEAD_SCOPE_KEY`)."""
    ahead = request.__dict__.pop(_AHEAD, None)
    if ahead is None:
        scope = getattr(request, "scope", None)
        if isinstance(scope, dict):
            ahead = scope.pop(AHEAD_SCOPE_KEY, None)
    if ahead is not None:
        (planned_fn, planned_args, planned_kwargs), (ok, value) = ahead
        if planned_fn is fn and planned_args == args and planned_kwargs == kwargs:
            if ok:
                return value  # type: ignore[no-any-return]
            raise value
    return await db(fn, *args, **kwargs)


# -- waiting for runs -----------------------------------------------------------------

_waiters: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
_waiters_lock = threading.Lock()


def _on_run_changed(event: dict[str, Any]) -> None:
    """A run's status changed in this process (any thread): wake its waiters."""
    if event.get("status") not in ENDED:
        return
    with _waiters_lock:
        waiting = list(_waiters.get(str(event.get("run_id")), ()))
    for loop, ready in waiting:
        with contextlib.suppress(RuntimeError):  # the loop has closed
            loop.call_soon_threadsafe(ready.set)


events.add_run_listener(_on_run_changed)


async def wait_for_run(
    run: Run, timeout: float | None = None, *, fields: Sequence[str] | None = None
) -> Run:
    """Wait until ``run`` has ended or ``timeout`` seconds passed; return it re-read:
    only ``fields`` (and ``status``) when given, every field otherwise. A caller that
    answers with the run's status and error need not decode its input again on every
    wake-up."""
    if fields is not None:
        fields = list({"status", *fields})
    run_id = str(run.pk)
    ready = asyncio.Event()
    entry = (asyncio.get_running_loop(), ready)
    with _waiters_lock:
        _waiters.setdefault(run_id, set()).add(entry)
    deadline = None if timeout is None else time.monotonic() + timeout
    delay = 0.05
    try:
        while True:
            ready.clear()
            if fields is None:
                await db(run.refresh_from_db)
            else:
                await db(refresh_run, run, fields)
            if run.status in ENDED:
                break
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            wait = delay if remaining is None else min(delay, remaining)
            try:
                await asyncio.wait_for(ready.wait(), timeout=wait)
            except TimeoutError:
                delay = min(delay * 2, 1.0)
    finally:
        with _waiters_lock:
            entries = _waiters.get(run_id)
            if entries is not None:
                entries.discard(entry)
                if not entries:
                    del _waiters[run_id]
    return run
