"""Live pages: one WebSocket consumer per page, pushing re-rendered partials.

Each consumer checks the user, joins the groups of contract 3 (``inbox`` and
``thread_group(tid)``) and accepts; on connect (and so after every reconnect) it sends
the page's partials once, which re-syncs a page that missed events while offline. On
each event it renders the **same** partials the HTTP views render and sends them; the
htmx ws extension swaps every top-level element into the element with the same id
(out of band). Nothing is written over the socket: actions are HTTP POSTs.

A burst of events (a run writing many checkpoints) is coalesced: while one render is
in flight, further events only mark the page dirty, and one more render follows.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.http import Http404, QueryDict
from django.template.loader import render_to_string

from criogen.events import INBOX_GROUP, thread_group
from dashboard.data import InboxFilters, can_operate, get_thread_for_user, inbox_count

logger = logging.getLogger("criogen.dashboard")


def _oob(html: str) -> str:
    from dashboard.views.common import oob

    return oob(html)


class LiveConsumer(AsyncWebsocketConsumer):
    """Base: the navigation's inbox count on every page, plus coalesced re-renders."""

    groups_to_join: list[str]

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.user = user
        self.can_act = await database_sync_to_async(can_operate)(user)
        self.query = QueryDict(self.scope.get("query_string", b"").decode())
        cookies = self.scope.get("cookies") or {}
        # Partials with forms render {% csrf_token %}; the cookie's secret is a valid token.
        self.csrf_token = cookies.get(settings.CSRF_COOKIE_NAME, "")
        self._dirty = False
        self._full = False
        self._task: asyncio.Task[None] | None = None
        if not await self.setup():
            await self.close(code=4404)
            return
        self.groups_to_join = self.page_groups()
        for group in self.groups_to_join:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        await self.push()

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "groups_to_join", []):
            await self.channel_layer.group_discard(group, self.channel_name)
        task = getattr(self, "_task", None)
        if task is not None:
            task.cancel()

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

    async def push(self, *, full: bool = True) -> None:
        html = await database_sync_to_async(self.render if full else self.render_nav)()
        await self.send(text_data=html)

    def schedule(self, *, full: bool = True) -> None:
        """Re-render soon (the whole page, or only the nav count); events arriving
        meanwhile fold into one more render."""
        self._full = self._full or full
        if self._task is not None and not self._task.done():
            self._dirty = True
            return
        self._task = asyncio.ensure_future(self._render_loop())

    async def _render_loop(self) -> None:
        while True:
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


class NavConsumer(LiveConsumer):
    """Pages without live content of their own (threads list, audit): the nav count."""


class InboxConsumer(LiveConsumer):
    """The inbox: its list (with the page's filters, from the query string) and count."""

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
        return True

    def page_groups(self) -> list[str]:
        return [thread_group(self.thread_id), INBOX_GROUP]

    async def checkpoint_written(self, event: dict[str, Any]) -> None:
        # The inbox group brings other threads' suspensions: they change only the count.
        self.schedule(full=event.get("thread_id") == self.thread_id)

    def render(self) -> str:
        from dashboard import actions
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
        return (
            "".join(
                _oob(render_to_string(name, context))
                for name in (
                    "dashboard/thread.html#thread-header",
                    "dashboard/thread.html#timeline",
                    "dashboard/thread.html#actions",
                )
            )
            + self.render_nav()
        )
