"""``get_state`` and ``get_history`` as the SDK sends them, answered by api.hot without
Django's request cycle: the same status, headers (in order) and body as the API's
handler, and every request it cannot answer that way left to the handler."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connections
from django.utils import timezone

from api import aio, hot
from criogen import asgi, registry
from criogen.services.tokens import issue_token
from criogen.storage.models import Thread
from tests.api.asgi import Answer, asgi_call, get_state_failing_once

pytestmark = pytest.mark.django_db(transaction=True)


async def _both(
    method: str,
    path: str,
    headers: list[tuple[bytes, bytes]],
    query: bytes = b"",
    body: bytes = b"",
    scheme: str = "http",
    general: Any = None,
) -> tuple[str, Answer, Answer]:
    """Which path answered through the site's application, its answer, and the API
    handler's answer to the same request."""
    before = dict(hot._served)
    answer = await asgi_call(asgi.application, method, path, headers, query, body, scheme)
    which = "hot" if hot._served["hot"] > before["hot"] else "general"
    handler = general or asgi.api_asgi_app
    return which, answer, await asgi_call(handler, method, path, headers, query, body, scheme)


@pytest.fixture(autouse=True)
async def close_pool_connections() -> AsyncIterator[None]:
    """Close the connections the pool's threads opened (on PostgreSQL a connection
    left open keeps the test database from being dropped)."""
    cache.clear()  # the bad-token counts
    yield
    cache.clear()
    size = aio.pool_size()
    all_in = threading.Barrier(size)

    def close() -> None:
        all_in.wait(10)  # one job on every thread of the pool
        connections.close_all()

    await asyncio.gather(*(aio.db(close) for _ in range(size)))


@pytest.fixture
def cast(django_user_model: Any, thread_id: str) -> Iterator[dict[str, Any]]:
    """alice owns the thread ``thread_id`` (a few checkpoints); bob owns nothing; olga
    is staff. Their tokens, and the thread's paths."""
    alice = django_user_model.objects.create_user("alice-hot")
    bob = django_user_model.objects.create_user("bob-hot")
    olga = django_user_model.objects.create_user("olga-hot", is_staff=True)
    Thread.objects.create(id=thread_id, owner=alice, metadata={"owner": "alice-hot"})
    thread = registry.get_graph("steps").thread(thread_id)
    for n in range(3):
        thread.run({"n": n}, durability="sync")
    yield {
        "alice": issue_token(user=alice, name="t")[1],
        "bob": issue_token(user=bob, name="t")[1],
        "olga": issue_token(user=olga, name="t")[1],
        "expired": issue_token(user=alice, name="old", expires_at=timezone.now() - timedelta(1))[1],
        "state": f"/threads/{thread_id}/state",
        "history": f"/threads/{thread_id}/history",
    }


def _headers(token: str | None = None, *extra: tuple[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    headers = [(b"host", b"testserver"), (b"content-type", b"application/json")]
    if token is not None:
        headers.append((b"x-api-key", token.encode()))
    return [*headers, *extra]


async def test_the_sdks_reads_are_answered_hot_and_as_the_handler_answers(
    cast: dict[str, Any],
) -> None:
    alice, olga = cast["alice"], cast["olga"]
    bearer = [(b"host", b"testserver"), (b"authorization", f"Bearer {alice}".encode())]
    cases = [
        ("GET", cast["state"], _headers(alice), b"subgraphs=false", b""),
        ("GET", cast["state"], _headers(alice), b"subgraphs=true", b""),
        ("GET", cast["state"], _headers(alice), b"", b""),
        ("GET", cast["state"], bearer, b"", b""),
        ("GET", cast["state"], _headers(olga), b"subgraphs=false", b""),
        ("POST", cast["history"], _headers(alice), b"", b'{"limit": 10}'),
        ("POST", cast["history"], _headers(alice), b"", b'{"limit": 2}'),
        ("POST", cast["history"], _headers(alice), b"", b"{}"),
        ("POST", cast["history"], _headers(alice), b"", b'{"limit": 3, "before": null}'),
        ("POST", cast["history"], _headers(olga), b"", b'{"limit": 10}'),
    ]
    for method, path, headers, query, body in cases:
        which, answer, general = await _both(method, path, headers, query, body)
        assert which == "hot", (method, path, query, body)
        assert answer[0] == 200, answer
        assert answer == general, (method, path, query, body)


async def test_what_it_cannot_answer_goes_to_the_handler_unchanged(
    cast: dict[str, Any], settings: Any
) -> None:
    alice, bob = cast["alice"], cast["bob"]
    state, history = cast["state"], cast["history"]
    cases = [
        # The caller may not see the thread, or there is none: the handler's 404.
        ("GET", state, _headers(bob), b"subgraphs=false", b"", 404),
        ("GET", "/threads/no-such-thread/state", _headers(alice), b"", b"", 404),
        # Tokens: none, bad, expired, in both headers.
        ("GET", state, _headers(None), b"", b"", 401),
        ("GET", state, _headers("crg_not-a-token"), b"", b"", 401),
        ("GET", state, _headers(cast["expired"]), b"", b"", 401),
        (
            "GET",
            state,
            _headers(alice, (b"authorization", f"Bearer {alice}".encode())),
            b"",
            b"",
            200,
        ),
        # Parameters the endpoint reads or refuses.
        ("GET", state, _headers(alice), b"subgraphs=maybe", b"", 422),
        ("GET", state, _headers(alice), b"select=values", b"", 200),
        ("POST", history, _headers(alice), b"", b'{"limit": 0}', 422),
        ("POST", history, _headers(alice), b"", b'{"limit": true}', 200),  # pydantic: 1
        ("POST", history, _headers(alice), b"", b'{"limit": 10, "nope": 1}', 422),
        ("POST", history, _headers(alice), b"", b'{"limit": 1, "metadata": {"a": 1}}', 200),
        ("POST", history, _headers(alice), b"", b"[1]", 422),
        ("POST", history, _headers(alice), b"", b"{", 422),
        # A CORS request, a host not allowed, a repeated header.
        ("GET", state, _headers(alice, (b"origin", b"https://app.example")), b"", b"", 200),
        ("GET", state, [(b"host", b"evil.example"), (b"x-api-key", alice.encode())], b"", b"", 400),
        ("GET", state, _headers(alice, (b"x-api-key", alice.encode())), b"", b"", 401),
    ]
    for method, path, headers, query, body, status in cases:
        which, answer, general = await _both(method, path, headers, query, body)
        assert which == "general", (method, path, headers, query, body)
        assert answer[0] == status, (answer, method, path, query, body)
        assert answer == general, (method, path, headers, query, body)


async def test_a_bad_token_counts_once_and_a_locked_out_address_gets_the_429(
    cast: dict[str, Any], settings: Any
) -> None:
    from api.auth import _keys

    settings.CRIOGEN_AUTH_FAILURE_LIMIT = 2
    count_key, _ = _keys("127.0.0.1")
    status, _, _ = await asgi_call(asgi.application, "GET", cast["state"], _headers("crg_bad"))
    assert status == 401
    assert cache.get(count_key) == 1
    await asgi_call(asgi.application, "GET", cast["state"], _headers("crg_bad"))
    before = dict(hot._served)
    status, headers, _ = await asgi_call(
        asgi.application, "GET", cast["state"], _headers(cast["alice"])
    )
    assert status == 429
    assert any(name == b"Retry-After" for name, _ in headers)
    assert hot._served["general"] == before["general"] + 1


@pytest.mark.parametrize(
    "overrides",
    [
        {"SECURE_HSTS_SECONDS": 3600, "SECURE_HSTS_PRELOAD": True},
        {"X_FRAME_OPTIONS": "SAMEORIGIN", "SECURE_REFERRER_POLICY": None},
        {"SECURE_CROSS_ORIGIN_OPENER_POLICY": None, "SECURE_CONTENT_TYPE_NOSNIFF": False},
        {"SECURE_SSL_REDIRECT": True},
        {"ALLOWED_HOSTS": ["api.example"]},
        {"CORS_ALLOW_ALL_ORIGINS": False, "CORS_ALLOWED_ORIGINS": ["https://app.example"]},
    ],
    ids=["hsts", "frame-referrer", "no-coop-nosniff", "ssl-redirect", "hosts", "cors-list"],
)
@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_the_headers_follow_the_settings_as_the_middleware_does(
    cast: dict[str, Any],
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    overrides: dict[str, Any],
    scheme: str,
) -> None:
    for name, value in overrides.items():
        setattr(settings, name, value)
    general = asgi.ApiHandler()  # its middleware read the settings above
    monkeypatch.setattr(asgi, "api_asgi_app", general)
    for method, path, query, body in [
        ("GET", cast["state"], b"subgraphs=false", b""),
        ("POST", cast["history"], b"", b'{"limit": 10}'),
        ("POST", "/threads/search", b"", b'{"limit": 1, "offset": 0}'),
    ]:
        _, answer, expected = await _both(
            method, path, _headers(cast["alice"]), query, body, scheme, general
        )
        assert answer == expected, (overrides, scheme, method)
    # A delete's 204: two like threads, one deleted by each path.
    alice = _headers(cast["alice"])
    made = await asgi_call(asgi.application, "POST", "/threads", alice, body=b"{}", scheme=scheme)
    again = await asgi_call(asgi.application, "POST", "/threads", alice, body=b"{}", scheme=scheme)
    if made[0] == 200:  # else (a host not allowed, an SSL redirect) nothing to delete
        mine, theirs = _ids(made, again)
        answer = await asgi_call(
            asgi.application, "DELETE", f"/threads/{mine}", _headers(cast["alice"]), scheme=scheme
        )
        expected = await asgi_call(
            general, "DELETE", f"/threads/{theirs}", _headers(cast["alice"]), scheme=scheme
        )
        assert answer[0] == 204, answer
        assert answer == expected, (overrides, scheme, "DELETE")


async def test_another_middleware_chain_turns_it_off(cast: dict[str, Any], settings: Any) -> None:
    settings.MIDDLEWARE = [
        *settings.MIDDLEWARE,
        "django.middleware.gzip.GZipMiddleware",
    ]
    which, answer, _ = await _both("GET", cast["state"], _headers(cast["alice"]))
    assert which == "general"
    assert answer[0] == 200


async def test_a_failed_read_is_made_again_by_the_handler(
    cast: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = get_state_failing_once(monkeypatch)
    before = dict(hot._served)
    status, _, _ = await asgi_call(asgi.application, "GET", cast["state"], _headers(cast["alice"]))
    assert status == 200
    assert calls["n"] == 2
    assert hot._served["general"] == before["general"] + 1


def test_only_the_hot_requests_match() -> None:
    def scope(method: str, path: str, query: bytes = b"", root: str = "") -> dict[str, Any]:
        return {"method": method, "path": path, "query_string": query, "root_path": root}

    assert hot.match(scope("GET", "/threads/t-1/state", b"subgraphs=false"))
    assert hot.match(scope("POST", "/threads/t-1/history"))
    assert not hot.match(scope("POST", "/threads/t-1/state"))
    assert not hot.match(scope("GET", "/threads/t-1/history"))
    assert not hot.match(scope("GET", "/threads/t-1/state/"))
    assert not hot.match(scope("GET", "/threads/a/b/state"))
    assert not hot.match(scope("GET", "/threads/t%201/state"))
    assert not hot.match(scope("GET", "/threads/t-1/state", b"select=values"))
    assert not hot.match(scope("POST", "/threads/t-1/history", b"x=1"))
    assert not hot.match(scope("GET", "/threads/t-1/state", root="/api"))
    assert hot.match(scope("POST", "/threads"))
    assert not hot.match(scope("POST", "/threads", b"x=1"))
    assert not hot.match(scope("GET", "/threads"))
    assert not hot.match(scope("POST", "/threads/"))
    assert hot.match(scope("POST", "/threads/search"))
    assert not hot.match(scope("POST", "/threads/search", b"limit=1"))
    assert not hot.match(scope("GET", "/threads/search"))
    assert hot.match(scope("DELETE", "/threads/t-1"))
    assert not hot.match(scope("DELETE", "/threads/t-1", b"x=1"))
    assert not hot.match(scope("DELETE", "/threads/t-1/state"))
    assert not hot.match(scope("DELETE", "/threads/t%201"))
    assert not hot.match(scope("DELETE", "/threads"))


# -- creates ---------------------------------------------------------------------------


def _normal(answer: Answer, *ids: str) -> tuple[int, list[tuple[bytes, bytes]], Any]:
    """An answer with its thread id and times made comparable."""
    import json

    status, headers, body = answer
    data = json.loads(body)
    if status == 200:
        for key in ("created_at", "updated_at", "state_updated_at"):
            data[key] = "<time>"
        if data.get("ttl"):
            data["ttl"]["expires_at"] = "<time>"
        if data["thread_id"] in ids:
            data["thread_id"] = "<id>"
    length = [(n, b"<n>" if n == b"Content-Length" else v) for n, v in headers]
    return status, length, data


@pytest.fixture
def creates(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every call of the create service from the API, with its thread id."""
    from api import threads

    seen: list[Any] = []
    create = threads.create_thread

    def counting(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("thread_id"))
        return create(*args, **kwargs)

    monkeypatch.setattr(threads, "create_thread", counting)
    return seen


async def test_a_create_is_answered_hot_and_as_the_handler_answers(
    cast: dict[str, Any], creates: list[Any]
) -> None:
    from criogen.storage.models import AuditEvent

    alice = cast["alice"]
    bearer = [(b"host", b"testserver"), (b"authorization", f"Bearer {alice}".encode())]
    bearer.append((b"content-type", b"application/json"))
    cases = [
        (_headers(alice), b"{}"),
        (bearer, b"{}"),
        (_headers(alice), b'{"metadata": {"graph_id": "steps", "k": [1, "x"]}}'),
        (_headers(alice), b'{"ttl": 5}'),
        (_headers(alice), b'{"ttl": {"ttl": 3, "strategy": "keep_latest"}, "if_exists": null}'),
        (_headers(cast["olga"]), b'{"thread_id": "ID", "if_exists": "raise"}'),
    ]
    for n, (headers, body) in enumerate(cases):
        mine, theirs = f"hot-{n:04}-a", f"hot-{n:04}-b"
        creates.clear()
        before = dict(hot._served)
        answer = await asgi_call(
            asgi.application, "POST", "/threads", headers, body=body.replace(b"ID", mine.encode())
        )
        assert hot._served["hot"] == before["hot"] + 1, (body, answer)
        general = await asgi_call(
            asgi.api_asgi_app,
            "POST",
            "/threads",
            headers,
            body=body.replace(b"ID", theirs.encode()),
        )
        assert answer[0] == 200, answer
        assert len(creates) == 2, body
        made = [(await aio.db(_audit, tid)) for tid in _ids(answer, general)]
        assert made[0] == made[1], body
        assert _normal(answer, mine, *_ids(answer)) == _normal(general, theirs, *_ids(general))
    assert await aio.db(AuditEvent.objects.filter(action="create").count) >= 12


def _ids(*answers: Answer) -> list[str]:
    import json

    return [json.loads(a[2])["thread_id"] for a in answers]


def _audit(thread_id: str) -> tuple[Any, ...]:
    from criogen.storage.models import AuditEvent

    (event,) = AuditEvent.objects.filter(thread_id=thread_id, action="create")
    return (event.actor, event.door, event.details.replace(thread_id, "<id>"))


async def test_a_refused_create_is_the_handlers_error_made_once(
    cast: dict[str, Any], creates: list[Any], thread_id: str
) -> None:
    alice = cast["alice"]
    cases = [
        # Refused by the service in the hot job: the handler raises that very error.
        (f'{{"thread_id": "{thread_id}"}}'.encode(), 409, 1),
        (b'{"metadata": {"owner": "mallory"}}', 422, 1),
        (b'{"thread_id": "   "}', 422, 1),
        (b'{"ttl": 2.5}', 422, 1),
        # Refused before anything is called: the handler's own 422.
        (b'{"if_exists": "replace"}', 422, 0),
        (b'{"nope": 1}', 422, 0),
        (b'{"ttl": NaN}', 422, 0),
        (b"[]", 422, 0),
    ]
    for body, status, calls in cases:
        creates.clear()
        before = dict(hot._served)
        answer = await asgi_call(asgi.application, "POST", "/threads", _headers(alice), body=body)
        assert hot._served["general"] == before["general"] + 1, body
        assert answer[0] == status, (answer, body)
        assert len(creates) == calls, (body, creates)
        creates.clear()
        general = await asgi_call(asgi.api_asgi_app, "POST", "/threads", _headers(alice), body=body)
        assert answer == general, body
    # With supersteps, the handler makes the create.
    creates.clear()
    body = b'{"metadata": {"graph_id": "steps"}, "supersteps": []}'
    answer = await asgi_call(asgi.application, "POST", "/threads", _headers(alice), body=body)
    assert answer[0] == 200
    assert len(creates) == 1


async def test_a_create_whose_answer_fails_is_answered_by_the_handler_not_made_again(
    cast: dict[str, Any], creates: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the answer could not be written")

    monkeypatch.setattr(hot, "thread_dump", broken)
    status, _, body = await asgi_call(
        asgi.application, "POST", "/threads", _headers(cast["alice"]), body=b"{}"
    )
    assert status == 200
    assert len(creates) == 1
    (made,) = _ids((status, [], body))
    assert await aio.db(Thread.objects.filter(pk=made).exists)


async def test_a_check_that_fails_leaves_the_request_to_the_handler(
    cast: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any) -> bool:
        raise ValueError("an unusual setting")

    monkeypatch.setattr(hot, "_host_allowed", broken)
    which, answer, general = await _both("GET", cast["state"], _headers(cast["alice"]))
    assert which == "general"
    assert answer[0] == 200
    assert answer == general


async def test_a_throttle_on_an_endpoint_turns_it_off(
    cast: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.urls import resolve

    assert hot._endpoints_plain()
    view = resolve(cast["state"]).func
    path_view = next(
        c.cell_contents for c in view.__closure__ if hasattr(c.cell_contents, "operations")
    )
    (operation,) = [op for op in path_view.operations if "GET" in op.methods]
    monkeypatch.setattr(operation, "throttle_objects", [object()])
    monkeypatch.setattr(hot, "_chain_ok", None)  # the site is checked again
    assert not hot._endpoints_plain()
    # Every hot request goes the general way (here a create, whose endpoint has none).
    which, answer, _ = await _both("POST", "/threads", _headers(cast["alice"]), body=b"{}")
    assert which == "general"
    assert answer[0] == 200


# -- searches ----------------------------------------------------------------------------


@pytest.fixture
def seeded(cast: dict[str, Any], django_user_model: Any) -> dict[str, Any]:
    """alice also owns 30 threads without checkpoints, half of them marked, one busy."""
    from criogen.services.assistants import resolve_assistant
    from criogen.storage.models import Run

    alice = django_user_model.objects.get(username="alice-hot")
    for n in range(30):
        Thread.objects.create(
            id=f"s-{n:03}", owner=alice, metadata={"mark": "m" if n % 2 else "o", "n": n}
        )
    Run.objects.create(
        thread_id="s-007",
        assistant=resolve_assistant(assistant_id="steps"),
        graph_id="steps",
        status="running",
        input={},
    )
    return cast


async def test_the_sdks_searches_are_answered_hot_and_as_the_handler_answers(
    seeded: dict[str, Any], thread_id: str
) -> None:
    import json

    alice = seeded["alice"]
    bodies: list[dict[str, Any]] = [
        # bench/_sdk_workload.py's SEARCH_SHAPES, as threads.search(...) sends them.
        {"limit": 20, "offset": 0},
        {"limit": 20, "offset": 0, "metadata": {"mark": "m"}},
        {"limit": 20, "offset": 0, "status": "idle"},
        {"limit": 20, "offset": 0, "metadata": {"mark": "m"}, "status": "idle"},
        {"limit": 20, "offset": 5},
        # The last page, past it, other sorts, select, extract, ids, values, statuses.
        {"limit": 20, "offset": 20},
        {"limit": 20, "offset": 100},
        {"limit": 5, "offset": 3, "sort_by": "created_at", "sort_order": "asc"},
        {"limit": 7, "offset": 0, "sort_by": "thread_id", "sort_order": "desc"},
        {"limit": 10, "offset": 0, "sort_by": "updated_at"},
        {"limit": 10, "offset": 0, "select": ["thread_id", "status"]},
        {"limit": 10, "offset": 0, "select": ["metadata", "values"], "sort_by": "thread_id"},
        {"limit": 10, "offset": 0, "extract": {"n": "values.n", "mark": "metadata.mark"}},
        {"limit": 10, "offset": 0, "ids": [thread_id, "s-003", "nope"]},
        {"limit": 10, "offset": 0, "values": {"n": 2}},
        {"limit": 10, "offset": 0, "status": "busy"},
        {"limit": 10, "offset": 0, "metadata": {"mark": "none"}},
        {},
        {"limit": None, "offset": 0, "metadata": None, "status": None},
    ]
    for token in (alice, seeded["olga"], seeded["bob"]):
        for body in bodies:
            raw = json.dumps(body).encode()
            which, answer, general = await _both(
                "POST", "/threads/search", _headers(token), b"", raw
            )
            assert which == "hot", body
            assert answer[0] == 200, (answer, body)
            assert answer == general, body
    # The headers as the endpoint sets them: while more follow, the next offset and one
    # more as the total; on the last page, the total and no next offset.
    _, (_, headers, _), _ = await _both(
        "POST", "/threads/search", _headers(alice), b"", b'{"limit": 20, "offset": 0}'
    )
    names = dict(headers)
    assert (names[b"X-Pagination-Total"], names[b"X-Pagination-Next"]) == (b"21", b"20")
    _, (_, headers, _), _ = await _both(
        "POST", "/threads/search", _headers(alice), b"", b'{"limit": 20, "offset": 20}'
    )
    assert b"X-Pagination-Next" not in dict(headers)
    assert dict(headers)[b"X-Pagination-Total"] == b"31"


async def test_a_search_the_endpoint_refuses_goes_to_the_handler(seeded: dict[str, Any]) -> None:
    alice = seeded["alice"]
    eleven = {f"k{n}": "values.n" for n in range(11)}
    import json

    cases = [
        (b'{"limit": 10, "select": ["nope"]}', 422),  # refused by the search's own code
        (b'{"limit": 10, "extract": {"a": ""}}', 422),
        (json.dumps({"limit": 10, "extract": eleven}).encode(), 422),
        (b'{"limit": 0}', 422),
        (b'{"limit": 10, "offset": -1}', 422),
        (b'{"status": "sleepy"}', 422),
        (b'{"nope": 1}', 422),
        (b'{"limit": NaN}', 422),
        (b"[]", 422),
        (b"{", 422),
    ]
    for body, status in cases:
        which, answer, general = await _both("POST", "/threads/search", _headers(alice), b"", body)
        assert which == "general", body
        assert answer[0] == status, (answer, body)
        assert answer == general, body
    which, answer, general = await _both(
        "POST", "/threads/search", _headers(alice), b"limit=3", b"{}"
    )
    assert which == "general"
    assert answer == general


# -- deletes -----------------------------------------------------------------------------


@pytest.fixture
def deletes(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every call of the delete service from the API, with its thread id."""
    from api import threads

    seen: list[Any] = []
    delete = threads.delete_thread

    def counting(who: Any, thread_id: str) -> Any:
        seen.append(thread_id)
        return delete(who, thread_id)

    monkeypatch.setattr(threads, "delete_thread", counting)
    return seen


def _deleted(thread_id: str) -> tuple[bool, list[Any]]:
    from criogen.storage.models import AuditEvent

    events = AuditEvent.objects.filter(thread_id=thread_id, action="delete")
    return (
        Thread.objects.filter(pk=thread_id).exists(),
        [(e.actor, e.door, e.details) for e in events],
    )


async def test_a_delete_is_answered_hot_and_as_the_handler_answers(
    seeded: dict[str, Any], deletes: list[Any], thread_id: str
) -> None:
    alice, olga = seeded["alice"], seeded["olga"]
    bearer = [(b"host", b"testserver"), (b"authorization", f"Bearer {alice}".encode())]
    # Pairs of like threads: the first deleted hot, the second by the handler; s-007 and
    # s-008 (busy: a run in progress, cancelled by the delete) and the one with checkpoints.
    cases = [
        (_headers(alice), "s-001", "s-003"),
        (bearer, "s-002", "s-004"),
        (_headers(olga), "s-005", "s-006"),
        (_headers(alice), "s-007", "s-009"),
        (_headers(alice), thread_id, "s-010"),
    ]
    for headers, mine, theirs in cases:
        deletes.clear()
        before = dict(hot._served)
        answer = await asgi_call(asgi.application, "DELETE", f"/threads/{mine}", headers)
        assert hot._served["hot"] == before["hot"] + 1, mine
        general = await asgi_call(asgi.api_asgi_app, "DELETE", f"/threads/{theirs}", headers)
        assert answer[0] == 204, answer
        assert answer == general, mine
        assert deletes == [mine, theirs]
        gone_mine, events_mine = await aio.db(_deleted, mine)
        gone_theirs, events_theirs = await aio.db(_deleted, theirs)
        assert not gone_mine and not gone_theirs
        assert len(events_mine) == len(events_theirs) == 1
        assert events_mine[0][:2] == events_theirs[0][:2]


async def test_a_refused_delete_is_the_handlers_error_made_once(
    seeded: dict[str, Any], deletes: list[Any]
) -> None:
    alice, bob = seeded["alice"], seeded["bob"]
    cases = [
        # Made in the hot job and refused: the handler raises that very error.
        (_headers(bob), "/threads/s-011", 404, 1),
        (_headers(alice), "/threads/no-such-thread", 404, 1),
        # Not a delete answered here: the handler's own answer, nothing made before it.
        (_headers("crg_not-a-token"), "/threads/s-012", 401, 0),
        (_headers(None), "/threads/s-012", 401, 0),
        (_headers(alice), "/threads/search", 405, 0),
        (_headers(alice), "/threads/count", 405, 0),
    ]
    for headers, path, status, calls in cases:
        deletes.clear()
        before = dict(hot._served)
        answer = await asgi_call(asgi.application, "DELETE", path, headers)
        assert hot._served["general"] == before["general"] + 1, path
        assert answer[0] == status, (answer, path)
        assert len(deletes) == calls, (path, deletes)
        deletes.clear()
        general = await asgi_call(asgi.api_asgi_app, "DELETE", path, headers)
        assert answer == general, path
    assert (await aio.db(_deleted, "s-011"))[0]
    assert (await aio.db(_deleted, "s-012"))[0]
    # A query: the handler's, which deletes once (in its token check's job).
    deletes.clear()
    which, answer, _ = await _both("DELETE", "/threads/s-013", _headers(alice), b"x=1")
    assert which == "general"
    assert answer[0] == 204
    assert deletes == ["s-013", "s-013"]  # the hot request's, then _both's second one
