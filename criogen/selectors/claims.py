"""Claims as the console reads them: who holds which suspended thread, and the inbox's
"mine" / "unclaimed" narrowing.

A claim row counts only while its ``version`` is the thread's head version (see
:class:`~criogen.storage.models.Claim`): an answered suspension's claim is not shown.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Exists, OuterRef, QuerySet

from criogen.storage.models import Claim, Thread

__all__ = ["CLAIM_FILTERS", "claim_of", "claims_of", "filter_claimed"]

CLAIM_FILTERS = ("all", "mine", "unclaimed")
"""The inbox's ``claim`` filter values."""


def claim_of(thread: Thread) -> Claim | None:
    """The live claim on ``thread`` (with its user), or None."""
    return (
        Claim.objects.select_related("user")
        .filter(thread_id=thread.pk, version=thread.head_version)
        .first()
    )


def claims_of(threads: Iterable[Thread]) -> dict[str, Claim]:
    """The live claims of ``threads`` by thread id: none when their claim rows were
    selected with them (``select_related("claim__user")``, as the inbox page does), else
    one query for the whole page."""
    threads = list(threads)
    found: dict[str, Claim] = {}
    missing = {}
    for t in threads:
        if Thread.claim.is_cached(t):  # type: ignore[attr-defined]
            claim = getattr(t, "claim", None)
            if claim is not None and claim.version == t.head_version:
                found[t.pk] = claim
        else:
            missing[t.pk] = t.head_version
    if missing:
        rows = Claim.objects.select_related("user").filter(thread_id__in=list(missing))
        found.update({c.thread_id: c for c in rows if missing.get(c.thread_id) == c.version})
    return found


def filter_claimed(qs: QuerySet[Thread], claim: str, user_id: Any) -> QuerySet[Thread]:
    """Narrow threads to those ``user_id`` holds (``mine``) or nobody holds
    (``unclaimed``); ``all`` (or empty) leaves ``qs`` as it is."""
    live = Claim.objects.filter(thread=OuterRef("pk"), version=OuterRef("head_version"))
    if claim == "mine":
        return qs.filter(Exists(live.filter(user_id=user_id)))
    if claim == "unclaimed":
        return qs.filter(~Exists(live))
    return qs
