"""Read-side helpers of the dashboard: what each page shows, in a constant number of queries.

Pages and consumers both call these, so an HTTP response and a live push render the same
rows. They read the ORM tables (``criogen.storage.models``) and the engine's storage for
states; they never write. Every function takes the signed-in ``user`` and applies the
visibility rule of contract 5: operators see every thread, other users only their own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property, lru_cache
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import connections
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.db.models.fields.json import KeyTransform
from django.http import Http404
from django.utils import timezone

from criogen.storage.models import Checkpoint as CheckpointRow
from criogen.storage.models import Thread

User = AbstractBaseUser | AnonymousUser

INBOX_LIMIT = 50
"""At most this many cards on the inbox page (the rest are counted, not shown)."""
THREADS_PAGE = 50
"""Rows per page of the threads list."""
TIMELINE_PAGE = 100
"""Checkpoints per page of a thread's timeline (newest first; older ones are paged)."""
STATUSES = ("in_progress", "suspended", "completed", "failed")


def can_operate(user: User) -> bool:
    """Whether ``user`` may act on threads: staff, or the ``criogen.operate`` permission."""
    if not user.is_authenticated:
        return False
    return bool(user.is_staff or user.has_perm("criogen.operate"))  # type: ignore[union-attr]


def visible_threads(user: User) -> QuerySet[Thread]:
    """The threads ``user`` may see (contract 5): all for operators, else their own."""
    qs = Thread.objects.all()
    if not can_operate(user):
        qs = qs.filter(owner_id=getattr(user, "pk", None))
    return qs


def get_thread_for_user(user: User, thread_id: str) -> Thread:
    """The thread, or Http404 when it does not exist or ``user`` may not see it."""
    try:
        return visible_threads(user).select_related("owner").get(pk=thread_id)
    except Thread.DoesNotExist:
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


def open_json(text: str | None) -> Any:
    """Decode a JSON column the engine wrote, opening it first if it is encrypted at rest.

    Uses the shared storage's ``_open`` (the one place that knows the key); None when the
    text cannot be read (no key, or not JSON).
    """
    if not text:
        return None
    from criogen.registry import storage

    opener = getattr(storage(), "_open", None)
    try:
        return json.loads(opener(text) if opener is not None else text)
    except Exception:  # noqa: BLE001 - unreadable (wrong key): shown as missing, not a crash
        return None


def body_of(row: CheckpointRow | None) -> dict[str, Any]:
    """The decoded body of a checkpoint row ({} when absent or unreadable)."""
    if row is None:
        return {}
    data = open_json(row.body)
    return data if isinstance(data, dict) else {}


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


def suspended_threads(user: User, filters: InboxFilters | None = None) -> QuerySet[Thread]:
    """Suspended threads ``user`` may see, oldest waiting first, narrowed by ``filters``."""
    f = filters or InboxFilters()
    # Thread.updated_at moves with the head, so for a suspended thread it is the moment it
    # suspended; (head_status, updated_at) is indexed for exactly this query.
    qs = visible_threads(user).filter(head_status="suspended")
    if f.assistant:
        qs = qs.filter(Q(metadata__graph_id=f.assistant) | Q(metadata__assistant_id=f.assistant))
    if f.tool:
        # The body is JSON text written compactly by the engine, so a call to the tool
        # appears as "name":"<tool>" in the head checkpoint's body.
        needle = '"name":' + json.dumps(f.tool, ensure_ascii=False)
        qs = qs.filter(
            Exists(CheckpointRow.objects.filter(id=OuterRef("head_id"), body__contains=needle))
        )
    if f.older_than is not None:
        qs = qs.filter(updated_at__lte=timezone.now() - timedelta(minutes=f.older_than))
    if f.q:
        qs = qs.filter(Q(id__icontains=f.q) | Q(owner__username__icontains=f.q))
    return qs.order_by("updated_at", "id")


def inbox_items(
    user: User, filters: InboxFilters | None = None, *, limit: int = INBOX_LIMIT
) -> tuple[list[InboxItem], int]:
    """The inbox cards (at most ``limit``) and how many suspended threads match in all.

    Three queries whatever the number of rows: the count, the threads (with owners), and
    their head checkpoints.
    """
    qs = suspended_threads(user, filters)
    total = qs.count()
    threads = list(qs.select_related("owner")[:limit])
    heads = {
        row.id: row
        for row in CheckpointRow.objects.filter(id__in=[t.head_id for t in threads if t.head_id])
    }
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


def inbox_count(user: User) -> int:
    """How many suspended threads ``user`` may see (the number in the navigation)."""
    if not user.is_authenticated:
        return 0
    return suspended_threads(user).count()


def inbox_assistants(user: User) -> list[str]:
    """Assistants seen among the suspended threads (for the filter's choices), sorted."""
    # The distinct pairs of the two keys, computed by the database: fetching and decoding
    # 1,000 metadata documents to find a handful of names was most of the page's queries'
    # time. The values are JSON text (as the ORM reads a JSON column), decoded here.
    rows = suspended_threads(user).values_list(
        KeyTransform("graph_id", "metadata"), KeyTransform("assistant_id", "metadata")
    )[:1000]
    sql, params = rows.query.sql_with_params()
    with connections[rows.db].cursor() as cur:
        cur.execute(f"SELECT DISTINCT * FROM ({sql}) AS seen", params)  # noqa: S608
        pairs = cur.fetchall()
    names = set()
    for graph, assistant in pairs:
        name = _json_value(graph) or _json_value(assistant)
        if name:
            names.add(str(name))
    return sorted(names)


def _json_value(value: Any) -> Any:
    """A JSON value as a raw cursor returns it: text to decode (None for SQL NULL)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


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


def encode_cursor(thread: Thread) -> str:
    """The keyset cursor after ``thread`` in the list (``updated_at|id``)."""
    return f"{thread.updated_at.isoformat()}|{thread.id}"


def threads_page(
    user: User, filters: ThreadFilters, *, after: str = "", size: int = THREADS_PAGE
) -> tuple[list[Thread], str]:
    """One page of threads, newest update first, and the cursor of the next page ('' at end).

    Keyset pagination on ``(updated_at, id)`` (indexed), so page 2,000 costs what page 1
    does and no COUNT over 100,000 rows is run.

    Raises:
        BadFilter: an unknown ``status``, a malformed ``metadata`` search or cursor.
    """
    qs = visible_threads(user)
    if filters.q:
        qs = qs.filter(id__icontains=filters.q)
    if filters.status and filters.status not in STATUSES:
        raise BadFilter(
            "status",
            f"{filters.status!r} is not a status: use one of {', '.join(STATUSES)}.",
        )
    if filters.status:
        qs = qs.filter(head_status=filters.status)
    if filters.assistant:
        qs = qs.filter(
            Q(metadata__graph_id=filters.assistant) | Q(metadata__assistant_id=filters.assistant)
        )
    if filters.metadata:
        key, sep, value = filters.metadata.partition("=")
        key = key.strip()
        if not sep or not key or not key.replace("_", "").replace("-", "").isalnum():
            raise BadFilter(
                "metadata", "metadata search must look like key=value (letters, digits, _ or -)."
            )
        qs = qs.filter(**{f"metadata__{key}": _metadata_value(value.strip())})
    if after:
        stamp, sep, last_id = after.partition("|")
        try:
            when = datetime.fromisoformat(stamp)
        except ValueError:
            raise BadFilter("after", "the page cursor is malformed; start again.") from None
        if not sep:
            raise BadFilter("after", "the page cursor is malformed; start again.")
        qs = qs.filter(Q(updated_at__lt=when) | Q(updated_at=when, id__lt=last_id))
    rows = list(qs.select_related("owner").order_by("-updated_at", "-id")[: size + 1])
    more = len(rows) > size
    rows = rows[:size]
    return rows, (encode_cursor(rows[-1]) if more and rows else "")


def _metadata_value(text: str) -> Any:
    """A metadata search value: JSON when it parses (numbers, true, null), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def status_counts(user: User) -> dict[str, int]:
    """Threads per head status (one grouped query)."""
    from django.db.models import Count

    counts = dict.fromkeys(STATUSES, 0)
    for row in visible_threads(user).values("head_status").annotate(n=Count("id")):
        if row["head_status"] in counts:
            counts[row["head_status"]] = row["n"]
    return counts


# -- timeline --------------------------------------------------------------------------------


@dataclass
class TimelineEntry:
    """One checkpoint as a row of the timeline (no state: that is loaded on demand)."""

    id: str
    version: int
    source: str
    status: str
    created_at: datetime
    run_id: str | None
    parent_id: str | None
    forked_from: int | None = None


def timeline(
    thread: Thread, *, before: int | None = None, size: int = TIMELINE_PAGE
) -> list[TimelineEntry]:
    """Checkpoints of ``thread``, newest first, without their bodies (one query)."""
    qs = CheckpointRow.objects.filter(thread_id=thread.pk)
    if before is not None:
        qs = qs.filter(version__lt=before)
    rows = qs.order_by("-version").values_list(
        "id", "version", "source", "status", "created_at", "run_id", "parent_id"
    )[:size]
    versions: dict[str, int] = {}
    entries = []
    for cid, version, source, status, created_at, run_id, parent_id in rows:
        versions[cid] = version
        entries.append(TimelineEntry(cid, version, source, status, created_at, run_id, parent_id))
    for entry in entries:
        if entry.source == "fork" and entry.parent_id:
            entry.forked_from = versions.get(entry.parent_id)
    return entries


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
