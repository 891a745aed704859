"""The API tokens page: every signed-in user lists, creates and revokes their own
tokens (a new one is shown once); another user's tokens are out of reach."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from api.auth import _from_token
from criogen.storage.models import ApiToken
from tests.dashboard.conftest import client_for

pytestmark = pytest.mark.django_db

URL = "/ui/tokens/"


def _csrf(page: Any) -> str:
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode())
    assert found
    return found.group(1)


def test_the_header_links_to_the_tokens_page(as_viewer: Client) -> None:
    page = as_viewer.get("/ui/inbox/")
    assert f'href="{URL}"' in page.content.decode()


def test_it_lists_only_the_users_own_tokens(viewer: User, stranger: User) -> None:
    ApiToken.issue(viewer, name="laptop", expires_at=timezone.now() + timedelta(days=3))
    ApiToken.issue(viewer, name="old ci", expires_at=timezone.now() - timedelta(days=1))
    ApiToken.issue(stranger, name="strangers-token")
    text = client_for(viewer).get(URL).content.decode()
    assert "laptop" in text and "old ci" in text
    assert "strangers-token" not in text
    assert "expired" in text  # the old one says so
    assert "crg_" in text  # prefixes only...
    assert not re.search(r"crg_[A-Za-z0-9_-]{20,}", text)  # ...never a whole token


def test_a_new_token_is_shown_once_and_works(viewer: User) -> None:
    client = client_for(viewer, csrf_checks=True)
    done = client.post(
        URL, {"name": "laptop", "create": "", "csrfmiddlewaretoken": _csrf(client.get(URL))}
    )
    assert done.status_code == 302  # a reload of the next page creates nothing
    page = client.get(done["Location"])
    assert page.status_code == 200
    assert page["Cache-Control"] == "no-store"
    token = re.search(r'id="new-token-value">(crg_[^<]+)<', page.content.decode())
    assert token
    who = _from_token(token.group(1))
    assert who is not None and who.user == viewer
    (row,) = ApiToken.objects.filter(user=viewer)
    assert row.name == "laptop" and row.expires_at is None  # no default TTL set
    assert token.group(1) not in client.get(URL).content.decode()  # shown once


def test_a_new_token_gets_the_default_or_its_own_expiry(viewer: User, settings: Any) -> None:
    settings.CRIOGEN_TOKEN_TTL_DAYS = 30
    client = client_for(viewer)
    client.post(URL, {"name": "default", "create": ""})
    client.post(URL, {"name": "short", "expires_in_days": "2", "create": ""})
    client.post(URL, {"name": "forever", "expires_in_days": "0", "create": ""})
    rows = {t.name: t.expires_at for t in ApiToken.objects.filter(user=viewer)}
    now = timezone.now()
    assert timedelta(days=29) < rows["default"] - now <= timedelta(days=30)
    assert timedelta(days=1) < rows["short"] - now <= timedelta(days=2)
    assert rows["forever"] is None
    bad = client.post(URL, {"name": "x", "expires_in_days": "soon", "create": ""})
    assert bad.status_code == 422
    assert 'data-field="expires_in_days"' in bad.content.decode()
    assert ApiToken.objects.filter(user=viewer).count() == 3


def test_revoking_needs_the_csrf_token_and_stops_the_token(viewer: User) -> None:
    row, token = ApiToken.issue(viewer, name="laptop")
    client = client_for(viewer, csrf_checks=True)
    refused = client.post(URL, {"token": row.pk, "revoke": ""})
    assert refused.status_code == 403
    assert _from_token(token) is not None
    done = client.post(
        URL, {"token": row.pk, "revoke": "", "csrfmiddlewaretoken": _csrf(client.get(URL))}
    )
    assert done.status_code == 302
    assert _from_token(token) is None
    assert not ApiToken.objects.filter(pk=row.pk).exists()


def test_another_users_token_cannot_be_revoked(viewer: User, stranger: User) -> None:
    row, token = ApiToken.issue(stranger, name="theirs")
    page = client_for(viewer).post(URL, {"token": row.pk, "revoke": ""}, follow=True)
    assert "No such token" in page.content.decode()
    assert _from_token(token) is not None


def test_anonymous_visitors_are_sent_to_sign_in() -> None:
    page = Client().get(URL)
    assert page.status_code == 302 and "/accounts/login/" in page["Location"]
