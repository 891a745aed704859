"""Feature 14, the typed state form: a workflow that declares its state
(``Workflow(state_schema=...)``) is edited on its thread page with the same small form
typed answers use; only the fields changed are sent, through the one verb
(``update_thread_state``), whose check names the field."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from criogen import registry
from criogen.engine.errors import RunFailed
from criogen.storage.models import AuditEvent, Thread
from tests.dashboard.conftest import new_thread_id

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def failed_steps(db: None) -> Thread:
    """A ``steps`` thread whose run failed in node b (input ``fail: true``)."""
    tid = new_thread_id("steps")
    with pytest.raises(RunFailed):
        registry.get_graph("steps").thread(tid).run({"n": 0, "fail": True}, durability="sync")
    Thread.objects.filter(pk=tid).update(metadata={"graph_id": "steps"})
    return Thread.objects.get(pk=tid)


def save(client: Client, t: Thread, **fields: str) -> tuple[int, str]:
    post = {"save_state": "", "state_form": "1", "expected": t.head_id, **fields}
    answer = client.post(f"/ui/threads/{t.pk}/act/", post, **HX)
    return answer.status_code, answer.content.decode()


def test_the_page_shows_the_declared_state_as_a_form_filled_with_the_head(
    as_operator: Client, failed_steps: Thread
) -> None:
    page = as_operator.get(f"/ui/threads/{failed_steps.pk}/").content.decode()
    form = page[page.index('class="state-form typed"') :]
    assert re.search(
        r'<input type="checkbox" id="f-values-fail" name="values.fail"[^>]* checked', form
    )
    assert re.search(r'id="f-values-n" name="values.n" value="1" type="number" step="1"', form)
    assert re.search(
        r'id="f-values-sleep" name="values.sleep" value="" type="number"[^>]* min="0"', form
    )
    # A list, as JSON; steps appends, so its box starts empty: what is typed is added.
    assert re.search(r'<textarea id="f-values-steps" name="values.steps"[^>]*></textarea>', form)
    assert "What you type is appended to it" in form
    assert "Fail in node b" in form and "Node b raises while this is ticked." in form
    # The JSON box stays reachable.
    assert "<summary>Edit as JSON</summary>" in form and 'id="state-values"' in form


def test_a_workflow_without_a_state_schema_keeps_the_json_box_only(
    as_operator: Client, failed_thread
) -> None:
    page = as_operator.get(f"/ui/threads/{failed_thread().pk}/").content.decode()
    assert 'id="state-values"' in page
    assert "state-form" not in page and "Edit as JSON" not in page


def test_only_the_changed_fields_are_saved(
    as_operator: Client, failed_steps: Thread, settings
) -> None:
    settings.CRIOGEN_AUDIT = True
    # "fail" unticked (absent), the rest as shown: one key changes.
    status, html = save(
        as_operator, failed_steps, **{"values.n": "1", "values.steps": "", "values.sleep": ""}
    )
    assert status == 200 and "State saved as v" in html
    event = AuditEvent.objects.get(thread_id=failed_steps.pk, action="update_state")
    details = json.loads(event.details)
    assert (event.actor, event.door, details["values"]) == ("olga", "ui", {"fail": False})
    head = registry.get_graph("steps").thread(failed_steps.pk).head
    assert head.state == {"n": 1, "steps": ["a"], "fail": False}
    assert head.status == "failed"  # still to retry, now with the fixed input
    # The form now shows the saved state.
    assert re.search(r'id="f-values-fail" name="values.fail"(?![^>]* checked)[^>]*>', html)


@pytest.mark.parametrize(
    ("fields", "name", "says"),
    [
        # Refused by the engine's check of the declared schema (the one verb's).
        ({"values.sleep": "-1"}, "values.sleep", "Sleep in node b (seconds) must be at least 0."),
        # steps appends what is typed: the merged list ["a", "b", 2] is checked.
        ({"values.steps": '["b", 2]'}, "values.steps", "Steps run[2] must be a string."),
        # Refused while reading the form: text that is not what the field takes.
        ({"values.n": "1.5"}, "values.n", "Count must be a whole number."),
        ({"values.n": "many"}, "values.n", "Count must be a number."),
    ],
)
def test_a_refused_value_is_shown_next_to_its_field_with_what_was_typed(
    as_operator: Client, failed_steps: Thread, fields: dict[str, str], name: str, says: str
) -> None:
    head = failed_steps.head_id
    status, html = save(as_operator, failed_steps, **{"values.fail": "on", **fields})
    assert status == 422
    dom = "f-" + name.replace(".", "-")
    assert re.search(
        rf'id="{dom}" name="{name}"[^>]* aria-invalid="true" aria-describedby="{dom}-error"', html
    )
    assert f'<p id="{dom}-error" class="field-error" role="alert">{says}</p>' in html
    typed = fields[name].replace('"', "&quot;")
    assert f'value="{typed}"' in html or f">{typed}</textarea>" in html
    assert 'id="form-error"' not in html  # said next to the field, not above the panel
    assert '<details class="edit-state" open>' in html
    failed_steps.refresh_from_db()
    assert failed_steps.head_id == head  # nothing written


def test_saving_an_unchanged_form_says_nothing_changed(
    as_operator: Client, failed_steps: Thread
) -> None:
    status, html = save(
        as_operator, failed_steps, **{"values.fail": "on", "values.n": "1", "values.steps": ""}
    )
    assert status == 422
    assert "Nothing changed: change a field, then save." in html


def test_what_is_typed_for_an_appending_key_is_appended(
    as_operator: Client, failed_steps: Thread
) -> None:
    status, html = save(
        as_operator, failed_steps, **{"values.fail": "on", "values.n": "1", "values.steps": '["x"]'}
    )
    assert status == 200 and "State saved as v" in html
    head = registry.get_graph("steps").thread(failed_steps.pk).head
    assert head.state["steps"] == ["a", "x"]


def test_a_value_refused_in_the_json_box_is_said_by_the_box_with_the_text_kept(
    as_operator: Client, failed_steps: Thread
) -> None:
    typed = '{"fail": "no"}'
    answer = as_operator.post(
        f"/ui/threads/{failed_steps.pk}/act/",
        {"save_state": "", "state": typed, "expected": failed_steps.head_id},
        **HX,
    )
    assert answer.status_code == 422
    html = answer.content.decode()
    assert 'id="form-error" class="flash error" role="alert" data-field="state"' in html
    assert "values.fail must be a boolean." in html
    assert re.search(r'id="state-values" name="state"[^>]* aria-invalid="true"', html)
    assert "{&quot;fail&quot;: &quot;no&quot;}</textarea>" in html
    assert '<details class="edit-json" open>' in html  # the box stays open
    assert 'aria-invalid="true" aria-describedby="f-values-fail-error"' not in html
