"""A user's own API tokens: list, issue, revoke (the dashboard's API tokens page).

Each function acts for ``user`` on that user's tokens only: another user's token id
is the same as an unknown one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from criogen.storage.models.tokens import DEFAULT_EXPIRY, ApiToken

__all__ = ["DEFAULT_EXPIRY", "issue_token", "revoke_token", "tokens_of"]


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
