"""Typed answers on the thread page (server side): a suspension's choices are buttons
and its schema a form; a refused answer is a 422 with the error next to its field and
the typed text kept; an approval shows only its allowed decisions."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from criogen import registry
from criogen.storage.models import Run, Thread
from tests.dashboard.conftest import TEST_ASSISTANTS, new_thread_id

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def _console_graphs(settings: Any, _graphs: None) -> None:
    settings.CRIOGEN_ASSISTANTS = {
        **TEST_ASSISTANTS,
        "review": "criogen.examples.review:workflow",
        "gated": "tests.dashboard.graphs_console:gated",
        "form": "tests.dashboard.graphs_console:form",
    }
    registry.reset()


def suspended(graph: str, state: dict[str, Any] | None = None) -> Thread:
    tid = new_thread_id(graph)
    registry.get_graph(graph).thread(tid).run(state or {}, durability="sync")
    Thread.objects.filter(pk=tid).update(metadata={"graph_id": graph})
    return Thread.objects.get(pk=tid)


def act(client: Client, thread: Thread, **fields: Any) -> Any:
    data = {"expected": thread.head_id, **fields}
    return client.post(f"/ui/threads/{thread.pk}/act/", data, **HX)


def commands(thread: Thread) -> list[Any]:
    return [r.command["resume"] for r in Run.objects.filter(thread_id=thread.pk)]


def test_the_review_step_shows_its_choice_and_form_not_a_json_box(as_operator: Client) -> None:
    t = suspended("review", {"title": "T", "body": "b"})
    html = as_operator.get(f"/ui/threads/{t.pk}/").content.decode()
    assert 'id="resume-value"' not in html
    assert re.search(
        r'<button type="submit" name="choice" value="0" class="ok" data-approve>Approve</button>',
        html,
    )
    assert 'name="answer.decision" value="0"' in html and 'name="answer.decision" value="1"' in html
    assert '<textarea id="f-answer-note" name="answer.note"' in html


def test_the_approve_choice_resumes_with_the_declared_value(as_operator: Client) -> None:
    t = suspended("review", {"title": "T", "body": "b"})
    response = act(as_operator, t, choice="0")
    assert response.status_code == 200, response.content
    assert commands(t) == [{"decision": "approve"}]


def test_the_form_sends_typed_json(as_operator: Client) -> None:
    t = suspended("review", {"title": "T", "body": "b"})
    response = act(as_operator, t, resume="", **{"answer.decision": "1", "answer.note": "shorter"})
    assert response.status_code == 200
    assert commands(t) == [{"decision": "revise", "note": "shorter"}]


def test_a_refused_answer_is_a_422_next_to_the_field_keeping_the_text(as_operator: Client) -> None:
    t = suspended("review", {"title": "T", "body": "b"})
    response = act(as_operator, t, resume="", **{"answer.note": "<b>keep me</b>"})
    assert response.status_code == 422
    html = response.content.decode()
    assert 'aria-invalid="true" aria-describedby="f-answer-decision-error"' in html
    assert re.search(
        r'id="f-answer-decision-error" class="field-error" role="alert">Decision is required', html
    )
    assert "&lt;b&gt;keep me&lt;/b&gt;</textarea>" in html
    assert commands(t) == []


def test_every_widget_reads_back_into_json(as_operator: Client) -> None:
    t = suspended("form")
    html = as_operator.get(f"/ui/threads/{t.pk}/").content.decode()
    assert '<select id="f-answer-size"' in html  # five options: a select
    assert 'type="number" step="1"' in html
    assert 'type="checkbox" id="f-answer-gift"' in html
    assert (
        '<input id="f-answer-name" name="answer.name" value="" type="text" maxlength="40"' in html
    )
    assert '<textarea id="f-answer-message"' in html
    bad = act(as_operator, t, resume="", **{"answer.size": "3", "answer.count": "two"})
    assert bad.status_code == 422
    assert 'id="f-answer-count-error"' in bad.content.decode()
    assert 'value="two"' in bad.content.decode()
    zero = act(as_operator, t, resume="", **{"answer.size": "3", "answer.count": "0"})
    assert zero.status_code == 422 and "Count must be at least 1" in zero.content.decode()
    fields = {"answer.size": "3", "answer.count": "2", "answer.gift": "on", "answer.message": "hi"}
    ok = act(as_operator, t, resume="", **fields)
    assert ok.status_code == 200
    assert commands(t) == [{"size": "XL", "count": 2, "gift": True, "message": "hi"}]


def test_an_untyped_suspension_keeps_the_json_box_without_a_default_or_shortcut(
    as_operator: Client,
) -> None:
    t = suspended("hitl", {"n": 1})
    html = as_operator.get(f"/ui/threads/{t.pk}/").content.decode()
    box = re.search(r'<textarea id="resume-value"[^>]*>([^<]*)</textarea>', html)
    assert box is not None and box.group(1) == ""
    assert not re.search(r'name="resume"[^>]*data-approve', html)


def test_an_approval_shows_only_its_allowed_decisions(as_operator: Client) -> None:
    t = suspended("gated")
    html = as_operator.get(f"/ui/threads/{t.pk}/").content.decode()
    actions = html[html.index('id="actions"') : html.index('id="panel"')]
    assert 'name="reject"' in actions
    assert 'name="approve"' not in actions and "Edit arguments" not in actions
    inbox = as_operator.get("/ui/inbox/").content.decode()
    card = inbox[inbox.index(f'data-thread="{t.pk}"') :]
    card = card[: card.index("</article>")]
    assert 'name="reject"' in card and 'name="approve"' not in card
    # A hand-made approve is refused too, by name.
    refused = act(as_operator, t, approve="")
    assert refused.status_code == 422 and "not allowed" in refused.content.decode()
    assert commands(t) == []
