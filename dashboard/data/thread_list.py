"""The threads list: its search, pages and counts per head status."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from criogen import selectors
from criogen.engine.errors import InvalidArgument
from criogen.selectors import HEAD_STATUSES as STATUSES
from criogen.selectors import viewer
from dashboard.data.common import User

if TYPE_CHECKING:
    from criogen.storage.models import Thread

__all__ = [
    "STATUSES",
    "THREADS_PAGE",
    "BadFilter",
    "ThreadFilters",
    "status_counts",
    "threads_page",
]

THREADS_PAGE = 50
"""Rows per page of the threads list."""


@dataclass
class ThreadFilters:
    """Search of the threads list."""

    q: str = ""
    """A thread id (or part of one)."""
    status: str = ""
    """One of :data:`STATUSES`; anything else is kept as typed and refused by
    :func:`threads_page` (a search for ``?status=nope`` must not list every thread)."""
    assistant: str = ""
    metadata: str = ""
    """``key=value`` (exact match on a top-level metadata key)."""

    @classmethod
    def from_query(cls, query: Any) -> ThreadFilters:
        return cls(
            q=str(query.get("q") or "").strip(),
            status=str(query.get("status") or "").strip(),
            assistant=str(query.get("assistant") or "").strip(),
            metadata=str(query.get("metadata") or "").strip(),
        )

    def as_query(self) -> str:
        from urllib.parse import urlencode

        items = {
            "q": self.q,
            "status": self.status,
            "assistant": self.assistant,
            "metadata": self.metadata,
        }
        return urlencode({k: v for k, v in items.items() if v})


class BadFilter(ValueError):
    """A search the threads list cannot run; the message names the field."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name


def threads_page(
    user: User, filters: ThreadFilters, *, after: str = "", size: int = THREADS_PAGE
) -> tuple[list[Thread], str]:
    """One page of threads, newest update first, and the cursor of the next page ('' at
    end) (:func:`criogen.selectors.threads_page`).

    Raises:
        BadFilter: an unknown ``status``, a malformed ``metadata`` search or cursor.
    """
    try:
        return selectors.threads_page(
            viewer(user),
            q=filters.q,
            status=filters.status,
            assistant=filters.assistant,
            metadata=filters.metadata,
            after=after,
            size=size,
        )
    except InvalidArgument as exc:
        raise BadFilter(str(exc.details.get("field") or ""), exc.message) from None


def status_counts(user: User) -> dict[str, int]:
    """Threads per head status (one grouped query)."""
    return selectors.status_counts(viewer(user))
