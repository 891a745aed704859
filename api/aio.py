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

from criogen import events
from criogen.selectors import refresh_run
from criogen.services.runs import ENDED
from criogen.storage.connections import close_old_connections, mark_used

if TYPE_CHECKING:
    from criogen.storage.models import Run

__all__ = ["db", "max_age", "pool_size", "wait_for_run"]

T = TypeVar("T")

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def pool_size() -> int:
    """How many threads (and so database connections) the API's pool has."""
    return max(1, int(getattr(settings, "CRIOGEN_API_THREADS", 8)))


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


async def db(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on a thread of the API's pool (it may use the ORM)."""
    run = sync_to_async(_job, thread_sensitive=False, executor=_pool())
    return await run(fn, args, kwargs)


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
