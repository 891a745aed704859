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
from django.core.cache import cache
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from ninja.security.base import AuthBase

from api.errors import TokenExpired
from criogen.storage.models.tokens import ApiToken, hash_token
from criogen.storage.rows import Columns, columns

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


def _model_backend_only() -> bool:
    return list(settings.AUTHENTICATION_BACKENDS) == ["django.contrib.auth.backends.ModelBackend"]


# -- the token lookup: one statement -------------------------------------------------------
# Every API request authenticates, so this is on the hot path. Built by the ORM (the
# token with select_related user and two Exists subqueries) it cost ~3.3 ms on
# PostgreSQL: ~1.7 ms compiling the query and building the instances, ~1.3 ms of the
# server planning a six-table statement whose execution took 0.13 ms. The statement
# below is written once per process from the models' own tables and columns, with the
# permission's id looked up once (each permission subquery then joins at most two
# tables), and its row is turned into the token and its user with the fields' own
# database converters: ~0.5 ms (bench/NOTES.md, "Token authentication").


@dataclass(frozen=True)
class _TokenStatement:
    sql: str
    token: Columns
    user: Columns


_statements: dict[str, _TokenStatement | None] = {}
_operate_id: dict[str, int] = {}

TOKEN_COLUMNS = ("id", "user", "token_hash", "last_used", "expires_at")


def forget_operate_permission(**_: Any) -> None:
    """Look ``criogen.operate``'s id up again on next use (connected to ``post_migrate``
    and to the permission's deletion: a flushed database creates it anew)."""
    _operate_id.clear()


def _operate_permission_id(alias: str) -> int:
    """The id of ``criogen.operate`` in ``alias`` (0, which no row has, when missing)."""
    pid = _operate_id.get(alias)
    if pid is None:
        from django.contrib.auth.models import Permission

        found = (
            Permission.objects.using(alias)
            .filter(content_type__app_label="criogen", codename="operate")
            .values_list("pk", flat=True)
            .first()
        )
        if found is None:
            return 0  # not remembered: migrations may create it later
        pid = _operate_id[alias] = found
    return pid


def _key_to(through: Any, model: Any) -> str:
    """The column of the many-to-many table ``through`` that points to ``model``."""
    for field in through.concrete_fields:
        if field.many_to_one and field.related_model is model:
            return str(field.column)
    raise LookupError(f"{through.db_table} has no key to {model._meta.label}")


def _token_statement(alias: str) -> _TokenStatement | None:
    """The token + user + ``criogen.operate`` statement for ``alias``, or None when the
    user model has no Django permissions (the ORM path then asks ``has_perm``)."""
    if alias in _statements:
        return _statements[alias]
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group, Permission

    user_model = get_user_model()
    meta = user_model._meta
    try:
        direct = meta.get_field("user_permissions").remote_field.through._meta
        groups = meta.get_field("groups").remote_field.through._meta
        group_perms = Group._meta.get_field("permissions").remote_field.through._meta
    except Exception:  # noqa: BLE001 - a custom user model without PermissionsMixin
        _statements[alias] = None
        return None
    qn = connections[alias].ops.quote_name
    token = columns(ApiToken, alias, TOKEN_COLUMNS)
    user = columns(user_model, alias)
    owner = f"t.{qn(ApiToken._meta.get_field('user').column)}"
    # Identifiers come from the models' metadata, quoted; every value is a parameter.
    holds_direct = (
        f"SELECT 1 FROM {qn(direct.db_table)} p"  # noqa: S608
        f" WHERE p.{qn(_key_to(direct, user_model))} = {owner}"
        f" AND p.{qn(_key_to(direct, Permission))} = %s"
    )
    holds_by_group = (
        f"SELECT 1 FROM {qn(groups.db_table)} g JOIN {qn(group_perms.db_table)} q"  # noqa: S608
        f" ON q.{qn(_key_to(group_perms, Group))} = g.{qn(_key_to(groups, Group))}"
        f" WHERE g.{qn(_key_to(groups, user_model))} = {owner}"
        f" AND q.{qn(_key_to(group_perms, Permission))} = %s"
    )
    sql = (
        f"SELECT {token.select('t')}, {user.select('u')},"  # noqa: S608
        f" (EXISTS ({holds_direct}) OR EXISTS ({holds_by_group}))"
        f" FROM {qn(ApiToken._meta.db_table)} t JOIN {qn(meta.db_table)} u"
        f" ON u.{qn(meta.pk.column)} = {owner}"
        f" WHERE t.{qn(ApiToken._meta.get_field('token_hash').column)} = %s"
    )
    statement = _statements[alias] = _TokenStatement(sql, token, user)
    return statement


def _token_row(statement: _TokenStatement, digest: str) -> tuple[ApiToken, bool] | None:
    """The token with its user, and whether the user holds ``criogen.operate``."""
    pid = _operate_permission_id(DEFAULT_DB_ALIAS)
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute(statement.sql, [pid, pid, digest])
        values = cursor.fetchone()
    if values is None:
        return None
    n = len(statement.token.fields)
    row = statement.token.instance(values[:n])
    row.user = statement.user.instance(values[n:-1])
    return row, bool(values[-1])


def _principal(row: ApiToken | None, token: str, *, operate: bool | None) -> Principal | None:
    """The caller a token ``row`` stands for (None for no row, a wrong token or an
    inactive user); notes the token's use. ``operate``: whether the user holds
    ``criogen.operate`` (None: ask ``has_perm``). Raises :class:`TokenExpired` for a
    token past its ``expires_at``."""
    if row is None or not row.matches(token) or not row.user.is_active:
        return None
    now = timezone.now()
    if row.expired(now):
        raise TokenExpired(
            f"this API token expired at {row.expires_at:%Y-%m-%d %H:%M} UTC; "
            "create a new one (dashboard: API tokens, or manage.py criogen_token USER).",
            expired_at=row.expires_at.isoformat() if row.expires_at else None,
        )
    if row.last_used is None or (now - row.last_used).total_seconds() > 60:
        # At most one write a minute per token: last_used is for humans, not audits.
        ApiToken.objects.filter(pk=row.pk).update(last_used=now)
    user = row.user
    if user.is_staff or user.is_superuser:
        return Principal(user=user, is_operator=True)
    if operate is None:
        operate = user.has_perm("criogen.operate")
    return Principal(user=user, is_operator=bool(operate))


def _from_token(token: str, request: HttpRequest | None = None) -> Principal | None:
    token = token.strip()
    if not token:
        return None
    # The lookup is by hash (unique index), then compared in constant time.
    digest = hash_token(token)
    statement = _token_statement(DEFAULT_DB_ALIAS) if _model_backend_only() else None
    row: ApiToken | None
    operate: bool | None
    if statement is not None:
        row, operate = _token_row(statement, digest) or (None, False)
    else:
        row = ApiToken.objects.select_related("user").filter(token_hash=digest).first()
        operate = None
    principal = _principal(row, token, operate=operate)
    if principal is None and request is not None:
        _note_failure(request)
    return principal


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
