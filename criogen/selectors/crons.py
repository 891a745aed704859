"""Crons, read: one by id, and ``POST /runs/crons/search`` and ``/runs/crons/count``.

A cron belongs to its creator; operators see every cron, and another user's cron is not
found, exactly as if it did not exist (the rule of :mod:`criogen.selectors.visibility`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from django.db.models import F, QuerySet
from django.db.models.fields.json import KeyTransform

from criogen.engine.errors import NotFound
from criogen.selectors.visibility import Who, narrowed
from criogen.storage.models import Cron

__all__ = ["count_crons", "cron_for", "search_crons"]


def cron_for(who: Who, cron_id: str) -> Cron:
    """``who``'s cron ``cron_id`` (operators: any cron); else NotFound naming
    ``cron_id`` (also for an id that is not a UUID)."""
    try:
        key = uuid.UUID(str(cron_id))
    except ValueError:
        raise NotFound(f"no cron {cron_id!r}.", field="cron_id") from None
    cron = narrowed(who, Cron.objects.all(), "user").filter(pk=key).first()
    if cron is None:
        raise NotFound(f"no cron {cron_id!r}.", field="cron_id")
    return cron


def _filtered(
    who: Who,
    *,
    assistant_id: str | None,
    thread_id: str | None,
    metadata: Mapping[str, Any] | None,
) -> QuerySet[Cron]:
    qs = narrowed(who, Cron.objects.all(), "user")
    if assistant_id:
        qs = qs.filter(assistant_id=assistant_id)
    if thread_id:
        qs = qs.filter(thread_id=thread_id)
    for n, (key, value) in enumerate((metadata or {}).items()):
        qs = qs.alias(**{f"_m{n}": KeyTransform(key, "metadata")}).filter(**{f"_m{n}": value})
    return qs


def search_crons(
    who: Who,
    *,
    assistant_id: str | None = None,
    thread_id: str | None = None,
    enabled: bool | None = None,
    metadata: Mapping[str, Any] | None = None,
    sort_by: str | None = None,
    sort_order: str | None = None,
    limit: int = 10,
    offset: int = 0,
) -> list[Cron]:
    """``who``'s crons of the assistant ``assistant_id`` (its UUID, as crons store it),
    on ``thread_id``, ``enabled`` or not, with every ``metadata`` key equal; sorted by
    ``sort_by`` (default ``created_at``; ``desc`` puts crons without a value last),
    then by id."""
    qs = _filtered(who, assistant_id=assistant_id, thread_id=thread_id, metadata=metadata)
    if enabled is not None:
        qs = qs.filter(enabled=enabled)
    field = {"cron_id": "pk", "thread_id": "thread_id"}.get(
        sort_by or "created_at", sort_by or "created_at"
    )
    descending = (sort_order or "desc") == "desc"
    qs = qs.order_by(F(field).desc(nulls_last=True) if descending else F(field).asc(), "pk")
    return list(qs[offset : offset + limit])


def count_crons(
    who: Who,
    *,
    assistant_id: str | None = None,
    thread_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> int:
    """How many of ``who``'s crons match (as :func:`search_crons` filters them)."""
    return int(
        _filtered(who, assistant_id=assistant_id, thread_id=thread_id, metadata=metadata).count()
    )
