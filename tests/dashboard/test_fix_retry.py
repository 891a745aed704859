"""Feature 14 on the server side: the state is edited from the thread page (checked,
audited, refused by name), and a thread's run is cancelled from it."""

from __future__ import annotations

import pytest
from django.test import Client

from criogen.services.runs import create_run
from criogen.storage.models import AuditEvent, Thread

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


def act(client: Client, thread: Thread, **fields: str) -> object:
    return client.post(f"/ui/threads/{thread.pk}/act/", fields, **HX)


def test_the_state_is_edited_then_retried(as_operator: Client, failed_thread, settings) -> None:
    settings.CRIOGEN_AUDIT = True
    t = failed_thread()
    page = as_operator.get(f"/ui/threads/{t.pk}/").content.decode()
    assert 'name="save_state"' in page and "Edit the state before retrying" in page
    for bad, why in (("{nope", "not valid JSON"), ("[1]", "a JSON object")):
        refused = act(as_operator, t, save_state="", state=bad, expected=t.head_id)
        assert refused.status_code == 422 and why in refused.content.decode()
        assert 'aria-invalid="true"' in refused.content.decode()
    ok = act(as_operator, t, save_state="", state='{"fail": false}', expected=t.head_id)
    assert ok.status_code == 200 and "State saved as v" in ok.content.decode()
    t.refresh_from_db()
    assert t.head_status == "failed"  # still to retry, now with the fixed input
    event = AuditEvent.objects.get(thread_id=t.pk, action="update_state")
    assert (event.actor, event.door) == ("olga", "ui")
    stale = act(as_operator, t, save_state="", state='{"fail": true}', expected="old")
    assert "moved on" in stale.content.decode()


def test_a_pending_run_is_cancelled(as_operator: Client, suspended_workflow, as_viewer) -> None:
    t = suspended_workflow()
    run = create_run(assistant_id="hitl", thread_id=t.pk, command={"resume": "yes"})
    page = as_operator.get(f"/ui/threads/{t.pk}/").content.decode()
    assert f'<input type="hidden" name="run" value="{run.run_id}">' in page
    refused = as_viewer.post(
        f"/ui/threads/{t.pk}/act/", {"cancel": "", "run": str(run.run_id)}, **HX
    )
    assert refused.status_code in (403, 404)
    done = act(as_operator, t, cancel="", run=str(run.run_id))
    assert "Cancelled run" in done.content.decode()
    run.refresh_from_db()
    assert (run.status, run.cancelled_by) == ("interrupted", "olga")
    unknown = act(as_operator, t, cancel="", run="not-a-run")
    assert "no run" in unknown.content.decode()
