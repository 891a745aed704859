"""Stopping a run between two steps: a cancel, this process shutting down, its time
limit passed, or the run taken over by another attempt (the ``should_stop`` the engine asks before each step)."""

from __future__ import annotations

import threading
import time
from typing import Any

from criogen.runner.base import (
    _CONNECTION_LOST,
    CANCEL_CHECK_SECONDS,
    _reconnect,
    _shutdown,
)
from criogen.storage.models import Run

__all__ = ["request_shutdown", "request_stop"]


class _Stop:
    """The ``should_stop`` of one run: a shutdown of this process, a cancel (set here
    by :func:`request_stop`, or in the database by another process), or the run lost:
    the reaper took it away (its lease expired while this worker stalled) and another
    attempt owns it now."""

    def __init__(
        self, run_id: str, attempt: int, *, deadline: float | None = None, limit: float = 0.0
    ) -> None:
        self.run_id = run_id
        self.attempt = attempt
        self.deadline = deadline
        """When the run's time limit passes (epoch seconds), or None."""
        self.limit = limit
        self.reason: str | None = None
        self.error: BaseException | None = None
        self.local = threading.Event()
        # The claim just read the row as running with this attempt: the first look at
        # the database is due one period later (a short run never pays it).
        self._next_check = time.monotonic() + CANCEL_CHECK_SECONDS

    def __call__(self) -> bool:
        if _shutdown.is_set():
            self.reason = "shutdown"
            return True
        if self.local.is_set():
            self.reason = "cancel"
            return True
        if self.deadline is not None and time.time() >= self.deadline:
            # The engine ends the run with a failure checkpoint carrying this error; the
            # runner records the run as ``timeout``. A step never is cut short.
            self.reason = "timeout"
            raise TimeoutError(
                f"the run passed its time limit of {self.limit:g} seconds; retry continues it."
            )
        now = time.monotonic()
        if now >= self._next_check:
            # Throttled: a fast run asks before every step, the database at most 5x/s.
            self._next_check = now + CANCEL_CHECK_SECONDS
            try:
                row = (
                    Run.objects.filter(pk=self.run_id)
                    .values_list("status", "attempts", "cancel_action")
                    .first()
                )
            except _CONNECTION_LOST as exc:
                # The connection broke between two steps: stop here and hand the run
                # back (the next claim continues from the last checkpoint that was
                # written). A new connection first, so the run's way out (the thread
                # lease's release, the hand-back) does not fail on the dead one.
                _reconnect()
                self.reason = "connection"
                self.error = exc
                return True
            if row is None or row[0] != "running" or row[1] != self.attempt:
                self.reason = "lost"
                return True
            if row[2] is not None:
                self.reason = "cancel"
                return True
        return False


_stops: dict[str, _Stop] = {}
_stops_lock = threading.Lock()


def request_stop(run_id: Any) -> None:
    """Stop a run executing in this process before its next step (a cancel; other
    processes see the run's ``cancel_action`` instead)."""
    with _stops_lock:
        stop = _stops.get(str(run_id))
    if stop is not None:
        stop.local.set()


def request_shutdown() -> None:
    """This process is shutting down: every run it executes stops after its current
    step and is handed back (Celery's ``worker_shutting_down`` calls this)."""
    _shutdown.set()
