"""Threads as the JSON ``langgraph_sdk`` expects: ``Thread``, ``ThreadState``,
``Interrupt`` (engine checkpoints in, plain dicts out)."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from criogen import selectors
from criogen.engine.checkpoints import Checkpoint
from criogen.engine.errors import InvalidArgument

if TYPE_CHECKING:
    from criogen.storage.models import Thread

__all__ = [
    "STATE_FIELDS",
    "THREAD_FIELDS",
    "interrupt_out",
    "search_thread_out",
    "state_dump",
    "state_out",
    "storage",
    "task_id",
    "thread_interrupts",
    "thread_dump",
    "thread_out",
]


def storage() -> Any:
    """The process's shared storage (the one the runner and events use)."""
    from criogen.registry import storage as shared

    return shared()


@functools.lru_cache(maxsize=8192)
def task_id(checkpoint_id: str, node: str) -> str:
    """A stable id for the task that runs ``node`` after ``checkpoint_id`` (remembered:
    a history page names a task for every state, and the same pages are read again)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"criogen:task:{checkpoint_id}:{node}"))


def interrupt_out(interrupt: Mapping[str, Any]) -> dict[str, Any]:
    """An engine interrupt as LangGraph's ``Interrupt``: ``{"id", "value", …}``.

    ``value`` is the suspension's payload (for an agent's approval, LangChain's
    ``HITLRequest``); ``reason``, ``node`` and the other engine fields come along.
    """
    out = {k: v for k, v in interrupt.items() if k not in ("payload", "id")}
    return {"id": interrupt.get("id"), "value": interrupt.get("payload"), **out}


def thread_interrupts(head: Checkpoint | None) -> dict[str, list[dict[str, Any]]]:
    """The head's pending interrupts keyed by task id (the SDK ``Thread.interrupts``)."""
    if head is None or head.status != "suspended":
        return {}
    out: dict[str, list[dict[str, Any]]] = {}
    for interrupt in head.interrupts:
        key = task_id(head.id, str(interrupt.get("node", "")))
        out.setdefault(key, []).append(interrupt_out(interrupt))
    return out


def thread_out(
    row: Thread, *, head: Checkpoint | None = None, load_head: bool = True
) -> dict[str, Any]:
    """A thread row as the SDK's ``Thread``."""
    if head is None and load_head and row.head_version:
        head = storage().head(row.id)
    status = getattr(row, "rest_status", None) or selectors.thread_status(row)
    return {
        "thread_id": row.id,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "state_updated_at": row.updated_at,
        "metadata": row.metadata or {},
        "status": status,
        "values": head.state if head is not None else None,
        "interrupts": thread_interrupts(head),
        "config": {},
        "context": {},
        "ttl": _ttl_out(row),
    }


def search_thread_out(row: Any, head: Checkpoint | None) -> dict[str, Any]:
    """:func:`thread_out` of a search page's row (a :class:`Thread` or a
    :class:`~criogen.selectors.search.ThreadRow`): a row that carries its times' JSON
    text (``json_times``, written by the database) answers with that text, which
    :func:`thread_dump` passes on as it is, instead of datetimes to format."""
    item = thread_out(row, head=head, load_head=False)
    texts = getattr(row, "json_times", None)
    if texts is not None:
        item["created_at"], item["updated_at"] = texts
        item["state_updated_at"] = texts[1]
    return item


def _ttl_out(row: Thread) -> dict[str, Any] | None:
    if row.ttl_minutes is None:
        return None
    return {
        "ttl": row.ttl_minutes,
        "strategy": row.ttl_strategy,
        "expires_at": row.expires_at,
    }


def _checkpoint_ref(thread_id: str, checkpoint_id: str | None) -> dict[str, Any]:
    return {
        "thread_id": thread_id,
        "checkpoint_ns": "",
        "checkpoint_id": checkpoint_id,
        "checkpoint_map": None,
    }


def state_out(
    thread_id: str, cp: Checkpoint | None, *, select: list[str] | None = None
) -> dict[str, Any]:
    """A checkpoint as the SDK's ``ThreadState``.

    ``metadata`` carries the engine's metadata plus ``source``, ``status``, ``step``,
    ``version``, ``run_id`` and ``thread_id``. ``tasks`` are the nodes that run next,
    each with its interrupts, its error (for a failure) and its result if it finished.
    """
    if cp is None:
        state: dict[str, Any] = {
            "values": {},
            "next": [],
            "tasks": [],
            "interrupts": [],
            "checkpoint": _checkpoint_ref(thread_id, None),
            "metadata": {},
            "created_at": None,
            "parent_checkpoint": None,
        }
    else:
        done = cp.tasks.get("done", {}) if isinstance(cp.tasks, dict) else {}
        error = cp.error or {}
        interrupts = [interrupt_out(i) for i in cp.interrupts] if cp.status == "suspended" else []
        tasks = []
        for node in cp.next:
            failed_here = cp.status == "failed" and error.get("node") in (node, None)
            tasks.append(
                {
                    "id": task_id(cp.id, node),
                    "name": node,
                    "error": error.get("message") if failed_here else None,
                    "interrupts": [i for i in interrupts if i.get("node") == node],
                    "checkpoint": None,
                    "state": None,
                    "result": done.get(node),
                }
            )
        state = {
            "values": cp.state,
            "next": list(cp.next),
            "tasks": tasks,
            "interrupts": interrupts,
            "checkpoint": _checkpoint_ref(thread_id, cp.id),
            "metadata": {
                **cp.metadata,
                "source": cp.source,
                "status": cp.status,
                "step": cp.metadata.get("step", cp.version - 1),
                "version": cp.version,
                "run_id": cp.run_id,
                "thread_id": thread_id,
                **({"error": cp.error} if cp.error else {}),
            },
            "created_at": cp.created_at.isoformat(),
            "parent_checkpoint": _checkpoint_ref(thread_id, cp.parent_id) if cp.parent_id else None,
        }
    return _select(state, select)


def _select(state: dict[str, Any], select: list[str] | None) -> dict[str, Any]:
    if not select:
        return state
    out: dict[str, Any] = {}
    for name in select:
        if name.startswith("values."):
            key = name[len("values.") :]
            values = out.setdefault("values", {})
            if key in state["values"]:
                values[key] = state["values"][key]
        elif name in state:
            out[name] = state[name]
        else:
            raise InvalidArgument(
                f"select has {name!r}; use {', '.join(state)} or values.<key>.", field="select"
            )
    return out


# -- the shapes as their response schemas dump them ---------------------------------------
# The hot reads answer without ninja validating their output again (api.render): these
# put the dicts above in the order, and with the defaults, that validating them with
# ThreadStateOut / ThreadOut and dumping them would give. tests/api/test_trusted_output.py
# checks each shape against the schemas.

STATE_FIELDS = (
    "values",
    "next",
    "tasks",
    "interrupts",
    "checkpoint",
    "metadata",
    "created_at",
    "parent_checkpoint",
    "checkpoint_id",
    "parent_checkpoint_id",
)
"""``ThreadStateOut``'s fields, in its order."""

THREAD_FIELDS = (
    "thread_id",
    "created_at",
    "updated_at",
    "state_updated_at",
    "metadata",
    "config",
    "context",
    "status",
    "values",
    "interrupts",
    "ttl",
    "extracted",
)
"""The fields a thread search may ``select``."""

_THREAD_ORDER = (
    "thread_id",
    "created_at",
    "updated_at",
    "state_updated_at",
    "metadata",
    "status",
    "values",
    "interrupts",
    "config",
    "context",
    "ttl",
    "extracted",
)
"""``ThreadOut``'s fields, in its order."""

_INTERRUPT_ORDER = ("id", "value", "node", "reason")
"""``InterruptOut``'s declared fields, in its order (any other field follows)."""


def _interrupt_dump(interrupt: Mapping[str, Any], *, unset: bool) -> dict[str, Any]:
    if unset:
        out = {k: interrupt[k] for k in _INTERRUPT_ORDER if k in interrupt}
    else:
        out = {k: interrupt.get(k) for k in _INTERRUPT_ORDER}
    for key, value in interrupt.items():
        if key not in out:
            out[key] = value
    return out


def state_dump(state: Mapping[str, Any]) -> dict[str, Any]:
    """A :func:`state_out` dict as ``ThreadStateOut`` dumps it (``exclude_unset``)."""
    out = {k: state[k] for k in STATE_FIELDS if k in state}
    if out.get("interrupts"):
        out["interrupts"] = [_interrupt_dump(i, unset=True) for i in out["interrupts"]]
    if out.get("tasks"):
        out["tasks"] = [
            {**task, "interrupts": [_interrupt_dump(i, unset=True) for i in task["interrupts"]]}
            if task.get("interrupts")
            else task
            for task in out["tasks"]
        ]
    return out


def _json_time(value: Any) -> Any:
    """A datetime as the API's JSON writes it (DjangoJSONEncoder: milliseconds, ``Z``
    for UTC), written here rather than by the encoder's fallback: a search page has
    sixty, and the fallback's dispatch was most of its encoding time."""
    if not isinstance(value, datetime):
        return value
    text = value.isoformat()
    if value.microsecond:
        text = text[:23] + text[26:]
    if text.endswith("+00:00"):
        text = text.removesuffix("+00:00") + "Z"
    return text


def thread_dump(item: Mapping[str, Any], *, unset: bool) -> dict[str, Any]:
    """A :func:`thread_out` dict as ``ThreadOut`` dumps it: only the fields it has with
    ``unset`` (``exclude_unset``, as search answers), every field otherwise; its times
    already in their JSON text."""
    if unset:
        out = {k: item[k] for k in _THREAD_ORDER if k in item}
    else:
        out = {k: item.get(k) for k in _THREAD_ORDER}
    for key in ("created_at", "updated_at", "state_updated_at"):
        if key in out:
            out[key] = _json_time(out[key])
    interrupts = out.get("interrupts")
    if interrupts:
        out["interrupts"] = {
            task: [_interrupt_dump(i, unset=unset) for i in items]
            for task, items in interrupts.items()
        }
    ttl = out.get("ttl")
    if ttl is not None:
        out["ttl"] = {
            "ttl": float(ttl["ttl"]),
            "strategy": ttl["strategy"],
            "expires_at": _json_time(ttl.get("expires_at")),
        }
    return out
