"""The inbox: suspended threads as cards, the calls waiting for a decision, filters."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
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
    "WaitingCall",
    "describe_interrupts",
    "inbox_assistants",
    "inbox_count",
    "inbox_items",
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

    @classmethod
    def from_query(cls, query: Any) -> InboxFilters:
        """Read the filters from a QueryDict (bad numbers are ignored, not errors)."""
        older = str(query.get("older_than") or "").strip()
        claim = str(query.get("claim") or "").strip()
        return cls(
            assistant=str(query.get("assistant") or "").strip(),
            tool=str(query.get("tool") or "").strip(),
            older_than=int(older) if older.isdigit() else None,
            q=str(query.get("q") or "").strip(),
            claim=claim if claim in ("mine", "unclaimed") else "",
        )

    def as_query(self) -> str:
        """The filters as a URL query string (for the live socket and links)."""
        from urllib.parse import urlencode

        items = {
            "assistant": self.assistant,
            "tool": self.tool,
            "older_than": "" if self.older_than is None else str(self.older_than),
            "q": self.q,
            "claim": self.claim,
        }
        return urlencode({k: v for k, v in items.items() if v})

    @property
    def active(self) -> bool:
        return bool(self.as_query())


def inbox_items(
    user: User, filters: InboxFilters | None = None, *, limit: int = INBOX_LIMIT
) -> tuple[list[InboxItem], int]:
    """The inbox cards (at most ``limit``) and how many suspended threads match in all.

    Three queries whatever the number of rows: the count, the threads (with owners and
    claims), and their head checkpoints.
    """
    threads, heads, total = selectors.inbox_page(
        viewer(user), limit=limit, **_inbox_filters(filters), claimer=user.pk
    )
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
    return items, total


def _inbox_filters(filters: InboxFilters | None) -> dict[str, Any]:
    f = filters or InboxFilters()
    return {
        "assistant": f.assistant,
        "tool": f.tool,
        "older_than": f.older_than,
        "q": f.q,
        "claim": f.claim,
    }


def inbox_count(user: User) -> int:
    """How many suspended threads ``user`` may see (the number in the navigation)."""
    if not user.is_authenticated:
        return 0
    return selectors.suspended_threads(viewer(user)).count()


def inbox_assistants(user: User) -> list[str]:
    """Assistants seen among the suspended threads (for the filter's choices), sorted."""
    return selectors.inbox_assistants(viewer(user))
