"""The admin finds memory facts by subject through the digest, sealed or not."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from criogen import Storage
from criogen.engine.crypto import generate_key

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("sealed", [True, False])
def test_the_admin_searches_memory_facts_by_subject(settings: Any, sealed: bool) -> None:
    settings.CRIOGEN_ENCRYPTION_KEY = generate_key() if sealed else None
    storage = Storage.default()
    namespace = f"ns_{uuid.uuid4().hex[:8]}"
    person = f"person-{uuid.uuid4().hex[:8]}"
    fact = storage.add_fact(namespace, person, "likes tea")
    other = storage.add_fact(namespace, f"{person}-other", "likes coffee")
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    page = client.get("/admin/criogen/memoryfact/", {"q": person})
    assert page.status_code == 200
    shown = [f.id for f in page.context["cl"].result_list]
    assert shown == [fact.id], (shown, other.id)
    change = client.get(f"/admin/criogen/memoryfact/{fact.id}/change/")
    assert change.status_code == 200
    assert (person in change.content.decode()) is not sealed
