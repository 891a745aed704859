"""Who is calling: API tokens (``Authorization: Bearer`` or ``x-api-key``) -> a
:class:`Principal`, and the one helper every endpoint uses to load a thread it may see.

With ``CRIOGEN_AUTH_ENABLED = False`` (local development only) every request is an
anonymous operator. Operators (staff, or users with ``criogen.operate``) see every
thread; other users see only the threads they own — another user's thread is a 404,
exactly as if it did not exist.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from ninja.security.base import AuthBase

from api.models import ApiToken, hash_token

__all__ = [
    "ApiKeyAuth",
    "BearerAuth",
    "Principal",
    "auth_backends",
    "auth_failures_retry_after",
    "client_ip",
    "principal",
]


@dataclass(frozen=True)
class Principal:
    """The caller of one request."""

    user: Any
    """The token's user, or None when auth is off."""
    is_operator: bool
    """Staff, ``criogen.operate`` holders, and everyone when auth is off."""

    @property
    def user_id(self) -> int | None:
        """The user's primary key (None when auth is off)."""
        return self.user.pk if self.user is not None else None

    @property
    def name(self) -> str | None:
        """The user's name, recorded as actor and as the ``owner`` metadata."""
        return self.user.get_username() if self.user is not None else None

    def scope(self, qs: QuerySet[Any], field: str = "owner") -> QuerySet[Any]:
        """``qs`` narrowed to what this caller may see (everything for operators)."""
        if self.is_operator:
            return qs
        return qs.filter(**{field: self.user})


LOCAL = Principal(user=None, is_operator=True)


# --- rate limit on token authentication failures ---
# Per client IP, a fixed window: after CRIOGEN_AUTH_FAILURE_LIMIT bad tokens within
# CRIOGEN_AUTH_FAILURE_WINDOW seconds, requests from that IP carrying a token get 429
# with Retry-After until the window ends (api.middleware answers them). The counts live
# in Django's cache: the default LocMemCache counts per process; production with several
# processes sets a shared cache (CACHES, e.g. Redis) so the limit holds across them.


def _failure_limit() -> int:
    return int(getattr(settings, "CRIOGEN_AUTH_FAILURE_LIMIT", 20))


def _failure_window() -> int:
    return int(getattr(settings, "CRIOGEN_AUTH_FAILURE_WINDOW", 60))


def client_ip(request: HttpRequest) -> str:
    """The peer address (behind a proxy: the proxy's, unless it rewrites REMOTE_ADDR)."""
    return str(request.META.get("REMOTE_ADDR") or "unknown")


def _keys(ip: str) -> tuple[str, str]:
    return f"criogen:authfail:{ip}:n", f"criogen:authfail:{ip}:since"


def _note_failure(request: HttpRequest) -> None:
    """Count one bad token from the request's client IP."""
    count_key, since_key = _keys(client_ip(request))
    window = _failure_window()
    if cache.add(since_key, time.time(), window):
        cache.set(count_key, 0, window)
    try:
        cache.incr(count_key)
    except ValueError:  # the window ended between the two calls: start a new one
        cache.set(count_key, 1, window)


def auth_failures_retry_after(request: HttpRequest) -> int | None:
    """Seconds until the request's client IP may try tokens again, or None when it is
    under the limit."""
    count_key, since_key = _keys(client_ip(request))
    count = cache.get(count_key) or 0
    if count < _failure_limit():
        return None
    since = cache.get(since_key) or time.time()
    return max(1, int(since + _failure_window() - time.time() + 0.999))


def _operate_permission() -> Any:
    """SQL: the token's user holds ``criogen.operate`` (directly or through a group),
    as Django's ModelBackend decides it — in the token's own query."""
    from django.contrib.auth.models import Permission

    perm = Permission.objects.filter(content_type__app_label="criogen", codename="operate")
    user = OuterRef("user_id")
    return Exists(perm.filter(user=user)) | Exists(perm.filter(group__user=user))


def _model_backend_only() -> bool:
    return list(settings.AUTHENTICATION_BACKENDS) == ["django.contrib.auth.backends.ModelBackend"]


def _from_token(token: str, request: HttpRequest | None = None) -> Principal | None:
    token = token.strip()
    if not token:
        return None
    # The lookup is by hash (unique index), then compared in constant time.
    qs = ApiToken.objects.select_related("user").filter(token_hash=hash_token(token))
    plain = _model_backend_only()
    if plain:
        qs = qs.annotate(operate=_operate_permission())
    row = qs.first()
    if row is None or not row.matches(token) or not row.user.is_active:
        if request is not None:
            _note_failure(request)
        return None
    now = timezone.now()
    if row.last_used is None or (now - row.last_used).total_seconds() > 60:
        # At most one write a minute per token: last_used is for humans, not audits.
        ApiToken.objects.filter(pk=row.pk).update(last_used=now)
    user = row.user
    operator = bool(
        user.is_staff
        or user.is_superuser
        or (row.operate if plain else user.has_perm("criogen.operate"))  # type: ignore[attr-defined]
    )
    return Principal(user=user, is_operator=operator)


async def _from_token_off_loop(token: str, request: HttpRequest) -> Principal | None:
    """:func:`_from_token` on the API's database threads (the auth is async: ninja
    awaits it on the event loop for async endpoints and runs it to completion for
    sync ones)."""
    from api.aio import db

    return await db(_from_token, token, request)


def _auth_enabled() -> bool:
    return bool(getattr(settings, "CRIOGEN_AUTH_ENABLED", True))


class BearerAuth(AuthBase):
    """``Authorization: Bearer <token>`` (OpenAPI scheme ``bearer``)."""

    openapi_type = "http"
    openapi_scheme = "bearer"

    async def __call__(self, request: HttpRequest) -> Principal | None:
        if not _auth_enabled():
            return LOCAL
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return None
        return await _from_token_off_loop(token, request)


class ApiKeyAuth(AuthBase):
    """``x-api-key: <token>``, as ``langgraph_sdk.get_client(api_key=...)`` sends it."""

    openapi_type = "apiKey"
    openapi_in = "header"
    openapi_name = "x-api-key"

    async def __call__(self, request: HttpRequest) -> Principal | None:
        if not _auth_enabled():
            return LOCAL
        token = request.headers.get("x-api-key", "")
        if not token.strip():
            return None
        return await _from_token_off_loop(token, request)


def auth_backends() -> list[Any]:
    """The auth callables every endpoint takes (any one may succeed)."""
    return [BearerAuth(), ApiKeyAuth()]


def principal(request: HttpRequest) -> Principal:
    """The caller of an authenticated request."""
    who = getattr(request, "auth", None)
    return who if isinstance(who, Principal) else LOCAL
