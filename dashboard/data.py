"""Read-side helpers of the dashboard: what each page shows, in a constant number of queries.

Pages and consumers both call these, so an HTTP response and a live push render the same
rows. The queries are :mod:`criogen.selectors`'; this module turns the signed-in
``user`` into who is asking (:func:`criogen.selectors.viewer`: operators see every
thread, other users only their own, contract 5) and the selectors' rows into what the
templates show. Nothing here writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import Http404
from django.utils import timezone

from criogen import selectors
from criogen.engine.errors import InvalidArgument, ThreadNotFound
from criogen.selectors import HEAD_STATUSES as STATUSES
from criogen.selectors import TimelineEntry, can_operate, open_json, viewer
from criogen.selectors import checkpoint_body as body_of

if TYPE_CHECKING:
    from criogen.storage.models import Thread

__all__ = [
    "STATUSES",
    "BadFilter",
    "InboxFilters",
    "InboxItem",
    "ThreadFilters",
    "TimelineEntry",
    "WaitingCall",
    "assistant_of",
    "body_of",
    "can_operate",
    "describe_interrupts",
    "get_thread_for_user",
    "inbox_assistants",
    "inbox_count",
    "inbox_items",
    "open_json",
    "state_diff",
    "status_counts",
    "thread_url",
    "threads_page",
    "timeline",
    "transcript",
]

User = AbstractBaseUser | AnonymousUser

INBOX_LIMIT = 50
"""At most this many cards on the inbox page (the rest are counted, not shown)."""
THREADS_PAGE = 50
"""Rows per page of the threads list."""
TIMELINE_PAGE = 100
"""Checkpoints per page of a thread's timeline (newest first; older ones are paged)."""


def get_thread_for_user(user: User, thread_id: str) -> Thread:
    """The thread with its owner, or Http404 when it does not exist or ``user`` may not
    see it (:func:`criogen.selectors.thread_for`)."""
    try:
        return selectors.thread_for(viewer(user), thread_id, owner=True)
    except ThreadNotFound:
        raise Http404(f"No thread {thread_id!r}.") from None


def thread_url(thread_id: str, suffix: str = "") -> str:
    """``/ui/threads/<id>/<suffix>`` without a ``reverse()`` per row (lists render many)."""
    from urllib.parse import quote

    from django.urls import get_script_prefix

    from dashboard.converters import encode_thread_id

    segment = quote(encode_thread_id(thread_id), safe="~")
    return f"{_threads_root(get_script_prefix())}{segment}/{suffix}"


@lru_cache(maxsize=16)
def _threads_root(prefix: str) -> str:
    """``reverse('dashboard:threads')`` under the script ``prefix`` (the cache key: the
    URL only changes with it). An inbox page links each card several times, and each
    ``reverse()`` cost more than the rest of the card's row."""
    from django.urls import reverse

    return reverse("dashboard:threads")


def assistant_of(thread: Thread) -> str:
    """The assistant (or graph) a thread runs, from its metadata; '' when unknown."""
    meta = thread.metadata if isinstance(thread.metadata, dict) else {}
    return str(meta.get("graph_id") or meta.get("assistant_id") or "")


# -- inbox ---------------------------------------------------------------------------------


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

    @property
    def may_approve(self) -> bool:
        """Whether every waiting call allows ``approve`` (an "Approve" button)."""
        return all("approve" in c.allowed for c in self.calls)

    @property
    def may_reject(self) -> bool:
        """Whether every waiting call allows ``reject`` (a "Reject" button)."""
        return all("reject" in c.allowed for c in self.calls)


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

    @classmethod
    def from_query(cls, query: Any) -> InboxFilters:
        """Read the filters from a QueryDict (bad numbers are ignored, not errors)."""
        older = str(query.get("older_than") or "").strip()
        return cls(
            assistant=str(query.get("assistant") or "").strip(),
            tool=str(query.get("tool") or "").strip(),
            older_than=int(older) if older.isdigit() else None,
            q=str(query.get("q") or "").strip(),
        )

    def as_query(self) -> str:
        """The filters as a URL query string (for the live socket and links)."""
        from urllib.parse import urlencode

        items = {
            "assistant": self.assistant,
            "tool": self.tool,
            "older_than": "" if self.older_than is None else str(self.older_than),
            "q": self.q,
        }
        return urlencode({k: v for k, v in items.items() if v})

    @property
    def active(self) -> bool:
        return bool(self.as_query())


def inbox_items(
    user: User, filters: InboxFilters | None = None, *, limit: int = INBOX_LIMIT
) -> tuple[list[InboxItem], int]:
    """The inbox cards (at most ``limit``) and how many suspended threads match in all.

    Three queries whatever the number of rows: the count, the threads (with owners), and
    their head checkpoints.
    """
    threads, heads, total = selectors.inbox_page(
        viewer(user), limit=limit, **_inbox_filters(filters)
    )
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
            )
        )
    return items, total


def _inbox_filters(filters: InboxFilters | None) -> dict[str, Any]:
    f = filters or InboxFilters()
    return {"assistant": f.assistant, "tool": f.tool, "older_than": f.older_than, "q": f.q}


def inbox_count(user: User) -> int:
    """How many suspended threads ``user`` may see (the number in the navigation)."""
    if not user.is_authenticated:
        return 0
    return selectors.suspended_threads(viewer(user)).count()


def inbox_assistants(user: User) -> list[str]:
    """Assistants seen among the suspended threads (for the filter's choices), sorted."""
    return selectors.inbox_assistants(viewer(user))


# -- threads list ---------------------------------------------------------------------------


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


# -- timeline --------------------------------------------------------------------------------


def timeline(
    thread: Thread, *, before: int | None = None, size: int = TIMELINE_PAGE
) -> list[TimelineEntry]:
    """Checkpoints of ``thread``, newest first, without their bodies (one query)."""
    return selectors.timeline(thread.pk, before=before, size=size)


def state_diff(before: dict[str, Any] | None, after: dict[str, Any]) -> list[dict[str, Any]]:
    """What changed from ``before`` to ``after``, key by key, sorted by key.

    Each item is ``{"key", "op", "old", "new"}`` with op ``added``, ``removed``,
    ``changed`` or ``appended`` (a list that grew at its end: ``new`` holds only the new
    items).
    """
    before = before or {}
    out: list[dict[str, Any]] = []
    for key in sorted(set(before) | set(after)):
        if key not in before:
            out.append({"key": key, "op": "added", "old": None, "new": after[key]})
        elif key not in after:
            out.append({"key": key, "op": "removed", "old": before[key], "new": None})
        elif before[key] != after[key]:
            old, new = before[key], after[key]
            if isinstance(old, list) and isinstance(new, list) and new[: len(old)] == old:
                out.append({"key": key, "op": "appended", "old": None, "new": new[len(old) :]})
            else:
                out.append({"key": key, "op": "changed", "old": old, "new": new})
    return out


def transcript(state: dict[str, Any]) -> list[dict[str, Any]]:
    """``state["messages"]`` as LangChain-style dicts ready for chat bubbles ([] if none)."""
    messages = state.get("messages")
    if not isinstance(messages, list):
        return []
    out = []
    for m in messages:
        if not isinstance(m, dict):
            continue
        kind = str(m.get("type") or m.get("role") or "ai")
        kind = {"user": "human", "assistant": "ai", "developer": "system"}.get(kind, kind)
        content = m.get("content")
        if isinstance(content, list):
            text = "\n".join(
                str(b.get("text", "")) if isinstance(b, dict) else str(b) for b in content
            )
        else:
            text = "" if content is None else str(content)
        out.append(
            {
                "type": kind,
                "text": text,
                "tool_calls": [c for c in m.get("tool_calls") or [] if isinstance(c, dict)],
                "name": m.get("name") or "",
                "tool_call_id": m.get("tool_call_id") or "",
                "status": m.get("status") or "",
            }
        )
    return out
