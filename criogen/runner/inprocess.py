"""The in-process runner (``CRIOGEN_RUNNER="inprocess"``, the embedded default): a pool
of ``CRIOGEN_INPROCESS_WORKERS`` threads that execute runs, and the timer that reaps
dead runs, sweeps expired threads and fires deadlines."""

from __future__ import annotations

import heapq
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from django.conf import settings
from django.db import close_old_connections as django_close_old_connections

from criogen.runner.base import _CONNECTION_LOST, HANDED_BACK, _reconnect, _shutdown
from criogen.runner.execute import execute_run
from criogen.runner.handoff import enqueue_run
from criogen.runner.leases import reap_expired
from criogen.runner.stops import request_shutdown
from criogen.storage.connections import close_old_connections, mark_used

__all__ = ["drain", "start_background"]

logger = logging.getLogger("criogen.runner")

_pool: ThreadPoolExecutor | None = None
_futures: set[Future[Any]] = set()
_pool_lock = threading.Lock()
_timer: threading.Thread | None = None


def _submit(run_id: str) -> None:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=max(1, int(settings.CRIOGEN_INPROCESS_WORKERS)),
                thread_name_prefix="criogen-run",
            )
            # When the server exits, stop the runs after their current step and hand
            # them back (the next server start restarts them) instead of waiting for
            # them to finish. threading's exit hooks run newest first, so this runs
            # before the pool's own hook joins its threads.
            register = getattr(threading, "_register_atexit", None)
            if register is not None:
                register(request_shutdown)
        future = _pool.submit(_job, run_id)
        _futures.add(future)
    future.add_done_callback(_forget)
    start_background()


_later: list[tuple[float, str]] = []
_later_cond = threading.Condition()
_later_thread: threading.Thread | None = None


def _schedule(run_id: str, delay: float) -> None:
    """Submit the run ``delay`` seconds from now (a delayed run): one timer thread per
    process for all of them. Lost when the process ends: the reaper starts due runs."""
    global _later_thread
    with _later_cond:
        heapq.heappush(_later, (time.monotonic() + delay, run_id))
        _later_cond.notify()
        if _later_thread is None or not _later_thread.is_alive():
            _later_thread = threading.Thread(
                target=_later_loop, name="criogen-run-later", daemon=True
            )
            _later_thread.start()
    start_background()


def _later_loop() -> None:
    while not _shutdown.is_set():
        with _later_cond:
            if not _later:
                _later_cond.wait(1.0)
                continue
            when, run_id = _later[0]
            wait_for = when - time.monotonic()
            if wait_for > 0:
                _later_cond.wait(min(wait_for, 1.0))
                continue
            heapq.heappop(_later)
        try:
            _submit(run_id)
        except Exception:
            logger.exception("could not submit the delayed run %s", run_id)


def _forget(future: Future[Any]) -> None:
    with _pool_lock:
        _futures.discard(future)


def _job(run_id: str) -> str | None:
    close_old_connections()
    try:
        status = execute_run(run_id)
        if status == HANDED_BACK and not _shutdown.is_set():
            enqueue_run(run_id)  # handed back without a shutdown: run it again
        return status
    except Exception:
        logger.exception("executing run %s failed", run_id)
        return None
    finally:
        mark_used()
        django_close_old_connections()


def drain(timeout: float | None = None) -> bool:
    """Wait until the in-process runner has nothing left to do (tests, shutdown).
    Returns False if ``timeout`` passed first."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        with _pool_lock:
            pending = set(_futures)
        if not pending:
            return True
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return False
        wait(pending, timeout=remaining)


def start_background() -> None:
    """Start the in-process timer that reaps dead runs (every ``CRIOGEN_REAP_SECONDS``)
    and sweeps expired threads (every ``CRIOGEN_SWEEP_SECONDS``); once per process, and
    not when ``CRIOGEN_SWEEP_SECONDS`` is 0."""
    global _timer
    period = float(settings.CRIOGEN_SWEEP_SECONDS)
    if period <= 0 or settings.CRIOGEN_RUNNER != "inprocess":
        return
    with _pool_lock:
        if _timer is not None and _timer.is_alive():
            return
        _timer = threading.Thread(target=_tick, args=(period,), name="criogen-sweep", daemon=True)
        _timer.start()


def _tick(period: float) -> None:
    from criogen.outbound import prune_attempts
    from criogen.services.deadlines import fire_deadlines
    from criogen.services.streams import prune_streams
    from criogen.services.threads import sweep_threads

    reap_every = min(period, float(settings.CRIOGEN_REAP_SECONDS) or period)
    last_sweep = time.monotonic()
    while not _shutdown.wait(reap_every):
        close_old_connections()
        try:
            reap_expired()
            if time.monotonic() - last_sweep >= period:
                last_sweep = time.monotonic()
                sweep_threads()
                prune_streams()  # resumable-stream logs past CRIOGEN_STREAM_RETENTION_SECONDS
                prune_attempts()  # outbound records past CRIOGEN_OUTBOUND_RETENTION_SECONDS
                fire_deadlines()
        except _CONNECTION_LOST as exc:
            # Its connection broke (killed while idle): the next round opens a new one.
            _reconnect()
            logger.warning("the in-process sweep lost its database connection: %s", exc)
        except Exception:
            logger.exception("the in-process sweep failed")
        finally:
            close_old_connections()
