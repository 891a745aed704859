"""The store over ``langgraph_sdk``: items put, get, delete, searched (filters and full
text), namespaces listed; each user's items are private."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langgraph_sdk.errors import NotFoundError, UnprocessableEntityError


def ns() -> list[str]:
    return ["tests", uuid.uuid4().hex]


async def test_it_puts_gets_and_deletes_an_item(client: Any) -> None:
    space = ns()
    await client.store.put_item(space, "prefs", {"channel": "e-mail", "hours": [9, 17]})
    item = await client.store.get_item(space, "prefs")
    assert item["namespace"] == space
    assert item["key"] == "prefs"
    assert item["value"] == {"channel": "e-mail", "hours": [9, 17]}
    created = item["created_at"]
    await client.store.put_item(space, "prefs", {"channel": "phone"})
    again = await client.store.get_item(space, "prefs")
    assert again["value"] == {"channel": "phone"}
    assert again["created_at"] == created
    assert again["updated_at"] >= created
    await client.store.delete_item(space, "prefs")
    with pytest.raises(NotFoundError):
        await client.store.get_item(space, "prefs")


async def test_it_searches_by_prefix_filter_and_text(client: Any) -> None:
    space = ns()
    await client.store.put_item(
        [*space, "a"], "1", {"kind": "faq", "text": "Refunds take five days"}
    )
    await client.store.put_item([*space, "b"], "2", {"kind": "faq", "text": "Shipping is free"})
    await client.store.put_item([*space, "b"], "3", {"kind": "note", "text": "Refunds by bank"})
    everything = await client.store.search_items(space)
    assert {i["key"] for i in everything["items"]} == {"1", "2", "3"}
    faq = await client.store.search_items(space, filter={"kind": "faq"})
    assert {i["key"] for i in faq["items"]} == {"1", "2"}
    refunds = await client.store.search_items(space, query="refunds")
    assert {i["key"] for i in refunds["items"]} == {"1", "3"}
    assert all(i["score"] is not None for i in refunds["items"])
    only_b = await client.store.search_items([*space, "b"], limit=1)
    assert len(only_b["items"]) == 1


async def test_it_lists_namespaces(client: Any) -> None:
    space = ns()
    await client.store.put_item([*space, "x", "deep"], "k", {"v": 1})
    await client.store.put_item([*space, "y"], "k", {"v": 2})
    found = await client.store.list_namespaces(prefix=space)
    assert found["namespaces"] == [[*space, "x", "deep"], [*space, "y"]]
    shallow = await client.store.list_namespaces(prefix=space, max_depth=3)
    assert shallow["namespaces"] == [[*space, "x"], [*space, "y"]]
    ending = await client.store.list_namespaces(prefix=space, suffix=["y"])
    assert ending["namespaces"] == [[*space, "y"]]


async def test_another_users_items_are_invisible(clients: Any) -> None:
    space = ns()
    await clients("alice").store.put_item(space, "secret", {"pin": "1234"})
    bob = clients("bob")
    with pytest.raises(NotFoundError):
        await bob.store.get_item(space, "secret")
    assert (await bob.store.search_items(space))["items"] == []
    assert (await bob.store.list_namespaces(prefix=space))["namespaces"] == []


async def test_an_item_ttl_is_refused_with_422(client: Any) -> None:
    with pytest.raises(UnprocessableEntityError) as caught:
        await client.store.put_item(ns(), "k", {"v": 1}, ttl=5)
    assert caught.value.body["field"] == "ttl"
