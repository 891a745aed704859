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

CORS (:class:`CorsMiddleware`): django-cors-headers, for the REST API's paths only
(:data:`API_PREFIXES`), configured by ``CRIOGEN_CORS_ALLOW_ORIGINS`` / ``CRIOGEN_CORS``
(:mod:`api.cors`). It answers a browser's preflight before authentication and routing,
and refuses with ``400`` a preflight whose origin, method or headers the configuration
does not allow.
A NUL character (U+0000), which PostgreSQL cannot store, in the path, the query string
or a form field is answered ``422`` (``code: invalid_argument``, ``field`` naming the
parameter) on the API and with a ``400`` page on the dashboard; :mod:`api.parser` refuses
it in JSON bodies.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from corsheaders import middleware as cors
from corsheaders.conf import conf as cors_conf
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.middleware import clickjacking, common, security
from django.utils.deprecation import MiddlewareMixin

from api.auth import auth_failures_retry_after, local_cache
from api.errors import problem
from criogen.inputs import BROWSER_PREFIXES, nul_field

__all__ = [
    "API_PREFIXES",
    "AuthFailureLimitMiddleware",
    "BodySizeLimitMiddleware",
    "CommonMiddleware",
    "CorsMiddleware",
    "DEFAULT_MAX_BODY_BYTES",
    "NulCharacterMiddleware",
    "SecurityMiddleware",
    "XFrameOptionsMiddleware",
    "api_middleware",
    "is_api_path",
]

DEFAULT_MAX_BODY_BYTES = 1024 * 1024

API_PREFIXES = ("/threads", "/runs", "/assistants", "/store", "/ok", "/info")
"""The REST API's resources (not ``/docs`` and ``/openapi.json``: pages for browsers)."""


def is_api_path(path: str) -> bool:
    """``/threads``, ``/threads/…`` and the like; not ``/threadsx``."""
    return any(path == p or path.startswith(p + "/") for p in API_PREFIXES)


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
        if self.off_loop and not local_cache():
            from api.aio import db

            refused = await db(self.refuse, request)
        else:
            refused = self.refuse(request)
        if refused is not None:
            return refused
        return await self.get_response(request)


# -- NUL characters ------------------------------------------------------------------------
# PostgreSQL stores no NUL (U+0000) in text or jsonb: a NUL that reaches a query fails
# there, as a 500. One check refuses it in everything a request carries: JSON bodies in
# api.parser (every field the API reads), and the path, the query string and form
# fields here (path parameters, search filters, the dashboard's forms).


def _nul_problem(field: str) -> HttpResponse:
    return problem(
        422,
        f"{field} contains a NUL character (\\u0000), which cannot be stored; remove it.",
        "invalid_argument",
        field=field,
    )


class NulCharacterMiddleware(_Gate):
    """Refuse a NUL character in the path, query string or form fields of an API
    request: ``422`` with the API's problem body naming the parameter. Pages for people
    (:data:`criogen.inputs.BROWSER_PREFIXES`) pass on to the dashboard's own check,
    which answers with a page. Pure computation: it runs on the event loop."""

    @staticmethod
    def refuse(request: HttpRequest) -> HttpResponse | None:
        if request.path_info.startswith(BROWSER_PREFIXES):
            return None
        found = nul_field(request)
        return None if found is None else _nul_problem(found[0])


class BodySizeLimitMiddleware(_Gate):
    """Answer ``413`` to a request body over ``CRIOGEN_MAX_BODY_BYTES``."""

    refuse = staticmethod(_too_large)


class AuthFailureLimitMiddleware(_Gate):
    """Answer ``429`` with ``Retry-After`` to a client IP over the bad-token limit."""

    refuse = staticmethod(_locked_out)
    off_loop = True  # a shared cache (production, several processes) does I/O


class CorsMiddleware(cors.CorsMiddleware):
    """django-cors-headers for the REST API's paths, refusing what it may not allow.

    The library answers every preflight ``200`` and, for an origin it does not allow,
    leaves out the ``Access-Control-Allow-*`` headers: the browser then reports a bare
    "CORS error". As LangGraph's server does, a preflight whose origin, method or
    headers the configuration does not allow is answered ``400`` here instead, with a
    problem body (``code: cors_refused``) naming what was refused, for whoever reads
    the network panel or tries with curl. With ``allow_headers: ["*"]`` (the default)
    the preflight's requested headers are allowed by name: browsers do not let a
    literal ``*`` cover ``Authorization``.

    Paths outside the API (the dashboard, ``/admin/``, ``/accounts/``) authenticate
    with cookies and never get CORS headers; nor do the dashboard's WebSockets, which
    Channels' origin check guards.
    """

    def is_enabled(self, request: HttpRequest) -> bool:
        return is_api_path(request.path_info)

    def check_preflight(self, request: HttpRequest) -> HttpResponseBase | None:
        answer = super().check_preflight(request)  # None: not a preflight of the API
        if answer is None:
            return None
        refused = self._refusal(request)
        return refused if refused is not None else answer

    def add_response_headers(
        self, request: HttpRequest, response: HttpResponseBase
    ) -> HttpResponseBase:
        response = super().add_response_headers(request, response)
        if (
            request.method == "OPTIONS"
            and cors.ACCESS_CONTROL_ALLOW_HEADERS in response
            and "*" in cors_conf.CORS_ALLOW_HEADERS
        ):
            requested = _requested_headers(request)
            if requested:
                response[cors.ACCESS_CONTROL_ALLOW_HEADERS] = ", ".join(requested)
            else:
                del response[cors.ACCESS_CONTROL_ALLOW_HEADERS]
        return response

    def _origin_allowed(self, origin: str) -> bool:
        if cors_conf.CORS_ALLOW_ALL_ORIGINS:
            return True
        try:
            url = urlsplit(origin)
        except ValueError:
            return False
        return self.origin_found_in_white_lists(origin, url)

    def _refusal(self, request: HttpRequest) -> HttpResponse | None:
        """The 400 for a preflight the configuration does not allow, or None."""
        refused: list[tuple[str, str]] = []
        origin = request.headers.get("origin")
        if origin is not None and not self._origin_allowed(origin):
            refused.append(("Origin", f"origin {origin!r} is not allowed"))
        method = request.headers.get("access-control-request-method", "").strip()
        if method not in cors_conf.CORS_ALLOW_METHODS:
            refused.append(("Access-Control-Request-Method", f"method {method!r} is not allowed"))
        if "*" not in cors_conf.CORS_ALLOW_HEADERS:
            allowed = {h.lower() for h in cors_conf.CORS_ALLOW_HEADERS}
            others = [h for h in _requested_headers(request) if h not in allowed]
            if others:
                refused.append(
                    (
                        "Access-Control-Request-Headers",
                        f"header(s) {', '.join(others)} not allowed",
                    )
                )
        if not refused:
            return None
        return problem(
            400,
            "CORS preflight refused: "
            + "; ".join(why for _, why in refused)
            + " (CRIOGEN_CORS_ALLOW_ORIGINS / CRIOGEN_CORS, docs/deployment.md).",
            "cors_refused",
            field=refused[0][0],
        )


def _requested_headers(request: HttpRequest) -> list[str]:
    """The preflight's ``Access-Control-Request-Headers``, lower case."""
    value = request.headers.get("access-control-request-headers", "")
    return [h.strip().lower() for h in value.split(",") if h.strip()]


# -- the REST API's middleware under ASGI ------------------------------------------------
# Django runs the hooks of a classic (MiddlewareMixin) middleware on the one thread that
# also runs sync views: under ASGI every request would hop to that thread and back twice
# per middleware, and queue behind whatever it is doing. criogen.asgi serves the API's
# paths with the chain below instead: the same middleware, less those that only serve
# browsers (static files, sessions, CSRF, the signed-in user, messages, htmx: a token-authenticated API
# never reads or sets a cookie, so they add nothing to its responses), and Django's
# header middleware called inline on the event loop (their hooks are pure computation).

BROWSER_ONLY = frozenset(
    {
        "criogen.static.StaticFilesMiddleware",
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "django.contrib.messages.middleware.MessageMiddleware",
        # Pages only; classic (sync) middleware would cost every API request a thread hop.
        "dashboard.middleware.HtmxLoginRedirectMiddleware",
        # request.htmx, which only the dashboard's views read.
        "django_htmx.middleware.HtmxMiddleware",
        "dashboard.middleware.NulCharacterPageMiddleware",
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
