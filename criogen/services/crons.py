"""Crons: schedules that start runs, and the timer that fires them.

A cron has a 5-field schedule (``*/5 * * * *``) read in its ``timezone``; when
``next_run_date`` passes, :func:`fire_due_crons` claims the tick with a conditional
UPDATE (so two timers never fire it twice), moves ``next_run_date`` to the next tick,
and creates a run through :func:`criogen.services.runs.create_run` (by
``cron:<cron_id>``, door ``cron``) with the cron's payload — including its
durability, resolved once at creation from ``durability`` / ``checkpoint_during`` by
the same rule as runs. The timer is the in-process one (:func:`start_timer`, started
with the server when ``CRIOGEN_RUNNER="inprocess"``) or Celery beat
(``criogen.tasks.fire_crons_task``).

:func:`create_cron`, :func:`update_cron` and :func:`delete_cron` are the only code
that changes a cron; the REST API's ``/runs/crons`` endpoints call them.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.db import close_old_connections, connections, transaction
from django.utils import timezone

from criogen.engine.errors import InvalidArgument
from criogen.outbound import check_webhook_url
from criogen.storage.models import Cron

__all__ = [
    "PAYLOAD_FIELDS",
    "check_schedule",
    "check_timezone",
    "create_cron",
    "delete_cron",
    "fire_due_crons",
    "next_tick",
    "start_timer",
    "update_cron",
]

logger = logging.getLogger("criogen.crons")

PAYLOAD_FIELDS = (
    "input",
    "config",
    "context",
    "metadata",
    "webhook",
    "multitask_strategy",
    "stream_mode",
    "durability",
    "after_seconds",
)
"""The run fields a cron keeps in its ``payload`` and gives every run it fires."""

ON_RUN_COMPLETED = ("delete", "keep")

_UNSET: Any = object()


def check_schedule(schedule: Any) -> str:
    """A 5-field cron expression (minute hour day month weekday), else 422."""
    from croniter import croniter

    if (
        not isinstance(schedule, str)
        or len(schedule.split()) != 5
        or not croniter.is_valid(schedule)
    ):
        raise InvalidArgument(
            f"schedule {schedule!r} is not a 5-field cron expression "
            "(minute hour day-of-month month day-of-week, e.g. '*/5 * * * *').",
            field="schedule",
        )
    return schedule


def check_timezone(name: Any) -> str:
    """An IANA time zone name (default UTC), else 422."""
    if name is None:
        return "UTC"
    try:
        ZoneInfo(str(name))
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidArgument(
            f"timezone {name!r} is not an IANA time zone (e.g. 'Europe/Paris').", field="timezone"
        ) from None
    return str(name)


def _check_on_run_completed(value: Any) -> str:
    if value not in ON_RUN_COMPLETED:
        raise InvalidArgument(
            f"on_run_completed is {value!r}; use 'delete' or 'keep'.", field="on_run_completed"
        )
    return str(value)


def next_tick(schedule: str, tz: str, after: datetime | None = None) -> datetime:
    """The first time after ``after`` (default now) that the schedule fires, in UTC."""
    from croniter import croniter

    zone = ZoneInfo(tz)
    start = (after or timezone.now()).astimezone(zone)
    return croniter(schedule, start).get_next(datetime).astimezone(UTC)  # type: ignore[no-any-return]


def create_cron(
    *,
    assistant_id: str,
    thread_id: str | None,
    schedule: str,
    timezone: str | None = None,
    payload: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    on_run_completed: str | None = None,
    end_time: datetime | None = None,
    enabled: bool | None = None,
    owner: Any = None,
) -> Cron:
    """A new cron, its first tick computed.

    Args:
        assistant_id: an assistant's UUID or a graph id (stored as the assistant's UUID).
        thread_id: the thread each tick runs on; None: a stateless run each tick. The
            caller has checked that ``owner`` may use it.
        schedule / timezone: a 5-field cron expression read in this IANA zone
            (default UTC).
        payload: the fields each fired run gets (:data:`PAYLOAD_FIELDS`).
        on_run_completed: stateless runs: ``delete`` (default) or ``keep`` their thread.
        enabled: default True.
        owner: the user the cron belongs to (and its runs' threads).
    Raises:
        InvalidArgument (422, names the field), GraphNotFound (404).
    """
    from criogen.services.assistants import resolve_assistant

    payload = _check_payload(payload)
    schedule = check_schedule(schedule)
    tz = check_timezone(timezone)
    assistant = resolve_assistant(assistant_id=assistant_id)
    return Cron.objects.create(
        assistant_id=str(assistant.assistant_id),
        thread_id=thread_id,
        schedule=schedule,
        timezone=tz,
        payload=payload,
        metadata=metadata or {},
        on_run_completed=_check_on_run_completed(on_run_completed or "delete"),
        end_time=end_time,
        enabled=True if enabled is None else enabled,
        next_run_date=next_tick(schedule, tz),
        user=owner,
    )


def _check_payload(payload: dict[str, Any] | None) -> dict[str, Any]:
    """The payload, its fields checked as a run checks them (422 naming the field)."""
    from criogen.services.assistants import check_run_timeout
    from criogen.services.runs import check_after_seconds

    payload = dict(payload or {})
    check_webhook_url(payload.get("webhook"))
    if payload.get("after_seconds") is not None:
        payload["after_seconds"] = check_after_seconds(payload["after_seconds"])
    check_run_timeout(payload.get("config"))
    return payload


def update_cron(
    *,
    cron: Cron,
    schedule: str = _UNSET,
    timezone: str | None = _UNSET,
    payload: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    end_time: datetime | None = _UNSET,
    enabled: bool | None = None,
    on_run_completed: str | None = None,
) -> Cron:
    """Replace the fields given (left out, or None for ``payload``, ``metadata``,
    ``enabled`` and ``on_run_completed``: unchanged). ``payload`` is merged into the
    cron's; ``end_time=None`` removes the end; ``timezone=None`` is UTC. A new schedule,
    time zone or ``enabled`` moves the next run to the next tick from now.

    Raises:
        InvalidArgument (422, names the field); nothing is saved then.
    """
    payload = _check_payload(payload)
    if schedule is not _UNSET:
        cron.schedule = check_schedule(schedule)
    if timezone is not _UNSET:
        cron.timezone = check_timezone(timezone)
    cron.payload = {**(cron.payload or {}), **payload}
    if metadata is not None:
        cron.metadata = metadata
    if end_time is not _UNSET:
        cron.end_time = end_time
    if enabled is not None:
        cron.enabled = enabled
    if on_run_completed is not None:
        cron.on_run_completed = _check_on_run_completed(on_run_completed)
    if schedule is not _UNSET or timezone is not _UNSET or enabled is not None:
        cron.next_run_date = next_tick(cron.schedule, cron.timezone)
    cron.updated_at = _now()
    cron.save()
    return cron


def delete_cron(*, cron: Cron) -> None:
    """Delete the cron; the runs it started stay."""
    cron.delete()


def _now() -> datetime:
    # Module-level: update_cron's argument named ``timezone`` hides django.utils.timezone.
    return timezone.now()


def fire_due_crons(now: datetime | None = None) -> list[str]:
    """Create a run for every enabled cron whose ``next_run_date`` has passed; return
    the ids of the runs created. A cron past its ``end_time`` is disabled instead; a
    cron whose owner is deactivated skips the tick (logged) and creates no run."""
    now = now or timezone.now()
    fired: list[str] = []
    due = Cron.objects.filter(enabled=True, next_run_date__lte=now).values_list(
        "pk", "next_run_date"
    )
    for pk, when in list(due):
        cron = Cron.objects.select_related("user").filter(pk=pk).first()
        if cron is None:
            continue
        if cron.end_time is not None and cron.end_time <= now:
            Cron.objects.filter(pk=pk, next_run_date=when).update(enabled=False, updated_at=now)
            continue
        following = next_tick(cron.schedule, cron.timezone, now)
        # Claim this tick: only the timer whose UPDATE matches creates the run.
        if not Cron.objects.filter(pk=pk, next_run_date=when).update(next_run_date=following):
            continue
        if cron.user is not None and not cron.user.is_active:
            # A deactivated user's schedules stop with them (their tokens and sessions
            # already do); the tick is spent, so reactivating the user resumes the cron
            # at its next tick instead of replaying the missed ones.
            logger.warning(
                "cron %s skipped: its owner %r is deactivated", pk, cron.user.get_username()
            )
            continue
        try:
            fired.append(_fire(cron))
        except Exception:
            logger.exception("cron %s could not start its run", pk)
    return fired


def _fire(cron: Cron) -> str:
    from criogen.services.runs import create_run

    payload = dict(cron.payload or {})
    metadata = {**(payload.get("metadata") or {}), "cron_id": str(cron.cron_id)}
    webhook = payload.get("webhook")
    try:
        check_webhook_url(webhook)
    except InvalidArgument:
        # Stored before webhooks were checked at creation: the run still starts.
        logger.warning("cron %s has a malformed webhook %r; its run gets none", cron.pk, webhook)
        webhook = None
    with transaction.atomic():
        run = create_run(
            thread_id=cron.thread_id,
            assistant_id=cron.assistant_id,
            input=payload.get("input"),
            config=payload.get("config"),
            context=payload.get("context"),
            metadata=metadata,
            webhook=webhook,
            multitask_strategy=payload.get("multitask_strategy") or "enqueue",
            stream_mode=payload.get("stream_mode"),
            durability=payload.get("durability"),
            after_seconds=payload.get("after_seconds"),
            owner=cron.user,
            by=f"cron:{cron.cron_id}",
            door="cron",
        )
    if cron.thread_id is None and cron.on_run_completed == "delete":
        _delete_when_done(run, cron)
    return str(run.run_id)


def _delete_when_done(run: Any, cron: Cron) -> None:
    def watch() -> None:
        from criogen.services.runs import wait_run
        from criogen.services.threads import delete_thread

        try:
            wait_run(run=run, timeout=3600)
            # The same verb as every other door: one audited delete, by the cron.
            delete_thread(thread_id=run.thread_id, by=f"cron:{cron.cron_id}", door="cron")
        except Exception:
            logger.exception("cron %s could not delete the thread of run %s", cron.pk, run.pk)
        finally:
            # This thread ends here: close its connections (close_old_connections keeps
            # a healthy one open, which the thread would then drop unclosed).
            connections.close_all()

    threading.Thread(target=watch, name=f"criogen-cron-cleanup-{run.run_id}", daemon=True).start()


_timer: threading.Thread | None = None
_timer_lock = threading.Lock()


def start_timer() -> None:
    """Fire due crons every ``CRIOGEN_CRON_TICK_SECONDS`` on a daemon thread (once per
    process)."""
    global _timer
    with _timer_lock:
        if _timer is not None and _timer.is_alive():
            return
        period = float(getattr(settings, "CRIOGEN_CRON_TICK_SECONDS", 10))
        _timer = threading.Thread(target=_tick, args=(period,), name="criogen-crons", daemon=True)
        _timer.start()


def _tick(period: float) -> None:
    while True:
        time.sleep(period)
        try:
            fire_due_crons()
        except Exception:
            logger.exception("firing crons failed")
        finally:
            close_old_connections()
