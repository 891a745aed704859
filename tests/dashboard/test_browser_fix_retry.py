"""In headless Chromium, feature 14: a failed run whose input was bad is fixed from its
thread page (edit the state, then Retry) and completes; a running run is cancelled from
its thread page, and the page says who paused it."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.dashboard.test_browser import wait_live

pytestmark = pytest.mark.browser


def start_steps(server: Any, state: dict[str, Any], *, join: bool) -> tuple[str, str]:
    thread_id = f"steps-{uuid.uuid4().hex[:10]}"
    made: dict[str, str] = {}

    def go(client: Any) -> None:
        client.threads.create(thread_id=thread_id, metadata={"graph_id": "steps"})
        run = client.runs.create(thread_id, "steps", input=state)
        made["run"] = run["run_id"]
        if join:
            client.runs.join(thread_id, run["run_id"])

    server.call(go)
    return thread_id, made["run"]


def test_a_bad_input_is_fixed_in_the_state_then_retried(signed_in, dashboard_server) -> None:
    tid, _ = start_steps(dashboard_server, {"n": 0, "fail": True}, join=True)
    page = signed_in("olga")
    page.goto(f"/ui/threads/{tid}/")
    wait_live(page)
    status = page.locator("#thread-header [data-status]")
    expect(status).to_have_attribute("data-status", "failed")
    page.get_by_text("Edit the state before retrying").click()
    # steps declares its state: the JSON box is one click further, under the form.
    page.get_by_text("Edit as JSON").click()
    box = page.locator("#state-values")
    box.fill('{"fail": fals}')
    page.locator(".edit-json button[name=save_state]").click()
    expect(page.locator("#state-values")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#form-error")).to_contain_text("not valid JSON")
    expect(page.locator("#state-values")).to_have_value('{"fail": fals}')
    expect(page.locator("#state-values")).to_be_visible()  # its box stays open
    page.locator("#state-values").fill('{"fail": false}')
    page.locator(".edit-json button[name=save_state]").click()
    # Saved as a new checkpoint (v4, a fork): the timeline says who changed what, and
    # the panel, which showed the head, shows the new one.
    expect(page.locator("#timeline li.event[data-action=update_state]")).to_contain_text(
        "edited the state (fail)"
    )
    expect(page.locator("#panel [data-state]")).to_contain_text('"fail": false')
    page.get_by_role("button", name="Retry from v4").click()
    expect(status).to_have_attribute("data-status", "completed")
    page.reload()
    expect(page.locator("#panel [data-state]")).to_contain_text('"steps": [')
    expect(page.locator("#panel [data-state]")).to_contain_text('"c"')


def test_a_running_run_is_cancelled_from_its_thread_page(
    signed_in, dashboard_server, tmp_path
) -> None:
    # Node b waits for the gate, so the run is still running when the operator gets to
    # the button however long the browser takes (a fixed sleep ended the run first on a
    # loaded machine, and the live update took the button away); the gate opens once the
    # cancel is requested. The click waits for the socket's first push, which re-renders
    # the actions: a click on the button it replaces is lost (wait_live).
    gate = tmp_path / "gate"
    tid, run_id = start_steps(dashboard_server, {"n": 0, "gate": str(gate)}, join=False)
    page = signed_in("olga")
    page.goto(f"/ui/threads/{tid}/")
    wait_live(page)
    row = page.locator(f'#actions tr[data-run="{run_id}"]')
    row.get_by_role("button", name="Cancel").click()
    expect(page.locator("#actions [role=status]")).to_contain_text("Cancel")
    gate.touch()
    run = dashboard_server.call(lambda c: c.runs.join(tid, run_id))
    assert run is not None
    status = dashboard_server.call(lambda c: c.runs.get(tid, run_id))["status"]
    assert status == "interrupted"
    # The live update of the run's end re-rendered the actions (now "Continue from"),
    # and the outcome of the operator's cancel is still there to read.
    actions = page.locator("#actions")
    expect(actions.get_by_role("button", name="Continue from v", exact=False)).to_be_visible()
    expect(actions.locator("[role=status]")).to_contain_text("Cancel")
    page.reload()
    expect(page.locator("#thread-header [data-stopped]")).to_have_text(
        "paused: run cancelled by olga"
    )
    expect(page.locator("#actions").get_by_role("button", name="Retry")).to_have_count(0)
    expect(
        page.locator("#actions").get_by_role("button", name="Continue from v", exact=False)
    ).to_be_visible()


def test_a_failed_run_is_fixed_with_the_typed_state_form_then_retried(
    signed_in, dashboard_server
) -> None:
    tid, _ = start_steps(dashboard_server, {"n": 0, "fail": True}, join=True)
    page = signed_in("olga")
    page.goto(f"/ui/threads/{tid}/")
    wait_live(page)
    status = page.locator("#thread-header [data-status]")
    expect(status).to_have_attribute("data-status", "failed")
    page.get_by_text("Edit the state before retrying").click()
    form = page.locator("form.state-form")
    fail = form.get_by_label("Fail in node b")
    expect(fail).to_be_checked()
    expect(form.get_by_label("Count")).to_have_value("1")
    # A value the declared schema refuses: said next to its field, what was typed kept.
    fail.uncheck()
    sleep = form.get_by_label("Sleep in node b (seconds)")
    sleep.fill("-1")
    form.get_by_role("button", name="Save as a new checkpoint").click()
    sleep = page.locator("form.state-form").get_by_label("Sleep in node b (seconds)")
    expect(sleep).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#f-values-sleep-error")).to_have_text(
        "Sleep in node b (seconds) must be at least 0."
    )
    expect(sleep).to_have_value("-1")
    expect(page.locator("form.state-form").get_by_label("Fail in node b")).not_to_be_checked()
    sleep.fill("")
    page.locator("form.state-form").get_by_role("button", name="Save as a new checkpoint").click()
    expect(page.locator("#timeline li.event[data-action=update_state]")).to_contain_text(
        "edited the state (fail)"
    )
    expect(page.locator("#panel [data-state]")).to_contain_text('"fail": false')
    page.get_by_role("button", name="Retry from v4").click()
    expect(status).to_have_attribute("data-status", "completed")
    page.reload()
    expect(page.locator("#panel [data-state]")).to_contain_text('"c"')
