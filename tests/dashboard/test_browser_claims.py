"""Claims and presence in Chromium, two operators side by side (olga and oscar)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.dashboard.test_browser import card, wait_live

pytestmark = pytest.mark.browser


def test_a_claim_shows_live_for_the_other_who_takes_it_over_and_filters(
    signed_in: Any, dashboard_server: Any
) -> None:
    tid = dashboard_server.start_hitl(prefix="claimed")
    other = dashboard_server.start_hitl(prefix="free")
    olga = signed_in("olga")
    oscar = signed_in("oscar")
    wait_live(olga)
    wait_live(oscar)
    expect(card(oscar, tid).locator("[data-claim]")).to_have_attribute("data-claim", "free")

    card(olga, tid).locator("[data-claim-button=claim]").click()
    expect(card(olga, tid).locator("[data-claim]")).to_have_attribute("data-claim", "mine")
    # Oscar's inbox shows it by itself: who, and since when.
    strip = card(oscar, tid).locator("[data-claim]")
    expect(strip).to_have_attribute("data-claim", "taken")
    expect(strip).to_contain_text(re.compile(r"Claimed by olga since \d\d:\d\d:\d\d"))

    # "mine" / "unclaimed" / "all", in the URL like the other filters.
    olga.goto("/ui/inbox/?claim=mine")
    wait_live(olga)
    expect(card(olga, tid)).to_be_visible()
    expect(card(olga, other)).to_have_count(0)
    oscar.goto("/ui/inbox/?claim=unclaimed")
    wait_live(oscar)
    expect(card(oscar, other)).to_be_visible()
    expect(card(oscar, tid)).to_have_count(0)
    oscar.goto("/ui/inbox/?claim=all")
    wait_live(oscar)

    # One click takes it over; Olga's "mine" list loses it live; the audit says so.
    card(oscar, tid).locator("[data-claim-button=take_over]").click()
    expect(card(oscar, tid).locator("[data-claim]")).to_have_attribute("data-claim", "mine")
    expect(card(olga, tid)).to_have_count(0)
    olga.goto(f"/ui/threads/{tid}/")
    wait_live(olga)
    expect(olga.locator("#claim")).to_contain_text("Claimed by oscar")
    expect(olga.locator("#claim [data-claim-button]")).to_have_text("Take over")
    olga.goto(f"/ui/audit/?thread={tid}")
    expect(olga.locator("body")).to_contain_text("claim_taken_over")


def test_the_thread_page_shows_who_else_has_it_open(signed_in: Any, dashboard_server: Any) -> None:
    tid = dashboard_server.start_hitl(prefix="presence")
    olga = signed_in("olga")
    olga.goto(f"/ui/threads/{tid}/")
    wait_live(olga)
    expect(olga.locator("#presence")).to_have_attribute("data-viewers", "")

    oscar = signed_in("oscar")
    oscar.goto(f"/ui/threads/{tid}/")
    wait_live(oscar)
    expect(olga.locator("#presence")).to_have_attribute("data-viewers", "oscar")
    expect(olga.locator("#presence")).to_contain_text("Also here: oscar")
    expect(oscar.locator("#presence")).to_have_attribute("data-viewers", "olga")

    # Oscar claims it from the thread page: Olga's page shows it live.
    oscar.locator("#claim [data-claim-button=claim]").click()
    expect(olga.locator("#claim")).to_contain_text("Claimed by oscar")

    oscar.close()
    expect(olga.locator("#presence")).to_have_attribute("data-viewers", "")


@pytest.fixture(scope="module")
def two_processes(
    tmp_path_factory: pytest.TempPathFactory, postgres_url: str
) -> Iterator[tuple[Any, Any]]:
    """Two dashboard servers (two processes) on one PostgreSQL database and one Redis
    channel layer, as in production, with a 1 s presence heartbeat."""
    from tests.conftest import START_REDIS, need_service, redis_url
    from tests.dashboard import live_server
    from tests.dashboard.conftest import redis_available

    need_service("Redis", redis_available(), START_REDIS)
    tmp = tmp_path_factory.mktemp("presence")
    options = {"REDIS_URL": redis_url("presence"), "CRIOGEN_PRESENCE_HEARTBEAT": "1"}
    first = live_server.start(postgres_url, tmp, **options)
    second = live_server.start(postgres_url, tmp, **options)
    yield first, second
    for server in (first, second):
        if server.process.poll() is None:
            live_server.stop(server)


@pytest.mark.postgres
def test_presence_and_claims_cross_processes_and_a_dead_process_drops_out(
    signed_in: Any, two_processes: tuple[Any, Any]
) -> None:
    first, second = two_processes
    tid = first.start_hitl(prefix="procs")
    olga = signed_in("olga", first)
    oscar = signed_in("oscar", second)
    for page in (olga, oscar):
        page.goto(f"/ui/threads/{tid}/")
        wait_live(page)
    expect(olga.locator("#presence")).to_have_attribute("data-viewers", "oscar")
    expect(oscar.locator("#presence")).to_have_attribute("data-viewers", "olga")

    oscar.locator("#claim [data-claim-button=claim]").click()
    expect(olga.locator("#claim")).to_contain_text("Claimed by oscar")

    # Oscar's server dies without closing anything: his heartbeats stop, and Olga's
    # page drops him once they are overdue (2.5 heartbeats), not at once.
    second.process.kill()
    second.process.wait()
    expect(olga.locator("#presence")).to_have_attribute("data-viewers", "", timeout=8_000)
