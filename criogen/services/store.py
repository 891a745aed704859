"""The REST store's writes: put and delete items (LangGraph's key-value store).

Each namespace of each user is one document collection, named by
:func:`criogen.selectors.store_collection` (``store:<user id>:<a.b.c>``), so a user's
items are private to them. An item is a document whose id is the item's key, whose
metadata keeps the JSON value and its times, and whose text is what full-text search
sees: the string leaves of the value (or of the fields named by ``index``). The reads
are :func:`criogen.selectors.store_item`, :func:`~criogen.selectors.store_items` and
:func:`~criogen.selectors.store_namespaces`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from criogen.engine.errors import InvalidArgument
from criogen.registry import storage
from criogen.selectors import Who, store_collection

__all__ = ["delete_item", "put_item"]


def _searchable(value: Any, fields: list[str] | None) -> str:
    if fields is not None:
        value = {f: value.get(f) for f in fields}
    words: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, str):
            words.append(v)
        elif isinstance(v, dict):
            for item in v.values():
                walk(item)
        elif isinstance(v, list):
            for item in v:
                walk(item)
        elif v is not None:
            words.append(json.dumps(v))

    walk(value)
    return " ".join(words)


def put_item(
    *, who: Who, namespace: list[str], key: str, value: dict[str, Any], index: Any = None
) -> None:
    """Create or replace ``who``'s item ``key`` in ``namespace``; it keeps its creation
    time. ``index``: False (not searchable), a list of the value's fields to search, or
    None (all of it). Raises InvalidArgument naming the field."""
    if not key or len(key) > 255:
        raise InvalidArgument("key must be 1–255 characters.", field="key")
    name = store_collection(who, namespace)
    store = storage()
    old = store.get_document(name, key)
    now = datetime.now(UTC).isoformat()
    created = (old.metadata or {}).get("created_at") if old is not None else None
    fields = index if isinstance(index, list) else None
    text = "" if index is False else _searchable(value, fields)
    from criogen.engine.memory import Collection

    Collection(name, storage=store).add(
        text.strip() or key,
        id=key,
        metadata={"value": value, "created_at": created or now, "updated_at": now},
    )


def delete_item(*, who: Who, namespace: list[str], key: str) -> None:
    """Delete ``who``'s item ``key`` in ``namespace`` (a missing one is not an error)."""
    storage().delete_document(store_collection(who, namespace), key)
