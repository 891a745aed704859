"""``/store``: LangGraph's key-value store (items in namespaces), backed by the engine's
document collections.

Each namespace of each user is one collection, named ``store:<user id>:<a.b.c>``: a
user's items are private to them (another user's namespace is simply a different
collection, so their items are never found — a 404 for ``get``). Operators have their
own store too; the store is per person, not shared. An item is a document whose id is
the item's key, whose metadata keeps the JSON value, and whose text is what full-text
search sees: the string leaves of the value (or of the fields named by ``index``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema
from pydantic import Field

from api.auth import Principal, principal
from api.errors import NotFound
from api.schemas import ErrorOut, In, JsonObject
from criogen.engine.errors import InvalidArgument

router = Router(tags=["store"])

ERRORS: dict[int, Any] = {404: ErrorOut, 422: ErrorOut}


class ItemPutIn(In):
    """PUT /store/items."""

    namespace: list[str]
    key: str
    value: JsonObject
    index: bool | list[str] | None = Field(
        None, description="false: not searchable; a list: only these fields are searched."
    )
    ttl: float | None = Field(None, description="Not supported: non-null is a 422.")


class ItemDeleteIn(In):
    """DELETE /store/items."""

    namespace: list[str]
    key: str


class ItemSearchIn(In):
    """POST /store/items/search."""

    namespace_prefix: list[str] = []
    filter: JsonObject | None = None
    limit: int = Field(10, ge=1, le=1000)
    offset: int = Field(0, ge=0)
    query: str | None = None
    refresh_ttl: bool | None = None


class NamespacesIn(In):
    """POST /store/namespaces."""

    prefix: list[str] | None = None
    suffix: list[str] | None = None
    max_depth: int | None = Field(None, ge=1)
    limit: int = Field(100, ge=1, le=1000)
    offset: int = Field(0, ge=0)


class ItemOut(Schema):
    """A stored item (``score`` is set by a search with ``query``)."""

    namespace: list[str]
    key: str
    value: JsonObject
    created_at: Any
    updated_at: Any
    score: float | None = None


class ItemsOut(Schema):
    """Search results."""

    items: list[ItemOut]


class NamespacesOut(Schema):
    """Namespaces, each a list of labels."""

    namespaces: list[list[str]]


def _owner(who: Principal) -> str:
    return str(who.user_id) if who.user_id is not None else "local"


def _check_namespace(namespace: list[str], field: str = "namespace") -> list[str]:
    for label in namespace:
        if not isinstance(label, str) or not label or "." in label:
            raise InvalidArgument(
                f"namespace label {label!r} must be a non-empty string without '.'.", field=field
            )
    return namespace


def _collection(who: Principal, namespace: list[str]) -> str:
    name = f"store:{_owner(who)}:" + ".".join(_check_namespace(namespace))
    if len(name) > 255 or not namespace:
        raise InvalidArgument(
            "namespace must have 1 or more labels and fit 255 characters.", field="namespace"
        )
    return name


def _storage() -> Any:
    from criogen.registry import storage

    return storage()


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


def _item_out(record: Any, namespace: list[str]) -> dict[str, Any]:
    meta = record.metadata or {}
    return {
        "namespace": namespace,
        "key": record.doc_id,
        "value": meta.get("value", {}),
        "created_at": meta.get("created_at") or record.created_at,
        "updated_at": meta.get("updated_at") or record.created_at,
        "score": getattr(record, "score", None),
    }


def _namespace_of(collection: str) -> list[str]:
    return collection.split(":", 2)[2].split(".")


@router.put(
    "/items", response={204: None, **ERRORS}, operation_id="put_item", summary="Store an item"
)
def put_item(request: HttpRequest, payload: ItemPutIn) -> tuple[int, None]:
    """Create or replace the item ``key`` in ``namespace``."""
    if payload.ttl is not None:
        raise InvalidArgument("store item TTLs are not supported.", field="ttl")
    if not payload.key or len(payload.key) > 255:
        raise InvalidArgument("key must be 1–255 characters.", field="key")
    who = principal(request)
    name = _collection(who, payload.namespace)
    store = _storage()
    old = store.get_document(name, payload.key)
    now = datetime.now(UTC).isoformat()
    created = (old.metadata or {}).get("created_at") if old is not None else None
    fields = payload.index if isinstance(payload.index, list) else None
    text = "" if payload.index is False else _searchable(payload.value, fields)
    from criogen.engine.memory import Collection

    Collection(name, storage=store).add(
        text.strip() or payload.key,
        id=payload.key,
        metadata={"value": payload.value, "created_at": created or now, "updated_at": now},
    )
    return 204, None


@router.get(
    "/items", response={200: ItemOut, **ERRORS}, operation_id="get_item", summary="Get an item"
)
def get_item(
    request: HttpRequest, namespace: str, key: str, refresh_ttl: bool | None = None
) -> dict[str, Any]:
    """One item; ``namespace`` is its labels joined with ``.``."""
    labels = namespace.split(".") if namespace else []
    record = _storage().get_document(_collection(principal(request), labels), key)
    if record is None:
        raise NotFound(f"no item {key!r} in namespace {labels}.", field="key")
    return _item_out(record, labels)


@router.delete(
    "/items", response={204: None, **ERRORS}, operation_id="delete_item", summary="Delete an item"
)
def delete_item(request: HttpRequest, payload: ItemDeleteIn) -> tuple[int, None]:
    """Delete an item (deleting a missing one is not an error, as in LangGraph)."""
    _storage().delete_document(_collection(principal(request), payload.namespace), payload.key)
    return 204, None


def _collections(who: Principal, prefix: list[str]) -> list[str]:
    from criogen.storage.models import Document

    base = f"store:{_owner(who)}:"
    start = base + ".".join(_check_namespace(prefix, "namespace_prefix"))
    names = (
        Document.objects.filter(collection__startswith=start)
        .values_list("collection", flat=True)
        .distinct()
        .order_by("collection")
    )
    # "a.b" is under prefix ["a"], "ab" is not.
    return [n for n in names if not prefix or n == start or n.startswith(start + ".")]


@router.post(
    "/items/search",
    response={200: ItemsOut, **ERRORS},
    operation_id="search_items",
    summary="Search items",
)
def search_items(request: HttpRequest, payload: ItemSearchIn) -> dict[str, Any]:
    """Items under ``namespace_prefix`` whose value has every ``filter`` key equal;
    with ``query``, ranked by full-text search (best first, with ``score``)."""
    who = principal(request)
    store = _storage()
    found: list[dict[str, Any]] = []
    wanted = payload.filter or {}
    for name in _collections(who, payload.namespace_prefix):
        labels = _namespace_of(name)
        if payload.query:
            records = store.search_documents(name, payload.query, limit=10_000)
        else:
            records = store.documents(name, limit=1_000_000)
        for record in records:
            item = _item_out(record, labels)
            if all(item["value"].get(k) == v for k, v in wanted.items()):
                found.append(item)
    if payload.query:
        found.sort(key=lambda i: -(i["score"] or 0.0))
    else:
        found.sort(key=lambda i: str(i["updated_at"]), reverse=True)
    return {"items": found[payload.offset : payload.offset + payload.limit]}


@router.post(
    "/namespaces",
    response={200: NamespacesOut, **ERRORS},
    operation_id="list_namespaces",
    summary="List namespaces",
)
def list_namespaces(request: HttpRequest, payload: NamespacesIn) -> dict[str, Any]:
    """The caller's namespaces: under ``prefix``, ending with ``suffix``, cut to
    ``max_depth`` labels."""
    who = principal(request)
    out: list[list[str]] = []
    for name in _collections(who, payload.prefix or []):
        labels = _namespace_of(name)
        if payload.suffix and labels[-len(payload.suffix) :] != payload.suffix:
            continue
        if payload.max_depth is not None:
            labels = labels[: payload.max_depth]
        if labels not in out:
            out.append(labels)
    return {"namespaces": out[payload.offset : payload.offset + payload.limit]}
