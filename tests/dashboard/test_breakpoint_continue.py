"""A thread stopped at a breakpoint (``interrupt_before`` / ``interrupt_after``) shows on
its page as paused before the node, with "Continue" — not as a question to answer —
and Continue queues a resume with no value by the operator (door ``ui``)."""

from __future__ import annotations

import pytest
from django.test import Client

from criogen import registry
from criogen.storage.models import Run, Thread
from tests.dashboard.conftest import new_thread_id

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


def _stopped() -> Thread:
    tid = new_thread_id("bp")
    registry.get_graph("hitl").thread(tid).run(
        {"n": 0}, interrupt_before=["ask"], durability="sync"
    )
    Thread.objects.filter(pk=tid).update(metadata={"graph_id": "hitl"})
    return Thread.objects.get(pk=tid)


def test_a_breakpoint_is_a_paused_thread_with_continue(as_operator: Client) -> None:
    t = _stopped()
    assert t.head_status == "suspended"
    html = as_operator.get(f"/ui/threads/{t.pk}/").content.decode()
    assert "paused at a breakpoint before ask" in html
    assert "data-breakpoint" in html and 'name="continue"' in html
    assert 'name="resume"' not in html and "Mark as resolved" not in html
    response = as_operator.post(
        f"/ui/threads/{t.pk}/act/", {"continue": "", "expected": t.head_id}, **HX
    )
    assert response.status_code == 200
    assert "Resumed" in response.content.decode()
    (run,) = Run.objects.filter(thread_id=t.pk)
    assert run.command == {"resume": None}
    assert (run.kwargs["actor"], run.kwargs["door"]) == ("olga", "ui")


def test_the_inbox_still_renders_with_a_thread_at_a_breakpoint(as_operator: Client) -> None:
    t = _stopped()
    response = as_operator.get("/ui/inbox/")
    assert response.status_code == 200
    assert t.pk in response.content.decode()  # it waits for a person: Continue
