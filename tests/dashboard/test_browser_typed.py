"""In headless Chromium: a typed suspension (the demo's review step) is answered with
its buttons and form, never a guessed ``true``; a refused answer shows next to its field
and keeps the text; the ``a`` shortcut sends only the declared approving choice; the
REST API refuses the same bad answers with a 422 naming the field.

Same server and helpers as ``test_browser.py``.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from tests.dashboard.test_browser import wait_live

pytestmark = pytest.mark.browser


def start_review(server: Any, title: str) -> str:
    """A ``review`` run (criogen.examples.review) on a new thread, once it waits."""
    thread_id = f"review-{uuid.uuid4().hex[:10]}"

    def go(client: Any) -> None:
        client.threads.create(thread_id=thread_id, metadata={"graph_id": "review"})
        run = client.runs.create(
            thread_id, "review", input={"title": title, "body": "We refund within 14 days."}
        )
        client.runs.join(thread_id, run["run_id"])

    server.call(go)
    return thread_id


def test_the_review_step_is_answered_with_its_form_then_its_approve_key(
    signed_in, dashboard_server
) -> None:
    tid = start_review(dashboard_server, "Typed")
    page = signed_in("olga")
    page.goto(f"/ui/threads/{tid}/")
    wait_live(page)
    actions = page.locator("#actions")
    expect(actions.locator("#resume-value")).to_have_count(0)  # no bare JSON box
    expect(actions.get_by_role("button", name="Approve")).to_be_visible()

    # The form without a decision: refused next to the field, the note kept.
    page.fill("#f-answer-note", "shorter, please")
    page.click("#actions button[name=resume]")
    error = page.locator("#f-answer-decision-error")
    expect(error).to_contain_text("Decision is required")
    expect(error).to_have_attribute("role", "alert")
    expect(page.locator("#actions fieldset.radios")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#f-answer-note")).to_have_value("shorter, please")

    # Revise with the note: the draft loops back and waits again (revision 2).
    page.get_by_label("revise").check()
    page.click("#actions button[name=resume]")
    expect(page.locator("#actions pre.json").first).to_contain_text('"revision": 2')

    # The "a" shortcut presses the declared approving choice: published, not revised.
    page.locator("body").press("a")
    expect(page.locator("#thread-header [data-status]")).to_have_attribute(
        "data-status", "completed"
    )
    page.reload()
    expect(page.locator("#panel [data-state]")).to_contain_text('"published": true')
    expect(page.locator("#panel [data-state]")).to_contain_text('"decision": "approve"')


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("approve", "command.resume"),
        (True, "command.resume"),
        ({"decision": "ok"}, "command.resume.decision"),
    ],
)
def test_the_api_refuses_what_the_step_does_not_take(
    dashboard_server, value: Any, field: str
) -> None:
    tid = start_review(dashboard_server, "Api")
    response = httpx.post(
        f"{dashboard_server.url}/threads/{tid}/runs",
        json={"assistant_id": "review", "command": {"resume": value}},
        headers={"x-api-key": dashboard_server.tokens["olga"]},
        timeout=10,
    )
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["code"] == "invalid_argument"
    assert field in problem["detail"]
    # No run was created: the thread still waits for the same suspension.
    runs = httpx.get(
        f"{dashboard_server.url}/threads/{tid}/runs",
        headers={"x-api-key": dashboard_server.tokens["olga"]},
        timeout=10,
    ).json()
    assert len(runs) == 1
