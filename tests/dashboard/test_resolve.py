""" "Mark as resolved" on the thread page: the operator closes a suspension without
running what waited, through the one answering service (``goto: "__end__"``, door
``ui``); the page then says who resolved it, and a second click is refused by name.

As in test_actions, the queued run does not execute inside the test transaction: the
engine's resolve is called directly to see the page afterwards."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from criogen import registry
from criogen.storage.models import Run, Thread

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


def resolve(client: Client, thread: Thread, expected: str | None = None) -> Any:
    data = {"resolve": "", "expected": expected or thread.head_id}
    return client.post(f"/ui/threads/{thread.pk}/act/", data, **HX)


@pytest.mark.parametrize("kind", ["workflow", "agent"])
def test_mark_as_resolved_queues_one_goto_end_by_the_operator(
    as_operator: Client, suspended_workflow: Any, waiting_agent: Any, kind: str
) -> None:
    t = suspended_workflow() if kind == "workflow" else waiting_agent()
    page = as_operator.get(f"/ui/threads/{t.pk}/").content.decode()
    assert "data-resolve" in page and "Mark as resolved" in page
    response = resolve(as_operator, t)
    assert response.status_code == 200
    assert "Resolved: nothing that waited was run" in response.content.decode()
    (run,) = Run.objects.filter(thread_id=t.pk)
    assert run.command == {"goto": "__end__"}
    assert (run.kwargs["actor"], run.kwargs["door"]) == ("olga", "ui")
    # The same click again (the run still queued): refused, naming who came first.
    again = resolve(as_operator, t).content.decode()
    assert "Already decided by olga" in again
    assert Run.objects.filter(thread_id=t.pk).count() == 1


def test_the_page_says_who_resolved_it(
    as_operator: Client, suspended_workflow: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry.storage(), "audit_enabled", True)
    t = suspended_workflow()
    registry.get_graph("hitl").thread(t.pk).resolve(by="oscar", door="ui", durability="sync")
    html = as_operator.get(f"/ui/threads/{t.pk}/").content.decode()
    assert 'data-resolved-by="oscar"' in html and "resolved by oscar" in html
    assert "Resolved by oscar" in html and "data-resolve " not in html
    assert "resolved it without running what waited" in html  # the timeline's event


def test_a_viewer_gets_no_resolve_button(
    as_viewer: Client, viewer: Any, suspended_workflow: Any
) -> None:
    t = suspended_workflow(owner=viewer)  # her own thread: she sees it, cannot act
    response = as_viewer.get(f"/ui/threads/{t.pk}/")
    assert response.status_code == 200
    assert "Mark as resolved" not in response.content.decode()
    assert resolve(as_viewer, t).status_code == 403
    assert not Run.objects.filter(thread_id=t.pk).exists()
