"""The admin lists a LangGraph thread's checkpoints (read-only, payloads not shown)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from criogen.storage.models import LangGraphCheckpoint

pytestmark = pytest.mark.django_db


def test_the_admin_lists_and_searches_langgraph_checkpoints(thread_id: str) -> None:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    # A thread Criogen never made (a saver used on its own): listed all the same.
    row = LangGraphCheckpoint.objects.create(
        thread_id=thread_id,
        checkpoint_id="1ef-checkpoint",
        run_id="run-7",
        type="msgpack",
        checkpoint=b"secret bytes",
    )

    page = client.get("/admin/criogen/langgraphcheckpoint/", {"q": thread_id})
    detail = client.get(f"/admin/criogen/langgraphcheckpoint/{row.pk}/change/")

    assert page.status_code == 200
    assert "1ef-checkpoint" in page.content.decode()
    assert page.context["cl"].result_count == 1
    assert detail.status_code == 200
    assert "secret bytes" not in detail.content.decode()
    assert client.get("/admin/criogen/langgraphcheckpoint/add/").status_code == 403
