"""Threads over the official ``langgraph_sdk`` client: every rule of the threads page
(``spec/threads-rest-api.txt``) that does not need a run. Runs, status and delete with
active runs are in ``test_runs.py``."""

from __future__ import annotations

import sqlite3
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langgraph_sdk.errors import ConflictError, NotFoundError, UnprocessableEntityError

from tests.api.conftest import Server


def tag() -> str:
    """A metadata value no other test uses (tests share one server)."""
    return uuid.uuid4().hex


# -- create -------------------------------------------------------------------------------


async def test_it_creates_a_thread_with_a_server_uuid(client: Any) -> None:
    thread = await client.threads.create()
    assert uuid.UUID(thread["thread_id"])
    assert thread["status"] == "idle"
    assert thread["values"] is None
    assert thread["interrupts"] == {}
    assert thread["metadata"]["owner"] == "alice"


async def test_it_keeps_the_metadata_given_at_creation(client: Any) -> None:
    thread = await client.threads.create(metadata={"user_name": "Alice", "session": "onboarding"})
    got = await client.threads.get(thread["thread_id"])
    assert got["metadata"] == {"user_name": "Alice", "session": "onboarding", "owner": "alice"}


async def test_it_returns_the_existing_thread_with_if_exists_do_nothing(client: Any) -> None:
    tid = f"my-thread-{tag()}"
    first = await client.threads.create(thread_id=tid, metadata={"n": 1})
    again = await client.threads.create(thread_id=tid, if_exists="do_nothing", metadata={"n": 2})
    assert again["thread_id"] == tid
    assert again["created_at"] == first["created_at"]
    assert again["metadata"]["n"] == 1


async def test_it_refuses_a_taken_id_with_409_by_default_and_with_raise(client: Any) -> None:
    tid = f"taken-{tag()}"
    await client.threads.create(thread_id=tid)
    with pytest.raises(ConflictError) as default:
        await client.threads.create(thread_id=tid)
    with pytest.raises(ConflictError):
        await client.threads.create(thread_id=tid, if_exists="raise")
    assert default.value.body["code"] == "conflict"
    assert default.value.body["field"] == "thread_id"


async def test_it_accepts_a_thread_id_of_255_characters(client: Any) -> None:
    tid = tag() + "x" * (255 - 32)
    thread = await client.threads.create(thread_id=tid)
    assert thread["thread_id"] == tid


@pytest.mark.parametrize("bad", ["x" * 256, "   ", "\t\n", ""])
def test_it_refuses_a_thread_id_that_is_too_long_or_blank_with_422(
    server: Server, bad: str
) -> None:
    with server.http() as http:
        response = http.post("/threads", json={"thread_id": bad})
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["field"] == "thread_id"
    assert body["code"] == "invalid_argument"
    assert "1–255" in body["detail"]


def test_it_makes_a_uuid_when_thread_id_is_null(server: Server) -> None:
    with server.http() as http:
        response = http.post("/threads", json={"thread_id": None})
    assert response.status_code == 200
    assert uuid.UUID(response.json()["thread_id"])


async def test_it_sets_a_ttl_in_minutes_with_the_delete_strategy(client: Any) -> None:
    thread = await client.threads.create(ttl=1440)
    assert thread["ttl"]["ttl"] == 1440
    assert thread["ttl"]["strategy"] == "delete"
    expires = datetime.fromisoformat(thread["ttl"]["expires_at"])
    assert timedelta(minutes=1430) < expires - datetime.now(UTC) < timedelta(minutes=1441)


async def test_it_sets_a_ttl_with_the_keep_latest_strategy(client: Any) -> None:
    thread = await client.threads.create(ttl={"ttl": 10080, "strategy": "keep_latest"})
    assert thread["ttl"]["ttl"] == 10080
    assert thread["ttl"]["strategy"] == "keep_latest"


@pytest.mark.parametrize(
    ("ttl", "field"),
    [
        ({"ttl": 10, "strategy": "archive"}, "ttl.strategy"),
        (0, "ttl"),
        (-5, "ttl"),
        (1.5, "ttl"),
    ],
)
def test_it_refuses_a_bad_ttl_with_422(server: Server, ttl: Any, field: str) -> None:
    with server.http() as http:
        response = http.post("/threads", json={"ttl": ttl})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field


def test_it_refuses_an_unknown_field_naming_it(server: Server) -> None:
    with server.http() as http:
        response = http.post("/threads", json={"metadata": {}, "colour": "red"})
    assert response.status_code == 422
    body = response.json()
    assert body["field"] == "colour"
    assert body["code"] == "validation_error"
    assert "colour" in body["detail"]


def test_it_refuses_malformed_json_with_422(server: Server) -> None:
    with server.http() as http:
        response = http.post(
            "/threads", content=b"{not json", headers={"Content-Type": "application/json"}
        )
    assert response.status_code == 422
    assert response.json()["code"] == "invalid_json"


# -- get / update / delete / copy ---------------------------------------------------------


async def test_it_answers_404_for_an_unknown_thread(client: Any) -> None:
    with pytest.raises(NotFoundError) as caught:
        await client.threads.get(f"nope-{tag()}")
    assert caught.value.body["code"] == "thread_not_found"


async def test_it_merges_metadata_on_update(client: Any) -> None:
    thread = await client.threads.create(metadata={"a": 1, "b": 2})
    updated = await client.threads.update(
        thread["thread_id"], metadata={"b": 3, "priority": "high"}
    )
    assert updated["metadata"] == {"a": 1, "b": 3, "priority": "high", "owner": "alice"}
    assert updated["updated_at"] >= thread["updated_at"]


def test_metadata_owner_is_the_servers_to_set(server: Server) -> None:
    with server.http("bob") as bob, server.http("olga") as olga:
        created = bob.post("/threads", json={"metadata": {"owner": "alice"}})
        assert created.status_code == 422
        assert created.json()["field"] == "metadata.owner"
        thread = bob.post("/threads", json={"metadata": {"owner": "bob", "a": 1}}).json()
        tid = thread["thread_id"]
        assert thread["metadata"] == {"owner": "bob", "a": 1}
        for who in (bob, olga):  # not even an operator rewrites it
            refused = who.patch(f"/threads/{tid}", json={"metadata": {"owner": "alice"}})
            assert refused.status_code == 422, refused.text
            assert refused.json()["field"] == "metadata.owner"
            assert "metadata.owner" in refused.json()["detail"]
        # Sending back the metadata as read (owner unchanged) is fine.
        same = olga.patch(f"/threads/{tid}", json={"metadata": {**thread["metadata"], "b": 2}})
        assert same.status_code == 200
        assert bob.get(f"/threads/{tid}").json()["metadata"] == {"owner": "bob", "a": 1, "b": 2}
    with server.http("alice") as alice:
        assert tid not in [t["thread_id"] for t in alice.post("/threads/search", json={}).json()]


async def test_it_sets_the_ttl_on_update(client: Any) -> None:
    thread = await client.threads.create()
    updated = await client.threads.update(thread["thread_id"], metadata={}, ttl=60)
    assert updated["ttl"]["ttl"] == 60
    fetched = await client.threads.get(thread["thread_id"], include=["ttl"])
    assert fetched["ttl"]["strategy"] == "delete"


def test_it_answers_204_to_an_update_with_return_minimal(sync_client: Any) -> None:
    thread = sync_client.threads.create()
    assert (
        sync_client.threads.update(thread["thread_id"], metadata={"x": 1}, return_minimal=True)
        is None
    )
    assert sync_client.threads.get(thread["thread_id"])["metadata"]["x"] == 1


async def test_it_deletes_a_thread_with_its_state_and_history(client: Any) -> None:
    thread = await client.threads.create(graph_id="steps")
    tid = thread["thread_id"]
    await client.threads.update_state(tid, {"n": 5}, as_node="c")
    await client.threads.delete(tid)
    with pytest.raises(NotFoundError):
        await client.threads.get(tid)
    with pytest.raises(NotFoundError):
        await client.threads.get_state(tid)
    with pytest.raises(NotFoundError):
        await client.threads.get_history(tid)


async def test_it_copies_a_thread_with_its_history(client: Any) -> None:
    thread = await client.threads.create(graph_id="steps", metadata={"k": "v"})
    tid = thread["thread_id"]
    await client.threads.update_state(tid, {"n": 1, "steps": ["a"]}, as_node="a")
    await client.threads.update_state(tid, {"n": 2, "steps": ["b"]}, as_node="b")
    copy = await client.threads.copy(tid)
    assert copy["thread_id"] != tid
    assert copy["metadata"]["k"] == "v"
    assert copy["values"] == {"n": 2, "steps": ["a", "b"]}
    original = await client.threads.get_history(tid)
    copied = await client.threads.get_history(copy["thread_id"])
    assert [s["values"] for s in copied] == [s["values"] for s in original]
    assert {s["checkpoint"]["checkpoint_id"] for s in copied}.isdisjoint(
        {s["checkpoint"]["checkpoint_id"] for s in original}
    )
    # The copy goes on by itself.
    await client.threads.update_state(copy["thread_id"], {"n": 9}, as_node="c")
    assert (await client.threads.get_state(tid))["values"]["n"] == 2


# -- search and count ---------------------------------------------------------------------


async def test_it_searches_by_metadata(client: Any) -> None:
    mark = tag()
    a = await client.threads.create(metadata={"mark": mark, "user_name": "Alice"})
    await client.threads.create(metadata={"mark": mark, "user_name": "Bob"})
    found = await client.threads.search(metadata={"mark": mark, "user_name": "Alice"})
    assert [t["thread_id"] for t in found] == [a["thread_id"]]


async def test_it_searches_by_state_values_and_ids(client: Any) -> None:
    mark = tag()
    one = await client.threads.create(graph_id="steps", metadata={"mark": mark})
    two = await client.threads.create(graph_id="steps", metadata={"mark": mark})
    await client.threads.update_state(one["thread_id"], {"n": 41}, as_node="c")
    await client.threads.update_state(two["thread_id"], {"n": 42}, as_node="c")
    found = await client.threads.search(metadata={"mark": mark}, values={"n": 42})
    assert [t["thread_id"] for t in found] == [two["thread_id"]]
    by_ids = await client.threads.search(ids=[one["thread_id"]])
    assert [t["thread_id"] for t in by_ids] == [one["thread_id"]]
    assert await client.threads.count(metadata={"mark": mark}, values={"n": 41}) == 1


async def test_it_searches_by_status(client: Any) -> None:
    mark = tag()
    await client.threads.create(metadata={"mark": mark})
    idle = await client.threads.search(metadata={"mark": mark}, status="idle")
    assert len(idle) == 1
    assert await client.threads.search(metadata={"mark": mark}, status="interrupted") == []


async def test_it_sorts_and_pages_search_results(client: Any) -> None:
    mark = tag()
    ids = [f"{mark}-{i}" for i in range(5)]
    for tid in reversed(ids):
        await client.threads.create(thread_id=tid, metadata={"mark": mark})
    asc = await client.threads.search(
        metadata={"mark": mark}, sort_by="thread_id", sort_order="asc", limit=2, offset=1
    )
    assert [t["thread_id"] for t in asc] == ids[1:3]
    newest_first = await client.threads.search(metadata={"mark": mark})
    assert [t["thread_id"] for t in newest_first] == ids  # created in reverse order


async def test_it_counts_threads(client: Any) -> None:
    mark = tag()
    for _ in range(3):
        await client.threads.create(metadata={"mark": mark})
    assert await client.threads.count(metadata={"mark": mark}) == 3
    assert await client.threads.count(metadata={"mark": mark}, status="busy") == 0


def test_it_defaults_the_search_limit_to_20(server: Server) -> None:
    mark = tag()
    with server.http() as http:
        for _ in range(21):
            assert http.post("/threads", json={"metadata": {"mark": mark}}).status_code == 200
        omitted = http.post("/threads/search", json={"metadata": {"mark": mark}})
        null = http.post("/threads/search", json={"metadata": {"mark": mark}, "limit": None})
    assert len(omitted.json()) == 20
    assert len(null.json()) == 20


@pytest.mark.parametrize("limit", [0, -1, 1001])
def test_it_refuses_a_search_limit_outside_1_to_the_cap_with_422(
    server: Server, limit: int
) -> None:
    with server.http() as http:
        response = http.post("/threads/search", json={"limit": limit})
    assert response.status_code == 422
    assert response.json()["field"] == "limit"


def test_it_accepts_the_cap_itself_as_limit(sync_client: Any) -> None:
    assert isinstance(sync_client.threads.search(limit=1000), list)


async def test_it_extracts_paths_from_search_results(client: Any) -> None:
    mark = tag()
    thread = await client.threads.create(graph_id="steps", metadata={"mark": mark})
    await client.threads.update_state(thread["thread_id"], {"steps": ["a", "b"]}, as_node="c")
    found = await client.threads.search(
        metadata={"mark": mark}, extract={"last": "values.steps[-1]", "who": "metadata.owner"}
    )
    assert found[0]["extracted"] == {"last": "b", "who": "alice"}


# -- prune and TTL -----------------------------------------------------------------------


def _expire(server: Server, thread_id: str) -> None:
    """Move a thread's expiry into the past, as if its TTL had run out."""
    path = server.database_url.removeprefix("sqlite://")
    with sqlite3.connect(path, timeout=30) as db:
        db.execute(
            "UPDATE criogen_thread SET expires_at = ? WHERE id = ?",
            ((datetime.now(UTC) - timedelta(minutes=1)).strftime("%Y-%m-%d %H:%M:%S"), thread_id),
        )


async def test_prune_without_a_body_applies_the_callers_expired_ttls(
    server: Server, client: Any, clients: Any
) -> None:
    doomed = await client.threads.create(ttl=1)
    kept = await client.threads.create(graph_id="steps", ttl={"ttl": 1, "strategy": "keep_latest"})
    fresh = await client.threads.create(ttl=60)
    await client.threads.update_state(kept["thread_id"], {"n": 1}, as_node="a")
    await client.threads.update_state(kept["thread_id"], {"n": 2}, as_node="c")
    bobs = await clients("bob").threads.create(ttl=1)
    for tid in (doomed["thread_id"], kept["thread_id"], bobs["thread_id"]):
        _expire(server, tid)
    with server.http() as http:
        response = http.post("/threads/prune")
    assert response.status_code == 200
    assert response.json()["deleted"] >= 1
    assert response.json()["pruned"] >= 1
    with pytest.raises(NotFoundError):
        await client.threads.get(doomed["thread_id"])
    history = await client.threads.get_history(kept["thread_id"])
    assert [s["values"] for s in history] == [{"n": 2}]
    assert (await client.threads.get(kept["thread_id"]))["ttl"]["expires_at"] > datetime.now(
        UTC
    ).isoformat()
    await client.threads.get(fresh["thread_id"])
    # bob's expired thread is bob's to prune.
    await clients("bob").threads.get(bobs["thread_id"])


async def test_prune_with_thread_ids_answers_pruned_count(client: Any) -> None:
    one = await client.threads.create()
    two = await client.threads.create()
    result = await client.threads.prune([one["thread_id"], two["thread_id"]])
    assert result["pruned_count"] == 2
    with pytest.raises(NotFoundError):
        await client.threads.get(one["thread_id"])


async def test_prune_keep_latest_keeps_the_thread_and_its_state(client: Any) -> None:
    thread = await client.threads.create(graph_id="steps")
    tid = thread["thread_id"]
    for n in range(3):
        await client.threads.update_state(tid, {"n": n, "steps": [str(n)]}, as_node="a")
    result = await client.threads.prune([tid], strategy="keep_latest")
    assert result["pruned_count"] == 1
    history = await client.threads.get_history(tid)
    assert len(history) == 1
    assert history[0]["values"] == {"n": 2, "steps": ["0", "1", "2"]}


# -- state, update_state, history ---------------------------------------------------------


async def test_a_new_thread_has_an_empty_state(client: Any) -> None:
    thread = await client.threads.create()
    state = await client.threads.get_state(thread["thread_id"])
    assert state["values"] == {}
    assert state["next"] == []
    assert state["tasks"] == []
    assert state["interrupts"] == []
    assert state["checkpoint"]["checkpoint_id"] is None


async def test_update_state_writes_a_checkpoint_through_the_reducers(client: Any) -> None:
    thread = await client.threads.create(graph_id="steps")
    tid = thread["thread_id"]
    first = await client.threads.update_state(tid, {"steps": ["a"], "n": 1}, as_node="a")
    second = await client.threads.update_state(tid, {"steps": ["x"]})
    state = await client.threads.get_state(tid)
    assert state["values"] == {"steps": ["a", "x"], "n": 1}  # steps appends
    assert state["next"] == ["b"]  # still what follows "a"
    assert [t["name"] for t in state["tasks"]] == ["b"]
    assert state["checkpoint"] == {
        "thread_id": tid,
        "checkpoint_ns": "",
        "checkpoint_id": second["checkpoint"]["checkpoint_id"],
        "checkpoint_map": None,
    }
    assert state["parent_checkpoint"]["checkpoint_id"] == first["checkpoint"]["checkpoint_id"]
    assert state["metadata"]["source"] == "fork"  # a person wrote it, not a run
    assert datetime.fromisoformat(state["created_at"])


async def test_update_state_as_the_last_node_completes_the_thread(client: Any) -> None:
    thread = await client.threads.create(graph_id="steps")
    await client.threads.update_state(thread["thread_id"], {"n": 3}, as_node="c")
    state = await client.threads.get_state(thread["thread_id"])
    assert state["next"] == []
    assert (await client.threads.get(thread["thread_id"]))["values"] == {"n": 3}


async def test_update_state_refuses_an_unknown_node_with_422(client: Any) -> None:
    thread = await client.threads.create(graph_id="steps")
    with pytest.raises(UnprocessableEntityError) as caught:
        await client.threads.update_state(thread["thread_id"], {"n": 1}, as_node="agent")
    assert caught.value.body["field"] == "as_node"


async def test_update_state_refuses_a_thread_without_a_graph_with_422(client: Any) -> None:
    thread = await client.threads.create()
    with pytest.raises(UnprocessableEntityError):
        await client.threads.update_state(thread["thread_id"], {"n": 1})


async def test_it_reads_the_state_at_a_checkpoint_by_get_and_by_post(client: Any) -> None:
    thread = await client.threads.create(graph_id="steps")
    tid = thread["thread_id"]
    first = await client.threads.update_state(tid, {"n": 1}, as_node="a")
    await client.threads.update_state(tid, {"n": 2}, as_node="b")
    cid = first["checkpoint"]["checkpoint_id"]
    by_get = await client.threads.get_state(tid, checkpoint_id=cid)
    by_post = await client.threads.get_state(
        tid, checkpoint={"thread_id": tid, "checkpoint_ns": "", "checkpoint_id": cid}
    )
    assert by_get["values"] == by_post["values"] == {"n": 1}
    assert by_get["checkpoint"]["checkpoint_id"] == cid


async def test_it_refuses_a_checkpoint_id_that_is_not_a_uuid_with_422(client: Any) -> None:
    thread = await client.threads.create()
    with pytest.raises(UnprocessableEntityError) as caught:
        await client.threads.get_state(thread["thread_id"], checkpoint_id="not-a-uuid")
    assert caught.value.body["field"] == "checkpoint_id"


async def test_it_answers_404_for_an_unknown_checkpoint(client: Any) -> None:
    thread = await client.threads.create()
    with pytest.raises(NotFoundError) as caught:
        await client.threads.get_state(thread["thread_id"], checkpoint_id=str(uuid.uuid4()))
    assert caught.value.body["code"] == "checkpoint_not_found"


async def test_it_selects_one_state_key(client: Any) -> None:
    thread = await client.threads.create(graph_id="steps")
    await client.threads.update_state(thread["thread_id"], {"n": 1, "steps": ["a"]}, as_node="a")
    state = await client.threads.get_state(thread["thread_id"], select=["values.n", "next"])
    assert state == {"values": {"n": 1}, "next": ["b"]}


async def test_history_is_newest_first_with_limit_before_and_metadata(client: Any) -> None:
    thread = await client.threads.create(graph_id="steps")
    tid = thread["thread_id"]
    for n, node in enumerate(["a", "b", "c"], start=1):
        await client.threads.update_state(tid, {"n": n}, as_node=node)
    history = await client.threads.get_history(tid)
    assert [s["values"]["n"] for s in history] == [3, 2, 1]
    assert [s["next"] for s in history] == [[], ["c"], ["b"]]
    two = await client.threads.get_history(tid, limit=2)
    assert [s["values"]["n"] for s in two] == [3, 2]
    older = await client.threads.get_history(tid, before=two[-1]["checkpoint"]["checkpoint_id"])
    assert [s["values"]["n"] for s in older] == [1]
    older_by_object = await client.threads.get_history(tid, before=two[-1]["checkpoint"])
    assert [s["values"]["n"] for s in older_by_object] == [1]
    as_b = await client.threads.get_history(tid, metadata={"as_node": "b"})
    assert [s["values"]["n"] for s in as_b] == [2]


def test_history_has_a_get_form(server: Server, sync_client: Any) -> None:
    thread = sync_client.threads.create(graph_id="steps")
    tid = thread["thread_id"]
    sync_client.threads.update_state(tid, {"n": 1}, as_node="a")
    sync_client.threads.update_state(tid, {"n": 2}, as_node="b")
    with server.http() as http:
        response = http.get(f"/threads/{tid}/history", params={"limit": 1})
    assert response.status_code == 200
    assert [s["values"]["n"] for s in response.json()] == [2]


async def test_history_refuses_a_limit_out_of_range(client: Any) -> None:
    thread = await client.threads.create()
    with pytest.raises(UnprocessableEntityError):
        await client.threads.get_history(thread["thread_id"], limit=0)


def test_the_server_default_ttl_applies_to_new_threads_only_without_their_own(
    open_server: Server,
) -> None:
    with open_server.http(None) as http:
        default = http.post("/threads", json={}).json()
        own = http.post("/threads", json={"ttl": 5}).json()
        by_run = http.post(
            f"/threads/run-made-{tag()}/runs/wait",
            json={"assistant_id": "steps", "input": {"n": 0}, "if_not_exists": "create"},
        )
        made = http.get(by_run.headers["Content-Location"].rsplit("/runs/", 1)[0]).json()
    assert default["ttl"]["ttl"] == 60
    assert default["ttl"]["strategy"] == "keep_latest"
    assert own["ttl"] == {"ttl": 5, "strategy": "delete", "expires_at": own["ttl"]["expires_at"]}
    assert made["ttl"]["ttl"] == 60


async def test_search_returns_only_the_selected_fields(client: Any) -> None:
    mark = tag()
    await client.threads.create(metadata={"mark": mark})
    (found,) = await client.threads.search(metadata={"mark": mark}, select=["status", "values"])
    assert set(found) == {"thread_id", "status", "values"}
    with pytest.raises(UnprocessableEntityError) as caught:
        await client.threads.search(select=["colour"])
    assert caught.value.body["field"] == "select"


async def test_history_from_a_checkpoint_back(client: Any) -> None:
    thread = await client.threads.create()
    await client.runs.wait(thread["thread_id"], "steps", input={"n": 0})
    full = await client.threads.get_history(thread["thread_id"], limit=100)
    middle = full[2]["checkpoint"]
    older = await client.threads.get_history(thread["thread_id"], checkpoint=middle, limit=100)
    assert [s["checkpoint"]["checkpoint_id"] for s in older] == [
        s["checkpoint"]["checkpoint_id"] for s in full[2:]
    ]
