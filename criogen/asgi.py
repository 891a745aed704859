"""ASGI entry point: HTTP through Django; WebSockets through Channels.

``langgraph_sdk``'s ``get_state``, ``get_history`` and ``threads.create`` are answered
by :mod:`api.hot` when it can answer them as the API's handler would (else they go that
way too).

The REST API's paths go through a second Django handler whose middleware chain is
:func:`api.middleware.api_middleware` of ``MIDDLEWARE``: without it every API request
would hop to Django's single sync thread and back for each classic middleware. It also
sends the two request signals on the event loop (see :meth:`ApiHandler.handle`). Views,
URLs, error handling and the response headers are the same on both.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "criogen.settings")
# Django must be set up before anything imports models (consumers do).
django_asgi_app = get_asgi_application()

from asgiref.sync import SyncToAsync, sync_to_async  # noqa: E402
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core import signals  # noqa: E402
from django.core.exceptions import RequestAborted  # noqa: E402
from django.core.handlers.asgi import ASGIHandler, get_script_prefix  # noqa: E402
from django.http import HttpRequest, HttpResponseBase  # noqa: E402
from django.urls import URLPattern, URLResolver, get_resolver, set_script_prefix  # noqa: E402
from django.urls.exceptions import Resolver404  # noqa: E402
from django.urls.resolvers import RoutePattern  # noqa: E402

from api import hot  # noqa: E402
from api.hot import sync_receivers_only as _sync_only  # noqa: E402
from api.middleware import api_middleware, is_api_path  # noqa: E402
from dashboard.routing import websocket_urlpatterns  # noqa: E402


def _request_has_thread() -> bool:
    """Sync code of this request ran on a thread of its own (its ThreadSensitiveContext
    has an executor): then that thread may hold a database connection to clean up."""
    context = SyncToAsync.thread_sensitive_context.get(None)
    return context is None or context in SyncToAsync.context_to_thread_executor


def _first_segment(pattern: URLPattern | URLResolver) -> str | None:
    """The first segment of every path ``pattern`` matches, or None when it may match
    paths of any first segment (a converter or a regular expression in it, or an
    include's prefix with no ``/``)."""
    if not isinstance(pattern.pattern, RoutePattern):
        return None
    literal, converter, _ = str(pattern.pattern).partition("<")
    if "/" in literal:
        return literal.split("/", 1)[0]
    if converter or isinstance(pattern, URLResolver):
        return None  # an include's route matches a prefix: "ok" would match "okay/"
    return literal  # a whole path of one segment


def _narrowed(patterns: Any, segment: str) -> list[URLPattern | URLResolver]:
    """``patterns``, in their order, less those that cannot match a path whose first
    segment is ``segment``; an include at the empty route narrowed the same way."""
    kept: list[URLPattern | URLResolver] = []
    for pattern in patterns:
        first = _first_segment(pattern)
        if first is not None:
            if first == segment:
                kept.append(pattern)
        elif (
            isinstance(pattern, URLResolver)
            and isinstance(pattern.pattern, RoutePattern)
            and str(pattern.pattern) == ""
        ):
            kept.append(
                URLResolver(
                    pattern.pattern,
                    _narrowed(pattern.url_patterns, segment),
                    pattern.default_kwargs,
                    pattern.app_name,
                    pattern.namespace,
                )
            )
        else:
            kept.append(pattern)
    return kept


def _segments(patterns: Any) -> set[str]:
    """The first segments ``patterns`` name (through includes at the empty route)."""
    found: set[str] = set()
    for pattern in patterns:
        first = _first_segment(pattern)
        if first is not None:
            found.add(first)
        elif isinstance(pattern, URLResolver) and str(pattern.pattern) == "":
            found |= _segments(pattern.url_patterns)
    return found


class _ApiRoutes:
    """URL resolving for the API's paths, by the path's first segment.

    Django tries a urlconf's patterns in order, a regular expression each: for
    ``/threads/{id}/state`` about thirty before the one that matches. Here the root
    urlconf is copied once per first segment its routes name (``threads``, ``runs``…),
    keeping, in their order, only the patterns that can match a path starting with that
    segment. Django's own ``resolve`` runs on that copy, so a path resolves to the same
    view, arguments, names and route (the patterns it skipped are not in the match's
    ``tried``, which only Django's debug 404 page reads). A path none of them matches,
    or of a segment no route names, is resolved on the whole urlconf, for Django's 404.
    """

    def __init__(self, root: URLResolver) -> None:
        self.root = root
        self.by_segment = {
            segment: URLResolver(root.pattern, _narrowed(root.url_patterns, segment))
            for segment in _segments(root.url_patterns)
            if segment
        }

    def resolver(self, path: str) -> URLResolver | None:
        """The copy for ``path`` (``/threads/…``), or None."""
        return self.by_segment.get(path[1:].split("/", 1)[0])


_routes: _ApiRoutes | None = None


def _api_routes() -> _ApiRoutes:
    global _routes
    root = get_resolver()
    routes = _routes
    if routes is None or routes.root is not root:
        routes = _routes = _ApiRoutes(root)
    return routes


class ApiHandler(ASGIHandler):
    """Django's ASGI handler with the API's middleware chain and request signals sent
    on the event loop."""

    def resolve_request(self, request: HttpRequest) -> Any:
        """Django's resolving, on the copy of the urlconf for the path's first segment
        (:class:`_ApiRoutes`)."""
        if not hasattr(request, "urlconf"):
            resolver = _api_routes().resolver(request.path_info)
            if resolver is not None:
                try:
                    match = resolver.resolve(request.path_info)
                except Resolver404:
                    pass
                else:
                    request.resolver_match = match
                    return match
        return super().resolve_request(request)

    def load_middleware(self, is_async: bool = False) -> None:
        # BaseHandler reads settings.MIDDLEWARE; this runs once, at start-up.
        site = settings.MIDDLEWARE
        settings.MIDDLEWARE = api_middleware(list(site))
        try:
            super().load_middleware(is_async=is_async)
        finally:
            settings.MIDDLEWARE = site

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Django's request cycle: the body, ``request_started``, the view raced against
        the client going away, the response, ``request_finished``.

        Django sends the two signals through ``sync_to_async``, which in a request's
        ThreadSensitiveContext starts a thread (and another to join it) for every
        request, only to run Django's receivers (``reset_queries``,
        ``close_old_connections``) where they have nothing to do: a new thread has no
        connection. The API's async views do their database work on the pool of
        :mod:`api.aio`, so for them both signals are sent here, on the loop (0.65 ms of
        a 2.6 ms ``get_state``). A request whose view ran sync code gets
        ``request_finished`` on that view's thread, as Django sends it; so does any
        request when a receiver is async.
        """
        try:
            body = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        if _sync_only(signals.request_started, self.__class__):
            signals.request_started.send(sender=self.__class__, scope=scope)
        else:
            await signals.request_started.asend(sender=self.__class__, scope=scope)
        request, refused = self.create_request(scope, body)
        if request is None:
            assert refused is not None  # Django's contract: one or the other
            body.close()
            await self.send_response(refused, send)
            await self._finish(refused)
            return
        view = asyncio.create_task(self._respond(request, send))
        gone = asyncio.create_task(self.listen_for_disconnect(receive))
        await asyncio.wait((view, gone), return_when=asyncio.FIRST_COMPLETED)
        for task in (gone, view):  # the watcher first: it fails no request
            if not task.done():
                task.cancel()  # a view may handle its cancellation
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            elif not task.cancelled():
                try:
                    task.result()
                except RequestAborted:
                    pass  # the client went away
                except AssertionError:
                    body.close()
                    raise
        if view.cancelled():
            await signals.request_finished.asend(sender=self.__class__)
        else:
            await self._finish(view.result())
        body.close()

    async def _respond(self, request: HttpRequest, send: Any) -> HttpResponseBase:
        response = await self.run_get_response(request)
        with contextlib.suppress(asyncio.CancelledError):  # the client went away
            await self.send_response(response, send)
        return response

    async def _finish(self, response: HttpResponseBase) -> None:
        """Close ``response`` (which sends ``request_finished``), on the request's own
        thread when sync code ran on one, else here."""
        if _request_has_thread() or not _sync_only(signals.request_finished, self.__class__):
            await sync_to_async(response.close)()
        else:
            response.close()


api_asgi_app = ApiHandler()


async def http_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    path = scope.get("path", "")
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    if hot.match(scope):
        await hot.serve(scope, receive, send, api_asgi_app)
        return
    app = api_asgi_app if is_api_path(path) else django_asgi_app
    await app(scope, receive, send)


async def lifespan_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The ASGI lifespan protocol (uvicorn sends it; Daphne does not).

    At shutdown the runs this process executes stop after their current step and are
    handed back (pending, for the next server), as they are when a Daphne process
    exits. uvicorn ends its process with the signal it received, so Python's exit hooks,
    which do that under Daphne, never run there.
    """
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await asyncio.get_running_loop().run_in_executor(None, _hand_back_runs)
            await send({"type": "lifespan.shutdown.complete"})
            return


def _hand_back_runs() -> None:
    from criogen.runner import drain, request_shutdown

    request_shutdown()
    drain()


application = ProtocolTypeRouter(
    {
        "http": http_app,
        "lifespan": lifespan_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
