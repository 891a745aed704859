"""Webhooks over the API, on SQLite and PostgreSQL: a malformed URL is a 422, loopback
is refused by default, a slow listener costs other users nothing, failures are retried
and every attempt is recorded (docs/security.md, "Outbound calls").

The server allows 127.0.0.2 only (``CRIOGEN_OUTBOUND_ALLOW``): the listeners that must
receive something are there; 127.0.0.1, ::1 and ``localhost`` stay refused.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk.errors import UnprocessableEntityError

from tests.api.conftest import Server, start_server, stop_server
from tests.listeners import Listener, Trickle

DEADLINE = 2.0


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def hook_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """An API server whose webhooks may reach 127.0.0.2, with a 2 s deadline per
    attempt, 3 attempts and a 0.2 s first backoff."""
    tmp = tmp_path_factory.mktemp(f"hooks-{request.param}")
    if request.param == "postgres":
        database_url = str(request.getfixturevalue("postgres_url"))
    else:
        database_url = f"sqlite://{tmp / 'hooks.db'}"
    srv = start_server(
        database_url,
        tmp,
        CRIOGEN_OUTBOUND_ALLOW="127.0.0.2",
        CRIOGEN_OUTBOUND_DEADLINE_SECONDS=str(DEADLINE),
        CRIOGEN_OUTBOUND_ATTEMPTS="3",
        CRIOGEN_OUTBOUND_BACKOFF_SECONDS="0.2",
    )
    yield srv
    stop_server(srv)


@pytest.fixture
async def sdk(hook_server: Server) -> AsyncIterator[Callable[[str], Any]]:
    made: dict[str, Any] = {}

    def make(who: str) -> Any:
        if who not in made:
            made[who] = hook_server.client(who)
        return made[who]

    yield make
    for c in made.values():
        await c.aclose()


def attempts(server: Server, run_id: str) -> list[dict[str, Any]]:
    """The recorded attempts of the run's webhook, read from the server's database."""
    query = (
        "SELECT kind, outcome, attempt, status_code, error, duration_ms, target "
        "FROM criogen_outbound_attempt WHERE run_id = {} ORDER BY attempt"
    )
    names = ("kind", "outcome", "attempt", "status_code", "error", "duration_ms", "target")
    url = server.database_url
    if url.startswith("sqlite://"):
        with sqlite3.connect(Path(url.removeprefix("sqlite://"))) as conn:
            rows = conn.execute(query.format("?"), (run_id,)).fetchall()
    else:
        import psycopg

        with psycopg.connect(url) as conn:
            rows = conn.execute(query.format("%s"), (run_id,)).fetchall()
    return [dict(zip(names, row, strict=True)) for row in rows]


async def recorded(
    server: Server, run_id: str, count: int, timeout: float = 60
) -> list[dict[str, Any]]:
    """Wait until the run's webhook has ``count`` recorded attempts."""
    deadline = time.monotonic() + timeout
    while True:
        rows = await asyncio.to_thread(attempts, server, run_id)
        if len(rows) >= count:
            return rows
        assert time.monotonic() < deadline, f"{len(rows)} of {count} attempts after {timeout} s"
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("url", ["http://[::1", "ftp://example.com/hook", "http://", "hooks"])
async def test_a_malformed_webhook_is_a_422_for_runs(sdk: Any, url: str) -> None:
    client = sdk("alice")
    thread = await client.threads.create()

    for create in (
        lambda: client.runs.create(thread["thread_id"], "steps", input={}, webhook=url),
        lambda: client.runs.wait(None, "steps", input={}, webhook=url),
    ):
        # runs.wait raises httpx's own error, the other calls the SDK's (a subclass).
        with pytest.raises(httpx.HTTPStatusError) as caught:
            await create()
        assert caught.value.response.status_code == 422
        assert caught.value.response.json()["field"] == "webhook"
    assert await client.runs.list(thread["thread_id"]) == []


@pytest.mark.parametrize("url", ["http://[::1", "ftp://example.com/hook", "http://"])
async def test_a_malformed_webhook_is_a_422_for_crons(sdk: Any, url: str) -> None:
    client = sdk("alice")
    thread = await client.threads.create()

    for create in (
        lambda: client.crons.create("steps", schedule="0 9 * * *", webhook=url),
        lambda: client.crons.create_for_thread(
            thread["thread_id"], "steps", schedule="0 9 * * *", webhook=url
        ),
    ):
        with pytest.raises(UnprocessableEntityError) as caught:
            await create()
        assert caught.value.body["field"] == "webhook"
    cron = await client.crons.create("steps", schedule="0 9 * * *", webhook="https://a.example/h")
    with pytest.raises(UnprocessableEntityError) as caught:
        await client.crons.update(cron["cron_id"], webhook=url)
    assert caught.value.body["field"] == "webhook"
    await client.crons.delete(cron["cron_id"])


async def test_webhooks_to_loopback_are_refused_by_default_and_recorded(
    sdk: Any, hook_server: Server
) -> None:
    client = sdk("alice")
    v4, v6 = Listener("127.0.0.1"), Listener("::1")
    try:
        urls = [
            f"http://127.0.0.1:{v4.port}/hook",
            f"http://[::1]:{v6.port}/hook",
            f"http://localhost:{v4.port}/hook",
        ]
        runs = []
        for url in urls:
            thread = await client.threads.create()
            run = await client.runs.create(thread["thread_id"], "steps", input={}, webhook=url)
            await client.runs.join(thread["thread_id"], run["run_id"])
            runs.append(run)
        rows = [(await recorded(hook_server, run["run_id"], 1)) for run in runs]
    finally:
        v4.close()
        v6.close()

    # A refusal is recorded once and never retried: nothing reached the listeners.
    assert v4.received == [] and v6.received == []
    for url, (row,) in zip(urls, rows, strict=True):
        assert (row["kind"], row["outcome"], row["attempt"], row["target"]) == (
            "run",
            "refused",
            1,
            url,
        )
        assert "loopback" in row["error"]


async def test_a_failing_webhook_is_retried_with_backoff_and_delivered(
    sdk: Any, hook_server: Server
) -> None:
    client = sdk("alice")
    hook = Listener("127.0.0.2", statuses=[503])
    try:
        thread = await client.threads.create()
        url = f"http://127.0.0.2:{hook.port}/hook?token=s3cret"
        run = await client.runs.create(thread["thread_id"], "steps", input={"n": 1}, webhook=url)
        rows = await recorded(hook_server, run["run_id"], 2)
    finally:
        hook.close()

    assert [(r["attempt"], r["outcome"], r["status_code"]) for r in rows] == [
        (1, "failed", 503),
        (2, "delivered", 204),
    ]
    assert rows[0]["target"] == f"http://127.0.0.2:{hook.port}/hook"  # the query may be secret
    assert hook.times[1] - hook.times[0] >= 0.2
    posted = hook.received[-1]["body"]
    assert (posted["run_id"], posted["status"], posted["values"]) == (
        run["run_id"],
        "success",
        {"n": 4, "steps": ["a", "b", "c"]},
    )


async def test_a_slow_webhook_does_not_delay_another_users_run(
    sdk: Any, hook_server: Server
) -> None:
    alice, bob = sdk("alice"), sdk("bob")
    bobs = await bob.threads.create()

    async def bobs_run() -> float:
        started = time.monotonic()
        result = await bob.runs.wait(bobs["thread_id"], "steps", input={})
        assert result["steps"][-3:] == ["a", "b", "c"]
        return time.monotonic() - started

    baseline = max([await bobs_run() for _ in range(3)])
    # Each byte comes well within any per-read timeout; only a total deadline stops it.
    slow = Trickle("127.0.0.2", every=0.5)
    try:
        runs = []
        for _ in range(6):  # more webhooks than the server has runner threads (4)
            thread = await alice.threads.create()
            url = f"http://127.0.0.2:{slow.port}/hook"
            run = await alice.runs.create(thread["thread_id"], "steps", input={}, webhook=url)
            runs.append((thread["thread_id"], run["run_id"]))
        for tid, rid in runs:
            await alice.runs.join(tid, rid)
        # Until the first attempt is cut, every webhook is held by the listener.
        deadline = time.monotonic() + 30
        while slow.accepted == 0:
            assert time.monotonic() < deadline, "no webhook reached the listener"
            await asyncio.sleep(0.05)
        took = await bobs_run()
        held = slow.open
        rows = [await recorded(hook_server, rid, 3, timeout=120) for _, rid in runs]
    finally:
        slow.close()

    print(f"\nbob's run: {took:.2f} s with slow webhooks held, {baseline:.2f} s before")
    assert held > 0, "the slow webhooks had ended before bob's run: the test proves nothing"
    assert took <= baseline + 1.0, (took, baseline)
    for attempts_of_run in rows:
        assert [(r["attempt"], r["outcome"]) for r in attempts_of_run] == [
            (1, "failed"),
            (2, "failed"),
            (3, "failed"),
        ]
        for row in attempts_of_run:
            assert f"deadline of {DEADLINE:g} s passed" in row["error"]
            assert DEADLINE * 1000 - 100 <= row["duration_ms"] <= DEADLINE * 1000 + 600, row
