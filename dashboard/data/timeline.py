"""A thread's page: its timeline, what changed between two states, a chat transcript."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from criogen import selectors
from criogen.selectors import TimelineEntry

if TYPE_CHECKING:
    from criogen.storage.models import Thread

__all__ = ["TIMELINE_PAGE", "TimelineEntry", "state_diff", "timeline", "transcript"]

TIMELINE_PAGE = 100
"""Checkpoints per page of a thread's timeline (newest first; older ones are paged)."""


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
