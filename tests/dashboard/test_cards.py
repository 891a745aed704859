"""Inbox cards are rendered once per head checkpoint and kept (``dashboard.cards``):
a kept card still carries each viewer's own CSRF token and a fresh age, changes with
whatever it shows, never fills its marks into what users wrote, and the kept cards are
bounded."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from criogen import registry
from criogen.storage.models import Run, Thread
from dashboard import cards
from dashboard.data import InboxFilters, inbox_items
from tests.dashboard.conftest import client_for

TOKEN = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


@pytest.fixture(autouse=True)
def renders(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The card renders (each a kept card made), from no kept cards."""
    made: list[str] = []
    render = cards.render_to_string

    def counting(name: str, context: dict[str, Any]) -> str:
        made.append(context["item"].thread.pk)
        return render(name, context)

    cards.forget_cards()
    monkeypatch.setattr(cards, "render_to_string", counting)
    yield made
    cards.forget_cards()


def card_of(html: str, thread_id: str) -> str:
    start = html.index(f'data-thread="{thread_id}"')
    return html[start : html.index("</article>", start)]


def text_of(html: str) -> str:
    """The words of ``html`` (its tags dropped), as a reader sees them."""
    return re.sub(r"<[^>]+>", "", html)


def test_a_kept_card_carries_each_viewer_s_own_token_and_works(
    operator: User, operator2: User, waiting_agent: Any, renders: list[str]
) -> None:
    t = waiting_agent()
    olga, oscar = client_for(operator, csrf_checks=True), client_for(operator2, csrf_checks=True)
    first = card_of(olga.get("/ui/inbox/").content.decode(), t.pk)
    second = card_of(oscar.get("/ui/inbox/").content.decode(), t.pk)
    assert renders == [t.pk]  # Oscar got the kept card
    assert len(TOKEN.findall(first)) == len(TOKEN.findall(second)) == 1
    token = TOKEN.findall(second)[0]
    assert token != TOKEN.findall(first)[0]
    assert "<criogen-" not in first + second
    # Oscar's quick approve, posted with the token of the kept card, passes the CSRF check.
    response = oscar.post(
        f"/ui/threads/{t.pk}/act/",
        {"csrfmiddlewaretoken": token, "approve": "", "expected": t.head_id, "from": "inbox"},
        HTTP_HX_REQUEST="true",
        HTTP_HX_CURRENT_URL="http://testserver/ui/inbox/",
    )
    assert response.status_code == 200
    assert "Approved" in response.content.decode()
    assert Run.objects.filter(thread_id=t.pk).count() == 1  # the resume, queued


def test_a_kept_card_shows_how_long_it_has_waited_now(
    as_operator: Client, waiting_agent: Any, renders: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    t = waiting_agent()
    card = card_of(as_operator.get("/ui/inbox/").content.decode(), t.pk)
    assert re.search(r"waiting \d+s\b", text_of(card))  # seconds, however slow the machine
    later = timezone.now() + timedelta(hours=3, minutes=5)
    monkeypatch.setattr("dashboard.templatetags.criogen_ui.timezone.now", lambda: later)
    card = card_of(as_operator.get("/ui/inbox/").content.decode(), t.pk)
    assert "waiting 3h 05m" in text_of(card)
    assert renders == [t.pk]


def test_an_age_ticks_in_the_browser_and_is_late_only_past_its_threshold(
    as_operator: Client, waiting_agent: Any, renders: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    t = waiting_agent()
    age = re.compile(
        r'<time class="([^"]+)" datetime="[^"]+" data-age="(\d+)" data-late-at="3600">'
    )
    fresh = age.search(card_of(as_operator.get("/ui/inbox/").content.decode(), t.pk))
    assert fresh is not None and fresh[1] == "age" and int(fresh[2]) < 60
    later = timezone.now() + timedelta(minutes=61)
    monkeypatch.setattr("dashboard.templatetags.criogen_ui.timezone.now", lambda: later)
    late = age.search(card_of(as_operator.get("/ui/inbox/").content.decode(), t.pk))
    assert late is not None and late[1] == "age late" and int(late[2]) >= 3660
    assert renders == [t.pk]  # the kept card, its age filled in


def test_a_wait_is_late_at_its_deadline_or_reminder_else_after_an_hour() -> None:
    from types import SimpleNamespace

    from dashboard.templatetags.criogen_ui import late_at

    since = timezone.now()

    def item(*interrupts: dict[str, Any]) -> Any:
        return SimpleNamespace(waiting_since=since, interrupts=list(interrupts))

    assert late_at(item()) == since + timedelta(hours=1)
    assert late_at(item({"deadline": "24h", "remind": "90s"})) == since + timedelta(seconds=90)
    assert late_at(item({"deadline": "2h"}, {"deadline": 600})) == since + timedelta(minutes=10)


def test_a_card_changes_with_its_head_assistant_and_owner(
    as_operator: Client, suspended_workflow: Any, viewer: User, stranger: User, renders: list[str]
) -> None:
    t = suspended_workflow(owner=viewer)
    assert "owner vera" in card_of(as_operator.get("/ui/inbox/").content.decode(), t.pk)
    Thread.objects.filter(pk=t.pk).update(metadata={"graph_id": "renamed"})
    assert ">renamed<" in card_of(as_operator.get("/ui/inbox/").content.decode(), t.pk)
    Thread.objects.filter(pk=t.pk).update(owner=stranger)
    assert "owner sam" in card_of(as_operator.get("/ui/inbox/").content.decode(), t.pk)
    assert renders == [t.pk, t.pk, t.pk]
    # Answered, then run and suspended again: a new head, a new card.
    graph = registry.get_graph("hitl").thread(t.pk)
    graph.resume("yes", durability="sync")
    assert f'data-thread="{t.pk}"' not in as_operator.get("/ui/inbox/").content.decode()
    graph.run({"n": 40}, durability="sync")
    card = card_of(as_operator.get("/ui/inbox/").content.decode(), t.pk)
    assert '<span class="j-n">41</span>' in card
    assert renders == [t.pk] * 4


def test_the_marks_are_never_filled_into_what_users_wrote(
    as_operator: Client, waiting_agent: Any
) -> None:
    t = waiting_agent(thread_id="ag-<criogen-age><criogen-csrf>")
    html = as_operator.get("/ui/inbox/").content.decode()
    card = card_of(html, "ag-&lt;criogen-age&gt;&lt;criogen-csrf&gt;")
    assert len(re.findall(r"waiting \d+s\b", text_of(card))) == 1
    assert len(TOKEN.findall(card)) == 1
    assert "&lt;criogen-age&gt;&lt;criogen-csrf&gt;" in card
    assert t.pk not in html  # only ever escaped


def test_a_card_without_a_token_has_no_token_field(
    operator: User, waiting_agent: Any, renders: list[str]
) -> None:
    t = waiting_agent()
    (item,), _ = inbox_items(operator, InboxFilters(q=t.pk))
    for token in (None, "", "NOTPROVIDED"):
        card = cards.inbox_card(item, can_act=True, csrf_token=token)
        assert "csrfmiddlewaretoken" not in card and "<criogen-" not in card
        assert "data-approve" in card
    assert "data-approve" not in cards.inbox_card(item, can_act=False, csrf_token="x")
    assert renders == [t.pk, t.pk]  # one per can_act


def test_the_kept_cards_are_bounded_in_number_and_in_size(
    operator: User, waiting_agent: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(3):
        waiting_agent()
    items, _ = inbox_items(operator)
    monkeypatch.setattr(cards, "CARDS_KEPT", 2)
    for item in items:
        cards.inbox_card(item, can_act=True, csrf_token="x")
    assert len(cards._kept) == 2
    kept = cards._kept.values()
    assert cards._kept_chars == sum(len(html) + len(strip) for html, strip, _ in kept)
    cards.forget_cards()
    monkeypatch.setattr(cards, "CARDS_KEPT", 2000)
    one = len(cards.inbox_card(items[0], can_act=True, csrf_token=""))
    monkeypatch.setattr(cards, "CARDS_KEPT_CHARS", 2 * one + 100)
    for item in items:
        cards.inbox_card(item, can_act=True, csrf_token="x")
    assert len(cards._kept) == 2
    assert cards._kept_chars <= cards.CARDS_KEPT_CHARS


def test_a_kept_card_shows_who_holds_the_thread_now_as_each_viewer_sees_it(
    operator: User, operator2: User, waiting_agent: Any, renders: list[str]
) -> None:
    from dashboard.claims import claim_strip

    t = waiting_agent()
    olga, oscar = client_for(operator), client_for(operator2)

    def strip(client: Client) -> str:
        card = card_of(client.get("/ui/inbox/").content.decode(), t.pk)
        return card[card.index('<div class="claim') : card.index("</div>", card.index("claim")) + 6]

    free = strip(olga)
    assert free == claim_strip(
        t.pk, None, user=operator, can_act=True, csrf_field="", where="inbox"
    )
    assert 'data-claim="free"' in free and 'name="claim"' in free
    olga.post(f"/ui/threads/{t.pk}/claim/", {"claim": ""})
    assert 'data-claim="mine"' in strip(olga) and 'name="release"' in strip(olga)
    taken = strip(oscar)
    assert 'data-claim="taken"' in taken and f"<strong>{operator.username}</strong>" in taken
    assert 'name="take_over"' in taken
    olga.post(f"/ui/threads/{t.pk}/claim/", {"release": ""})
    assert strip(oscar) == free
    assert renders == [t.pk]  # the kept card, its strip filled in for each


def test_a_card_is_kept_per_script_prefix_and_time_zone(
    as_operator: Client, waiting_agent: Any, renders: list[str], settings: Any
) -> None:
    from django.urls import get_script_prefix, set_script_prefix

    t = waiting_agent()
    plain = card_of(as_operator.get("/ui/inbox/").content.decode(), t.pk)
    before = get_script_prefix()
    set_script_prefix("/ops/")  # as a WSGI server does for SCRIPT_NAME=/ops
    try:
        mounted = card_of(as_operator.get("/ui/inbox/").content.decode(), t.pk)
    finally:
        set_script_prefix(before)
    assert f'href="/ui/threads/{t.pk}/' in plain
    assert f'href="/ops/ui/threads/{t.pk}/' in mounted and 'href="/ui/' not in mounted
    settings.TIME_ZONE = "Asia/Tokyo"
    card_of(as_operator.get("/ui/inbox/").content.decode(), t.pk)
    assert renders == [t.pk, t.pk, t.pk]
    assert card_of(as_operator.get("/ui/inbox/").content.decode(), t.pk)  # kept again
    assert renders == [t.pk, t.pk, t.pk]
