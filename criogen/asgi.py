"""ASGI entry point: HTTP through Django; WebSockets through Channels.

The REST API's paths go through a second Django handler whose middleware chain is
:func:`api.middleware.api_middleware` of ``MIDDLEWARE``: without it every API request
would hop to Django's single sync thread and back for each classic middleware. Views,
URLs, error handling and the response headers are the same on both.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "criogen.settings")
# Django must be set up before anything imports models (consumers do).
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.handlers.asgi import ASGIHandler  # noqa: E402

from api.middleware import api_middleware  # noqa: E402
from dashboard.routing import websocket_urlpatterns  # noqa: E402

API_PREFIXES = ("/threads", "/runs", "/assistants", "/store", "/ok", "/info")
"""The REST API's resources (not ``/docs`` and ``/openapi.json``: pages for browsers)."""


class ApiHandler(ASGIHandler):
    """Django's ASGI handler with the API's middleware chain."""

    def load_middleware(self, is_async: bool = False) -> None:
        # BaseHandler reads settings.MIDDLEWARE; this runs once, at start-up.
        site = settings.MIDDLEWARE
        settings.MIDDLEWARE = api_middleware(list(site))
        try:
            super().load_middleware(is_async=is_async)
        finally:
            settings.MIDDLEWARE = site


api_asgi_app = ApiHandler()


def is_api_path(path: str) -> bool:
    """``/threads``, ``/threads/…`` and the like; not ``/threadsx``."""
    return any(path == p or path.startswith(p + "/") for p in API_PREFIXES)


async def http_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    path = scope.get("path", "")
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    app = api_asgi_app if is_api_path(path) else django_asgi_app
    await app(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": http_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
