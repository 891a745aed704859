"""In headless Chromium: staff set an assistant's notification webhook and e-mails on
the dashboard's Notifications page; a bad URL is refused next to its field with the
text kept, a good one is saved (and read back over the REST API)."""

from __future__ import annotations

import uuid

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def test_staff_set_a_webhook_see_a_bad_url_refused_then_saved(signed_in, dashboard_server) -> None:
    name = f"desk {uuid.uuid4().hex[:6]}"
    made = dashboard_server.call(
        lambda c: c.assistants.create("hitl", name=name, metadata={"team": "refunds"}), "ada"
    )
    key = made["assistant_id"]
    page = signed_in("ada")
    page.goto("/ui/inbox/")
    page.get_by_role("link", name="Notifications").click()
    card = page.locator(f"#a-{key}")
    expect(card.get_by_role("heading")).to_contain_text(name)
    webhook = card.get_by_label("Webhook URL")
    webhook.fill("hooks.example.com/no-scheme")
    card.get_by_label("E-mail addresses").fill("ops@example.com")
    card.get_by_role("button", name="Save").click()
    card = page.locator(f"#a-{key}")
    webhook = card.get_by_label("Webhook URL")
    expect(webhook).to_have_attribute("aria-invalid", "true")
    expect(card.locator(".field-error[role=alert]")).to_have_text(
        "Webhook URL 'hooks.example.com/no-scheme' must start with http:// or https://."
    )
    expect(webhook).to_have_value("hooks.example.com/no-scheme")
    expect(card.get_by_label("E-mail addresses")).to_have_value("ops@example.com")
    webhook.fill("https://hooks.example.com/services/T0/B0/x")
    card.get_by_role("button", name="Save").click()
    expect(page.locator("#page-messages")).to_contain_text(f"Notifications of {name} saved")
    card = page.locator(f"#a-{key}")
    expect(card.get_by_label("Webhook URL")).to_have_value(
        "https://hooks.example.com/services/T0/B0/x"
    )
    expect(card.get_by_label("Webhook URL")).not_to_have_attribute("aria-invalid", "true")
    stored = dashboard_server.call(lambda c: c.assistants.get(key), "ada")
    assert stored["metadata"] == {
        "created_by": "ada",
        "team": "refunds",
        "notify": {
            "webhook": "https://hooks.example.com/services/T0/B0/x",
            "email": ["ops@example.com"],
        },
    }


def test_an_operator_who_is_not_staff_is_refused(signed_in, dashboard_server) -> None:
    page = signed_in("olga")
    answer = page.goto("/ui/notifications/")
    assert answer is not None and answer.status == 403
    page.goto("/ui/inbox/")
    expect(page.get_by_role("link", name="Notifications")).to_have_count(0)
