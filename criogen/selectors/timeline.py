"""Read-side queries for the operator console's timeline: what wrote each checkpoint,
how long its step took, and the decisions people made in between.

Reads only, a bounded number of queries per page, bodies decoded through
:func:`~criogen.selectors.checkpoints.open_json` (encrypted at rest when a key is set).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Exists, OuterRef

from criogen.selectors.checkpoints import TimelineEntry, open_json
from criogen.storage.models import AuditEvent, Decision
from criogen.storage.models import Checkpoint as CheckpointRow

__all__ = [
    "StepFacts",
    "TimelineEvent",
    "edited_calls",
    "timeline_events",
    "timeline_page",
]

SHOWN_ACTIONS = (
    "decide",
    "resume",
    "resolve",
    "goto",
    "retry",
    "rewind",
    "update_state",
    "input",
)
"""The audit actions the timeline shows as events (a person's or a door's doing)."""


@dataclass
class StepFacts:
    """What wrote one checkpoint, and how long it took."""

    wrote: str
    """The node(s) or agent phase that ran (``a``, ``model``, ``tools``), or who forked it."""
    took: timedelta | None
    """From the checkpoint before it, when both belong to the same run (else None)."""


@dataclass
class TimelineEvent:
    """A decision or other action that produced a checkpoint (from the audit trail)."""

    actor: str
    action: str
    door: str
    at: datetime
    details: dict[str, Any]
    edits: list[dict[str, Any]] = field(default_factory=list)
    """For agent edits: ``{"tool", "call_id", "original", "edited"}`` per edited call."""


def timeline_page(
    thread_id: str, *, before: int | None = None, size: int = 100
) -> tuple[list[TimelineEntry], dict[int, StepFacts], list[str]]:
    """One page of the timeline in one query: the checkpoints (newest first, older than
    version ``before``) as :func:`criogen.selectors.timeline` gives them, the
    :class:`StepFacts` of each, and the ids of those an audited action wrote (for
    :func:`timeline_events`, so a thread without any costs no second query)."""
    qs = CheckpointRow.objects.filter(thread_id=thread_id)
    if before is not None:
        qs = qs.filter(version__lt=before)
    audited = AuditEvent.objects.filter(
        thread_id=thread_id, after=OuterRef("pk"), action__in=SHOWN_ACTIONS
    )
    rows = list(
        qs.annotate(audited=Exists(audited))
        .order_by("-version")
        .values_list(
            "id",
            "version",
            "source",
            "status",
            "created_at",
            "run_id",
            "parent_id",
            "body",
            "audited",
        )[: size + 1]  # one more: the parent of the oldest, for its step's facts
    )
    parsed = {r[1]: (r[2], r[5], r[4], _body(r[7])) for r in rows}
    entries = [TimelineEntry(r[0], r[1], r[2], r[3], r[4], r[5], r[6]) for r in rows[:size]]
    versions = {e.id: e.version for e in entries}
    steps: dict[int, StepFacts] = {}
    for e in entries:
        if e.source == "fork" and e.parent_id:
            e.forked_from = versions.get(e.parent_id)
        source, run_id, created, body = parsed[e.version]
        parent = parsed.get(e.version - 1)
        steps[e.version] = StepFacts(_wrote(source, body, parent), _took(run_id, created, parent))
    return entries, steps, [r[0] for r in rows[:size] if r[8]]


def _body(text: str) -> dict[str, Any]:
    data = open_json(text)
    return data if isinstance(data, dict) else {}


def _wrote(source: str, body: dict[str, Any], parent: Any) -> str:
    meta = body.get("metadata") or {}
    if source == "fork":
        who = meta.get("actor") or "someone"
        if meta.get("update"):
            return f"state edit by {who}" + (
                f" as {meta['as_node']}" if meta.get("as_node") else ""
            )
        return f"rewind by {who}"
    if source == "input":
        # The source already says "input"; only who sent it adds something.
        return f"input by {meta['actor']}" if meta.get("actor") else ""
    if source == "failure":
        node = (body.get("error") or {}).get("node")
        if node:
            return str(node)
    if source == "suspend":
        nodes = [str(i.get("node")) for i in body.get("interrupts") or [] if i.get("node")]
        if nodes:
            return ", ".join(dict.fromkeys(nodes))
    if parent is not None:
        ran = parent[3].get("next") or []
        if ran:
            return ", ".join(str(n) for n in ran)
    return ""


def _took(run_id: str | None, created: datetime, parent: Any) -> timedelta | None:
    if parent is None or not run_id or parent[1] != run_id:
        return None
    return created - parent[2]


def timeline_events(
    thread_id: str, checkpoint_ids: Iterable[str]
) -> dict[str, list[TimelineEvent]]:
    """The audit events that wrote each of ``checkpoint_ids`` (their ``after``), oldest
    first, with the edited calls' original and edited arguments (two queries, plus one
    per page for the suspended checkpoints that edits answered)."""
    ids = list(checkpoint_ids)
    if not ids:
        return {}
    events = AuditEvent.objects.filter(
        thread_id=thread_id, after__in=ids, action__in=SHOWN_ACTIONS
    ).order_by("pk")
    out: dict[str, list[TimelineEvent]] = {}
    answered: dict[str, list[TimelineEvent]] = {}
    for row in events:
        details = open_json(row.details)
        details = details if isinstance(details, dict) else {}
        if row.action == "input" and not row.actor:
            continue  # a run's own input through the API: the checkpoint says it
        event = TimelineEvent(row.actor or "", row.action, row.door, row.created_at, details)
        out.setdefault(row.after, []).append(event)
        edits = [d for d in details.get("decisions") or [] if d.get("type") == "edit"]
        if edits and row.before:
            answered.setdefault(row.before, []).append(event)
    if answered:
        originals = CheckpointRow.objects.filter(
            thread_id=thread_id, pk__in=list(answered)
        ).values_list("id", "body")
        for cid, body in originals:
            calls = {
                c.get("id"): c.get("args")
                for i in _body(body).get("interrupts") or []
                for c in i.get("calls") or []
            }
            for event in answered[cid]:
                event.edits = [
                    {
                        "tool": d.get("name", ""),
                        "call_id": d.get("call_id", ""),
                        "original": calls.get(d.get("call_id")),
                        "edited": d.get("args"),
                    }
                    for d in event.details.get("decisions") or []
                    if d.get("type") == "edit"
                ]
    return out


def edited_calls(thread_id: str) -> dict[str, dict[str, Any]]:
    """The thread's tool calls a person edited: ``{call_id: {"args", "actor",
    "decided_at"}}`` with the arguments that actually ran (one query)."""
    rows = Decision.objects.filter(thread_id=thread_id, decision="edit").values_list(
        "call_id", "args", "actor", "decided_at"
    )
    out: dict[str, dict[str, Any]] = {}
    for call_id, args, actor, decided_at in rows:
        out[call_id] = {"args": open_json(args), "actor": actor or "", "decided_at": decided_at}
    return out
