"""Run leases: the heartbeat that renews the leases of the runs this process executes,
and the reaper that re-queues runs whose worker died (its lease expired)."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

from django.db.models import Exists, F, Q
from django.utils import timezone

from criogen import events
from criogen.runner.base import _CONNECTION_LOST, _lease_seconds
from criogen.runner.claim import _blockers
from criogen.runner.handoff import enqueue_run
from criogen.storage.models import Run

__all__ = ["reap_expired"]

logger = logging.getLogger("criogen.runner")


class _Leases:
    """One daemon thread per process that renews the leases of the runs it executes."""

    def __init__(self) -> None:
        self._runs: dict[str, int] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._lingering = False

    def add(self, run_id: str, attempt: int) -> None:
        with self._cond:
            self._runs[run_id] = attempt
            if self._lingering:
                self._cond.notify()  # end the linger: renew on this run's schedule
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="criogen-run-leases", daemon=True
                )
                self._thread.start()

    def remove(self, run_id: str, attempt: int) -> None:
        """Stop renewing ``attempt`` of the run; a later attempt of the same run that
        took it over in this process (the reaper gave it away) keeps its renewals."""
        with self._cond:
            if self._runs.get(run_id) == attempt:
                del self._runs[run_id]

    LINGER = 5.0
    """Seconds the thread waits for a next run before it ends (no thread per run)."""

    def _loop(self) -> None:
        from django.db import connection

        try:
            while True:
                with self._cond:
                    if not self._runs:
                        self._lingering = True
                        self._cond.wait(self.LINGER)
                        self._lingering = False
                        if not self._runs:
                            self._thread = None
                            return
                    self._cond.wait(_lease_seconds() / 3)
                    runs = dict(self._runs)
                if not runs:
                    continue
                # One statement for all the process's runs; each only while it is
                # still this attempt's (the reaper may have given it to another).
                held = Q()
                for run_id, attempt in runs.items():
                    held |= Q(pk=run_id, status="running", attempts=attempt)
                try:
                    Run.objects.filter(held).update(lease_expires=time.time() + _lease_seconds())
                except _CONNECTION_LOST as exc:
                    # A new connection at the next renewal, a third of a lease later: a
                    # broken connection must not let the leases of live runs lapse.
                    connection.close()
                    logger.warning("could not renew the leases of runs %s: %s", list(runs), exc)
                except Exception:
                    logger.exception("could not renew the leases of runs %s", list(runs))
        finally:
            connection.close()  # this thread's own connection; never opens one


_leases = _Leases()


def reap_expired(*, leases_at: float | None = None) -> dict[str, list[str]]:
    """Re-queue runs whose worker died, and restart queued runs nobody started.

    ``running`` runs whose lease expired go back to ``pending`` and are enqueued; the
    run that claims them continues from their last checkpoint (``sync``/``async``) or
    starts over (``exit``). ``pending`` runs that are first in line on their thread and
    older than a lease (their enqueue was lost, e.g. the web process died) are enqueued
    again, and so are delayed runs that came due (their timer died with a server).
    Returns ``{"requeued": [...], "restarted": [...]}`` (run ids). ``leases_at`` (Unix
    time, default the clock) is the moment the ``running`` runs' leases are judged at:
    a later one re-queues what the reaper would then (a worker stalled since, without
    racing its heartbeat).
    """
    now = time.time() if leases_at is None else leases_at
    requeued: list[str] = []
    expired = Run.objects.filter(status="running", lease_expires__lt=now).values_list(
        "pk", "attempts", "thread_id"
    )
    for pk, attempts, thread_id in list(expired[:500]):
        rows = Run.objects.filter(
            pk=pk, status="running", attempts=attempts, lease_expires__lt=now
        ).update(status="pending", lease_expires=0.0, updated_at=timezone.now())
        if rows == 1:
            logger.warning("run %s lost its worker; re-queued", pk)
            requeued.append(str(pk))
            events.run_changed(run_id=pk, thread_id=thread_id, status="pending")
    moment = timezone.now()
    stale = moment - timedelta(seconds=_lease_seconds())
    due = Q(not_before__isnull=True) | Q(not_before__lte=moment)
    # A delayed run that came due and was not touched since: its timer was lost (a
    # restart) or its thread's previous run ended before it was due.
    woken = Q(not_before__lte=moment, updated_at__lt=F("not_before"))
    restarted: list[str] = []
    for pk, not_before in (
        Run.objects.filter(status="pending")
        .filter((Q(updated_at__lt=stale) & due) | woken)
        .filter(~Exists(_blockers()))
        .values_list("pk", "not_before")[:500]
    ):
        if str(pk) in requeued:
            continue
        if not_before is not None:
            # Touched now, so the next round does not hand it over again while it
            # waits for a worker (the stale rule above still applies a lease later).
            Run.objects.filter(pk=pk, status="pending").update(updated_at=moment)
        restarted.append(str(pk))
    for run_id in requeued + restarted:
        enqueue_run(run_id)
    return {"requeued": requeued, "restarted": restarted}
