"""``manage.py criogen_token USER [--name NAME]``: issue an API token and print it."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from api.models import ApiToken


class Command(BaseCommand):
    help = "Create an API token for USER and print it (it is stored hashed, shown once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("user", help="username of the token's owner")
        parser.add_argument("--name", default="", help="a label for the token")

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: options["user"]})
        except User.DoesNotExist:
            raise CommandError(f"no user named {options['user']!r}; create it first.") from None
        _, token = ApiToken.issue(user, name=options["name"])
        self.stdout.write(token)
