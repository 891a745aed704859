"""A hot read made in the token check's thread hop (api.aio.plan_ahead): the same
answers and errors as the endpoint's own job, in one hop instead of two. The same for
``DELETE /threads/{id}``, the one write made ahead.

The requests go to the API's handler itself: through the site's application, the
SDK's ``get_state`` and ``get_history`` are answered by api.hot (tests/api/test_hot_reads.py)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from django.db import connections

from api import aio
from criogen.asgi import api_asgi_app
from criogen.services.tokens import issue_token
from criogen.storage.models import AuditEvent, Thread
from tests.api.asgi import asgi_call, get_state_failing_once

pytestmark = pytest.mark.django_db(transaction=True)


async def _call(
    method: str, path: str, token: str | None, query: str = "", body: bytes = b""
) -> tuple[int, Any]:
    headers = [(b"host", b"testserver"), (b"content-type", b"application/json")]
    if token:
        headers.append((b"x-api-key", token.encode()))
    status, _, body = await asgi_call(api_asgi_app, method, path, headers, query.encode(), body)
    return status, json.loads(body) if body else None


@pytest.fixture(autouse=True)
async def close_pool_connections() -> AsyncIterator[None]:
    """Close the connections the pool's threads opened (on PostgreSQL a connection
    left open keeps the test database from being dropped)."""
    yield
    size = aio.pool_size()
    all_in = threading.Barrier(size)

    def close() -> None:
        all_in.wait(10)  # one job on every thread of the pool
        connections.close_all()

    await asyncio.gather(*(aio.db(close) for _ in range(size)))


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The name of every job run on the API's pool."""
    seen: list[str] = []
    job = aio._job

    def counting(fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        seen.append(getattr(fn, "__name__", repr(fn)))
        return job(fn, args, kwargs)

    monkeypatch.setattr(aio, "_job", counting)
    yield seen


@pytest.fixture
def alice_bob(django_user_model: Any, thread_id: str) -> dict[str, str]:
    """alice owns the thread ``thread_id``; bob owns nothing; their tokens."""
    alice = django_user_model.objects.create_user("alice-ahead")
    bob = django_user_model.objects.create_user("bob-ahead")
    Thread.objects.create(id=thread_id, owner=alice, metadata={"owner": "alice-ahead"})
    return {
        "alice": issue_token(user=alice, name="t")[1],
        "bob": issue_token(user=bob, name="t")[1],
    }


async def test_a_read_as_the_sdk_asks_it_is_one_hop_and_the_same_answer(
    alice_bob: dict[str, str], thread_id: str, jobs: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = alice_bob["alice"]
    base = f"/threads/{thread_id}"
    cases = [
        ("GET", f"{base}/state", "subgraphs=false", b""),
        ("POST", f"{base}/history", "", b'{"limit": 10}'),
        ("GET", f"{base}/history", "limit=10", b""),
        ("GET", base, "", b""),
    ]
    answers = []
    for method, path, query, body in cases:
        jobs.clear()
        answers.append(await _call(method, path, alice, query, body))
        assert answers[-1][0] == 200, answers[-1]
        assert jobs == ["_authenticate"], (method, path, jobs)
    monkeypatch.setattr(aio, "_plans", {})  # every endpoint makes its own hop
    for (method, path, query, body), answer in zip(cases, answers, strict=True):
        jobs.clear()
        again = await _call(method, path, alice, query, body)
        assert len(jobs) == 2, (method, path, jobs)
        assert again == answer, (method, path)


async def test_errors_of_a_planned_read_are_the_endpoints(
    alice_bob: dict[str, str], thread_id: str, jobs: list[str]
) -> None:
    bob, alice = alice_bob["bob"], alice_bob["alice"]
    status, body = await _call("GET", f"/threads/{thread_id}/state", bob)
    assert status == 404
    assert body["detail"] == f"thread {thread_id!r} not found."
    status, body = await _call("POST", f"/threads/{thread_id}/history", alice, "", b'{"limit": 0}')
    assert status == 422
    assert "limit" in json.dumps(body)
    # Parameters django-ninja refuses: its 422, though the read was made.
    status, body = await _call("GET", f"/threads/{thread_id}/state", alice, "subgraphs=maybe")
    assert status == 422
    # A bad token is a 401 before anything is read.
    jobs.clear()
    status, _ = await _call("GET", f"/threads/{thread_id}/state", "not-a-token")
    assert status == 401


async def test_a_failed_plan_leaves_the_read_to_the_endpoint(
    alice_bob: dict[str, str], thread_id: str, jobs: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = get_state_failing_once(monkeypatch)
    status, body = await _call("GET", f"/threads/{thread_id}/state", alice_bob["alice"])
    assert status == 200 and body["values"] == {}
    assert calls["n"] == 2
    assert len(jobs) == 2


def _thread_and_deletes(thread_id: str) -> tuple[bool, int]:
    """Whether the thread is there; how many ``delete`` events it has."""
    return (
        Thread.objects.filter(pk=thread_id).exists(),
        AuditEvent.objects.filter(thread_id=thread_id, action="delete").count(),
    )


@pytest.fixture
def second_thread(alice_bob: dict[str, str], thread_id: str) -> str:
    """Another thread of alice's."""
    second = f"{thread_id}-2"
    Thread.objects.create(id=second, owner=Thread.objects.get(pk=thread_id).owner, metadata={})
    return second


async def test_a_delete_is_one_hop_with_the_answers_of_the_endpoints_own_job(
    alice_bob: dict[str, str],
    second_thread: str,
    thread_id: str,
    jobs: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    alice, bob = alice_bob["alice"], alice_bob["bob"]

    async def answers(tid: str) -> list[tuple[int, Any, tuple[bool, int], int]]:
        seen = []
        for token in (bob, alice, alice):  # another user's, the owner's, then gone
            jobs.clear()
            status, body = await _call("DELETE", f"/threads/{tid}", token)
            hops = len(jobs)
            seen.append((status, body, await aio.db(_thread_and_deletes, tid), hops))
        return seen

    ahead = await answers(thread_id)
    missing = {"detail": f"thread {thread_id!r} not found."}
    assert [(status, body, state) for status, body, state, _ in ahead] == [
        (404, {**ahead[0][1], **missing}, (True, 0)),
        (204, None, (False, 1)),
        (404, {**ahead[2][1], **missing}, (False, 1)),
    ]
    assert [hops for *_, hops in ahead] == [1, 1, 1]

    monkeypatch.setattr(aio, "_plans", {})  # the endpoint makes its own hop
    own = await answers(second_thread)
    assert [hops for *_, hops in own] == [2, 2, 2]
    same = [
        (status, json.loads(json.dumps(body).replace(second_thread, thread_id)), state)
        for status, body, state, _ in own
    ]
    assert same == [(status, body, state) for status, body, state, _ in ahead]
