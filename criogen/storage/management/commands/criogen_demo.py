"""``manage.py criogen_demo [--reset] [--serve]``: the demo of ``make demo``."""

from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = (
        "Create the demo operator and API token, run the example assistants so the inbox "
        "has something to approve, and (with --serve) start the server."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--reset", action="store_true", help="delete the demo threads first")
        parser.add_argument("--serve", action="store_true", help="then start the server")
        parser.add_argument("--addrport", default="127.0.0.1:8000", help="where to serve")

    def handle(self, *args: Any, reset: bool, serve: bool, addrport: str, **options: Any) -> None:
        from criogen import demo

        call_command("migrate", interactive=False, verbosity=0)
        if reset:
            self.stdout.write(f"Removed {demo.reset()} demo threads.")
        user, credentials = demo.ensure_operator()
        for item, outcome in demo.seed(owner=user):
            self.stdout.write(f"  {item.thread_id:<16} {item.what:<36} {outcome}")
        for run in demo.top_up(owner=user):
            demo.wait_run(run=run, timeout=30)
        url = f"http://{addrport}/"
        self.stdout.write(
            self.style.SUCCESS(
                f"\nCriogen demo: {url}\n"
                f"  sign in as   {credentials['username']} / {credentials['password']}\n"
                f"  API token    {credentials['token']}\n"
                f"  (kept in {demo.CREDENTIALS})\n"
            )
        )
        if serve:
            demo.start_feeder(owner=user)
            call_command("runserver", addrport, use_reloader=False)
