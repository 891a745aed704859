"""The inbox: suspended threads as cards, the calls waiting for a decision, filters."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from criogen import selectors
from criogen.selectors import checkpoint_body as body_of
from criogen.selectors import viewer
from dashboard.data.common import User, assistant_of, thread_url

if TYPE_CHECKING:
    from criogen.storage.models import Thread

__all__ = [
    "INBOX_LIMIT",
    "InboxFilters",
    "InboxItem",
    "InboxPage",
    "WaitingCall",
    "describe_interrupts",
    "inbox_assistants",
    "inbox_count",
    "inbox_items",
    "inbox_listing",
]

INBOX_LIMIT = 50
"""At most this many cards on the inbox page (the rest are counted, not shown)."""


@dataclass
class WaitingCall:
    """One tool call waiting for a decision (agents, contract 4)."""

    index: int
    call_id: str
    name: str
    args: Any
    description: str = ""
    allowed: list[str] = field(default_factory=lambda: ["approve", "edit", "reject"])
    args_schema: dict[str, Any] | None = None
    typed: str = ""
    """Arguments as the operator typed them (shown again when the form is refused)."""
    typed_decision: str = ""
    """The per-call decision the operator chose (kept when the form is refused)."""
    typed_reason: str = ""
    """The per-call rejection reason the operator typed (kept when the form is refused)."""
    digest: str = ""
    """SHA-256 of the call's arguments as the operator saw them (sent with the decision,
    so a decision made for other arguments fails closed)."""


@dataclass
class InboxItem:
    """A suspended thread as the inbox shows it."""

    thread: Thread
    checkpoint_id: str
    version: int
    waiting_since: datetime
    assistant: str
    kind: str
    """``approval`` (an agent waits on tool calls) or ``workflow`` (a node suspended)."""
    reason: str = ""
    payload: Any = None
    calls: list[WaitingCall] = field(default_factory=list)
    interrupts: list[dict[str, Any]] = field(default_factory=list)
    claim: Any = None
    """The operator's claim on this suspension (a ``Claim`` with its user), or None."""

    # Cached: a card links its thread twice and its decision URL twice.
    @cached_property
    def url(self) -> str:
        return thread_url(self.thread.pk)

    @cached_property
    def act_url(self) -> str:
        return thread_url(self.thread.pk, "act/")

    @property
    def waited(self) -> timedelta:
        return timezone.now() - self.waiting_since

    @property
    def tools(self) -> list[str]:
        return [c.name for c in self.calls]


def describe_interrupts(
    interrupts: list[dict[str, Any]],
) -> tuple[str, str, Any, list[WaitingCall]]:
    """``(kind, reason, payload, calls)`` for the pending interrupts of a checkpoint.

    An agent's approval request (contract 4) yields its calls; anything else is a workflow
    suspension shown by its reason and payload.
    """
    for interrupt in interrupts:
        payload = interrupt.get("payload")
        if isinstance(payload, dict) and isinstance(payload.get("action_requests"), list):
            configs = {
                c.get("action_name"): c
                for c in payload.get("review_configs") or []
                if isinstance(c, dict)
            }
            pending = [c for c in interrupt.get("calls") or [] if isinstance(c, dict)]
            calls = []
            for i, request in enumerate(payload["action_requests"]):
                if not isinstance(request, dict):
                    continue
                config = configs.get(request.get("name"), {})
                calls.append(
                    WaitingCall(
                        index=i,
                        call_id=str(pending[i].get("id", "")) if i < len(pending) else str(i),
                        name=str(request.get("name", "")),
                        args=request.get("args"),
                        description=str(request.get("description") or ""),
                        allowed=list(
                            config.get("allowed_decisions") or ["approve", "edit", "reject"]
                        ),
                        args_schema=config.get("args_schema"),
                        digest=str(pending[i].get("digest") or "") if i < len(pending) else "",
                    )
                )
            return "approval", str(interrupt.get("reason") or "approval"), payload, calls
    if interrupts:
        first = interrupts[0]
        return "workflow", str(first.get("reason") or ""), first.get("payload"), []
    return "workflow", "", None, []


@dataclass
class InboxFilters:
    """What the inbox is narrowed to (all optional)."""

    assistant: str = ""
    tool: str = ""
    older_than: int | None = None
    """Minutes: only threads waiting at least this long."""
    q: str = ""
    claim: str = ""
    """``mine`` (held by the viewer), ``unclaimed``, or empty for all."""
    since_from: date | None = None
    """Only threads waiting since this day or later (the ``waiting_from`` parameter)."""
    since_to: date | None = None
    """Only threads waiting since this day or earlier (the ``waiting_to`` parameter)."""
    text: str = ""
    """Words to find in the waiting calls' tools and arguments or a workflow's payload."""
    after: str = ""
    """The page cursor (``updated_at|id`` of the last card of the page before)."""

    @classmethod
    def from_query(cls, query: Any) -> InboxFilters:
        """Read the filters from a QueryDict (bad numbers and dates are ignored, not
        errors; a bad cursor is refused by the selector)."""
        older = str(query.get("older_than") or "").strip()
        claim = str(query.get("claim") or "").strip()
        return cls(
            assistant=str(query.get("assistant") or "").strip(),
            tool=str(query.get("tool") or "").strip(),
            older_than=int(older) if older.isdigit() else None,
            q=str(query.get("q") or "").strip(),
            claim=claim if claim in ("mine", "unclaimed") else "",
            since_from=_day(query.get("waiting_from")),
            since_to=_day(query.get("waiting_to")),
            text=str(query.get("text") or "").strip()[:200],
            after=str(query.get("after") or "").strip(),
        )

    def as_query(self, *, page: bool = True) -> str:
        """The filters as a URL query string (for the live socket and links); with
        ``page=False`` without the page cursor (the first page of the same filters)."""
        from urllib.parse import urlencode

        items = {
            "assistant": self.assistant,
            "tool": self.tool,
            "older_than": "" if self.older_than is None else str(self.older_than),
            "q": self.q,
            "claim": self.claim,
            "waiting_from": self.since_from.isoformat() if self.since_from else "",
            "waiting_to": self.since_to.isoformat() if self.since_to else "",
            "text": self.text,
            "after": self.after if page else "",
        }
        return urlencode({k: v for k, v in items.items() if v})

    @property
    def filter_query(self) -> str:
        """The filters without the page cursor (links to the first page, next pages)."""
        return self.as_query(page=False)

    @property
    def active(self) -> bool:
        return bool(self.as_query())

    @property
    def narrowed(self) -> bool:
        """Whether any filter (not only a page cursor) is set."""
        return bool(self.filter_query)


def _day(value: Any) -> date | None:
    """A ``YYYY-MM-DD`` day, or None when absent or malformed."""
    try:
        return date.fromisoformat(str(value or "").strip())
    except ValueError:
        return None


def _day_start(day: date | None) -> datetime | None:
    """The first moment of ``day`` in the current time zone."""
    if day is None:
        return None
    return timezone.make_aware(datetime.combine(day, time.min))


@dataclass
class InboxPage:
    """One page of the inbox."""

    items: list[InboxItem]
    total: int
    """How many suspended threads match the filters in all (every page)."""
    next_cursor: str = ""
    """The cursor of the next page ('' on the last)."""
    error: Any = None
    """An :class:`~criogen.engine.errors.InvalidArgument` (bad cursor, content search
    while encrypted) when the page could not be listed; its ``field`` names the input."""


def inbox_items(
    user: User, filters: InboxFilters | None = None, *, limit: int = INBOX_LIMIT
) -> tuple[list[InboxItem], int]:
    """The inbox cards (at most ``limit``) and how many suspended threads match in all."""
    page = inbox_listing(user, filters, limit=limit)
    return page.items, page.total


def inbox_listing(
    user: User, filters: InboxFilters | None = None, *, limit: int = INBOX_LIMIT
) -> InboxPage:
    """One page of inbox cards (at most ``limit``, after ``filters.after``), how many
    match in all, and the next page's cursor; a refused filter is the page's ``error``.

    Three queries whatever the number of rows: the count, the threads (with owners and
    claims), and their head checkpoints.
    """
    from criogen.engine.errors import InvalidArgument

    f = filters or InboxFilters()
    try:
        threads, heads, total, cursor = selectors.inbox_page(
            viewer(user), limit=limit, after=f.after, **_inbox_filters(f), claimer=user.pk
        )
    except InvalidArgument as exc:
        return InboxPage(items=[], total=0, error=exc)
    claims = selectors.claims_of(threads)
    items = []
    for thread in threads:
        row = heads.get(thread.head_id)
        interrupts = list(body_of(row).get("interrupts") or [])
        kind, reason, payload, calls = describe_interrupts(interrupts)
        items.append(
            InboxItem(
                thread=thread,
                checkpoint_id=thread.head_id,
                version=thread.head_version,
                waiting_since=row.created_at if row else thread.updated_at,
                assistant=assistant_of(thread),
                kind=kind,
                reason=reason,
                payload=payload,
                calls=calls,
                interrupts=interrupts,
                claim=claims.get(thread.pk),
            )
        )
    return InboxPage(items=items, total=total, next_cursor=cursor)


def _inbox_filters(filters: InboxFilters | None) -> dict[str, Any]:
    f = filters or InboxFilters()
    return {
        "assistant": f.assistant,
        "tool": f.tool,
        "older_than": f.older_than,
        "q": f.q,
        "claim": f.claim,
        "waiting_from": _day_start(f.since_from),
        "waiting_to": _day_start(f.since_to + timedelta(days=1)) if f.since_to else None,
        "text": f.text,
    }


def inbox_count(user: User) -> int:
    """How many suspended threads ``user`` may see (the number in the navigation)."""
    if not user.is_authenticated:
        return 0
    return selectors.suspended_threads(viewer(user)).count()


def inbox_assistants(user: User) -> list[str]:
    """Assistants seen among the suspended threads (for the filter's choices), sorted."""
    return selectors.inbox_assistants(viewer(user))
