"""``manage.py openapi_snapshot [PATH]``: write the API's OpenAPI schema (default
``openapi.json``), as ``make openapi-snapshot`` does; tests compare it with the live one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Write the REST API's OpenAPI schema to openapi.json (or PATH)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "path", nargs="?", default=str(Path(settings.BASE_DIR) / "openapi.json")
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from api.api import api

        schema = json.loads(json.dumps(api.get_openapi_schema(), default=str))
        Path(options["path"]).write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")
        self.stdout.write(f"wrote {options['path']}")
