"""WebSocket routes of the dashboard: one live consumer per page (see consumers.py)."""

from __future__ import annotations

from django.urls import URLPattern, path

from dashboard import consumers
from dashboard.converters import THREAD  # noqa: F401 - registers <thread:…>

websocket_urlpatterns: list[URLPattern] = [
    path("ws/ui/inbox/", consumers.InboxConsumer.as_asgi()),
    path("ws/ui/threads/<thread:thread_id>/", consumers.ThreadConsumer.as_asgi()),
    path("ws/ui/nav/", consumers.NavConsumer.as_asgi()),
]
