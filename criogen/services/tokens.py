"""API tokens: a user's own tokens (list, issue, revoke: the dashboard's API tokens
page and ``manage.py criogen_token``), and who a token stands for (the REST API's
authentication, :func:`authenticate_token`).

Each of ``tokens_of``, ``issue_token`` and ``revoke_token`` acts for ``user`` on that
user's tokens only: another user's token id is the same as an unknown one.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

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
    if statement is not None:
        found = _token_row(statement, digest)
        return _owner(found, digest) if found is not None else None
    row = ApiToken.objects.select_related("user").filter(token_hash=digest).first()
    if row is None:
        return None
    return _owner(_Token(row.pk, row.token_hash, row.last_used, row.expires_at, row.user), digest)


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

    def token_values(self, values: Sequence[Any]) -> list[Any]:
        """The token's columns of a row, each through its field's database converters
        (as :meth:`Columns.instance` converts them), in ``token.fields`` order."""
        converted = list(values)
        if not any(self.token.converters):  # PostgreSQL's datetimes need none
            return converted
        connection = connections[self.token.alias]
        table = self.token.model._meta.db_table
        for i, (field, converters) in enumerate(
            zip(self.token.fields, self.token.converters, strict=True)
        ):
            for convert in converters:
                converted[i] = convert(converted[i], field.get_col(table), connection)
        return converted


_statements: dict[str, _TokenStatement | None] = {}
_operate_id: dict[str, int] = {}

TOKEN_COLUMNS = ("id", "user", "token_hash", "last_used", "expires_at")
TOKEN_ATTNAMES = tuple(f.attname for f in ApiToken._meta.concrete_fields if f.name in TOKEN_COLUMNS)
"""The attributes of ``TOKEN_COLUMNS``, in the model's field order (the statement's)."""


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


class _Token(NamedTuple):
    """What authentication reads of a token's row."""

    pk: int
    token_hash: str
    last_used: datetime | None
    expires_at: datetime | None
    user: Any
    operate: bool | None = None
    """Whether the user holds ``criogen.operate`` (None: ask ``has_perm``)."""


def _token_row(statement: _TokenStatement, digest: str) -> _Token | None:
    """The token with its user, and whether the user holds ``criogen.operate``."""
    pid = _operate_permission_id(DEFAULT_DB_ALIAS)
    # Prepared on PostgreSQL: every API request runs it.
    rows = fetch_rows(DEFAULT_DB_ALIAS, statement.sql, [pid, pid, digest])
    if not rows:
        return None
    values = rows[0]
    n = len(statement.token.fields)
    # The token's own columns are read as they are (no ApiToken instance: a fifth of
    # this function's CPU); only the user is a model instance, as the caller needs.
    token = dict(zip(TOKEN_ATTNAMES, statement.token_values(values[:n]), strict=True))
    return _Token(
        token["id"],
        token["token_hash"],
        token["last_used"],
        token["expires_at"],
        statement.user.instance(values[n:-1]),
        bool(values[-1]),
    )


def _owner(row: _Token, digest: str) -> TokenOwner | None:
    """The user a token ``row`` (found by ``digest``, the hash of the token given)
    stands for: None for a wrong token or an inactive user; notes the token's use.
    Raises :class:`TokenExpired` for a token past its ``expires_at``."""
    if not hmac.compare_digest(row.token_hash, digest) or not row.user.is_active:
        return None
    now = timezone.now()
    if row.expires_at is not None and row.expires_at <= now:  # ApiToken.expired
        raise TokenExpired(
            f"this API token expired at {row.expires_at:%Y-%m-%d %H:%M} UTC; "
            "create a new one (dashboard: API tokens, or manage.py criogen_token USER).",
            expired_at=row.expires_at.isoformat(),
        )
    if row.last_used is None or (now - row.last_used).total_seconds() > 60:
        # At most one write a minute per token: last_used is for humans, not audits.
        ApiToken.objects.filter(pk=row.pk).update(last_used=now)
    user = row.user
    if user.is_staff or user.is_superuser:
        return TokenOwner(user=user, is_operator=True)
    operate = row.operate
    if operate is None:
        operate = user.has_perm("criogen.operate")
    return TokenOwner(user=user, is_operator=bool(operate))
