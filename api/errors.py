"""One error body for every failure: ``application/problem+json``.

::

    {"status": 404, "title": "Not Found", "detail": "thread 'x' not found",
     "code": "thread_not_found", "field": null, ...details}

``detail`` is the message ``langgraph_sdk`` shows in its exceptions; ``code`` is the
stable machine name (a :class:`~criogen.engine.errors.CriogenError` code, or
``validation_error`` / ``unauthorized`` / ``not_found``); ``field`` names the offending
input when there is one. Status codes: 404 for unknown ids, 409 for conflicts (a busy
thread, an already decided suspension, ``if_exists="raise"``), 422 for invalid input.
Bad input never produces a 500.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import OperationalError
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from criogen.engine.errors import (
    Conflict,
    CriogenError,
    InvalidArgument,
    InvalidGraph,
    InvalidSnapshot,
    InvalidState,
    NotFound,
    ThreadError,
    TokenExpired,
)

# NotFound, Conflict and TokenExpired are defined with every other error in
# criogen.engine.errors; they stay importable from here, where the API has always
# imported them.
__all__ = ["Conflict", "NotFound", "TokenExpired", "register_exception_handlers", "status_for"]

logger = logging.getLogger("api")


_UNPROCESSABLE = (InvalidArgument, InvalidState, InvalidSnapshot, InvalidGraph)


def status_for(exc: CriogenError) -> int:
    """The HTTP status of a Criogen error."""
    if isinstance(exc, TokenExpired):
        return 401
    if exc.code == "not_allowed_to_decide":
        return 403
    if exc.code == "state_too_large":
        return 413
    if exc.code == "too_many_streams":
        return 429
    if isinstance(exc, NotFound) or exc.code.endswith("_not_found"):
        return 404
    if isinstance(exc, _UNPROCESSABLE):
        return 422
    if isinstance(exc, ThreadError | Conflict):
        return 409
    return 409 if exc.code in ("storage_error", "run_failed") else 422


def problem(status: int, detail: str, code: str, **extra: Any) -> HttpResponse:
    """An ``application/problem+json`` response."""
    import json

    body = {
        "status": status,
        "title": HTTPStatus(status).phrase,
        "detail": detail,
        "code": code,
        **extra,
    }
    body.setdefault("field", None)
    return HttpResponse(
        json.dumps(body, default=str),
        status=status,
        content_type="application/problem+json",
    )


def _field_of(loc: list[Any] | tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc]
    # ninja puts the location first ("body", "query", "path") then the parameter name;
    # what a client sent is the rest.
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
        if len(parts) > 1 and parts[0] in ("payload", "filters", "params", "body"):
            parts = parts[1:]
    # Pydantic names the member of a union it tried ("ttl.TtlIn.strategy",
    # "ttl.float"): that is a type, not a field the client sent.
    parts = [p for p in parts if not _is_type_tag(p)] or parts[:1]
    return ".".join(parts) or "body"


_TYPE_TAGS = {"float", "int", "str", "bool", "list", "dict", "none", "literal", "union"}


def _is_type_tag(part: str) -> bool:
    return (
        part.lower() in _TYPE_TAGS
        or "[" in part
        or (part[:1].isupper() and part.endswith(("In", "Out", "Schema")))
    )


def register_exception_handlers(api: NinjaAPI) -> None:
    """Install the handlers that turn every exception into the one error body."""

    @api.exception_handler(CriogenError)
    def criogen_error(request: HttpRequest, exc: CriogenError) -> HttpResponse:
        details = {k: v for k, v in exc.details.items() if _plain(v)}
        return problem(status_for(exc), exc.message, exc.code, **details)

    @api.exception_handler(ValidationError)
    def validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
        errors = [
            {"field": _field_of(e.get("loc", ())), "message": str(e.get("msg", "invalid"))}
            for e in exc.errors
        ]
        # The most specific location names the field (a union reports each member).
        first = max(errors, key=lambda e: e["field"].count("."), default=None) or {
            "field": "body",
            "message": "invalid request",
        }
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors) or "invalid request"
        return problem(422, detail, "validation_error", field=first["field"], errors=errors)

    @api.exception_handler(TokenExpired)
    def token_expired(request: HttpRequest, exc: TokenExpired) -> HttpResponse:
        details = {k: v for k, v in exc.details.items() if _plain(v)}
        response = problem(401, exc.message, exc.code, **details)
        response["WWW-Authenticate"] = 'Bearer error="invalid_token"'
        return response

    @api.exception_handler(AuthenticationError)
    def unauthorized(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
        response = problem(
            401,
            "missing or invalid API token: send 'Authorization: Bearer <token>' or "
            "'x-api-key: <token>' (create one with manage.py criogen_token USER).",
            "unauthorized",
        )
        response["WWW-Authenticate"] = "Bearer"
        return response

    @api.exception_handler(Http404)
    def not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
        return problem(404, str(exc) or "not found", "not_found")

    @api.exception_handler(PermissionDenied)
    def forbidden(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
        return problem(403, str(exc) or "permission denied", "permission_denied")

    @api.exception_handler(HttpError)
    def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
        if isinstance(exc.__cause__, CriogenError):
            # The body parser's own refusal (a NUL character): its field and code.
            return criogen_error(request, exc.__cause__)
        code = "invalid_json" if exc.status_code == 400 else "http_error"
        status = 422 if exc.status_code == 400 else exc.status_code
        return problem(status, str(exc), code, field="body" if status == 422 else None)

    @api.exception_handler(OperationalError)
    def database_unavailable(request: HttpRequest, exc: OperationalError) -> HttpResponse:
        # The database refused the connection or dropped it (restart, too many
        # clients): nothing was done, and the same request may succeed in a moment.
        logger.warning("database unavailable in %s %s: %s", request.method, request.path, exc)
        response = problem(
            503, "the database is unavailable for a moment; retry the request.", "unavailable"
        )
        response["Retry-After"] = "1"
        return response

    @api.exception_handler(Exception)
    def server_error(request: HttpRequest, exc: Exception) -> HttpResponse:
        logger.exception("unhandled error in %s %s", request.method, request.path)
        return problem(
            500, f"internal error ({type(exc).__name__}); see the server log.", "internal_error"
        )


def _plain(value: Any) -> bool:
    return isinstance(value, str | int | float | bool | list | dict | type(None))
