"""Assistants: ``POST /assistants/search`` and ``/assistants/count``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import F, QuerySet
from django.db.models.fields.json import KeyTransform

from criogen.storage.models import Assistant

__all__ = ["count_assistants", "search_assistants"]


def _assistants(
    metadata: Mapping[str, Any] | None, graph_id: str | None, name: str | None
) -> QuerySet[Assistant]:
    from criogen.registry import graph_ids  # settings' graphs and langgraph.json's

    qs = Assistant.objects.filter(graph_id__in=graph_ids())
    if graph_id:
        qs = qs.filter(graph_id=graph_id)
    if name:
        qs = qs.filter(name__icontains=name)
    for n, (key, value) in enumerate((metadata or {}).items()):
        qs = qs.alias(**{f"_m{n}": KeyTransform(key, "metadata")}).filter(**{f"_m{n}": value})
    return qs


def search_assistants(
    *,
    metadata: Mapping[str, Any] | None = None,
    graph_id: str | None = None,
    name: str | None = None,
    sort_by: str | None = None,
    sort_order: str | None = None,
    limit: int = 10,
    offset: int = 0,
) -> list[Assistant]:
    """Assistants of the registered graphs with every ``metadata`` key equal, of
    ``graph_id``, whose name contains ``name``; sorted by ``sort_by`` (default
    ``created_at``, newest first), then by id. Default assistants are not made here:
    :func:`criogen.services.assistants.ensure_default_assistants` does that."""
    field = sort_by or "created_at"
    descending = (sort_order or "desc") == "desc"
    qs = _assistants(metadata, graph_id, name).order_by(
        F(field).desc() if descending else F(field).asc(), "assistant_id"
    )
    return list(qs[offset : offset + limit])


def count_assistants(
    *,
    metadata: Mapping[str, Any] | None = None,
    graph_id: str | None = None,
    name: str | None = None,
) -> int:
    """How many assistants :func:`search_assistants` would find in all."""
    return int(_assistants(metadata, graph_id, name).count())
