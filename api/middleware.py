"""Request guards that run before any view: a cap on request body size, and the lockout
after too many bad API tokens.

``CRIOGEN_MAX_BODY_BYTES`` (default 1 MiB) bounds every request body. A larger one is
answered ``413`` with the API's problem body (``code: payload_too_large``, a
``detail`` naming the limit) before anything parses it — for the REST API and the
dashboard alike. The declared ``Content-Length`` is checked first; a body sent without
one (chunked) is measured after the server buffered it.

A client IP that sent ``CRIOGEN_AUTH_FAILURE_LIMIT`` (default 20) bad tokens within
``CRIOGEN_AUTH_FAILURE_WINDOW`` seconds (default 60) gets ``429`` (``code:
too_many_auth_failures``, a ``Retry-After`` header) for every request carrying a token
until the window ends; requests without a token (the dashboard, ``/ok``) are not
affected. The counting is in :mod:`api.auth`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse

from api.auth import auth_failures_retry_after
from api.errors import problem

__all__ = ["AuthFailureLimitMiddleware", "BodySizeLimitMiddleware", "DEFAULT_MAX_BODY_BYTES"]

DEFAULT_MAX_BODY_BYTES = 1024 * 1024


def _limit() -> int:
    return int(getattr(settings, "CRIOGEN_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES))


def _too_large(request: HttpRequest) -> HttpResponse | None:
    """The 413 for ``request``, or None when its body fits."""
    limit = _limit()
    declared = request.META.get("CONTENT_LENGTH") or ""
    try:
        size = int(declared) if declared else None
    except ValueError:
        return problem(400, "Content-Length must be an integer", "invalid_argument")
    if size is None and request.method in ("POST", "PUT", "PATCH", "DELETE"):
        # No declared length (chunked): the ASGI/WSGI server buffered it; measure it.
        stream = getattr(request, "_stream", None)
        size = len(request.body) if stream is not None else 0
    if size is not None and size > limit:
        return problem(
            413,
            f"request body of {size} bytes exceeds the limit of {limit} bytes "
            "(CRIOGEN_MAX_BODY_BYTES)",
            "payload_too_large",
            field="body",
            limit=limit,
        )
    return None


def _locked_out(request: HttpRequest) -> HttpResponse | None:
    """The 429 for a token-carrying request from a locked-out client IP, or None."""
    if not (request.headers.get("Authorization") or request.headers.get("x-api-key")):
        return None
    retry_after = auth_failures_retry_after(request)
    if retry_after is None:
        return None
    response = problem(
        429,
        f"too many failed token authentications from this address; retry in {retry_after} s",
        "too_many_auth_failures",
        retry_after=retry_after,
    )
    response["Retry-After"] = str(retry_after)
    return response


class _Gate:
    """A middleware that answers early when ``refuse(request)`` returns a response,
    and otherwise passes the request on (sync and async)."""

    sync_capable = True
    async_capable = True
    off_loop = False
    """Run ``refuse`` in a worker thread under ASGI (it may do I/O)."""

    @staticmethod
    def refuse(request: HttpRequest) -> HttpResponse | None:
        raise NotImplementedError

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponse | Awaitable[HttpResponse]:
        if self.is_async:
            return self._acall(request)
        refused = self.refuse(request)
        return refused if refused is not None else self.get_response(request)

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        if self.off_loop:
            refused = await sync_to_async(self.refuse)(request)
        else:
            refused = self.refuse(request)
        if refused is not None:
            return refused
        return await self.get_response(request)


class BodySizeLimitMiddleware(_Gate):
    """Answer ``413`` to a request body over ``CRIOGEN_MAX_BODY_BYTES``."""

    refuse = staticmethod(_too_large)


class AuthFailureLimitMiddleware(_Gate):
    """Answer ``429`` with ``Retry-After`` to a client IP over the bad-token limit."""

    refuse = staticmethod(_locked_out)
    off_loop = True  # the cache may do I/O (a shared cache in production)
