"""The notification settings page (``/ui/notifications/``): staff set an assistant's
``metadata.notify`` from the dashboard, checked and saved by the one assistant update
service (``update_assistant`` → ``check_notify``), the other metadata kept."""

from __future__ import annotations

import html as html_text
import uuid
from typing import Any

import pytest
from django.test import Client

from criogen.services.assistants import create_assistant
from criogen.storage.models import Assistant
from tests.conftest import client_for

pytestmark = pytest.mark.django_db

URL = "/ui/notifications/"


@pytest.fixture
def as_admin(site_admin: Any) -> Client:
    return client_for(site_admin)


@pytest.fixture
def refunds_desk() -> Assistant:
    return create_assistant(
        graph_id="hitl",
        name=f"desk {uuid.uuid4().hex[:6]}",
        metadata={"team": "refunds", "notify": {"webhook": "https://hooks.example.com/a"}},
    )


def post(client: Client, a: Assistant, **fields: Any) -> Any:
    return client.post(
        URL, {"assistant": str(a.assistant_id), "version": str(a.version), "save": "", **fields}
    )


def test_only_staff_see_and_change_the_settings(
    as_operator: Client, as_viewer: Client, as_admin: Client, refunds_desk: Assistant
) -> None:
    assert as_operator.get(URL).status_code == 403  # an operator, but not staff
    assert as_viewer.get(URL).status_code == 403
    assert post(as_operator, refunds_desk, webhook="https://evil.example.com/").status_code == 403
    refunds_desk.refresh_from_db()
    assert refunds_desk.metadata["notify"] == {"webhook": "https://hooks.example.com/a"}
    page = as_admin.get(URL).content.decode()
    assert f'id="a-{refunds_desk.assistant_id}"' in page
    assert 'value="https://hooks.example.com/a"' in page
    assert ">Notifications</a>" in page  # in the header, for staff
    assert ">Notifications</a>" not in as_operator.get("/ui/threads/").content.decode()


def test_a_setting_is_saved_through_the_update_service_keeping_other_metadata(
    as_admin: Client, refunds_desk: Assistant
) -> None:
    saved = post(
        as_admin,
        refunds_desk,
        webhook="https://hooks.example.com/b",
        email="ops@example.com\noncall@example.com, lead@example.com",
    )
    assert saved.status_code == 302
    refunds_desk.refresh_from_db()
    assert refunds_desk.metadata["notify"] == {
        "webhook": "https://hooks.example.com/b",
        "email": ["ops@example.com", "oncall@example.com", "lead@example.com"],
    }
    assert refunds_desk.metadata["team"] == "refunds"
    assert refunds_desk.version == 2
    # Both empty: notifications off (the key goes), the rest stays.
    assert post(as_admin, refunds_desk, webhook="", email="").status_code == 302
    refunds_desk.refresh_from_db()
    assert "notify" not in refunds_desk.metadata and refunds_desk.metadata["team"] == "refunds"


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        (
            {"webhook": "ftp://hooks.example.com/x"},
            "webhook",
            "Webhook URL 'ftp://hooks.example.com/x' must start with http:// or https://.",
        ),
        (
            {"webhook": "https://ok.example.com/", "email": "ops@example.com\nnot-an-address"},
            "email",
            "E-mail addresses: 'not-an-address' is not an e-mail address.",
        ),
    ],
)
def test_a_bad_setting_is_refused_next_to_its_field_with_what_was_typed(
    as_admin: Client, refunds_desk: Assistant, fields: dict[str, str], field: str, says: str
) -> None:
    refused = post(as_admin, refunds_desk, **fields)
    assert refused.status_code == 422
    html = refused.content.decode()
    dom = f"{field}-{refunds_desk.assistant_id}"
    assert f'aria-invalid="true" aria-describedby="{dom}-error"' in html
    error = html[html.index(f'<p id="{dom}-error"') :]
    assert says in html_text.unescape(error[: error.index("</p>")])
    for text in fields.values():
        assert text in html  # what was typed, kept
    refunds_desk.refresh_from_db()
    assert refunds_desk.version == 1  # nothing saved


def test_an_update_made_meanwhile_is_not_overwritten(
    as_admin: Client, refunds_desk: Assistant
) -> None:
    from criogen.services.assistants import update_assistant

    update_assistant(assistant_id=str(refunds_desk.assistant_id), metadata={"team": "billing"})
    refused = post(as_admin, refunds_desk, webhook="https://hooks.example.com/c")
    assert refused.status_code == 422
    assert "changed since version 1" in refused.content.decode()
    refunds_desk.refresh_from_db()
    assert refunds_desk.metadata == {"team": "billing"}


def test_the_overdue_seconds_round_trip_and_a_bad_value_is_refused_by_its_field(
    as_admin: Client,
) -> None:
    """A setting made over the API with ``claimed_overdue_seconds`` shows in the form and
    survives a save of the webhook; a value that is no positive number is refused next to
    its field, as typed."""
    desk = create_assistant(
        graph_id="hitl",
        name=f"desk {uuid.uuid4().hex[:6]}",
        metadata={
            "notify": {"webhook": "https://hooks.example.com/a", "claimed_overdue_seconds": 900}
        },
    )
    page = as_admin.get(URL).content.decode()
    assert f'id="overdue-{desk.assistant_id}"' in page and 'value="900"' in page
    saved = post(as_admin, desk, webhook="https://hooks.example.com/b", overdue="900")
    assert saved.status_code == 302
    desk.refresh_from_db()
    assert desk.metadata["notify"] == {
        "webhook": "https://hooks.example.com/b",
        "claimed_overdue_seconds": 900,
    }
    refused = post(as_admin, desk, webhook="https://hooks.example.com/b", overdue="soon")
    assert refused.status_code == 422
    html = refused.content.decode()
    assert f'id="overdue-{desk.assistant_id}-error"' in html
    assert "Overdue after a claim (seconds)" in html_text.unescape(html)
    assert 'value="soon"' in html and 'aria-invalid="true"' in html
    desk.refresh_from_db()
    assert desk.metadata["notify"]["claimed_overdue_seconds"] == 900
