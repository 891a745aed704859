"""Live sockets last only as long as the session and the rights they were opened with.

Sockets are opened as a browser opens them: through Channels' session and auth
middleware, with the session cookie of a real sign-in. Sign-out goes through the real
sign-out view; changes to users go through the ORM, as the admin makes them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import Group, Permission, User
from django.contrib.sessions.models import Session
from django.test import Client
from django.utils import timezone

from criogen import events
from dashboard.routing import websocket_urlpatterns
from tests.dashboard.test_consumers import receive_until

pytestmark = pytest.mark.django_db(transaction=True)

app = AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
CSRF = "t" * 32


def sign_in(user: User) -> Client:
    """A browser's session: a client signed in through Django's login()."""
    client = Client()
    client.force_login(user)
    return client


def session_key(client: Client) -> str:
    return client.cookies[settings.SESSION_COOKIE_NAME].value


async def open_socket(path: str, client: Client) -> WebsocketCommunicator:
    """A socket opened with ``client``'s cookies; its first push is read."""
    cookie = f"{settings.SESSION_COOKIE_NAME}={session_key(client)}; csrftoken={CSRF}"
    ws = WebsocketCommunicator(app, path, headers=[(b"cookie", cookie.encode())])
    connected, code = await ws.connect(timeout=10)
    assert connected, f"{path} refused ({code})"
    assert await ws.receive_from(timeout=10)
    return ws


async def closed_with(ws: WebsocketCommunicator, *, timeout: float = 10) -> int:
    """The close code of the socket's next message (fails on anything else)."""
    message = await ws.receive_output(timeout=timeout)
    assert message["type"] == "websocket.close", f"expected a close, got {message!r:.300}"
    return int(message["code"])


def operate() -> Permission:
    return Permission.objects.get(codename="operate", content_type__app_label="criogen")


async def test_sign_out_closes_that_sessions_sockets_before_the_next_event(
    operator, suspended_workflow
) -> None:
    first = await database_sync_to_async(suspended_workflow)()
    browser = await database_sync_to_async(sign_in)(operator)
    inbox = await open_socket("/ws/ui/inbox/", browser)
    thread = await open_socket(f"/ws/ui/threads/{first.pk}/", browser)
    # The same operator in another browser: a sign-in elsewhere closes nothing, and
    # signing out of one browser leaves the other signed in.
    laptop = await database_sync_to_async(sign_in)(operator)
    other = await open_socket("/ws/ui/inbox/", laptop)
    assert await inbox.receive_nothing(timeout=0.3)

    signed_out = await database_sync_to_async(browser.post)("/accounts/logout/")
    assert signed_out.status_code in (200, 302)
    assert await closed_with(inbox) == 4401
    assert await closed_with(thread) == 4401

    second = await database_sync_to_async(suspended_workflow)()
    await receive_until(other, second.pk)  # the event went out to open sockets...
    assert await inbox.receive_nothing(timeout=0.5)  # ...and not to the closed ones
    assert await thread.receive_nothing(timeout=0.5)
    await other.disconnect()


async def test_a_socket_whose_session_vanished_closes_instead_of_pushing(
    operator, suspended_workflow
) -> None:
    """The second line: no message arrived (the session row was deleted by hand), so
    the next event finds the session gone and closes the socket without its data."""
    browser = await database_sync_to_async(sign_in)(operator)
    inbox = await open_socket("/ws/ui/inbox/", browser)
    await database_sync_to_async(Session.objects.filter(pk=session_key(browser)).delete)()
    await database_sync_to_async(suspended_workflow)()
    assert await closed_with(inbox) == 4401


async def test_a_socket_closes_when_its_session_expires(operator) -> None:
    def short_session() -> Client:
        client = sign_in(operator)
        session = client.session
        session.set_expiry(8)  # seconds: enough to connect on a busy machine
        session.save()
        return client

    browser = await database_sync_to_async(short_session)()
    expires = await database_sync_to_async(
        lambda: Session.objects.get(pk=session_key(browser)).expire_date
    )()
    nav = await open_socket("/ws/ui/nav/", browser)
    assert await closed_with(nav, timeout=30) == 4401
    assert timezone.now() >= expires  # not before it expired


def _deactivate(user: User) -> None:
    user.is_active = False
    user.save()


def _change_password(user: User) -> None:
    user.set_password("a new password, elsewhere")
    user.save()


def _delete(user: User) -> None:
    user.delete()


@pytest.mark.parametrize("change", [_deactivate, _change_password, _delete])
async def test_a_user_who_may_no_longer_sign_in_loses_every_socket(
    operator, suspended_workflow, change
) -> None:
    t = await database_sync_to_async(suspended_workflow)()
    browsers = [await database_sync_to_async(sign_in)(operator) for _ in range(2)]
    sockets = [
        await open_socket("/ws/ui/inbox/", browsers[0]),
        await open_socket(f"/ws/ui/threads/{t.pk}/", browsers[1]),
    ]
    await database_sync_to_async(change)(operator)
    for ws in sockets:
        assert await closed_with(ws) == 4401


def _unstaff(user: User) -> None:
    user.is_staff = False
    user.save()


def _drop_permission(user: User) -> None:
    user.user_permissions.remove(operate())


def _drop_group_permission(user: User) -> None:
    Group.objects.get(name="operators").permissions.remove(operate())


def _leave_group(user: User) -> None:
    Group.objects.get(name="operators").user_set.remove(user)


def _delete_group(user: User) -> None:
    Group.objects.get(name="operators").delete()


@pytest.fixture
def made_operator(request: pytest.FixtureRequest, db: None) -> Iterator[User]:
    """An operator by the way the parametrized demotion takes away."""
    how = request.param
    user = User.objects.create_user(f"op-{uuid.uuid4().hex[:8]}", password="pw")
    if how == "staff":
        user.is_staff = True
        user.save()
    elif how == "permission":
        user.user_permissions.add(operate())
    else:
        group = Group.objects.create(name="operators")
        group.permissions.add(operate())
        user.groups.add(group)
    yield user


@pytest.mark.parametrize(
    ("made_operator", "demote"),
    [
        ("staff", _unstaff),
        ("permission", _drop_permission),
        ("group", _drop_group_permission),
        ("group", _leave_group),
        ("group", _delete_group),
    ],
    indirect=["made_operator"],
)
async def test_a_demoted_operator_loses_every_socket(made_operator, demote) -> None:
    browser = await database_sync_to_async(sign_in)(made_operator)
    inbox = await open_socket("/ws/ui/inbox/", browser)
    nav = await open_socket("/ws/ui/nav/", browser)
    await database_sync_to_async(demote)(made_operator)
    assert await closed_with(inbox) == 4403
    assert await closed_with(nav) == 4403


async def test_an_unrelated_change_to_the_user_keeps_the_socket(operator) -> None:
    browser = await database_sync_to_async(sign_in)(operator)
    nav = await open_socket("/ws/ui/nav/", browser)

    def rename() -> None:
        operator.first_name = "Olga"
        operator.save()

    await database_sync_to_async(rename)()
    assert await nav.receive_nothing(timeout=1)
    await nav.disconnect()


# -- over Redis -------------------------------------------------------------------------


@pytest.fixture
def redis_layer(settings: Any) -> Iterator[None]:
    """The Redis channel layer (production's), on its own prefix."""
    from tests.conftest import START_REDIS, need_service, redis_url
    from tests.dashboard.conftest import redis_available

    need_service("Redis", redis_available(), START_REDIS)
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [redis_url("dashboard")],
                "prefix": f"criogen-test-{uuid.uuid4().hex[:8]}",
            },
        }
    }
    yield
    assert events.flush(timeout=10)


async def test_the_close_messages_cross_the_redis_channel_layer(
    redis_layer, operator, operator2
) -> None:
    from channels.layers import get_channel_layer

    assert type(get_channel_layer()).__name__ == "RedisChannelLayer"
    browser = await database_sync_to_async(sign_in)(operator)
    colleague = await database_sync_to_async(sign_in)(operator2)
    inbox = await open_socket("/ws/ui/inbox/", browser)
    nav = await open_socket("/ws/ui/nav/", colleague)
    await database_sync_to_async(browser.post)("/accounts/logout/")
    assert await closed_with(inbox) == 4401  # session.ended
    await database_sync_to_async(_deactivate)(operator2)
    assert await closed_with(nav) == 4401  # user.changed


@pytest.mark.parametrize(
    ("made_operator", "update", "code"),
    [("staff", {"is_staff": False}, 4403), ("staff", {"is_active": False}, 4401)],
    indirect=["made_operator"],
)
async def test_a_change_made_without_signals_closes_the_socket_at_the_next_event(
    made_operator, update, code, suspended_workflow
) -> None:
    """``QuerySet.update()`` sends no signal: the check before the next push catches it."""
    browser = await database_sync_to_async(sign_in)(made_operator)
    inbox = await open_socket("/ws/ui/inbox/", browser)
    await database_sync_to_async(User.objects.filter(pk=made_operator.pk).update)(**update)
    assert await inbox.receive_nothing(timeout=0.5)  # no message: nothing knows yet
    await database_sync_to_async(suspended_workflow)()
    assert await closed_with(inbox) == code
