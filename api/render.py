"""The API's JSON responses: encoded with orjson, and a response for output the API
shaped itself.

:class:`FastJsonRenderer` is the renderer of the :class:`~ninja.NinjaAPI`: the same
JSON as django-ninja's renderer (datetimes as Django writes them, milliseconds and
``Z``; UUIDs, decimals, enums and models as ninja's encoder writes them), compact
(no spaces after ``,`` and ``:``) and UTF-8 rather than ``\\uXXXX`` escapes. What
orjson does not encode (an integer beyond 64 bits, a non-string key) falls back to
Python's encoder, so every response that encoded before still does.

:func:`trusted_response` answers with data that is already in the response schema's
shape (the hot reads build it that way: :mod:`api.threads.shapes`), without ninja
validating it again: on a history page of 50 states the validation was a third of the
request's CPU (bench/NOTES.md, 2026-12-01 "The read path").
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from django.http import HttpRequest, HttpResponse
from ninja.renderers import BaseRenderer
from ninja.responses import NinjaJSONEncoder

__all__ = ["CONTENT_TYPE", "FastJsonRenderer", "dumps", "trusted_response"]

CONTENT_TYPE = "application/json; charset=utf-8"

_fallback = NinjaJSONEncoder()
_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME


def dumps(data: Any) -> bytes:
    """``data`` as JSON bytes (see the module's docstring for the format)."""
    try:
        return orjson.dumps(data, default=_fallback.default, option=_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError: a big integer, a non-string key
        text = json.dumps(data, cls=NinjaJSONEncoder, separators=(",", ":"), ensure_ascii=False)
        return text.encode()


class FastJsonRenderer(BaseRenderer):
    """django-ninja's JSON renderer on orjson."""

    media_type = "application/json"
    charset = "utf-8"

    def render(self, request: HttpRequest, data: Any, *, response_status: int) -> Any:
        return dumps(data)


def trusted_response(data: Any, status: int = 200) -> HttpResponse:
    """A JSON response of ``data``, which the caller built in its endpoint's response
    schema (field order, defaults and types as the schema dumps them): ninja passes an
    ``HttpResponse`` through without validating it. The schema still documents the
    endpoint in the OpenAPI; a test checks each shape against it."""
    return HttpResponse(dumps(data), status=status, content_type=CONTENT_TYPE)
