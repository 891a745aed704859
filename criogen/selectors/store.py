"""The REST store (LangGraph's key-value items), read: a user's items live in the
document collections ``store:<user id>:<label.label…>``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from criogen.engine.errors import InvalidArgument
from criogen.selectors.visibility import Who
from criogen.storage.models import Document

__all__ = ["store_collection", "store_item", "store_items", "store_namespaces"]


def _storage() -> Any:
    """The process's shared storage (the one the runner and events use)."""
    from criogen.registry import storage

    return storage()


def _store_owner(who: Who) -> str:
    user = who.user
    return str(user.pk) if user is not None else "local"


def _check_namespace(namespace: list[str], field: str = "namespace") -> list[str]:
    for label in namespace:
        if not isinstance(label, str) or not label or "." in label:
            raise InvalidArgument(
                f"namespace label {label!r} must be a non-empty string without '.'.", field=field
            )
    return namespace


def store_collection(who: Who, namespace: list[str]) -> str:
    """The document collection of ``who``'s store ``namespace``:
    ``store:<user id>:<label.label…>`` (``local`` for the operator of a server with auth
    off). Raises InvalidArgument for an empty namespace, a label that is empty or has a
    ``.``, or a name past 255 characters."""
    name = f"store:{_store_owner(who)}:" + ".".join(_check_namespace(namespace))
    if len(name) > 255 or not namespace:
        raise InvalidArgument(
            "namespace must have 1 or more labels and fit 255 characters.", field="namespace"
        )
    return name


def _item(record: Any, namespace: list[str]) -> dict[str, Any]:
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


def store_item(who: Who, namespace: list[str], key: str) -> dict[str, Any] | None:
    """``who``'s item ``key`` in ``namespace`` as ``{"namespace", "key", "value",
    "created_at", "updated_at", "score"}``, or None."""
    record = _storage().get_document(store_collection(who, namespace), key)
    return None if record is None else _item(record, namespace)


def _store_collections(who: Who, prefix: list[str]) -> list[str]:
    base = f"store:{_store_owner(who)}:"
    start = base + ".".join(_check_namespace(prefix, "namespace_prefix"))
    names = (
        Document.objects.filter(collection__startswith=start)
        .values_list("collection", flat=True)
        .distinct()
        .order_by("collection")
    )
    # "a.b" is under prefix ["a"], "ab" is not.
    return [n for n in names if not prefix or n == start or n.startswith(start + ".")]


def store_items(
    who: Who,
    *,
    namespace_prefix: list[str],
    filter: Mapping[str, Any] | None = None,
    query: str | None = None,
    limit: int = 10,
    offset: int = 0,
) -> list[dict[str, Any]]:
    """``who``'s items under ``namespace_prefix`` whose value has every ``filter`` key
    equal, as :func:`store_item` shapes them; with ``query``, ranked by full-text search
    (best first, with ``score``), else newest update first."""
    store = _storage()
    found: list[dict[str, Any]] = []
    wanted = filter or {}
    for name in _store_collections(who, namespace_prefix):
        labels = _namespace_of(name)
        if query:
            records = store.search_documents(name, query, limit=10_000)
        else:
            records = store.documents(name, limit=1_000_000)
        for record in records:
            item = _item(record, labels)
            if all(item["value"].get(k) == v for k, v in wanted.items()):
                found.append(item)
    if query:
        found.sort(key=lambda i: -(i["score"] or 0.0))
    else:
        found.sort(key=lambda i: str(i["updated_at"]), reverse=True)
    return found[offset : offset + limit]


def store_namespaces(
    who: Who,
    *,
    prefix: list[str] | None = None,
    suffix: list[str] | None = None,
    max_depth: int | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[list[str]]:
    """``who``'s namespaces (each a list of labels): under ``prefix``, ending with
    ``suffix``, cut to ``max_depth`` labels, without repeats."""
    out: list[list[str]] = []
    for name in _store_collections(who, prefix or []):
        labels = _namespace_of(name)
        if suffix and labels[-len(suffix) :] != suffix:
            continue
        if max_depth is not None:
            labels = labels[:max_depth]
        if labels not in out:
            out.append(labels)
    return out[offset : offset + limit]
