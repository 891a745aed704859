"""Operator actions from the dashboard: approve, reject, edit, decide, resume, retry,
rewind, bulk decisions — with permissions, CSRF, validation and races.

The actions create runs through ``criogen.services``; the run executes after the
transaction commits, which a test transaction never does, so these tests check the run
that was queued (its ``command``) and what the page says. The browser tests watch runs
finish.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.utils.html import escape

from criogen import registry
from criogen.storage.models import AuditEvent, Run, Thread
from tests.dashboard.conftest import client_for

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


def act(client: Client, thread: Thread, button: str, **fields: Any) -> Any:
    data = {button: "", "expected": thread.head_id, **fields}
    return client.post(f"/ui/threads/{thread.pk}/act/", data, **HX)


def resumes(thread: Thread) -> list[Any]:
    """The values the thread's queued runs resume it with (decision digests left out)."""
    out = []
    for run in Run.objects.filter(thread_id=thread.pk).order_by("created_at"):
        value = run.command["resume"]
        if isinstance(value, dict) and "decisions" in value:
            decisions = [{k: v for k, v in d.items() if k != "digest"} for d in value["decisions"]]
            value = {"decisions": decisions}
        out.append(value)
    return out


def test_it_approves_a_waiting_call(as_operator: Client, waiting_agent) -> None:
    t = waiting_agent()
    response = act(as_operator, t, "approve")
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="actions"')
    assert "Approved: the agent continues." in html
    assert re.search(r'<section id="timeline"[^>]*hx-swap-oob="true"', html)
    assert resumes(t) == [{"decisions": [{"type": "approve"}]}]
    run = Run.objects.get(thread_id=t.pk)
    # Each decision is bound to the arguments the operator saw.
    digest = t.checkpoints.get(version=3).body_json["interrupts"][0]["calls"][0]["digest"]
    assert run.command["resume"]["decisions"][0]["digest"] == digest
    assert run.status == "pending" and run.metadata == {"resumed_by": "olga"}


def test_it_rejects_with_a_reason(as_operator: Client, waiting_agent) -> None:
    t = waiting_agent()
    response = act(as_operator, t, "reject", reason="  not this customer  ")
    assert "Rejected" in response.content.decode()
    assert resumes(t) == [{"decisions": [{"type": "reject", "message": "not this customer"}]}]


def test_a_rejection_needs_a_reason(as_operator: Client, waiting_agent) -> None:
    t = waiting_agent()
    response = act(as_operator, t, "reject", reason=" ")
    assert response.status_code == 422
    assert 'data-field="reason"' in response.content.decode()
    assert resumes(t) == []


def test_a_refused_reason_is_given_back_as_typed(as_operator: Client, waiting_agent) -> None:
    t = waiting_agent()
    typed = "too <long> " * 200
    response = act(as_operator, t, "reject", reason=typed)
    assert response.status_code == 422
    html = response.content.decode()
    assert "The reason is too long (at most 2000 characters)." in html
    assert f'name="reason" value="{escape(typed)}"' in html
    assert resumes(t) == []


def test_a_refused_per_call_decision_keeps_the_choices(as_operator: Client, waiting_agent) -> None:
    t = waiting_agent(text="refund order 1 of 5 EUR and order 2 of 900 EUR")
    response = act(
        as_operator,
        t,
        "decide",
        **{"decision-0": "approve", "decision-1": "reject", "reason-1": "x" * 2001},
    )
    assert response.status_code == 422
    html = response.content.decode()
    assert 'name="reason-1" value="' + "x" * 2001 + '"' in html
    assert re.search(r'name="decision-1" value="reject"\s+checked', html)
    assert not re.search(r'name="decision-1" value="approve"\s+checked', html)


def test_a_refused_reason_in_an_inbox_card_swaps_nothing(
    as_operator: Client, waiting_agent
) -> None:
    t = waiting_agent()
    response = as_operator.post(
        f"/ui/threads/{t.pk}/act/",
        {"reject": "", "reason": "x" * 2001, "expected": t.head_id, "from": "inbox"},
        HTTP_HX_CURRENT_URL="http://testserver/ui/inbox/",
        **HX,
    )
    # Plain text: criogen.js shows it next to the card's form and swaps nothing, so
    # the card keeps the reason as typed.
    assert response.status_code == 422
    assert response["Content-Type"].startswith("text/plain")
    assert response.content.decode() == "The reason is too long (at most 2000 characters)."
    assert resumes(t) == []


def test_it_approves_edited_arguments(as_operator: Client, waiting_agent) -> None:
    t = waiting_agent()
    response = act(as_operator, t, "edit", **{"args-0": '{"order_id": "42", "amount": 5}'})
    assert "Edited and approved" in response.content.decode()
    assert resumes(t) == [
        {
            "decisions": [
                {
                    "type": "edit",
                    "edited_action": {
                        "name": "issue_refund",
                        "args": {"order_id": "42", "amount": 5},
                    },
                }
            ]
        }
    ]


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ('{"order_id": "42", "amount": "ten"}', "args.amount must be number"),
        ('{"order_id": "42"}', "args.amount is required"),
        ('{"order_id": "42", "amount": 1, "note": "x"}', "args.note is not allowed"),
        ('{"order_id": 42', "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
    ],
)
def test_edited_arguments_are_checked_against_the_tool_schema(
    as_operator: Client, waiting_agent, args: str, problem: str
) -> None:
    t = waiting_agent()
    response = act(as_operator, t, "edit", **{"args-0": args})
    assert response.status_code == 422
    html = response.content.decode()
    assert 'data-field="args-0"' in html and problem in html
    assert '<details class="edit" open>' in html
    assert escape(args) + "</textarea>" in html  # what was typed stays
    assert resumes(t) == []


def test_per_call_decisions_are_sent_in_request_order(as_operator: Client, waiting_agent) -> None:
    from dashboard.data import WaitingCall
    from dashboard.forms import decisions_from

    calls = [WaitingCall(0, "c1", "issue_refund", {}), WaitingCall(1, "c2", "issue_refund", {})]
    post = {"decision-0": "reject", "reason-0": "dup", "decision-1": "approve"}
    assert decisions_from(post, calls, "decide") == [
        {"type": "reject", "message": "dup"},
        {"type": "approve"},
    ]


def test_it_resumes_a_workflow_with_a_json_value(as_operator: Client, suspended_workflow) -> None:
    t = suspended_workflow()
    response = act(as_operator, t, "resume", value='{"ok": true, "note": "<b>fine</b>"}')
    assert "Resumed" in response.content.decode()
    assert resumes(t) == [{"ok": True, "note": "<b>fine</b>"}]


def test_a_resume_value_must_be_json(as_operator: Client, suspended_workflow) -> None:
    t = suspended_workflow()
    response = act(as_operator, t, "resume", value="{nope")
    assert response.status_code == 422
    html = response.content.decode()
    assert 'data-field="value"' in html and "{nope" in html  # what was typed stays
    assert resumes(t) == []


def test_a_second_operator_is_told_who_decided_first(operator, operator2, waiting_agent) -> None:
    t = waiting_agent()
    first = act(client_for(operator), t, "approve")
    assert "Approved" in first.content.decode()
    late = act(client_for(operator2), t, "reject", reason="too late")
    html = late.content.decode()
    assert late.status_code == 200
    assert "Already decided by olga at " in html and "nothing was changed" in html
    assert resumes(t) == [{"decisions": [{"type": "approve"}]}]


def test_a_decision_on_a_moved_thread_names_the_decider(as_operator: Client, waiting_agent) -> None:
    t = waiting_agent()
    seen = t.head_id
    registry.get_graph("refunds").thread(t.pk).approve(by="oscar", durability="sync")
    response = as_operator.post(f"/ui/threads/{t.pk}/act/", {"approve": "", "expected": seen}, **HX)
    assert "Already decided by oscar at " in response.content.decode()
    assert Run.objects.filter(thread_id=t.pk).count() == 0


def test_without_htmx_an_action_redirects_with_a_message(
    as_operator: Client, waiting_agent
) -> None:
    t = waiting_agent()
    response = as_operator.post(
        f"/ui/threads/{t.pk}/act/", {"approve": "", "expected": t.head_id}, follow=True
    )
    assert response.redirect_chain[-1][0] == f"/ui/threads/{t.pk}/"
    assert "Approved: the agent continues." in response.content.decode()


def test_it_retries_a_failed_run(as_operator: Client, failed_thread) -> None:
    t = failed_thread()
    page = as_operator.get(f"/ui/threads/{t.pk}/").content.decode()
    assert 'name="retry"' in page and "card declined &lt;b&gt;twice&lt;/b&gt;" in page
    response = act(as_operator, t, "retry")
    assert "Retrying" in response.content.decode()
    run = Run.objects.get(thread_id=t.pk)
    assert run.kwargs["action"] == "retry" and run.metadata == {"retried_by": "olga"}


def test_retry_is_refused_when_nothing_failed(as_operator: Client, waiting_agent) -> None:
    t = waiting_agent()
    response = act(as_operator, t, "retry")
    assert "no failed or interrupted turn" in response.content.decode()
    assert Run.objects.filter(thread_id=t.pk).count() == 0


def test_it_asks_before_rewinding_and_then_forks(as_operator: Client, suspended_workflow) -> None:
    t = suspended_workflow()
    v1 = t.checkpoints.get(version=1)
    confirm = as_operator.get(f"/ui/threads/{t.pk}/rewind/{v1.pk}/", **HX).content.decode()
    assert "Rewind to v1?" in confirm and 'name="rewind"' in confirm
    assert Thread.objects.get(pk=t.pk).head_version == 3  # asking changes nothing
    response = as_operator.post(
        f"/ui/threads/{t.pk}/act/", {"rewind": "", "checkpoint": v1.pk}, **HX
    )
    html = response.content.decode()
    assert "Rewound: the new head v4" in html
    t.refresh_from_db()
    head = t.checkpoints.get(version=4)
    assert head.source == "fork" and head.parent_id == v1.pk
    assert 'data-version="4"' in html and "fork of v1" in html


def test_a_viewer_cannot_act(as_viewer: Client, viewer, waiting_agent) -> None:
    t = waiting_agent(owner=viewer)
    for button in ("approve", "retry", "resume"):
        assert act(as_viewer, t, button).status_code == 403
    v1 = t.checkpoints.get(version=1)
    assert as_viewer.get(f"/ui/threads/{t.pk}/rewind/{v1.pk}/").status_code == 403
    assert (
        as_viewer.post(
            "/ui/inbox/bulk/", {"approve": "", "item": f"{t.pk}|{t.head_id}"}
        ).status_code
        == 403
    )
    assert Run.objects.count() == 0


def test_actions_need_the_csrf_token(operator, waiting_agent) -> None:
    t = waiting_agent()
    client = client_for(operator, csrf_checks=True)
    page = client.get(f"/ui/threads/{t.pk}/")
    assert act(client, t, "approve").status_code == 403
    assert Run.objects.count() == 0
    token = page.cookies["csrftoken"].value
    ok = client.post(
        f"/ui/threads/{t.pk}/act/",
        {"approve": "", "expected": t.head_id},
        HTTP_X_CSRFTOKEN=token,
        **HX,
    )
    assert ok.status_code == 200 and Run.objects.count() == 1


def test_actions_are_audited_when_the_audit_trail_is_on(
    monkeypatch: pytest.MonkeyPatch, as_operator: Client, waiting_agent
) -> None:
    # The shared storage reads CRIOGEN_AUDIT once per process; turn it on for this test.
    monkeypatch.setattr(registry.storage(), "audit_enabled", True)
    t = waiting_agent()
    before = AuditEvent.objects.filter(thread_id=t.pk).count()
    act(as_operator, t, "reject", reason="no")
    # Nothing is decided (nor audited) until the run carries the decision out; then
    # exactly one event names the operator and the dashboard as the door.
    assert AuditEvent.objects.filter(thread_id=t.pk).count() == before
    run = Run.objects.get(thread_id=t.pk)
    # What the runner does with the queued run: the answer, with the actor and door the
    # dashboard gave it (tests/api/test_verbs_audit.py runs the real runner end to end).
    assert (run.kwargs["actor"], run.kwargs["door"]) == ("olga", "ui")
    registry.get_graph("refunds").thread(t.pk).resume(
        run.command["resume"], by=run.kwargs["actor"], door=run.kwargs["door"], durability="sync"
    )
    (event,) = AuditEvent.objects.filter(thread_id=t.pk).exclude(action="input")
    assert (event.action, event.actor, event.door) == ("decide", "olga", "ui")
    assert event.before == t.head_id and event.after
    html = as_operator.get("/ui/audit/").content.decode()
    assert "decide" in html and "olga" in html and ">ui<" in html


def test_bulk_decisions_report_each_item(
    as_operator: Client, waiting_agent, suspended_workflow
) -> None:
    a, b, c = waiting_agent(), waiting_agent(), waiting_agent()
    wf = suspended_workflow()
    act(as_operator, c, "approve")  # c is decided before the bulk
    items = [f"{t.pk}|{t.head_id}" for t in (a, b, c, wf)]
    response = as_operator.post(
        "/ui/inbox/bulk/", {"reject": "", "reason": "fraud", "item": items}, **HX
    )
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="bulk-results"')
    assert html.count("applied: Rejected") == 2
    assert "Already decided by olga" in html
    assert "A workflow waits for a value" in html
    assert resumes(a) == resumes(b) == [{"decisions": [{"type": "reject", "message": "fraud"}]}]
    assert resumes(c) == [{"decisions": [{"type": "approve"}]}]


def test_bulk_rejection_needs_a_reason(as_operator: Client, waiting_agent) -> None:
    a = waiting_agent()
    response = as_operator.post(
        "/ui/inbox/bulk/", {"reject": "", "item": [f"{a.pk}|{a.head_id}"]}, **HX
    )
    assert "Say why you reject it" in response.content.decode()
    assert resumes(a) == []


@pytest.mark.parametrize("button", ["approve", "reject"])
def test_a_bulk_decision_with_nothing_ticked_says_so(
    as_operator: Client, waiting_agent, button: str
) -> None:
    a = waiting_agent()
    response = as_operator.post("/ui/inbox/bulk/", {button: "", "reason": "no"}, **HX)
    assert response.status_code == 422
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="bulk-results"')
    assert 'data-code="nothing_selected"' in html
    assert f"Nothing is selected: tick the cards to {button} first" in html
    assert "<table" not in html
    assert resumes(a) == []
    # Without htmx: back to the inbox, with the message.
    page = as_operator.post("/ui/inbox/bulk/", {button: ""}, follow=True)
    assert page.redirect_chain[-1][0] == "/ui/inbox/"
    assert "Nothing is selected" in page.content.decode()


def test_a_bulk_item_naming_no_thread_is_reported_without_a_link(
    as_operator: Client, waiting_agent
) -> None:
    a = waiting_agent()
    items = ["|", "no-such-thread|cp", f"{a.pk}|{a.head_id}"]
    response = as_operator.post("/ui/inbox/bulk/", {"approve": "", "item": items}, **HX)
    assert response.status_code == 200
    html = response.content.decode()
    assert html.count("No such thread.") == 2
    assert f'href="/ui/threads/{a.pk}/"' in html and "applied: Approved" in html
    assert 'href="/ui/threads//"' not in html


def test_a_quick_approve_in_the_inbox_returns_the_list(as_operator: Client, waiting_agent) -> None:
    a, b = waiting_agent(), waiting_agent()
    response = as_operator.post(
        f"/ui/threads/{a.pk}/act/",
        {"approve": "", "expected": a.head_id, "from": "inbox"},
        HTTP_HX_CURRENT_URL="http://testserver/ui/inbox/?assistant=refunds",
        **HX,
    )
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="inbox-list"')
    assert re.search(r'<div id="flash"[^>]*hx-swap-oob="true"', html) and "Approved" in html
    assert re.search(r'<span id="nav-inbox-count"[^>]*hx-swap-oob="true"', html)
    assert b.pk in html


def test_several_waiting_calls_get_a_decision_each(as_operator: Client, waiting_agent) -> None:
    t = waiting_agent(text="refund order 1 of 5 EUR and order 2 of 900 EUR")
    page = as_operator.get(f"/ui/threads/{t.pk}/").content.decode()
    assert "call 1 of 2" in page and "call 2 of 2" in page
    assert 'name="decide"' in page and 'name="decision-1"' in page
    response = act(
        as_operator,
        t,
        "decide",
        **{
            "decision-0": "edit",
            "args-0": '{"order_id": "1", "amount": 4.5}',
            "decision-1": "reject",
            "reason-1": "too much",
        },
    )
    assert "Edited and approved, Rejected" in response.content.decode()
    assert resumes(t) == [
        {
            "decisions": [
                {
                    "type": "edit",
                    "edited_action": {
                        "name": "issue_refund",
                        "args": {"order_id": "1", "amount": 4.5},
                    },
                },
                {"type": "reject", "message": "too much"},
            ]
        }
    ]


def test_a_per_call_rejection_needs_its_own_reason(as_operator: Client, waiting_agent) -> None:
    t = waiting_agent(text="refund order 1 of 5 EUR and order 2 of 900 EUR")
    response = act(as_operator, t, "decide", **{"decision-0": "approve", "decision-1": "reject"})
    assert response.status_code == 422
    assert 'data-field="reason-1"' in response.content.decode()
    assert resumes(t) == []


def test_the_agent_accepts_the_decisions_the_panel_sends(
    as_operator: Client, waiting_agent
) -> None:
    t = waiting_agent(text="refund order 1 of 5 EUR and order 2 of 900 EUR")
    fields = {
        "decision-0": "edit",
        "args-0": '{"order_id": "1", "amount": 4.5}',
        "decision-1": "reject",
        "reason-1": "too much",
    }
    act(as_operator, t, "decide", **fields)
    run = Run.objects.get(thread_id=t.pk)
    # Execute what the runner would: the agent resumes with the queued HITL response.
    reply = (
        registry.get_graph("refunds")
        .thread(t.pk)
        .resume(run.command["resume"], by="olga", durability="sync")
    )
    assert reply.status == "completed"
    final = reply.messages[-1]["content"]
    assert "refunded 4.50 EUR on order 1" in final and "too much" in final
    assert "900" not in final
