"""The API's JSON body parser: standard JSON only, and no NUL characters."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest
from ninja.parser import Parser

from criogen.engine.errors import InvalidArgument

NUL = "\x00"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON: send null or a string instead")


def _nul_path(value: Any) -> str | None:
    """The dotted path (``metadata.key``, ``namespace.0``) of the first string or key
    in ``value`` that holds a NUL, or None. Iterative: bodies may nest deeply."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if NUL in item:
                return path or "body"
        elif isinstance(item, dict):
            for key, inner in item.items():
                where = f"{path}.{key}" if path else str(key)
                if NUL in key:
                    return where.replace(NUL, "\\0")
                stack.append((inner, where))
        elif isinstance(item, list):
            stack.extend((inner, f"{path}.{i}" if path else str(i)) for i, inner in enumerate(item))
    return None


def refuse_nul(value: Any) -> None:
    """Raise :class:`InvalidArgument` (422) naming the field of the first NUL in a
    parsed JSON ``value``: PostgreSQL stores no NUL in text or jsonb, so the one check
    is here, before any endpoint sees the body."""
    field = _nul_path(value)
    if field is not None:
        raise InvalidArgument(
            f"{field} contains a NUL character (\\u0000), which cannot be stored; remove it.",
            field=field,
        )


class StrictJsonParser(Parser):
    """Python's json accepts NaN and Infinity, which JSON (and PostgreSQL's jsonb) do
    not: refuse them here, so the body fails as a 422 ``invalid_json`` instead of
    reaching the database. A NUL character in any string or key is a 422
    ``invalid_argument`` naming its field."""

    def parse_body(self, request: HttpRequest) -> Any:
        data = json.loads(request.body, parse_constant=_refuse_constant)
        # JSON can only spell NUL as the escape \u0000 (a raw one is invalid JSON), so
        # a body without that escape needs no walk.
        if b"\\u0000" in request.body:
            refuse_nul(data)
        return data
