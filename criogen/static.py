"""Static files served by the application itself, under any ASGI server.

Daphne and uvicorn serve only what the application answers, so without this the
dashboard's stylesheet and scripts (and the API docs' Swagger UI) would be 404 with
``DEBUG`` off. WhiteNoise, the usual choice for Django, serves ``STATIC_ROOT`` (filled by
``manage.py collectstatic``) with caching headers and the compressed copies its storage
writes; with ``DEBUG`` on it finds files through the finders, as runserver does.

WhiteNoise's middleware is sync-only: in the site's async middleware chain every page
would cross to a thread and back for it. :class:`StaticFilesMiddleware` is the same
middleware, async under ASGI: the lookup is a dict read on the event loop, and only a
static file's read goes to a thread (under WSGI it is WhiteNoise's, unchanged). The
REST API's own chain leaves it out (api.middleware).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings as django_settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from whitenoise.middleware import WhiteNoiseMiddleware  # type: ignore[import-untyped]

logger = logging.getLogger("criogen.static")


class StaticFilesMiddleware(WhiteNoiseMiddleware):  # type: ignore[misc]
    """WhiteNoise's middleware, async under ASGI (see the module docstring)."""

    sync_capable = True  # under WSGI (and Django's test client): WhiteNoise as it is
    async_capable = True

    def __init__(
        self,
        get_response: Callable[[HttpRequest], Any],
        settings: Any = django_settings,
    ) -> None:
        super().__init__(get_response, settings)
        self.async_mode = iscoroutinefunction(get_response)
        if self.async_mode:
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

    def __call__(self, request: HttpRequest) -> Any:
        if self.async_mode:
            return self.__acall__(request)
        return super().__call__(request)

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        if self.autorefresh:  # DEBUG: look on disk, on a thread, under a static prefix
            path = request.path_info
            prefixes = [prefix for _, prefix in self.directories]
            if self.use_finders:
                prefixes.append(self.static_prefix)
            static_file = None
            if any(path.startswith(p) for p in prefixes):
                static_file = await asyncio.to_thread(self.find_file, path)
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
