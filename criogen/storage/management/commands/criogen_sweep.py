"""``manage.py criogen_sweep``: re-queue dead runs, apply thread TTLs (and delete
resumable-stream logs and outbound attempt records past their retention) and
suspension deadlines, once.

Celery beat and the in-process runner do the same on a timer; run this from cron when
neither runs, or by hand after an outage. Prints a JSON summary.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = (
        "Re-queue runs whose worker died, apply the TTL policy of expired threads and the "
        "defaults and reminders of suspensions past their deadline."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--no-reap", action="store_true", help="skip the lease reaper")
        parser.add_argument(
            "--no-ttl",
            action="store_true",
            help="skip the TTL sweep (and the retention of stream logs and outbound records)",
        )
        parser.add_argument(
            "--no-deadlines", action="store_true", help="skip suspension deadlines and reminders"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from criogen.outbound import prune_attempts
        from criogen.runner import drain, reap_expired
        from criogen.services.deadlines import fire_deadlines
        from criogen.services.streams import prune_streams
        from criogen.services.threads import sweep_threads

        summary: dict[str, Any] = {}
        if not options["no_reap"]:
            summary["reaped"] = reap_expired()
        if not options["no_ttl"]:
            summary["ttl"] = sweep_threads()
            summary["streams"] = prune_streams()
            summary["outbound"] = prune_attempts()
        if not options["no_deadlines"]:
            summary["deadlines"] = fire_deadlines()
        # With the in-process runner the re-queued runs execute here: finish them.
        drain()
        self.stdout.write(json.dumps(summary))
