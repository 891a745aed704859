"""Former home of the crons' schedule logic and timer, now :mod:`criogen.services.crons`
(these names stay importable from here); ``cron_out`` and ``load_cron`` belong to the
REST endpoints in :mod:`api.routers.crons`."""

from __future__ import annotations

from api.routers.crons import cron_out, load_cron
from criogen.services.crons import (
    PAYLOAD_FIELDS,
    check_schedule,
    check_timezone,
    fire_due_crons,
    next_tick,
    start_timer,
)

__all__ = [
    "PAYLOAD_FIELDS",
    "check_schedule",
    "check_timezone",
    "cron_out",
    "fire_due_crons",
    "load_cron",
    "next_tick",
    "start_timer",
]
