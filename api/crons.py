"""Crons: schedules that start runs, and the timer that fires them.

A cron has a 5-field schedule (``*/5 * * * *``) read in its ``timezone``; when
``next_run_date`` passes, :func:`fire_due_crons` claims the tick with a conditional
UPDATE (so two timers never fire it twice), moves ``next_run_date`` to the next tick,
and creates a run through :func:`criogen.services.runs.create_run` with the cron's
payload — including its durability, resolved once at creation from ``durability`` /
``checkpoint_during`` by the same rule as runs. The timer is the in-process one
(:func:`start_timer`, started with the server when ``CRIOGEN_RUNNER="inprocess"``) or
Celery beat (``api.tasks.fire_crons_task``).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.db import close_old_connections, transaction
from django.utils import timezone

from api.auth import Principal
from api.models import Cron
from criogen.engine.errors import InvalidArgument
from criogen.outbound import check_webhook_url

__all__ = ["check_schedule", "cron_out", "fire_due_crons", "next_tick", "start_timer"]

logger = logging.getLogger("api.crons")

PAYLOAD_FIELDS = (
    "input",
    "config",
    "context",
    "metadata",
    "webhook",
    "multitask_strategy",
    "stream_mode",
    "durability",
)


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


def next_tick(schedule: str, tz: str, after: datetime | None = None) -> datetime:
    """The first time after ``after`` (default now) that the schedule fires, in UTC."""
    from croniter import croniter

    zone = ZoneInfo(tz)
    start = (after or timezone.now()).astimezone(zone)
    return croniter(schedule, start).get_next(datetime).astimezone(UTC)  # type: ignore[no-any-return]


def cron_out(cron: Cron) -> dict[str, Any]:
    """A cron as the SDK's ``Cron``."""
    return {
        "cron_id": str(cron.cron_id),
        "assistant_id": cron.assistant_id,
        "thread_id": cron.thread_id,
        "on_run_completed": cron.on_run_completed if cron.thread_id is None else None,
        "end_time": cron.end_time,
        "schedule": cron.schedule,
        "timezone": cron.timezone,
        "created_at": cron.created_at,
        "updated_at": cron.updated_at,
        "payload": cron.payload or {},
        "user_id": str(cron.user_id) if cron.user_id is not None else None,
        "next_run_date": cron.next_run_date,
        "metadata": cron.metadata or {},
        "enabled": cron.enabled,
    }


def load_cron(who: Principal, cron_id: str) -> Cron:
    """The caller's cron (operators: any), else 404."""
    from api.errors import NotFound

    try:
        key = uuid.UUID(str(cron_id))
    except ValueError:
        raise NotFound(f"no cron {cron_id!r}.", field="cron_id") from None
    cron = who.scope(Cron.objects.all(), "user").filter(pk=key).first()
    if cron is None:
        raise NotFound(f"no cron {cron_id!r}.", field="cron_id")
    return cron


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
            owner=cron.user,
        )
    if cron.thread_id is None and cron.on_run_completed == "delete":
        _delete_when_done(run)
    return str(run.run_id)


def _delete_when_done(run: Any) -> None:
    def watch() -> None:
        from criogen.registry import storage
        from criogen.services.runs import wait_run

        try:
            wait_run(run=run, timeout=3600)
            storage().delete_thread(run.thread_id)
        finally:
            close_old_connections()

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
