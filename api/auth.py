"""Who is calling: API tokens (``Authorization: Bearer`` or ``x-api-key``) -> a
:class:`Principal`, and the one helper every endpoint uses to load a thread it may see.

With ``CRIOGEN_AUTH_ENABLED = False`` (local development only) every request is an
anonymous operator. Operators (staff, or users with ``criogen.operate``) see every
thread; other users see only the threads they own — another user's thread is a 404,
exactly as if it did not exist.
"""

from __future__ import annotations

import ipaddress
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.core.cache import cache, caches
from django.db.models import QuerySet
from django.http import HttpRequest
from ninja.security.base import AuthBase

from criogen.services.tokens import authenticate_token

__all__ = [
    "ApiKeyAuth",
    "BearerAuth",
    "Principal",
    "auth_backends",
    "auth_failures_retry_after",
    "client_ip",
    "local_cache",
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
# Per client address (client_ip: the peer, or behind a trusted proxy the address it
# forwards), a fixed window: after CRIOGEN_AUTH_FAILURE_LIMIT bad tokens within
# CRIOGEN_AUTH_FAILURE_WINDOW seconds, requests from that IP carrying a token get 429
# with Retry-After until the window ends (api.middleware answers them). The counts live
# in Django's cache: the default LocMemCache counts per process; production with several
# processes sets a shared cache (CACHES, e.g. Redis) so the limit holds across them.


def _failure_limit() -> int:
    return int(getattr(settings, "CRIOGEN_AUTH_FAILURE_LIMIT", 20))


def _failure_window() -> int:
    return int(getattr(settings, "CRIOGEN_AUTH_FAILURE_WINDOW", 60))


_Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@lru_cache(maxsize=8)
def _networks(proxies: tuple[str, ...]) -> tuple[_Network, ...]:
    return tuple(ipaddress.ip_network(p, strict=False) for p in proxies)


def _address(text: str) -> _Address | None:
    """``text`` as an IP address (IPv4-mapped IPv6 as IPv4), or None."""
    try:
        address = ipaddress.ip_address(text.strip())
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def client_ip(request: HttpRequest) -> str:
    """The client address the bad-token lockout counts.

    The connection's peer (``REMOTE_ADDR``), unless the peer is one of
    ``CRIOGEN_TRUSTED_PROXIES``: then ``X-Forwarded-For`` is read from the right (each
    proxy appends the address it received the request from) and the first address that
    is not a trusted proxy is the client. Whatever a client writes into the header
    itself stays to the left of that, so it can neither spread its failures over made-up
    addresses nor lock out an address of its choosing. With no trusted proxies (the
    default) the header is ignored.
    """
    peer = str(request.META.get("REMOTE_ADDR") or "unknown")
    proxies = tuple(getattr(settings, "CRIOGEN_TRUSTED_PROXIES", ()) or ())
    if not proxies:
        return peer
    trusted = _networks(proxies)
    address = _address(peer)
    if address is None or not any(address in net for net in trusted):
        return peer
    hops = request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
    for hop in reversed(hops):
        hop_address = _address(hop)
        if hop_address is None:
            # Not an address: no proxy we trust wrote it, so the hop before it (a
            # trusted proxy, or the peer) is as far as the chain can be believed.
            break
        if not any(hop_address in net for net in trusted):
            return str(hop_address)
        address = hop_address
    return str(address)


def local_cache() -> bool:
    """Django's default cache lives in this process (LocMemCache): no I/O to wait for."""
    backend = str(settings.CACHES.get("default", {}).get("BACKEND", ""))
    return backend.endswith(".LocMemCache")


_shared: tuple[object, Any] | None = None
"""``(settings.CACHES, cache)``: the in-process default cache the lockout uses."""


def _cache() -> Any:
    """Django's default cache, for the lockout's counts.

    Django's ``cache`` is a per-context connection: under ASGI every request (its own
    async context) builds a new cache object on first use and closes it at
    ``request_finished``. A LocMemCache keeps its entries, expiry times and lock per
    cache name at module level, so each of its objects reads and writes the same
    counts: the lockout keeps one for as long as ``CACHES`` is the same (a check on
    every token-carrying request). Any other backend (a shared cache, with its own
    connections) is used through ``cache`` as Django hands it out.
    """
    global _shared
    conf = settings.CACHES
    shared = _shared
    if shared is not None and shared[0] is conf:
        return shared[1]
    if not local_cache():
        return cache
    instance = caches.create_connection("default")
    _shared = (conf, instance)
    return instance


def _keys(ip: str) -> tuple[str, str]:
    return f"criogen:authfail:{ip}:n", f"criogen:authfail:{ip}:since"


def _note_failure(request: HttpRequest) -> None:
    """Count one bad token from the request's client IP."""
    count_key, since_key = _keys(client_ip(request))
    window = _failure_window()
    store = _cache()
    if store.add(since_key, time.time(), window):
        store.set(count_key, 0, window)
    try:
        store.incr(count_key)
    except ValueError:  # the window ended between the two calls: start a new one
        store.set(count_key, 1, window)


def auth_failures_retry_after(request: HttpRequest) -> int | None:
    """Seconds until the request's client IP may try tokens again, or None when it is
    under the limit."""
    count_key, since_key = _keys(client_ip(request))
    store = _cache()
    count = store.get(count_key) or 0
    if count < _failure_limit():
        return None
    since = store.get(since_key) or time.time()
    return max(1, int(since + _failure_window() - time.time() + 0.999))


def _from_token(token: str, request: HttpRequest | None = None) -> Principal | None:
    """The caller ``token`` stands for (:func:`criogen.services.tokens.authenticate_token`),
    or None, which counts as a failure of the request's client IP."""
    if not token.strip():
        return None
    owner = authenticate_token(token)
    if owner is None:
        if request is not None:
            _note_failure(request)
        return None
    return Principal(user=owner.user, is_operator=owner.is_operator)


async def _from_token_off_loop(token: str, request: HttpRequest) -> Principal | None:
    """:func:`_from_token` on the API's database threads (the auth is async: ninja
    awaits it on the event loop for async endpoints and runs it to completion for
    sync ones)."""
    from api.aio import db

    return await db(_authenticate, token, request)


def _authenticate(token: str, request: HttpRequest) -> Principal | None:
    """:func:`_from_token`, then, for a caller it stands for, the read the endpoint
    planned to make in this same job (:func:`api.aio.run_ahead`)."""
    from api.aio import run_ahead

    who = _from_token(token, request)
    if who is not None:
        run_ahead(request, who)
    return who


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
