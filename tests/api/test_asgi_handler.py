"""The API's ASGI handler (criogen.asgi.ApiHandler) keeps Django's request cycle: both
request signals once per request, request_finished on the thread a sync view ran on,
a client that goes away cancels the view; and an async endpoint starts no thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.core import signals

from api import aio
from criogen.asgi import application


def _scope(path: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 40000),
        "server": ("testserver", 80),
    }


async def _call(path: str) -> tuple[int, bytes]:
    """One GET through the whole ASGI application; the client stays connected."""
    request = [{"type": "http.request", "body": b"", "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if request:
            return request.pop()
        await asyncio.Event().wait()  # never disconnects
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await application(_scope(path), receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


@pytest.fixture
def heard() -> Iterator[list[tuple[str, str]]]:
    """(signal, thread name) of every request_started / request_finished."""
    seen: list[tuple[str, str]] = []

    def started(**_: Any) -> None:
        seen.append(("started", threading.current_thread().name))

    def finished(**_: Any) -> None:
        seen.append(("finished", threading.current_thread().name))

    signals.request_started.connect(started, weak=False)
    signals.request_finished.connect(finished, weak=False)
    yield seen
    signals.request_started.disconnect(started)
    signals.request_finished.disconnect(finished)


async def _fill_the_pool() -> None:
    """Start every thread of the API's database pool. The pool starts its threads
    lazily, and a second one whenever a job arrives before the thread that finished the
    last has marked itself idle: a bounded pool, started once, not a thread per
    request; so the count below starts from a full pool."""
    size = aio.pool_size()
    all_in = threading.Barrier(size)
    await asyncio.gather(*(aio.db(all_in.wait, 10) for _ in range(size)))


@pytest.mark.django_db(transaction=True)
async def test_an_async_endpoint_starts_no_thread_and_sends_both_signals(
    heard: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    await _call("/ok")  # warm-up: imports, URL resolver
    await _fill_the_pool()
    heard.clear()
    starts: list[str] = []
    start = threading.Thread.start

    def counting_start(self: threading.Thread) -> None:
        starts.append(self.name)
        start(self)

    monkeypatch.setattr(threading.Thread, "start", counting_start)
    for _ in range(3):
        assert await _call("/ok") == (200, b'{"ok":true}')
    assert starts == []
    loop_thread = threading.current_thread().name
    assert heard == [("started", loop_thread), ("finished", loop_thread)] * 3


@pytest.mark.django_db(transaction=True)
async def test_a_sync_endpoint_gets_request_finished_on_its_own_thread(
    heard: list[tuple[str, str]],
) -> None:
    status, body = await _call("/info")
    assert status == 200 and b'"criogen"' in body
    assert [name for name, _ in heard] == ["started", "finished"]
    loop_thread = threading.current_thread().name
    # Where the view's database connection lives, so close_old_connections sees it.
    assert heard[1][1] != loop_thread


async def test_a_client_that_goes_away_cancels_the_view(
    heard: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from criogen.asgi import api_asgi_app

    cancelled = asyncio.Event()

    async def slow_response(request: Any) -> Any:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("never answered")

    monkeypatch.setattr(api_asgi_app, "get_response_async", slow_response)
    messages = [
        {"type": "http.request", "body": b"", "more_body": False},
        {"type": "http.disconnect"},
    ]

    async def receive() -> dict[str, Any]:
        if len(messages) == 1:
            await asyncio.sleep(0.05)  # the view is running when the client leaves
        return messages.pop(0)

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await asyncio.wait_for(application(_scope("/ok"), receive, send), 5)
    assert cancelled.is_set()
    assert sent == []
    assert [name for name, _ in heard] == ["started", "finished"]


def _sample_paths() -> list[str]:
    """A path for every route of the API's urlconf (each converter given ``x1``), and
    near misses: a route's segment with a suffix, a trailing slash, unknown segments."""
    from django.urls import URLResolver, get_resolver

    found: list[str] = []

    def walk(patterns: Any, prefix: str) -> None:
        for pattern in patterns:
            route = str(pattern.pattern)
            while "<" in route:
                head, _, rest = route.partition("<")
                route = head + "x1" + rest.partition(">")[2]
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, prefix + route)
            else:
                found.append("/" + prefix + route)

    walk(get_resolver().url_patterns, "")
    extra = ["/threadsx", "/threads/", "/threads/x1/", "/okay", "/ok/", "/nope/x", "/", "//"]
    return found + [p + "z" for p in found] + extra


def test_api_paths_resolve_as_django_resolves_them() -> None:
    """criogen.asgi resolves the API's paths on a copy of the urlconf per first
    segment: the same view, arguments, names and route as Django's whole urlconf, and
    no match (so Django's own 404) where Django finds none."""
    from django.urls import Resolver404, get_resolver

    from criogen.asgi import _api_routes

    routes = _api_routes()
    assert {"threads", "runs", "assistants", "store", "ok", "info"} <= set(routes.by_segment)
    root = get_resolver()
    for path in _sample_paths():
        try:
            whole = root.resolve(path)
        except Resolver404:
            whole = None
        resolver = routes.resolver(path)
        try:
            narrowed = resolver.resolve(path) if resolver is not None else None
        except Resolver404:
            narrowed = None
        if whole is None:
            assert narrowed is None, path
            continue
        if narrowed is None:
            assert resolver is None, path  # a segment no route names: the whole urlconf
            continue
        fields = ("func", "args", "kwargs", "url_name", "app_names", "namespaces", "route")
        fields += ("captured_kwargs", "extra_kwargs", "view_name", "_func_path")
        assert [getattr(narrowed, f) for f in fields] == [getattr(whole, f) for f in fields]


@pytest.mark.django_db(transaction=True)
async def test_an_unknown_api_path_is_django_s_404() -> None:
    status, _ = await _call("/threads/x1/nothing-here")
    assert status == 404
