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

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.middleware import clickjacking, common, security
from django.utils.deprecation import MiddlewareMixin

from api.auth import auth_failures_retry_after
from api.errors import problem

__all__ = [
    "AuthFailureLimitMiddleware",
    "BodySizeLimitMiddleware",
    "CommonMiddleware",
    "DEFAULT_MAX_BODY_BYTES",
    "SecurityMiddleware",
    "XFrameOptionsMiddleware",
    "api_middleware",
]

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


def _local_cache() -> bool:
    """Django's default cache lives in this process (LocMemCache): no I/O to wait for."""
    backend = str(settings.CACHES.get("default", {}).get("BACKEND", ""))
    return backend.endswith(".LocMemCache")


class _Gate:
    """A middleware that answers early when ``refuse(request)`` returns a response,
    and otherwise passes the request on (sync and async)."""

    sync_capable = True
    async_capable = True
    off_loop = False
    """Run ``refuse`` on the API's database threads under ASGI (it may do I/O), unless
    the cache is in this process."""

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
        if self.off_loop and not _local_cache():
            from api.aio import db

            refused = await db(self.refuse, request)
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
    off_loop = True  # a shared cache (production, several processes) does I/O


# -- the REST API's middleware under ASGI ------------------------------------------------
# Django runs the hooks of a classic (MiddlewareMixin) middleware on the one thread that
# also runs sync views: under ASGI every request would hop to that thread and back twice
# per middleware, and queue behind whatever it is doing. criogen.asgi serves the API's
# paths with the chain below instead: the same middleware, less those that only serve
# browsers (static files, sessions, CSRF, the signed-in user, messages: a token-authenticated API
# never reads or sets a cookie, so they add nothing to its responses), and Django's
# header middleware called inline on the event loop (their hooks are pure computation).

BROWSER_ONLY = frozenset(
    {
        "criogen.static.StaticFilesMiddleware",
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "django.contrib.messages.middleware.MessageMiddleware",
    }
)


class _Inline:
    """An async middleware that calls a classic middleware's ``process_request`` and
    ``process_response`` in place, on the event loop (only for hooks that do no I/O)."""

    sync_capable = False
    async_capable = True
    wrapped: type[MiddlewareMixin]

    def __init__(self, get_response: Callable[[HttpRequest], Awaitable[HttpResponse]]) -> None:
        self.get_response = get_response
        self.inner = self.wrapped(get_response)
        self.before = getattr(self.inner, "process_request", None)
        self.after = getattr(self.inner, "process_response", None)
        markcoroutinefunction(self)

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.before(request) if self.before is not None else None
        if response is None:
            response = await self.get_response(request)
        if self.after is not None:
            response = self.after(request, response)
        return response


class SecurityMiddleware(_Inline):
    """Django's SecurityMiddleware (HSTS, nosniff, referrer policy, SSL redirect), inline."""

    wrapped = security.SecurityMiddleware


class CommonMiddleware(_Inline):
    """Django's CommonMiddleware (Content-Length, slash redirects), inline."""

    wrapped = common.CommonMiddleware


class XFrameOptionsMiddleware(_Inline):
    """Django's XFrameOptionsMiddleware (``X-Frame-Options``), inline."""

    wrapped = clickjacking.XFrameOptionsMiddleware


INLINE = {
    "django.middleware.security.SecurityMiddleware": "api.middleware.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware": "api.middleware.CommonMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware": (
        "api.middleware.XFrameOptionsMiddleware"
    ),
}


def api_middleware(middleware: list[str]) -> list[str]:
    """The API's chain from the site's ``MIDDLEWARE``: browser-only ones left out,
    Django's header middleware made inline, every other one kept in its place."""
    return [INLINE.get(path, path) for path in middleware if path not in BROWSER_ONLY]
