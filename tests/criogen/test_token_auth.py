"""``authenticate_token``: its one statement (the model backend alone) answers as the
ORM path (any other backends) does, for every kind of token."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from criogen.engine.errors import TokenExpired
from criogen.services.tokens import authenticate_token, issue_token, revoke_token
from criogen.storage.models import ApiToken

pytestmark = pytest.mark.django_db

MODEL = ["django.contrib.auth.backends.ModelBackend"]
ORM = [*MODEL, "django.contrib.auth.backends.RemoteUserBackend"]


def _answer(token: str) -> Any:
    try:
        owner = authenticate_token(token)
    except TokenExpired as exc:
        return ("expired", exc.message, exc.details)
    return None if owner is None else (owner.user.pk, owner.is_operator)


def test_the_statement_answers_as_the_orm_does(
    settings: Any, operator: Any, viewer: Any, stranger: Any, site_admin: Any
) -> None:
    now = timezone.now()
    tokens = {
        "operator": issue_token(user=operator, name="o")[1],
        "viewer": issue_token(user=viewer, name="v", expires_at=None)[1],
        "admin": issue_token(user=site_admin, name="a")[1],
        "expired": issue_token(user=viewer, name="e", expires_at=now - timedelta(seconds=1))[1],
        "unknown": "not-a-token",
        "blank": "  ",
    }
    row, revoked = issue_token(user=stranger, name="r")
    revoke_token(user=stranger, token_id=row.pk)
    tokens["revoked"] = revoked
    inactive = issue_token(user=stranger, name="i")[1]
    stranger.is_active = False
    stranger.save(update_fields=["is_active"])
    tokens["inactive"] = inactive

    settings.AUTHENTICATION_BACKENDS = MODEL
    fast = {name: _answer(token) for name, token in tokens.items()}
    settings.AUTHENTICATION_BACKENDS = ORM
    general = {name: _answer(token) for name, token in tokens.items()}

    assert fast == general
    assert fast["operator"] == (operator.pk, True)
    assert fast["viewer"] == (viewer.pk, False)
    assert fast["admin"] == (site_admin.pk, True)
    assert fast["expired"][0] == "expired"
    assert fast["revoked"] is fast["inactive"] is fast["unknown"] is fast["blank"] is None


def test_use_is_noted_at_most_once_a_minute(settings: Any, viewer: Any) -> None:
    settings.AUTHENTICATION_BACKENDS = MODEL
    row, token = issue_token(user=viewer, name="v")
    assert authenticate_token(token) is not None
    first = ApiToken.objects.get(pk=row.pk).last_used
    assert first is not None
    assert authenticate_token(token) is not None
    assert ApiToken.objects.get(pk=row.pk).last_used == first
    ApiToken.objects.filter(pk=row.pk).update(last_used=first - timedelta(minutes=2))
    assert authenticate_token(token) is not None
    assert ApiToken.objects.get(pk=row.pk).last_used > first - timedelta(minutes=2)
