"""The API tokens page in headless Chromium: a viewer reaches it from the header,
creates a token that works against the REST API, and revokes it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def _api_status(server: Any, token: str) -> int:
    response = httpx.post(
        server.url + "/threads/search", json={}, headers={"x-api-key": token}, timeout=30
    )
    return response.status_code


def test_a_user_creates_uses_and_revokes_a_token(signed_in, dashboard_server) -> None:
    page = signed_in("vera")
    page.get_by_role("link", name="API tokens").click()
    page.wait_for_url("**/ui/tokens/")
    page.fill("input[name=name]", "laptop")
    page.fill("input[name=expires_in_days]", "30")
    page.click("button[name=create]")
    expect(page.locator("#new-token")).to_contain_text("not shown again")
    token = page.locator("#new-token-value").inner_text().strip()
    assert token.startswith("crg_")
    assert _api_status(dashboard_server, token) == 200
    row = page.locator("table.tokens tbody tr", has_text="laptop")
    expect(row).to_have_count(1)
    expect(row).to_contain_text(token[:10])

    page.reload()  # a GET: the token is not shown again
    expect(page.locator("#new-token")).to_have_count(0)
    row.get_by_role("button", name="Revoke").click()
    expect(page.locator("#page-messages")).to_contain_text("Revoked laptop")
    expect(page.locator("table.tokens tbody tr", has_text="laptop")).to_have_count(0)
    assert _api_status(dashboard_server, token) == 401
