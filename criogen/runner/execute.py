"""Executing one run: :func:`execute_run` claims it, drives its graph, records how it
ended (cancelled, handed back, rolled back, failed, timed out…), posts its webhook and starts the
thread's next run."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings
from django.db.models import F
from django.db.models import Value as V
from django.db.models.functions import Coalesce
from django.utils import timezone

from criogen import events
from criogen.engine.errors import (
    CriogenError,
    LeaseLost,
    RunCancelled,
    StorageError,
    ThreadInterrupted,
)
from criogen.engine.records import RunError
from criogen.registry import get_graph, storage
from criogen.runner.base import (
    _CONNECTION_LOST,
    HANDED_BACK,
    MAX_HAND_BACKS,
    _lease_seconds,
    _on_live_connection,
    _reconnect,
)
from criogen.runner.claim import _claim
from criogen.runner.handoff import start_next
from criogen.runner.leases import _leases
from criogen.runner.stops import _Stop, _stops, _stops_lock
from criogen.services.notifications import notify_suspension
from criogen.storage.models import Run
from criogen.storage.orm.runs import end_run

__all__ = ["execute_run"]

logger = logging.getLogger("criogen.runner")


@dataclass
class _Outcome:
    status: str
    error: dict[str, Any] | None = None
    cancelled: bool = False
    counted: bool = False
    """A ``pending`` outcome that counts against :data:`MAX_HAND_BACKS`."""


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
    stop = _Stop(run_id, run.attempts, **_deadline(run))
    with _stops_lock:
        _stops[run_id] = stop
    attempt = run.attempts
    _leases.add(run_id, attempt)
    try:
        outcome = _drive(run, stop)
    finally:
        # Only this attempt's: a later one of the same run may be under way here.
        _leases.remove(run_id, attempt)
        with _stops_lock:
            if _stops.get(run_id) is stop:
                del _stops[run_id]
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
    ended_at = timezone.now()
    ended = _on_live_connection(
        lambda: end_run(
            run_id,
            attempts=run.attempts,
            status=outcome.status,
            error=outcome.error,
            ended_at=ended_at,
            cancelled=outcome.cancelled,
        )
    )
    if ended is None:  # not PostgreSQL: through the ORM
        fields: dict[str, Any] = {
            "status": outcome.status,
            "error": outcome.error,
            "ended_at": ended_at,
            "updated_at": ended_at,
            "lease_expires": 0.0,
        }
        if outcome.cancelled:
            fields["cancelled_by"] = Coalesce(F("cancelled_by"), V("system"))
        ended = _on_live_connection(lambda: held.update(**fields)) == 1
    if ended:
        events.run_changed(run_id=run_id, thread_id=thread_id, status=outcome.status)
        if (run.kwargs or {}).get("webhook"):
            _post_webhook(run_id)
        if outcome.status == "interrupted" and not outcome.cancelled:
            # The run ended with its thread suspended: the assistant's notifications.
            notify_suspension(run_id)  # after commit, once per suspension; never raises
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
        return _hand_back(run, str(exc), exc)
    except _CONNECTION_LOST as exc:
        # Lost at any other point of the run (reading the head, taking the thread): the
        # same as between two steps.
        _reconnect()
        return _hand_back(run, f"the database connection was lost ({exc})")
    except CriogenError as exc:
        if stop.reason == "timeout":
            # Its time limit passed between two steps: the head is a failure checkpoint
            # carrying TimeoutError, and retry continues from it.
            cause = exc.__cause__
            if isinstance(cause, TimeoutError):  # the run's error names it, as the head's does
                return _Outcome("timeout", _error_json(replace(_record(cause), code="timeout")))
            return _Outcome("timeout", _error_json(_record(exc), exc.details))
        return _Outcome("error", _error_json(_record(exc), exc.details))
    except Exception as exc:
        logger.exception("run %s raised", run.pk)
        return _Outcome("error", _error_json(_record(exc)))
    if isinstance(result, dict):  # an ended head, read back
        return _Outcome(**result)
    status = getattr(result, "status", None)
    if status == "suspended":
        return _Outcome("interrupted")
    return _Outcome("success")


def _deadline(run: Run) -> dict[str, Any]:
    """The run's time limit for :class:`_Stop`: its own (``kwargs``, chosen when it was
    created from its config, its assistant's, or the setting), counted from when it
    first started, so a run handed back or taken over keeps its deadline."""
    limit = (run.kwargs or {}).get("run_timeout_seconds")
    if limit is None:
        limit = settings.CRIOGEN_RUN_TIMEOUT_SECONDS
    limit = float(limit)
    if limit <= 0:
        return {}
    started = run.started_at or timezone.now()
    return {"deadline": started.timestamp() + limit, "limit": limit}


def _hand_back(run: Run, why: str, exc: CriogenError | None = None) -> _Outcome:
    """Hand the run back (``pending``, counted), or end it in ``error`` when it has been
    handed back :data:`MAX_HAND_BACKS` times already."""
    if run.hand_backs < MAX_HAND_BACKS:
        logger.warning("run %s: %s; handing it back", run.pk, why)
        return _Outcome("pending", counted=True)
    if exc is None:
        exc = StorageError(why)
    record = replace(_record(exc), message=f"{exc.message} (handed back {run.hand_backs} times)")
    return _Outcome("error", _error_json(record, exc.details))


def _call(run: Run, stop: _Stop) -> Any:
    graph = get_graph(run.graph_id)
    rid = str(run.run_id)
    thread = graph.thread(run.thread_id)
    options: dict[str, Any] = {"run_id": rid, "durability": run.durability}
    if _accepts_should_stop(graph):
        options["should_stop"] = stop
    kwargs = run.kwargs or {}
    for breakpoint in ("interrupt_before", "interrupt_after"):
        if kwargs.get(breakpoint):
            # Checked against the graph when the run was created.
            options[breakpoint] = kwargs[breakpoint]
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
    if run.command is not None and run.command.get("goto") is not None:
        # command.goto: "__end__" resolves the suspension without running what waited;
        # a workflow's node continues from there (checked when the run was created).
        return thread.goto(run.command["goto"], **options, **actor)
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
        error = dict(head.error or {})
        # Its time limit ended it (the runner's TimeoutError, between steps, no node).
        timed_out = error.get("type") == "TimeoutError" and not error.get("node")
        return {
            "status": "timeout" if timed_out else "error",
            "error": _error_json(RunError.from_dict(error), error),
        }
    return {"status": "success"}


def _accepts_should_stop(graph: Any) -> bool:
    from criogen.engine.workflows import CompiledWorkflow

    return isinstance(graph, CompiledWorkflow) or bool(
        getattr(graph, "supports_should_stop", False)
    )


def _record(exc: BaseException) -> RunError:
    """The record of an exception that ended a run (the node a RunFailed names)."""
    node = exc.details.get("node") if isinstance(exc, CriogenError) else None
    return RunError(
        type=type(exc).__name__,
        code=getattr(exc, "code", None) or "internal_error",
        message=getattr(exc, "message", None) or str(exc),
        node=str(node) if node is not None else None,
        traceback="",
    )


def _error_json(error: RunError, details: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A run's ``error``: the record without its traceback (that stays on the failure
    checkpoint, for the dashboard), with the error's other facts (a CriogenError's
    details, ``graph_id``…) around it."""
    data = {**(details or {}), **error.to_dict()}
    del data["traceback"]
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
        store.rollback_run(tid, rid)
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
