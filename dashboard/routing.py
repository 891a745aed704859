"""WebSocket routes of the dashboard (live pages subscribe here)."""

from __future__ import annotations

from django.urls import URLPattern

websocket_urlpatterns: list[URLPattern] = []
