"""Live pages over WebSockets: the consumers push re-rendered partials on engine events.

Driven with Channels' ``WebsocketCommunicator`` on the dashboard's routes; engine writes
go through ``Storage.default()`` whose listener (``criogen.events``) publishes to the
in-memory channel layer, exactly as in the server.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from criogen import registry
from dashboard.routing import websocket_urlpatterns

pytestmark = pytest.mark.django_db(transaction=True)

app = URLRouter(websocket_urlpatterns)


async def connect(path: str, user: Any) -> WebsocketCommunicator:
    ws = WebsocketCommunicator(app, path)
    ws.scope["user"] = user
    ws.scope["cookies"] = {"csrftoken": "t" * 32}
    connected, _ = await ws.connect()
    assert connected, f"{path} refused {user}"
    return ws


async def receive_until(ws: WebsocketCommunicator, needle: str, *, timeout: float = 5) -> str:
    """Messages until one contains ``needle`` (earlier pushes may predate the change)."""
    seen = []
    while True:
        try:
            html = await ws.receive_from(timeout=timeout)
        except TimeoutError:
            raise AssertionError(f"no push contained {needle!r}; got {seen!r}") from None
        seen.append(html[:200])
        if needle in html:
            return html


def card_ids(html: str) -> set[str]:
    return set(re.findall(r'<article class="card waiting" data-thread="([^"]+)"', html))


async def test_anonymous_sockets_are_refused() -> None:
    for path in ("/ws/ui/inbox/", "/ws/ui/nav/", "/ws/ui/threads/x/"):
        ws = WebsocketCommunicator(app, path)
        ws.scope["user"] = AnonymousUser()
        connected, code = await ws.connect()
        assert not connected and code == 4401


async def test_the_inbox_syncs_on_connect_and_shows_new_suspensions(
    operator, suspended_workflow, waiting_agent
) -> None:
    first = await database_sync_to_async(suspended_workflow)()
    ws = await connect("/ws/ui/inbox/", operator)
    html = await ws.receive_from(timeout=5)
    assert card_ids(html) == {first.pk}
    assert re.search(r'<section id="inbox-list"[^>]*hx-swap-oob="true"', html)
    assert re.search(r'<span id="nav-inbox-count"[^>]*hx-swap-oob="true"[^>]*>1</span>', html)
    second = await database_sync_to_async(waiting_agent)()
    html = await receive_until(ws, second.pk)
    assert card_ids(html) == {first.pk, second.pk}
    assert ">2</span>" in html
    # The form token comes from the socket's cookie, so pushed forms still post.
    assert 'name="csrfmiddlewaretoken" value="' + "t" * 32 in html
    await ws.disconnect()


async def test_a_settled_suspension_vanishes_from_the_inbox(operator, suspended_workflow) -> None:
    t = await database_sync_to_async(suspended_workflow)()
    ws = await connect("/ws/ui/inbox/", operator)
    assert card_ids(await ws.receive_from(timeout=5)) == {t.pk}

    def answer() -> None:
        registry.get_graph("hitl").thread(t.pk).resume("yes", durability="sync")

    await database_sync_to_async(answer)()
    html = await receive_until(ws, "Nothing is waiting")
    assert card_ids(html) == set()
    await ws.disconnect()


async def test_the_inbox_socket_keeps_the_page_filters(
    operator, suspended_workflow, waiting_agent
) -> None:
    await database_sync_to_async(suspended_workflow)()
    agent = await database_sync_to_async(waiting_agent)()
    ws = await connect("/ws/ui/inbox/?assistant=refunds", operator)
    html = await ws.receive_from(timeout=5)
    assert card_ids(html) == {agent.pk}
    # The nav still counts every waiting thread.
    assert re.search(r'id="nav-inbox-count"[^>]*>2</span>', html)
    await ws.disconnect()


async def test_a_viewer_socket_sees_only_their_threads(viewer, stranger, waiting_agent) -> None:
    mine = await database_sync_to_async(waiting_agent)(owner=viewer)
    await database_sync_to_async(waiting_agent)(owner=stranger)
    ws = await connect("/ws/ui/inbox/", viewer)
    html = await ws.receive_from(timeout=5)
    assert card_ids(html) == {mine.pk}
    assert 'name="approve"' not in html
    await ws.disconnect()


async def test_a_thread_socket_is_refused_for_a_thread_you_cannot_see(
    viewer, stranger, waiting_agent
) -> None:
    theirs = await database_sync_to_async(waiting_agent)(owner=stranger)
    ws = WebsocketCommunicator(app, f"/ws/ui/threads/{theirs.pk}/")
    ws.scope["user"] = viewer
    connected, code = await ws.connect()
    assert not connected and code == 4404


async def test_the_timeline_grows_live_and_says_who_decided(operator, waiting_agent) -> None:
    t = await database_sync_to_async(waiting_agent)()
    ws = await connect(f"/ws/ui/threads/{t.pk}/", operator)
    html = await ws.receive_from(timeout=5)
    assert re.search(r'<section id="timeline"[^>]*hx-swap-oob="true"', html)
    assert 'data-version="3"' in html and 'data-version="4"' not in html
    assert 'name="approve"' in html

    def approve() -> None:
        registry.get_graph("refunds").thread(t.pk).approve(by="oscar", durability="sync")

    await database_sync_to_async(approve)()
    html = await receive_until(ws, 'data-status="completed"')
    assert 'data-version="4"' in html
    assert "Decided by oscar at " in html
    assert 'name="approve"' not in html
    await ws.disconnect()


async def test_a_reconnect_resyncs_what_was_missed(operator, suspended_workflow) -> None:
    t = await database_sync_to_async(suspended_workflow)()
    ws = await connect(f"/ws/ui/threads/{t.pk}/", operator)
    await ws.receive_from(timeout=5)
    await ws.disconnect()

    def answer() -> None:
        registry.get_graph("hitl").thread(t.pk).resume("yes", durability="sync")

    await database_sync_to_async(answer)()  # happens while the page is offline
    ws = await connect(f"/ws/ui/threads/{t.pk}/", operator)
    html = await ws.receive_from(timeout=5)
    assert 'data-version="5"' in html and 'data-status="completed"' in html
    await ws.disconnect()


async def test_the_nav_socket_pushes_the_count(operator, suspended_workflow) -> None:
    ws = await connect("/ws/ui/nav/", operator)
    assert re.search(r'id="nav-inbox-count"[^>]*>0</span>', await ws.receive_from(timeout=5))
    await database_sync_to_async(suspended_workflow)()
    html = await receive_until(ws, ">1</span>")
    assert html.count("<") == 1 + html.count("</")  # one element: the badge
    await ws.disconnect()


async def test_a_thread_page_only_recounts_for_other_threads(operator, suspended_workflow) -> None:
    from criogen import events

    mine = await database_sync_to_async(suspended_workflow)()
    # Its own run's live events leave from the publisher thread: all sent before the
    # page connects, so that what the socket gets next is the other thread's.
    assert await database_sync_to_async(events.flush)()
    ws = await connect(f"/ws/ui/threads/{mine.pk}/", operator)
    await ws.receive_from(timeout=5)
    await database_sync_to_async(suspended_workflow)()  # another thread suspends
    html = await receive_until(ws, ">2</span>")
    assert 'id="timeline"' not in html and html.lstrip().startswith('<span id="nav-inbox-count"')
    await ws.disconnect()


async def test_a_thread_socket_serves_an_id_with_a_slash(operator, suspended_workflow) -> None:
    from dashboard.converters import encode_thread_id

    t = await database_sync_to_async(suspended_workflow)(thread_id="team/orders/7")
    ws = await connect(f"/ws/ui/threads/{encode_thread_id(t.pk)}/", operator)
    html = await ws.receive_from(timeout=5)
    assert 'data-status="suspended"' in html
    await ws.disconnect()
