"""Search pages are exact whatever the path the database takes to them: threads that
share ``created_at`` (written in one transaction) come in id order, in the direction
asked; pages do not overlap or skip; and on PostgreSQL a metadata value most threads
carry (read from a window of the newest threads) or few carry (read from the metadata
index) gives what filtering every thread would."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.api.conftest import Server

COUNT = 90


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def api_server(request: pytest.FixtureRequest) -> Server:
    return request.getfixturevalue("server" if request.param == "sqlite" else "pg_server")


@pytest.fixture
async def sdk(api_server: Server) -> AsyncIterator[Any]:
    client = api_server.client("alice")
    yield client
    await client.aclose()


def _sql(server: Server, sql: str, params: Any = (), *, many: bool = False) -> Any:
    """Run ``sql`` on the server's database (``%s`` placeholders) and commit."""
    url = server.database_url
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite://"), timeout=60) as db:
            sql = sql.replace("%s", "?")
            return db.executemany(sql, params) if many else db.execute(sql, params).fetchall()
    import psycopg

    with psycopg.connect(url.replace("postgres://", "postgresql://", 1)) as db:
        if many:
            with db.cursor() as cur:
                cur.executemany(sql, params)
            return None
        cur = db.execute(sql, params)
        return cur.fetchall() if cur.description is not None else None


def _insert(server: Server, rows: list[dict[str, Any]]) -> None:
    """``rows`` as alice's threads, in one transaction, straight into the database."""
    ((owner,),) = _sql(server, "SELECT id FROM auth_user WHERE username = 'alice'")
    sqlite = server.database_url.startswith("sqlite")

    def stamp(when: datetime) -> Any:  # SQLite keeps Django's text form of the time
        return when.strftime("%Y-%m-%d %H:%M:%S.%f") if sqlite else when

    _sql(
        server,
        "INSERT INTO criogen_thread (id, created_at, updated_at, metadata, owner_id,"
        " head_version, head_id, head_status, lease_id, lease_expires, ttl_strategy)"
        " VALUES (%s, %s, %s, %s, %s, 0, '', %s, NULL, 0, 'delete')",
        [
            (
                r["id"],
                stamp(r["created_at"]),
                stamp(r["updated_at"]),
                json.dumps(r["metadata"]),
                owner,
                r["head_status"],
            )
            for r in rows
        ],
        many=True,
    )


@pytest.fixture
def seeded(api_server: Server) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """COUNT threads of alice, newer than any other test's (removed afterwards), sharing
    one ``created_at`` (``updated_at`` in threes); two in three carry ``common``, one in
    ten ``rare``; one in five waits for a person; their ids are not in insertion
    order."""
    mark = uuid.uuid4().hex[:10]
    now = datetime.now(UTC) + timedelta(days=1)
    rows = []
    for i in range(COUNT):
        metadata: dict[str, Any] = {"mark": mark, "nested": {"a": [1]}}
        if i % 3:
            metadata["kind"] = "common"
        if i % 10 == 0:
            metadata["kind"] = "rare"
        if i % 4 == 0:
            metadata["nested"] = {"a": [1], "b": 2}  # contains {"a": [1]}, is not equal to it
        rows.append(
            {
                "id": f"{mark}-{(i * 37) % COUNT:03d}",
                "created_at": now,
                "updated_at": now - timedelta(seconds=i // 3),
                "metadata": metadata,
                "head_status": "suspended" if i % 5 == 0 else "",
            }
        )
    _insert(api_server, rows)
    yield mark, rows
    # They are dated tomorrow: other tests on this database list threads newest first.
    _sql(api_server, "DELETE FROM criogen_thread WHERE id LIKE %s", (f"{mark}-%",))


def _expected(
    rows: list[dict[str, Any]],
    *,
    metadata: dict[str, Any],
    status: str | None = None,
    sort_by: str = "created_at",
    sort_order: str = "desc",
) -> list[str]:
    def status_of(row: dict[str, Any]) -> str:
        return "interrupted" if row["head_status"] == "suspended" else "idle"

    kept = [
        r
        for r in rows
        if all(r["metadata"].get(k) == v for k, v in metadata.items())
        and (status is None or status_of(r) == status)
    ]
    key = {
        "created_at": lambda r: (r["created_at"], r["id"]),
        "updated_at": lambda r: (r["updated_at"], r["id"]),
        "thread_id": lambda r: (r["id"],),
        "status": lambda r: (status_of(r), r["id"]),
    }[sort_by]
    return [r["id"] for r in sorted(kept, key=key, reverse=sort_order == "desc")]


async def _all_pages(sdk: Any, size: int, **filters: Any) -> list[str]:
    seen: list[str] = []
    while True:
        page = await sdk.threads.search(limit=size, offset=len(seen), **filters)
        seen += [t["thread_id"] for t in page]
        if len(page) < size:
            return seen


@pytest.mark.parametrize(
    ("sort_by", "sort_order"),
    [("created_at", "desc"), ("created_at", "asc"), ("updated_at", "desc"), ("status", "asc")],
)
async def test_pages_of_a_common_value_come_in_order_with_ties_by_id(
    sdk: Any, seeded: tuple[str, list[dict[str, Any]]], sort_by: str, sort_order: str
) -> None:
    mark, rows = seeded
    metadata = {"mark": mark, "kind": "common"}
    order = {"sort_by": sort_by, "sort_order": sort_order}
    expected = _expected(rows, metadata=metadata, **order)
    assert len(expected) == 54
    assert await _all_pages(sdk, 7, metadata=metadata, **order) == expected
    first = await sdk.threads.search(metadata=metadata, limit=20, **order)
    assert [t["thread_id"] for t in first] == expected[:20]
    assert all(t["metadata"]["kind"] == "common" for t in first)


async def test_a_rare_value_an_exact_nested_value_and_a_status_filter(
    sdk: Any, seeded: tuple[str, list[dict[str, Any]]]
) -> None:
    mark, rows = seeded
    rare = {"mark": mark, "kind": "rare"}
    assert await _all_pages(sdk, 20, metadata=rare) == _expected(rows, metadata=rare)
    nested = {"mark": mark, "nested": {"a": [1]}}
    found = await _all_pages(sdk, 20, metadata=nested)
    assert found == _expected(rows, metadata=nested)
    assert len(found) == COUNT - COUNT // 4 - 1  # not the ones whose value only contains it
    for status in ("interrupted", "idle"):
        common = {"mark": mark, "kind": "common"}
        found = await _all_pages(sdk, 5, metadata=common, status=status)
        assert found == _expected(rows, metadata=common, status=status)
    assert await sdk.threads.search(metadata={"mark": mark, "kind": "none"}) == []


async def test_threads_created_together_list_by_id_both_ways(
    sdk: Any, seeded: tuple[str, list[dict[str, Any]]]
) -> None:
    mark, rows = seeded
    newest = await sdk.threads.search(metadata={"mark": mark}, limit=COUNT)
    assert [t["thread_id"] for t in newest] == sorted((r["id"] for r in rows), reverse=True)
    oldest = await sdk.threads.search(metadata={"mark": mark}, limit=COUNT, sort_order="asc")
    assert [t["thread_id"] for t in oldest] == sorted(r["id"] for r in rows)


async def test_every_page_carries_each_threads_own_status(
    sdk: Any, seeded: tuple[str, list[dict[str, Any]]]
) -> None:
    """The status of a page's threads is computed for the page alone (not for every
    thread skipped to reach it): deep pages, with and without a metadata filter, with
    a numeric and a boolean value as well as strings."""
    mark, rows = seeded
    waiting = {r["id"] for r in rows if r["head_status"] == "suspended"}
    for metadata in ({"mark": mark}, {"mark": mark, "kind": "common"}):
        expected = _expected(rows, metadata=metadata)
        for offset in (0, 7, len(expected) - 3):
            page = await sdk.threads.search(metadata=metadata, limit=5, offset=offset)
            assert [t["thread_id"] for t in page] == expected[offset : offset + 5]
            for t in page:
                assert t["status"] == ("interrupted" if t["thread_id"] in waiting else "idle")
    assert await sdk.threads.search(metadata={"mark": mark, "kind": 1}) == []
    assert await sdk.threads.search(metadata={"mark": mark, "kind": True}) == []
    assert await sdk.threads.search(metadata={"mark": mark, "kind": None}) == []


async def test_the_pagination_headers_are_langgraphs(
    api_server: Server, seeded: tuple[str, list[dict[str, Any]]]
) -> None:
    """As LangGraph's server: while more threads follow, ``X-Pagination-Next`` is the
    next offset and ``X-Pagination-Total`` one more (no search counts every match); the
    last page, a page that ends exactly at the last thread among them, has no next and
    the exact total; an empty page past the end has the exact total (LangGraph's server
    gives the offset); ``/threads/count`` counts. With a common value (a window of the
    newest threads on PostgreSQL), a rare one (the metadata index), a status and a
    state-values filter (the ORM's path everywhere)."""
    import httpx

    mark, rows = seeded
    common = {"mark": mark, "kind": "common"}
    rare = {"mark": mark, "kind": "rare"}
    headers = {"x-api-key": api_server.tokens["alice"]}
    async with httpx.AsyncClient(base_url=api_server.url, headers=headers) as http:

        async def page(**body: Any) -> tuple[list[str], str, str | None]:
            answer = await http.post("/threads/search", json=body)
            assert answer.status_code == 200, answer.text
            found = [t["thread_id"] for t in answer.json()]
            return (
                found,
                answer.headers["x-pagination-total"],
                answer.headers.get("x-pagination-next"),
            )

        expected = _expected(rows, metadata=common)
        assert len(expected) == 54
        for limit, offset, total, after in [
            (20, 0, "21", "20"),
            (20, 20, "41", "40"),
            (20, 40, "54", None),  # 14 threads: the last page
            (27, 27, "54", None),  # a full page, and none after it
            (54, 0, "54", None),
            (53, 0, "54", "53"),
            (20, 54, "54", None),  # past the end: counted
            (20, 200, "54", None),
        ]:
            found, told, next_offset = await page(metadata=common, limit=limit, offset=offset)
            assert found == expected[offset : offset + limit], (limit, offset)
            assert (told, next_offset) == (total, after), (limit, offset)
        rare_ids = _expected(rows, metadata=rare)
        assert await page(metadata=rare, limit=5) == (rare_ids[:5], "6", "5")
        assert await page(metadata=rare, limit=5, offset=5) == (rare_ids[5:], "9", None)
        waiting = _expected(rows, metadata={"mark": mark}, status="interrupted")
        assert await page(metadata={"mark": mark}, status="interrupted", limit=10) == (
            waiting[:10],
            "11",
            "10",
        )
        assert await page(metadata={"mark": mark}, status="interrupted", limit=18) == (
            waiting,
            "18",
            None,
        )
        # State values are read from the heads: none of these threads has one.
        assert await page(metadata={"mark": mark}, values={"n": 1}, limit=5) == ([], "0", None)
        count = await http.post("/threads/count", json={"metadata": common})
        assert count.json() == 54
