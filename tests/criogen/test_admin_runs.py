"""The admin lists runs, assistants and deadline firings, with filters and search."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from criogen.services.assistants import resolve_assistant
from criogen.storage.models import DeadlineFiring, Run, Thread

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client_() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def test_the_admin_lists_filters_and_searches_runs(admin_client_: Client, thread_id: str) -> None:
    thread = Thread.objects.create(id=thread_id)
    assistant = resolve_assistant(assistant_id="steps")
    run = Run.objects.create(thread=thread, assistant=assistant, graph_id="steps", status="error")
    DeadlineFiring.objects.create(
        thread=thread, checkpoint_id="c", interrupt_id="i", kind="reminder", run=run
    )

    page = admin_client_.get("/admin/criogen/run/", {"status__exact": "error", "q": thread_id})
    assert page.status_code == 200
    assert str(run.pk) in page.content.decode()
    assert (
        admin_client_.get("/admin/criogen/run/", {"status__exact": "success"})
        .context["cl"]
        .result_count
        == 0
    )
    assert admin_client_.get(f"/admin/criogen/run/{run.pk}/change/").status_code == 200
    assert admin_client_.get("/admin/criogen/assistant/", {"q": "steps"}).status_code == 200
    assert (
        admin_client_.get("/admin/criogen/deadlinefiring/", {"kind__exact": "reminder"})
        .context["cl"]
        .result_count
        == 1
    )
