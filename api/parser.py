"""The API's JSON body parser: standard JSON only."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest
from ninja.parser import Parser


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON: send null or a string instead")


class StrictJsonParser(Parser):
    """Python's json accepts NaN and Infinity, which JSON (and PostgreSQL's jsonb) do
    not: refuse them here, so the body fails as a 422 ``invalid_json`` instead of
    reaching the database."""

    def parse_body(self, request: HttpRequest) -> Any:
        return json.loads(request.body, parse_constant=_refuse_constant)
