"""The operator console's threads list: keyset pages and counts per head status."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.db.models import Q

from criogen.engine.errors import InvalidArgument
from criogen.selectors.visibility import Who, visible_threads
from criogen.storage.models import Thread

__all__ = ["HEAD_STATUSES", "status_counts", "threads_page"]

HEAD_STATUSES = ("in_progress", "suspended", "completed", "failed")
"""The head statuses the threads list filters and counts by."""


def threads_page(
    who: Who,
    *,
    q: str = "",
    status: str = "",
    assistant: str = "",
    metadata: str = "",
    after: str = "",
    size: int = 50,
) -> tuple[list[Thread], str]:
    """One page of the threads ``who`` may see, newest update first, and the cursor of
    the next page ('' at the end): ids containing ``q``, head ``status``, of
    ``assistant``, with ``metadata`` ``key=value``, after the cursor ``after``.

    Keyset pagination on ``(updated_at, id)`` (indexed), so page 2,000 costs what page 1
    does and no COUNT over 100,000 rows is run.

    Raises:
        InvalidArgument: an unknown ``status``, a malformed ``metadata`` search or
            cursor (``field`` names which).
    """
    qs = visible_threads(who)
    if q:
        qs = qs.filter(id__icontains=q)
    if status and status not in HEAD_STATUSES:
        raise InvalidArgument(
            f"{status!r} is not a status: use one of {', '.join(HEAD_STATUSES)}.",
            field="status",
        )
    if status:
        qs = qs.filter(head_status=status)
    if assistant:
        qs = qs.filter(Q(metadata__graph_id=assistant) | Q(metadata__assistant_id=assistant))
    if metadata:
        key, sep, value = metadata.partition("=")
        key = key.strip()
        if not sep or not key or not key.replace("_", "").replace("-", "").isalnum():
            raise InvalidArgument(
                "metadata search must look like key=value (letters, digits, _ or -).",
                field="metadata",
            )
        qs = qs.filter(**{f"metadata__{key}": _metadata_value(value.strip())})
    if after:
        stamp, sep, last_id = after.partition("|")
        try:
            when = datetime.fromisoformat(stamp)
        except ValueError:
            raise InvalidArgument(
                "the page cursor is malformed; start again.", field="after"
            ) from None
        if not sep:
            raise InvalidArgument("the page cursor is malformed; start again.", field="after")
        qs = qs.filter(Q(updated_at__lt=when) | Q(updated_at=when, id__lt=last_id))
    rows = list(qs.select_related("owner").order_by("-updated_at", "-id")[: size + 1])
    more = len(rows) > size
    rows = rows[:size]
    return rows, (_cursor(rows[-1]) if more and rows else "")


def _cursor(thread: Thread) -> str:
    """The keyset cursor after ``thread`` in the list (``updated_at|id``)."""
    return f"{thread.updated_at.isoformat()}|{thread.id}"


def _metadata_value(text: str) -> Any:
    """A metadata search value: JSON when it parses (numbers, true, null), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def status_counts(who: Who) -> dict[str, int]:
    """The threads ``who`` may see, per head status (one grouped query)."""
    from django.db.models import Count

    counts = dict.fromkeys(HEAD_STATUSES, 0)
    for row in visible_threads(who).values("head_status").annotate(n=Count("id")):
        if row["head_status"] in counts:
            counts[row["head_status"]] = row["n"]
    return counts
