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
    """The live claims of ``threads`` by thread id: one query for a whole page."""
    heads = {t.pk: t.head_version for t in threads}
    if not heads:
        return {}
    rows = Claim.objects.select_related("user").filter(thread_id__in=list(heads))
    return {c.thread_id: c for c in rows if heads.get(c.thread_id) == c.version}


def filter_claimed(qs: QuerySet[Thread], claim: str, user_id: Any) -> QuerySet[Thread]:
    """Narrow threads to those ``user_id`` holds (``mine``) or nobody holds
    (``unclaimed``); ``all`` (or empty) leaves ``qs`` as it is."""
    live = Claim.objects.filter(thread=OuterRef("pk"), version=OuterRef("head_version"))
    if claim == "mine":
        return qs.filter(Exists(live.filter(user_id=user_id)))
    if claim == "unclaimed":
        return qs.filter(~Exists(live))
    return qs
