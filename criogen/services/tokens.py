"""API tokens: a user's own tokens (list, issue, revoke: the dashboard's API tokens
page and ``manage.py criogen_token``), and who a token stands for (the REST API's
authentication, :func:`authenticate_token`).

Each of ``tokens_of``, ``issue_token`` and ``revoke_token`` acts for ``user`` on that
user's tokens only: another user's token id is the same as an unknown one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import QuerySet
from django.utils import timezone

from criogen.engine.errors import TokenExpired
from criogen.storage.models.tokens import DEFAULT_EXPIRY, ApiToken, hash_token
from criogen.storage.rows import Columns, columns, fetch_rows

__all__ = [
    "DEFAULT_EXPIRY",
    "TokenOwner",
    "authenticate_token",
    "forget_operate_permission",
    "issue_token",
    "revoke_token",
    "tokens_of",
]


def tokens_of(user: Any) -> QuerySet[ApiToken]:
    """``user``'s tokens, newest first."""
    return ApiToken.objects.filter(user=user).order_by("-created", "-pk")


def issue_token(
    *, user: Any, name: str, expires_at: datetime | None | object = DEFAULT_EXPIRY
) -> tuple[ApiToken, str]:
    """A new token for ``user``: the row and the token itself (shown once, never
    stored). ``expires_at`` as in :meth:`ApiToken.issue` (left out:
    ``CRIOGEN_TOKEN_TTL_DAYS`` from now, never when that is unset; None: never)."""
    return ApiToken.issue(user, name=name, expires_at=expires_at)


def revoke_token(*, user: Any, token_id: int) -> ApiToken | None:
    """Delete ``user``'s token ``token_id`` (it stops working at once); return it, or
    None when ``user`` has no such token."""
    row = tokens_of(user).filter(pk=token_id).first()
    if row is not None:
        row.delete()
    return row


# -- who a token stands for ----------------------------------------------------------------


@dataclass(frozen=True)
class TokenOwner:
    """The user an API token stands for."""

    user: Any
    """The token's (active) user."""
    is_operator: bool
    """Staff, superusers and holders of ``criogen.operate`` (directly or through a
    group): they see and act on every thread."""


def authenticate_token(token: str) -> TokenOwner | None:
    """The user ``token`` stands for, or None (no such token, a revoked one, an inactive
    user, an empty string). Notes the token's use (``last_used``, at most once a
    minute).

    Raises:
        TokenExpired: the token is past its ``expires_at`` (a 401 naming when).
    """
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
    return _owner(row, token, operate=operate)


def _model_backend_only() -> bool:
    return list(settings.AUTHENTICATION_BACKENDS) == ["django.contrib.auth.backends.ModelBackend"]


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
    # Prepared on PostgreSQL: every API request runs it.
    rows = fetch_rows(DEFAULT_DB_ALIAS, statement.sql, [pid, pid, digest])
    if not rows:
        return None
    values = rows[0]
    n = len(statement.token.fields)
    row = statement.token.instance(values[:n])
    row.user = statement.user.instance(values[n:-1])
    return row, bool(values[-1])


def _owner(row: ApiToken | None, token: str, *, operate: bool | None) -> TokenOwner | None:
    """The user a token ``row`` stands for (None for no row, a wrong token or an
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
        return TokenOwner(user=user, is_operator=True)
    if operate is None:
        operate = user.has_perm("criogen.operate")
    return TokenOwner(user=user, is_operator=bool(operate))
