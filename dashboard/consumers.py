"""Live pages: one WebSocket consumer per page, pushing re-rendered partials.

Each consumer checks the user, joins the groups of contract 3 (``inbox`` and
``thread_group(tid)``) and accepts; on connect (and so after every reconnect) it sends
the page's partials once, which re-syncs a page that missed events while offline. On
each event it renders the **same** partials the HTTP views render and sends them; the
htmx ws extension swaps every top-level element into the element with the same id
(out of band). Nothing is written over the socket: actions are HTTP POSTs.

A burst of events (a run writing many checkpoints) is coalesced: while one render is
in flight, further events only mark the page dirty, and one more render follows.

A socket lives only as long as the session it was opened with (see access.py): it
joins its user's and its session's groups, closes on ``session.ended`` (sign-out),
checks again on ``user.changed`` (deactivation, demotion, password change), before
every push, and when the session's expiry date passes. Close codes: 4401 signed out
(the page needs a new sign-in), 4403 the user's rights changed (reload), 4404 the page's
thread is no longer visible.

Claims (criogen.services.claims) send ``claim.changed`` to the ``inbox`` group after
commit: the inbox re-renders its list, a thread page its claim strip when the claim is
its thread's. Presence (who else has a thread open) needs no storage: each thread page's
socket joins the thread's presence group (:func:`presence_group`), says ``presence.here``
when it opens (the others answer it directly with their own ``presence.here``), repeats
it every ``CRIOGEN_PRESENCE_HEARTBEAT`` seconds, and says ``presence.gone`` when it
closes. Each socket keeps the others it heard from, and forgets one not heard from for
``PRESENCE_TTL_FACTOR`` heartbeats: a process that died (and so could not say goodbye) drops out
that way. With the Redis channel layer this works across processes, as events do.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.contrib.auth import get_user_model
from django.http import Http404, QueryDict
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from criogen.events import INBOX_GROUP, thread_group
from dashboard.access import session_group, session_user, user_group
from dashboard.data import InboxFilters, can_operate, get_thread_for_user, inbox_count

logger = logging.getLogger("criogen.dashboard")

SIGNED_OUT = 4401
"""Close code: the session ended or no longer signs this user in."""
RIGHTS_CHANGED = 4403
"""Close code: the user may now do more or less than the page shows."""
NOT_VISIBLE = 4404
"""Close code: the page's thread is not (or no longer) visible to the user."""


PRESENCE_TTL_FACTOR = 2.5
"""A page not heard from for this many heartbeats is no longer shown (its process died)."""


def presence_heartbeat() -> float:
    """Seconds between two ``presence.here`` of an open thread page (the setting
    ``CRIOGEN_PRESENCE_HEARTBEAT``, 10 s by default)."""
    return float(getattr(settings, "CRIOGEN_PRESENCE_HEARTBEAT", 10.0))


def presence_group(thread_id: str) -> str:
    """The Channels group of the pages showing a thread (presence only)."""
    return "presence-" + hashlib.sha1(str(thread_id).encode()).hexdigest()[:32]  # noqa: S324


def _oob(html: str) -> str:
    from dashboard.views.common import oob

    return oob(html)


class LiveConsumer(AsyncWebsocketConsumer):
    """Base: the navigation's inbox count on every page, plus coalesced re-renders."""

    groups_to_join: list[str]

    async def connect(self) -> None:
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        self._expiry_task: asyncio.Task[None] | None = None
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=SIGNED_OUT)
            return
        self.user = user
        # Without a session in the scope (a consumer mounted without the session
        # middleware, as in some tests) only the user row is checked.
        session = self.scope.get("session")
        self.session_key: str | None = session.session_key if session is not None else None
        self.has_session = session is not None
        self.expires_at: datetime | None = None
        self.can_act = await database_sync_to_async(can_operate)(user)
        self.flags = (user.is_staff, user.is_superuser)
        self.query = QueryDict(self.scope.get("query_string", b"").decode())
        cookies = self.scope.get("cookies") or {}
        # Partials with forms render {% csrf_token %}; the cookie's secret is a valid token.
        self.csrf_token = cookies.get(settings.CSRF_COOKIE_NAME, "")
        self._dirty = False
        self._full = False
        if not await self.setup():
            await self.close(code=NOT_VISIBLE)
            return
        self.groups_to_join = [*self.page_groups(), user_group(user.pk)]
        if self.session_key:
            self.groups_to_join.append(session_group(self.session_key))
        for group in self.groups_to_join:
            await self.channel_layer.group_add(group, self.channel_name)
        # Joined first, checked second: a sign-out between the scope's session load and
        # the group_add is caught here; one after it reaches the group.
        code = await database_sync_to_async(self.check_access)()
        if code is not None:
            await self.end(code, accepted=False)
            return
        await self.accept()
        self._expiry_task = asyncio.ensure_future(self._close_on_expiry())
        await self.push(checked=True)

    async def disconnect(self, code: int) -> None:
        await self._leave()

    async def _leave(self) -> None:
        groups, self.groups_to_join = getattr(self, "groups_to_join", []), []
        for group in groups:
            await self.channel_layer.group_discard(group, self.channel_name)
        for task in (getattr(self, "_task", None), getattr(self, "_expiry_task", None)):
            if task is not None and task is not asyncio.current_task():
                task.cancel()

    async def end(self, code: int, *, accepted: bool = True) -> None:
        """Close the socket with ``code`` and stop everything it would still send."""
        if self._closed:
            return
        self._closed = True
        await self._leave()
        await self.close(code=code)
        if accepted:
            logger.info("live socket of user %s closed (%d)", getattr(self.user, "pk", "?"), code)

    # -- staying signed in -----------------------------------------------------------------
    def check_access(self, *, rights: bool = True) -> int | None:
        """None while this socket may stay open, else the code to close it with (runs in
        a worker thread: it reads the session and the user afresh).

        Before each push (``rights=False``) this is two indexed reads (the session with
        its expiry, the user): the user's permissions and the page's thread are read
        again only when the user's staff flags moved, on ``user.changed`` and at expiry;
        the render itself finds a thread gone.
        """
        if self.has_session:
            if not self.session_key:
                return SIGNED_OUT
            user, self.expires_at = session_user(self.session_key)
        else:
            user = get_user_model().objects.filter(pk=self.user.pk, is_active=True).first()
        if user is None or user.pk != self.user.pk:
            return SIGNED_OUT
        flags = (user.is_staff, user.is_superuser)
        if rights or flags != self.flags:
            if can_operate(user) != self.can_act:
                return RIGHTS_CHANGED
            self.flags = flags
            self.user = user  # its permissions as of now, for the renders
            if not self.still_visible():
                return NOT_VISIBLE
        return None

    def still_visible(self) -> bool:
        """The page's subject is still visible to ``self.user`` (worker thread)."""
        return True

    async def _close_on_expiry(self) -> None:
        """Close the socket when its session expires (a session whose expiry moved on,
        because the browser used it meanwhile, keeps the socket open)."""
        while self.expires_at is not None:
            wait = (self.expires_at - timezone.now()).total_seconds()
            # Wake just after the expiry (sleeping at most a day at a time).
            await asyncio.sleep(min(max(wait, 0) + 0.05, 86400))
            if self.expires_at - timezone.now() > timedelta(0):
                continue
            code = await database_sync_to_async(self.check_access)()
            if code is not None:
                await self.end(code)
                return
            if self.expires_at is not None and self.expires_at <= timezone.now():
                await asyncio.sleep(1)  # a backend that keeps an expired session a moment

    async def session_ended(self, event: dict[str, Any]) -> None:
        await self.end(SIGNED_OUT)

    async def user_changed(self, event: dict[str, Any]) -> None:
        if self._closed:
            return
        code = await database_sync_to_async(self.check_access)()
        if code is not None:
            await self.end(code)

    async def setup(self) -> bool:
        """Load what the page is about; False refuses the connection."""
        return True

    def page_groups(self) -> list[str]:
        return [INBOX_GROUP]

    def render(self) -> str:
        """The page's partials, each marked out-of-band (runs in a worker thread)."""
        return self.render_nav()

    def render_nav(self) -> str:
        context = {"inbox_total": inbox_count(self.user), "user": self.user}
        return _oob(render_to_string("base.html#nav-count", context))

    def context(self, extra: dict[str, Any]) -> dict[str, Any]:
        return {"user": self.user, "can_act": self.can_act, "csrf_token": self.csrf_token, **extra}

    async def push(self, *, full: bool = True, checked: bool = False) -> None:
        """Check the session and user (unless just ``checked``), render, send: a socket
        whose session ended between two events closes instead of sending."""
        result = await database_sync_to_async(self._checked_render)(full, checked)
        if self._closed:  # closed while rendering
            return
        if isinstance(result, int):
            await self.end(result)
            return
        await self.send(text_data=result)

    def _checked_render(self, full: bool, checked: bool) -> str | int:
        code = None if checked else self.check_access(rights=False)
        if code is not None:
            return code
        try:
            return self.render() if full else self.render_nav()
        except Http404:  # the page's thread is gone, or no longer visible
            return NOT_VISIBLE

    def schedule(self, *, full: bool = True) -> None:
        """Re-render soon (the whole page, or only the nav count); events arriving
        meanwhile fold into one more render."""
        if self._closed:
            return
        self._full = self._full or full
        if self._task is not None and not self._task.done():
            self._dirty = True
            return
        self._task = asyncio.ensure_future(self._render_loop())

    async def _render_loop(self) -> None:
        while not self._closed:
            self._dirty = False
            full, self._full = self._full, False
            try:
                await self.push(full=full)
            except Exception:
                logger.exception("live render failed for %s", type(self).__name__)
            if not self._dirty:
                return

    # Event handlers (contract 3): the type with "." -> "_".
    async def checkpoint_written(self, event: dict[str, Any]) -> None:
        self.schedule()

    async def run_changed(self, event: dict[str, Any]) -> None:
        self.schedule()

    async def claim_changed(self, event: dict[str, Any]) -> None:
        """Someone claimed, took over or released a thread: only the inbox shows it."""


class NavConsumer(LiveConsumer):
    """Pages without live content of their own (threads list, audit): the nav count."""


class InboxConsumer(LiveConsumer):
    """The inbox: its list (with the page's filters, from the query string) and count."""

    async def claim_changed(self, event: dict[str, Any]) -> None:
        self.schedule()

    def render(self) -> str:
        from dashboard.views.inbox import inbox_context

        filters = InboxFilters.from_query(self.query)
        context = self.context(inbox_context(self.user, filters, can_act=self.can_act))
        context["can_act"] = self.can_act
        parts = [
            render_to_string("dashboard/inbox.html#inbox-list", context),
            render_to_string("base.html#nav-count", context),
        ]
        # The count in the nav is of every suspended thread, not the filtered ones.
        if filters.active:
            return _oob(parts[0]) + self.render_nav()
        return "".join(_oob(p) for p in parts)


class ThreadConsumer(LiveConsumer):
    """A thread's page: its header, timeline and actions grow as checkpoints commit."""

    async def setup(self) -> bool:
        self.thread_id = self.scope["url_route"]["kwargs"]["thread_id"]
        try:
            await database_sync_to_async(get_thread_for_user)(self.user, self.thread_id)
        except Http404:
            return False
        before = parse_qs(self.scope.get("query_string", b"").decode()).get("before", [""])[0]
        self.before = int(before) if before.isdigit() else None
        self.last_waiting = ""
        self.note: Any = None
        self.peers: dict[str, tuple[str, float]] = {}  # channel -> (username, last heard)
        self.shown_viewers: list[str] = []
        self._presence_task: asyncio.Task[None] | None = None
        return True

    def page_groups(self) -> list[str]:
        return [thread_group(self.thread_id), INBOX_GROUP, presence_group(self.thread_id)]

    async def accept(self, subprotocol: str | None = None, headers: Any = None) -> None:
        await super().accept(subprotocol, headers)
        await self._announce(reply=True)
        self._presence_task = asyncio.ensure_future(self._heartbeat())

    async def _leave(self) -> None:
        task, self._presence_task = getattr(self, "_presence_task", None), None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        if task is not None:  # it was accepted: say goodbye once
            await self.channel_layer.group_send(
                presence_group(self.thread_id),
                {"type": "presence.gone", "channel": self.channel_name},
            )
        await super()._leave()

    async def _announce(self, *, reply: bool, to: str | None = None) -> None:
        event = {
            "type": "presence.here",
            "channel": self.channel_name,
            "user": self.user.get_username(),
            "reply": reply,
        }
        if to is None:
            await self.channel_layer.group_send(presence_group(self.thread_id), event)
        else:
            await self.channel_layer.send(to, event)

    async def _heartbeat(self) -> None:
        while not self._closed:
            await asyncio.sleep(presence_heartbeat())
            await self._announce(reply=False)
            await self._send_presence()

    async def presence_here(self, event: dict[str, Any]) -> None:
        channel = str(event.get("channel") or "")
        if not channel or channel == self.channel_name or self._closed:
            return
        self.peers[channel] = (str(event.get("user") or ""), time.monotonic())
        if event.get("reply"):  # a new page: tell it we are here too
            await self._announce(reply=False, to=channel)
        await self._send_presence()

    async def presence_gone(self, event: dict[str, Any]) -> None:
        if self.peers.pop(str(event.get("channel") or ""), None) is not None:
            await self._send_presence()

    def viewers(self) -> list[str]:
        """Who else has this thread open (not this user's other tabs), by name."""
        oldest = time.monotonic() - PRESENCE_TTL_FACTOR * presence_heartbeat()
        for channel, (_, heard) in list(self.peers.items()):
            if heard < oldest:
                del self.peers[channel]
        me = self.user.get_username()
        return sorted({name for name, _ in self.peers.values() if name and name != me})

    async def _send_presence(self) -> None:
        viewers = self.viewers()
        if self._closed or viewers == self.shown_viewers:
            return
        self.shown_viewers = viewers
        names = format_html_join(
            ", ", '<strong class="viewer">{}</strong>', ((n,) for n in viewers)
        )
        html = format_html(
            '<p id="presence" class="presence muted" aria-live="polite" data-viewers="{}">{}</p>',
            ",".join(viewers),
            format_html("Also here: {}", names) if viewers else "",
        )
        await self.send(text_data=_oob(html))

    async def claim_changed(self, event: dict[str, Any]) -> None:
        if event.get("thread_id") == self.thread_id:
            self.schedule()

    def still_visible(self) -> bool:
        try:
            get_thread_for_user(self.user, self.thread_id)
        except Http404:
            return False
        return True

    async def checkpoint_written(self, event: dict[str, Any]) -> None:
        # The inbox group brings other threads' suspensions: they change only the count.
        self.schedule(full=event.get("thread_id") == self.thread_id)

    def render(self) -> str:
        from dashboard import actions
        from dashboard.views.claims import claim_context
        from dashboard.views.threads import actions_context, timeline_context

        thread = get_thread_for_user(self.user, self.thread_id)
        context = self.context(actions_context(self.user, thread, can_act=self.can_act))
        context.update(timeline_context(thread, before=self.before, selected_id=""))
        waiting = context["waiting"]
        if self.last_waiting and (waiting is None or waiting.checkpoint_id != self.last_waiting):
            # The suspension this page showed was answered: say by whom, not only that
            # the buttons vanished. The note stays until something new waits.
            by, at = actions.who_decided(thread, self.last_waiting)
            self.note = actions.decided_note(by, at)
        if waiting is not None:
            self.note = None
        context["outcome"] = self.note
        self.last_waiting = waiting.checkpoint_id if waiting else ""
        context.update(claim_context(self.user, thread))
        return (
            "".join(
                _oob(render_to_string(name, context))
                for name in (
                    "dashboard/thread.html#thread-header",
                    "dashboard/thread.html#claim",
                    "dashboard/thread.html#timeline",
                    "dashboard/thread.html#actions",
                )
            )
            + self.render_nav()
        )
