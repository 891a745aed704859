"""``/store``: LangGraph's key-value store (items in namespaces), backed by the engine's
document collections.

Each namespace of each user is one collection, named ``store:<user id>:<a.b.c>``: a
user's items are private to them (another user's namespace is simply a different
collection, so their items are never found — a 404 for ``get``). Operators have their
own store too; the store is per person, not shared. An item is a document whose id is
the item's key, whose metadata keeps the JSON value, and whose text is what full-text
search sees: the string leaves of the value (or of the fields named by ``index``).
Writes are :mod:`criogen.services.store`, reads :mod:`criogen.selectors`.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema, Status
from pydantic import Field

from api.auth import principal
from api.errors import NotFound
from api.schemas import ErrorOut, In, JsonObject
from criogen import selectors
from criogen.engine.errors import InvalidArgument
from criogen.services import store

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


@router.put(
    "/items", response={204: None, **ERRORS}, operation_id="put_item", summary="Store an item"
)
def put_item(request: HttpRequest, payload: ItemPutIn) -> Status[None]:
    """Create or replace the item ``key`` in ``namespace``."""
    if payload.ttl is not None:
        raise InvalidArgument("store item TTLs are not supported.", field="ttl")
    store.put_item(
        who=principal(request),
        namespace=payload.namespace,
        key=payload.key,
        value=payload.value,
        index=payload.index,
    )
    return Status(204, None)


@router.get(
    "/items", response={200: ItemOut, **ERRORS}, operation_id="get_item", summary="Get an item"
)
def get_item(
    request: HttpRequest, namespace: str, key: str, refresh_ttl: bool | None = None
) -> dict[str, Any]:
    """One item; ``namespace`` is its labels joined with ``.``."""
    labels = namespace.split(".") if namespace else []
    item = selectors.store_item(principal(request), labels, key)
    if item is None:
        raise NotFound(f"no item {key!r} in namespace {labels}.", field="key")
    return item


@router.delete(
    "/items", response={204: None, **ERRORS}, operation_id="delete_item", summary="Delete an item"
)
def delete_item(request: HttpRequest, payload: ItemDeleteIn) -> Status[None]:
    """Delete an item (deleting a missing one is not an error, as in LangGraph)."""
    store.delete_item(who=principal(request), namespace=payload.namespace, key=payload.key)
    return Status(204, None)


@router.post(
    "/items/search",
    response={200: ItemsOut, **ERRORS},
    operation_id="search_items",
    summary="Search items",
)
def search_items(request: HttpRequest, payload: ItemSearchIn) -> dict[str, Any]:
    """Items under ``namespace_prefix`` whose value has every ``filter`` key equal;
    with ``query``, ranked by full-text search (best first, with ``score``)."""
    items = selectors.store_items(
        principal(request),
        namespace_prefix=payload.namespace_prefix,
        filter=payload.filter,
        query=payload.query,
        limit=payload.limit,
        offset=payload.offset,
    )
    return {"items": items}


@router.post(
    "/namespaces",
    response={200: NamespacesOut, **ERRORS},
    operation_id="list_namespaces",
    summary="List namespaces",
)
def list_namespaces(request: HttpRequest, payload: NamespacesIn) -> dict[str, Any]:
    """The caller's namespaces: under ``prefix``, ending with ``suffix``, cut to
    ``max_depth`` labels."""
    namespaces = selectors.store_namespaces(
        principal(request),
        prefix=payload.prefix,
        suffix=payload.suffix,
        max_depth=payload.max_depth,
        limit=payload.limit,
        offset=payload.offset,
    )
    return {"namespaces": namespaces}
