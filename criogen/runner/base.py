"""What the runner's modules share: its constants, this process's shutdown flag, the
run lease's length, the worker's name, and the way back from a broken database
connection."""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, connections

from criogen.storage.models import Run

__all__ = ["CANCEL_CHECK_SECONDS", "HANDED_BACK", "MAX_HAND_BACKS", "WORKER"]

logger = logging.getLogger("criogen.runner")

HANDED_BACK = "handed_back"
"""What :func:`execute_run` returns when it put the run back to ``pending``: this
process is shutting down, or the run lost its thread lease or a write race."""

MAX_HAND_BACKS = 5
"""A run that keeps losing its thread's lease, its writes or its database connection is
handed back at most this many times (``Run.hand_backs``), then ends in ``error``.
Re-claims after a worker died (the reaper) and hand-backs at a shutdown do not count:
``Run.attempts`` counts every claim."""

_CONNECTION_LOST = (OperationalError, InterfaceError)
"""What Django raises when the database connection broke (server restarted, the backend
terminated, the network dropped): the connection is unusable until it is closed."""

CANCEL_CHECK_SECONDS = 0.2
"""How often a running run reads its cancel flag from the database (between steps)."""

WORKER = f"{socket.gethostname()}:{os.getpid()}"

_shutdown = threading.Event()


def _lease_seconds() -> float:
    return float(settings.CRIOGEN_LEASE_SECONDS)


def _worker_name() -> str:
    # Computed per call: a forked worker process has a new pid.
    return f"{socket.gethostname()}:{os.getpid()}"


def _reconnect() -> None:
    """Close this thread's connection to the runs' database: the next query opens a new
    one (Django never replaces a broken connection by itself)."""
    connections[Run.objects.db].close()


def _on_live_connection(query: Any) -> Any:
    """``query()``; if the connection turns out to be broken, once more on a new one.

    For the runner's own statements around a run (the claim, the outcome): a connection
    killed while idle (the database restarted, ``pg_terminate_backend``, a proxy's idle
    timeout) fails the first statement that uses it, and without this the run would
    wait for the reaper."""
    try:
        return query()
    except _CONNECTION_LOST as exc:
        logger.warning("the database connection was lost (%s); reconnecting", exc)
        _reconnect()
        return query()
