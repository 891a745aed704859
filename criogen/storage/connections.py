"""A thread's database connections between its jobs, as Django keeps them between
requests (``close_old_connections``), without a health check's round trip for a
connection that has just answered.

The API's database threads (:mod:`api.aio`) and the in-process runner's threads each
serve many jobs on one connection; with ``CONN_HEALTH_CHECKS`` Django would check it
(``SELECT 1``) before every job's first statement.
"""

from __future__ import annotations

import select
import threading
import time
from typing import Any

from django.db import connections

__all__ = ["FRESH_SECONDS", "close_old_connections", "mark_used"]

FRESH_SECONDS = 1.0
"""A PostgreSQL connection that answered within this many seconds, and whose socket
has nothing to read, is reused without a health check (``CONN_HEALTH_CHECKS``): the
check is a round trip, and under load a pool thread's connection has always just
answered. A connection the server closed (a restart, ``pg_terminate_backend``) has its
goodbye waiting on the socket, and is checked (and replaced)."""

_used = threading.local()


def _quiet(conn: Any) -> bool:
    """The idle connection's socket has nothing to read (the server has not closed it)."""
    if conn.vendor != "postgresql" or conn.connection is None:
        return False
    try:
        fd = conn.connection.pgconn.socket
        readable, _, _ = select.select([fd], [], [], 0)
    except Exception:  # noqa: BLE001 - closed or broken: let the health check decide
        return False
    return not readable


def close_old_connections() -> None:
    """Before a job: what Django does around a request (close this thread's
    connections that are too old or unusable; the query log restarts), except that a
    connection this thread used less than :data:`FRESH_SECONDS` ago (:func:`mark_used`)
    and whose socket is quiet is taken as healthy."""
    fresh = time.monotonic() - getattr(_used, "at", float("-inf")) < FRESH_SECONDS
    for conn in connections.all(initialized_only=True):
        # A request resets the query log (DEBUG keeps up to 9,000 queries per
        # connection); these connections serve many jobs and no request_started.
        conn.queries_log.clear()
        conn.close_if_unusable_or_obsolete()
        if fresh and _quiet(conn):
            conn.health_check_done = True  # type: ignore[attr-defined]


def mark_used() -> None:
    """After a job: this thread's connections have just answered."""
    _used.at = time.monotonic()
