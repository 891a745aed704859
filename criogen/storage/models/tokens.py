"""API tokens: the credentials ``langgraph_sdk`` clients send as ``x-api-key`` or
``Authorization: Bearer``.

Only a SHA-256 hash of each token is stored; the token itself is shown once, when it
is created (admin, the dashboard's API tokens page or ``manage.py criogen_token USER``).
A token may expire (``expires_at``; by default ``CRIOGEN_TOKEN_TTL_DAYS`` after it was
issued, never when that is unset).

The table keeps the name it had when the model lived in the ``api`` app
(``api_apitoken``): moving the model into the core changed no data.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

__all__ = [
    "DEFAULT_EXPIRY",
    "TOKEN_PREFIX",
    "ApiToken",
    "default_expiry",
    "hash_token",
    "new_token",
]

TOKEN_PREFIX = "crg_"  # noqa: S105 - a marker that makes leaked tokens greppable


def new_token() -> tuple[str, str, str]:
    """A fresh random token: ``(token, its hash, its display prefix)``."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    return token, hash_token(token), token[:10]


DEFAULT_EXPIRY = object()
"""``ApiToken.issue``'s default: the expiry ``CRIOGEN_TOKEN_TTL_DAYS`` gives."""


def default_expiry() -> datetime | None:
    """Now plus ``CRIOGEN_TOKEN_TTL_DAYS``, or None (never) when that is unset or 0."""
    days = getattr(settings, "CRIOGEN_TOKEN_TTL_DAYS", None)
    return timezone.now() + timedelta(days=int(days)) if days else None


def hash_token(token: str) -> str:
    """The stored form of a token: hex SHA-256 (tokens are 256 random bits, so a
    plain fast hash is enough: there is nothing to brute-force)."""
    return hashlib.sha256(token.encode()).hexdigest()


class ApiToken(models.Model):
    """One API token of one user."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, blank=True, default="")
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(
        max_length=12, editable=False, help_text="The token's first characters, to tell it apart."
    )
    created = models.DateTimeField(default=timezone.now)
    last_used = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="From this time on the token is refused (401 token_expired). Empty: never.",
    )

    class Meta:
        db_table = "api_apitoken"  # its name from when it lived in the api app
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user}, {self.name or 'unnamed'})"

    @classmethod
    def issue(
        cls,
        user: models.Model,
        *,
        name: str = "",
        expires_at: datetime | None | object = DEFAULT_EXPIRY,
    ) -> tuple[ApiToken, str]:
        """Create a token for ``user``; return the row and the token (shown only now).

        ``expires_at``: when it stops working; None: never; left out:
        ``CRIOGEN_TOKEN_TTL_DAYS`` from now (never when that is unset).
        """
        if expires_at is DEFAULT_EXPIRY:
            expires_at = default_expiry()
        token, digest, prefix = new_token()
        row = cls.objects.create(
            user=user, name=name, token_hash=digest, prefix=prefix, expires_at=expires_at
        )
        return row, token

    def expired(self, now: datetime | None = None) -> bool:
        """Whether the token's expiry has passed."""
        return self.expires_at is not None and self.expires_at <= (now or timezone.now())

    def matches(self, token: str) -> bool:
        """Constant-time comparison of ``token`` with this row's hash."""
        return hmac.compare_digest(self.token_hash, hash_token(token))
