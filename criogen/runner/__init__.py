"""The background runner: the one entry point that executes a run, and how it is called.

:func:`execute_run` does one run from start to end status:

1. **Claim** it with a conditional ``UPDATE`` (``pending`` -> ``running``, or a
   ``running`` run whose worker's lease expired) that also requires that no other run on
   the thread is running or was queued earlier; ``rows != 1`` means someone else has it
   or it is not its turn, and the call returns ``None``.
2. **Run** the graph from :mod:`criogen.registry` with the run's durability: a resume
   command resumes the thread, ``retry`` retries it, ``checkpoint_id`` forks from that
   checkpoint first; a run claimed again after a crash continues from its own last
   checkpoint (``sync``/``async``) or starts over from the thread's state before it
   (``exit``, which wrote nothing). While it runs, a heartbeat thread renews the run's
   lease every third of ``CRIOGEN_LEASE_SECONDS``, also while a node takes long.
3. **Record** the outcome: completed -> ``success``; suspended -> ``interrupted``
   (input needed, ``cancelled_by`` empty); a node error -> ``error``; cancelled ->
   ``interrupted`` with ``cancelled_by`` set (for ``rollback`` the run's checkpoints are
   deleted first). A worker shutting down stops after the current step and hands the
   run back (``pending``); so does a run that lost its database connection or its
   thread's lease (counted in ``hand_backs``, at most :data:`MAX_HAND_BACKS`). A run
   never stays ``running`` after it ends.
4. **Start the next** pending run on the same thread (strategy ``enqueue``).

:func:`enqueue_run` dispatches by ``settings.CRIOGEN_RUNNER``: ``inprocess`` (a thread
pool in this process, ``CRIOGEN_INPROCESS_WORKERS`` threads) or ``celery`` (the task
``criogen.tasks.execute_run_task``). :func:`reap_expired` re-queues runs whose worker
died; it runs every ``CRIOGEN_REAP_SECONDS`` on a timer in the in-process runner and on
Celery beat, and in ``manage.py criogen_sweep``.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import (
    InterfaceError,
    OperationalError,
    close_old_connections,
    connections,
    transaction,
)
from django.db.models import Exists, F, OuterRef, Q
from django.db.models import Value as V
from django.db.models.functions import Coalesce
from django.db.models.query import QuerySet
from django.utils import timezone

from criogen import events
from criogen.engine.errors import (
    CriogenError,
    LeaseLost,
    RunCancelled,
    StorageError,
    ThreadInterrupted,
)
from criogen.registry import get_graph, storage
from criogen.storage.models import Checkpoint, Run, Thread, Value
from criogen.storage.rows import Columns, columns

__all__ = [
    "HANDED_BACK",
    "MAX_HAND_BACKS",
    "drain",
    "enqueue_run",
    "execute_run",
    "reap_expired",
    "request_shutdown",
    "request_stop",
    "start_background",
]

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


# -- stopping ----------------------------------------------------------------------------


class _Stop:
    """The ``should_stop`` of one run: a shutdown of this process, a cancel (set here
    by :func:`request_stop`, or in the database by another process), or the run lost:
    the reaper took it away (its lease expired while this worker stalled) and another
    attempt owns it now."""

    def __init__(self, run_id: str, attempt: int) -> None:
        self.run_id = run_id
        self.attempt = attempt
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


# -- the run lease ---------------------------------------------------------------------


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

    def remove(self, run_id: str) -> None:
        with self._cond:
            self._runs.pop(run_id, None)

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


# -- executing ---------------------------------------------------------------------------


@dataclass
class _Outcome:
    status: str
    error: dict[str, Any] | None = None
    cancelled: bool = False
    counted: bool = False
    """A ``pending`` outcome that counts against :data:`MAX_HAND_BACKS`."""


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


def _blockers() -> QuerySet[Run]:
    """Runs that must end before the outer run may start: running on its thread, or
    queued on it earlier."""
    return (
        Run.objects.filter(thread_id=OuterRef("thread_id"))
        .exclude(pk=OuterRef("pk"))
        .filter(Q(status="running") | Q(status="pending", created_at__lt=OuterRef("created_at")))
    )


def _claim(run_id: str) -> Run | None:
    """Move the run to ``running`` and return it, if it is this caller's to run: the
    conditional UPDATE is the lock (pending, or running with a dead worker), and only
    when no earlier run on its thread is still to end."""
    now = time.time()
    alias = Run.objects.db
    statement = _claim_statement(alias)
    if statement is None:
        return _claim_orm(run_id, now)
    run = statement.run
    params = [
        _worker_name(),
        now + _lease_seconds(),
        run.param("started_at", timezone.now()),
        run.param("updated_at", timezone.now()),
        run.param("run_id", run_id),
        now,
    ]
    with connections[alias].cursor() as cursor:
        cursor.execute(statement.sql, params)
        row = cursor.fetchone()
    return None if row is None else run.instance(row)


@dataclass(frozen=True)
class _ClaimStatement:
    sql: str
    run: Columns


_claim_statements: dict[str, _ClaimStatement | None] = {}


def _claim_statement(alias: str) -> _ClaimStatement | None:
    """The claim as one ``UPDATE … RETURNING`` for ``alias`` (None where the database
    cannot return rows from an UPDATE: SQLite before 3.35, other vendors).

    Built by the ORM, the claim was an UPDATE with an ``Exists`` subquery and then a
    ``get`` of the row: two round trips and ~2 ms of compiling, half of the runner's own
    CPU per run (bench/NOTES.md, "The runner's claim")."""
    if alias in _claim_statements:
        return _claim_statements[alias]
    connection = connections[alias]
    returning = connection.vendor == "postgresql" or (
        connection.vendor == "sqlite" and connection.Database.sqlite_version_info >= (3, 35)
    )
    if not returning:
        _claim_statements[alias] = None
        return None
    qn = connection.ops.quote_name
    meta = Run._meta
    table = qn(meta.db_table)

    def col(name: str) -> str:
        return qn(meta.get_field(name).column)

    status, lease = col("status"), col("lease_expires")
    # Identifiers come from the model's metadata, quoted; every value is a parameter.
    blockers = (
        f"SELECT 1 FROM {table} b WHERE b.{col('thread')} = {table}.{col('thread')}"  # noqa: S608
        f" AND b.{col('run_id')} <> {table}.{col('run_id')}"
        f" AND (b.{status} = 'running'"
        f" OR (b.{status} = 'pending' AND b.{col('created_at')} < {table}.{col('created_at')}))"
    )
    run = columns(Run, alias)
    sql = (
        f"UPDATE {table} SET {status} = 'running', {col('attempts')} = {col('attempts')} + 1,"  # noqa: S608
        f" {col('worker')} = %s, {lease} = %s,"
        f" {col('started_at')} = COALESCE({col('started_at')}, %s), {col('updated_at')} = %s"
        f" WHERE {col('run_id')} = %s"
        f" AND ({status} = 'pending' OR ({status} = 'running' AND {lease} < %s))"
        f" AND NOT EXISTS ({blockers})"
        f" RETURNING {run.select()}"
    )
    statement = _claim_statements[alias] = _ClaimStatement(sql, run)
    return statement


def _claim_orm(run_id: str, now: float) -> Run | None:
    """:func:`_claim` through the ORM, for databases without ``UPDATE … RETURNING``."""
    rows = (
        Run.objects.filter(pk=run_id)
        .filter(Q(status="pending") | Q(status="running", lease_expires__lt=now))
        .filter(~Exists(_blockers()))
        .update(
            status="running",
            attempts=F("attempts") + 1,
            worker=_worker_name(),
            lease_expires=now + _lease_seconds(),
            started_at=Coalesce(F("started_at"), V(timezone.now())),
            updated_at=timezone.now(),
        )
    )
    if rows != 1:
        return None
    return Run.objects.get(pk=run_id)


def execute_run(run_id: Any) -> str | None:
    """Execute the run ``run_id`` if it can be claimed; return its end status, or
    :data:`HANDED_BACK`, or ``None`` when it was not claimed (someone else has it, it
    ended, or an earlier run on its thread has not)."""
    run_id = str(run_id)
    run = _on_live_connection(lambda: _claim(run_id))
    if run is None:
        return None
    thread_id = run.thread_id
    events.run_changed(run_id=run_id, thread_id=thread_id, status="running")
    stop = _Stop(run_id, run.attempts)
    with _stops_lock:
        _stops[run_id] = stop
    _leases.add(run_id, run.attempts)
    try:
        outcome = _drive(run, stop)
    finally:
        _leases.remove(run_id)
        with _stops_lock:
            _stops.pop(run_id, None)
    if outcome.status == "lost":
        logger.warning("run %s was taken over by another attempt; this one stopped", run_id)
        return None
    held = Run.objects.filter(pk=run_id, status="running", attempts=run.attempts)
    if outcome.status == "pending":
        back: dict[str, Any] = {"status": "pending", "lease_expires": 0.0}
        if outcome.counted:
            back["hand_backs"] = F("hand_backs") + 1
        rows = _on_live_connection(lambda: held.update(**back, updated_at=timezone.now()))
        if rows == 1:
            events.run_changed(run_id=run_id, thread_id=thread_id, status="pending")
        return HANDED_BACK
    if outcome.cancelled:
        _on_live_connection(lambda: run.refresh_from_db(fields=["cancel_action", "cancelled_by"]))
        if run.cancel_action == "rollback":
            _rollback(run)
    fields: dict[str, Any] = {
        "status": outcome.status,
        "error": outcome.error,
        "ended_at": timezone.now(),
        "updated_at": timezone.now(),
        "lease_expires": 0.0,
    }
    if outcome.cancelled:
        fields["cancelled_by"] = Coalesce(F("cancelled_by"), V("system"))
    rows = _on_live_connection(lambda: held.update(**fields))
    if rows == 1:
        events.run_changed(run_id=run_id, thread_id=thread_id, status=outcome.status)
        if (run.kwargs or {}).get("webhook"):
            _post_webhook(run_id)
    else:
        logger.warning("run %s was taken over while it ran; its outcome is not recorded", run_id)
    if thread_id is not None:
        _on_live_connection(lambda: start_next(thread_id))
    return outcome.status


def _drive(run: Run, stop: _Stop) -> _Outcome:
    """Run the graph; turn how it ended into an outcome (never raises)."""
    try:
        result = _call(run, stop)
    except RunCancelled:
        if stop.reason == "lost":
            return _Outcome("lost")
        if stop.reason == "shutdown":
            return _Outcome("pending")
        if stop.reason == "connection":
            return _hand_back(run, f"the database connection was lost ({stop.error})")
        return _Outcome("interrupted", cancelled=True)
    except (LeaseLost, StorageError) as exc:
        # The thread's lease lapsed, or another write got there first: a stalled worker
        # the reaper presumed dead is still finishing a step, or the database hiccuped.
        # Hand the run back: the next claim continues it from its last checkpoint.
        _reconnect()  # if the database hiccuped, the hand-back needs a new connection
        return _hand_back(run, str(exc), exc.to_dict())
    except _CONNECTION_LOST as exc:
        # Lost at any other point of the run (reading the head, taking the thread): the
        # same as between two steps.
        _reconnect()
        return _hand_back(run, f"the database connection was lost ({exc})")
    except CriogenError as exc:
        return _Outcome("error", _error_json(exc.to_dict()))
    except Exception as exc:
        logger.exception("run %s raised", run.pk)
        return _Outcome(
            "error", {"code": "internal_error", "type": type(exc).__name__, "message": str(exc)}
        )
    if isinstance(result, dict):  # an ended head, read back
        return _Outcome(**result)
    status = getattr(result, "status", None)
    if status == "suspended":
        return _Outcome("interrupted")
    return _Outcome("success")


def _hand_back(run: Run, why: str, error: dict[str, Any] | None = None) -> _Outcome:
    """Hand the run back (``pending``, counted), or end it in ``error`` when it has been
    handed back :data:`MAX_HAND_BACKS` times already."""
    if run.hand_backs < MAX_HAND_BACKS:
        logger.warning("run %s: %s; handing it back", run.pk, why)
        return _Outcome("pending", counted=True)
    if error is None:
        error = StorageError(why).to_dict()
    error["message"] = f"{error.get('message', why)} (handed back {run.hand_backs} times)"
    return _Outcome("error", _error_json(error))


def _call(run: Run, stop: _Stop) -> Any:
    graph = get_graph(run.graph_id)
    rid = str(run.run_id)
    thread = graph.thread(run.thread_id)
    options: dict[str, Any] = {"run_id": rid, "durability": run.durability}
    if _accepts_should_stop(graph):
        options["should_stop"] = stop
    kwargs = run.kwargs or {}
    metadata = run.metadata or {}
    # Who asked for the run, and from where: the engine's audit event names them.
    by = kwargs.get("actor") or metadata.get("resumed_by") or metadata.get("retried_by")
    actor = {"by": str(by) if by else None, "door": kwargs.get("door") or "api"}
    if (
        run.attempts == 1
        and run.command is None
        and not run.checkpoint_id
        and kwargs.get("action") != "retry"
    ):
        # The common case, a new turn claimed for the first time, reads the head only
        # when it takes the thread.
        try:
            return thread.run(run.input, **options, **actor)
        except ThreadInterrupted:
            # The previous run was cancelled mid-way: the new turn starts from its state.
            head = thread.head
            assert head is not None
            thread.rewind(head.id)
            return thread.run(run.input, **options, **actor)
    head = thread.head
    if head is not None and head.run_id == rid:
        # Claimed again after a crash or a hand-back: this run already wrote checkpoints.
        if head.status == "in_progress":
            return thread.retry(**options)
        return _ended(head)
    if kwargs.get("action") == "retry":
        return thread.retry(**options, **actor)
    if run.command is not None and "resume" in run.command:
        return thread.resume(run.command.get("resume"), **options, **actor)
    if run.command is not None:
        # command.update alone: applied when the run was created; the thread goes on
        # waiting (or stays as it is).
        return _ended(thread.head) if thread.head is not None else {"status": "success"}
    if run.checkpoint_id:
        # A fork written without this run's id: if the run is claimed again after a
        # crash, it forks again instead of mistaking the fork for its own progress.
        fork = thread.rewind(run.checkpoint_id)
        if run.input is None:
            if fork.status in ("in_progress", "failed"):
                return thread.retry(**options)
            return _ended(fork)
        return thread.run(run.input, **options, **actor)
    if head is not None and head.status == "in_progress" and head.source != "fork":
        # The previous run was cancelled mid-way: the new turn starts from its state.
        thread.rewind(head.id)
    return thread.run(run.input, **options, **actor)


def _ended(head: Any) -> dict[str, Any]:
    if head.status == "suspended":
        return {"status": "interrupted"}
    if head.status == "failed":
        return {"status": "error", "error": _error_json(dict(head.error or {}))}
    return {"status": "success"}


def _accepts_should_stop(graph: Any) -> bool:
    from criogen.engine.workflows import CompiledWorkflow

    return isinstance(graph, CompiledWorkflow) or bool(
        getattr(graph, "supports_should_stop", False)
    )


def _error_json(data: dict[str, Any]) -> dict[str, Any]:
    data.pop("traceback", None)
    return json.loads(json.dumps(data, default=str))


def _rollback(run: Run) -> None:
    """Delete the checkpoints ``run`` wrote and move the thread's head back."""
    tid, rid = run.thread_id, str(run.run_id)
    store = storage()
    # Hold the thread's lease (this run's id) so no other run writes meanwhile.
    if not store.acquire(tid, rid, seconds=_lease_seconds()):
        logger.warning("rollback of run %s skipped: another run holds thread %r", rid, tid)
        return
    try:
        with transaction.atomic():
            versions = Checkpoint.objects.filter(thread_id=tid, run_id=rid).values_list(
                "version", flat=True
            )
            low = min(versions, default=None)
            if low is None:
                return
            # The run held the thread while it wrote, so its checkpoints are the newest.
            Checkpoint.objects.filter(thread_id=tid, version__gte=low).delete()
            Value.objects.filter(thread_id=tid, version__gte=low).delete()
            prev = Checkpoint.objects.filter(thread_id=tid).order_by("-version").first()
            Thread.objects.filter(pk=tid).update(
                head_version=prev.version if prev else 0,
                head_id=prev.id if prev else "",
                head_status=prev.status if prev else "",
                updated_at=timezone.now(),
            )
    finally:
        store.release(tid, rid)


def _post_webhook(run_id: str) -> None:
    """Have the ended run, with the thread's state, POSTed to the run's ``webhook``
    (LangGraph's ``webhook`` parameter) by the outbound sender, off this thread. Best
    effort: trouble is recorded and logged, never raised (the thread's next run must
    start whatever happens here)."""
    from criogen import outbound

    try:
        run = Run.objects.get(pk=run_id)
        values = None
        if run.thread_id is not None:
            head = storage().head(run.thread_id)
            values = head.state if head is not None else None
        metadata = run.metadata or {}
        payload = {
            "run_id": str(run.run_id),
            "thread_id": run.thread_id,
            "assistant_id": str(run.assistant_id),
            "graph_id": run.graph_id,
            "status": run.status,
            "error": run.error,
            "cancelled_by": run.cancelled_by,
            "metadata": metadata,
            "created_at": run.created_at.isoformat(),
            "updated_at": run.updated_at.isoformat(),
            "values": values,
        }
        cron_id = metadata.get("cron_id") if isinstance(metadata, dict) else None
        outbound.send_webhook(
            kind="cron" if cron_id else "run",
            url=str(run.kwargs["webhook"]),
            payload=payload,
            run_id=run.run_id,
            thread_id=run.thread_id,
            cron_id=cron_id,
        )
    except Exception:
        logger.exception("the webhook of run %s could not be queued", run_id)


def start_next(thread_id: str) -> str | None:
    """Enqueue the oldest pending run of the thread, if any; return its id."""
    nxt = (
        Run.objects.filter(thread_id=thread_id, status="pending")
        .order_by("created_at")
        .values_list("pk", flat=True)
        .first()
    )
    if nxt is not None:
        enqueue_run(nxt)
        return str(nxt)
    return None


# -- recovery --------------------------------------------------------------------------


def reap_expired() -> dict[str, list[str]]:
    """Re-queue runs whose worker died, and restart queued runs nobody started.

    ``running`` runs whose lease expired go back to ``pending`` and are enqueued; the
    run that claims them continues from their last checkpoint (``sync``/``async``) or
    starts over (``exit``). ``pending`` runs that are first in line on their thread and
    older than a lease (their enqueue was lost, e.g. the web process died) are enqueued
    again. Returns ``{"requeued": [...], "restarted": [...]}`` (run ids).
    """
    now = time.time()
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
    stale = timezone.now() - timedelta(seconds=_lease_seconds())
    restarted = [
        str(pk)
        for pk in Run.objects.filter(status="pending", updated_at__lt=stale)
        .filter(~Exists(_blockers()))
        .values_list("pk", flat=True)[:500]
        if str(pk) not in requeued
    ]
    for run_id in requeued + restarted:
        enqueue_run(run_id)
    return {"requeued": requeued, "restarted": restarted}


# -- dispatch --------------------------------------------------------------------------

_pool: ThreadPoolExecutor | None = None
_futures: set[Future[Any]] = set()
_pool_lock = threading.Lock()
_timer: threading.Thread | None = None


def enqueue_run(run_id: Any) -> None:
    """Have the run executed off this thread, as ``settings.CRIOGEN_RUNNER`` says.

    Call it after the run's row is committed (``transaction.on_commit``). Enqueuing a
    run twice is harmless: only one claim succeeds.
    """
    mode = settings.CRIOGEN_RUNNER
    if mode == "inprocess":
        _submit(str(run_id))
    elif mode == "celery":
        from criogen.celery import app

        app.send_task("criogen.tasks.execute_run_task", args=[str(run_id)])
    else:
        raise ImproperlyConfigured(f"CRIOGEN_RUNNER={mode!r}; use 'inprocess' or 'celery'.")


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
        close_old_connections()


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
                fire_deadlines()
        except _CONNECTION_LOST as exc:
            # Its connection broke (killed while idle): the next round opens a new one.
            _reconnect()
            logger.warning("the in-process sweep lost its database connection: %s", exc)
        except Exception:
            logger.exception("the in-process sweep failed")
        finally:
            close_old_connections()
