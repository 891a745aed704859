"""``manage.py criogen_token USER [--name NAME] [--expires-in-days N]``: issue an API
token and print it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from criogen.services.tokens import DEFAULT_EXPIRY, issue_token


class Command(BaseCommand):
    help = "Create an API token for USER and print it (it is stored hashed, shown once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("user", help="username of the token's owner")
        parser.add_argument("--name", default="", help="a label for the token")
        parser.add_argument(
            "--expires-in-days",
            type=int,
            default=None,
            metavar="N",
            help="the token stops working after N days; 0: never "
            "(default: CRIOGEN_TOKEN_TTL_DAYS, never when unset)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: options["user"]})
        except User.DoesNotExist:
            raise CommandError(f"no user named {options['user']!r}; create it first.") from None
        days = options["expires_in_days"]
        if days is not None and days < 0:
            raise CommandError("--expires-in-days must be 0 (never) or more.")
        expires_at: Any = DEFAULT_EXPIRY
        if days is not None:
            expires_at = timezone.now() + timedelta(days=days) if days else None
        _, token = issue_token(user=user, name=options["name"], expires_at=expires_at)
        self.stdout.write(token)
