"""Static files served by the application itself, under any ASGI server.

Daphne and uvicorn serve only what the application answers, so without this the
dashboard's stylesheet and scripts (and the API docs' Swagger UI) would be 404 with
``DEBUG`` off. WhiteNoise, the usual choice for Django, serves ``STATIC_ROOT`` (filled by
``manage.py collectstatic``) with caching headers and the compressed copies its storage
writes; with ``DEBUG`` on it finds files through the finders, as runserver does.

WhiteNoise's middleware is sync-only: in the site's async middleware chain every page
would cross to a thread and back for it. :class:`StaticFilesMiddleware` is the same
middleware, async: the lookup is a dict read on the event loop, and only a static file's
read goes to a thread. The REST API's own chain leaves it out (api.middleware).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import markcoroutinefunction
from django.conf import settings as django_settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from whitenoise.middleware import WhiteNoiseMiddleware  # type: ignore[import-untyped]

logger = logging.getLogger("criogen.static")


class StaticFilesMiddleware(WhiteNoiseMiddleware):  # type: ignore[misc]
    """WhiteNoise's middleware as an async middleware (see the module docstring)."""

    sync_capable = False
    async_capable = True

    def __init__(
        self,
        get_response: Callable[[HttpRequest], Awaitable[HttpResponseBase]],
        settings: Any = django_settings,
    ) -> None:
        super().__init__(get_response, settings)
        markcoroutinefunction(self)

    def add_files(self, root: str, prefix: str | None = None) -> None:
        # WhiteNoise says "No directory at" with warnings.warn, which a server rarely
        # shows and a test run turns into an error: say it in the log, with the fix.
        if not self.autorefresh and not os.path.isdir(root):
            logger.warning(
                "no static files at %s: run `manage.py collectstatic` (docs/deployment.md)",
                root,
            )
            return
        super().add_files(root, prefix)

    async def __call__(self, request: HttpRequest) -> HttpResponseBase:  # type: ignore[override]
        if self.autorefresh:  # DEBUG: look on disk, on a thread
            static_file = await asyncio.to_thread(self.find_file, request.path_info)
        else:
            static_file = self.files.get(request.path_info)
        if static_file is None:
            return await self.get_response(request)  # type: ignore[no-any-return]
        return await asyncio.to_thread(self._respond, static_file, request)

    @staticmethod
    def _respond(static_file: Any, request: HttpRequest) -> HttpResponse:
        """The whole file in one response (static files are small): a file response
        would be a sync iterator, which Django's ASGI handler reads with a warning."""
        answer = static_file.get_response(request.method, request.META)
        body = b""
        if answer.file is not None:
            with answer.file:
                body = answer.file.read()
        response = HttpResponse(body, status=int(answer.status))
        del response["Content-Type"]
        for key, value in answer.headers:
            response[key] = value
        return response
