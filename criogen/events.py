"""Live events: checkpoint commits and run status changes, sent to the Channels layer.

Two event types (JSON-plain, the ``type`` maps to a consumer handler with ``.`` -> ``_``):

- ``{"type": "checkpoint.written", "thread_id", "run_id", "checkpoint_id", "version",
  "status", "source", "updates"}`` after each committed checkpoint, to
  :func:`thread_group` of its thread, and to the group ``"inbox"`` when the thread is
  suspended now or was suspended just before (it enters or leaves the inbox);
- ``{"type": "run.changed", "run_id", "thread_id", "status"}`` after a run's status
  changes, to :func:`run_group` and :func:`thread_group`.

:func:`install` registers the checkpoint listener on the shared storage
(:func:`criogen.registry.storage`); the app does it in ``ready()`` when running inside
the Django project. Sending never raises: a broken channel layer is logged, and the
run goes on.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from criogen.engine.checkpoints import CheckpointWrite

__all__ = [
    "INBOX_GROUP",
    "add_run_listener",
    "install",
    "run_changed",
    "run_group",
    "send",
    "thread_group",
]

logger = logging.getLogger("criogen.events")

INBOX_GROUP = "inbox"
"""The group of every thread entering or leaving the ``suspended`` state."""

_installed_on: Any = None
_install_lock = threading.Lock()
_status_lock = threading.Lock()
_last_status: OrderedDict[str, str] = OrderedDict()  # checkpoint id -> status
_LAST_STATUS_MAX = 10_000
_run_listeners: list[Callable[[dict[str, Any]], None]] = []


def thread_group(thread_id: str) -> str:
    """The Channels group of a thread's events (any thread id maps to a valid name)."""
    return "thread-" + hashlib.sha1(str(thread_id).encode()).hexdigest()[:32]  # noqa: S324


def run_group(run_id: Any) -> str:
    """The Channels group of a run's events."""
    return "run-" + hashlib.sha1(str(run_id).encode()).hexdigest()[:32]  # noqa: S324


def send(group: str, event: dict[str, Any]) -> None:
    """Send ``event`` to ``group`` on the default channel layer; log, never raise."""
    try:
        from asgiref.sync import async_to_sync
        from channels.layers import get_channel_layer

        layer = get_channel_layer()
        if layer is not None:
            async_to_sync(layer.group_send)(group, event)
    except Exception:
        logger.exception("could not send %s to %s", event.get("type"), group)


def add_run_listener(listener: Callable[[dict[str, Any]], None]) -> None:
    """Also call ``listener(event)`` in this process for every ``run.changed`` event
    (the runner's waiters use this to wake up without polling)."""
    if listener not in _run_listeners:
        _run_listeners.append(listener)


def run_changed(*, run_id: Any, thread_id: str | None, status: str) -> None:
    """Publish that a run's status changed (call after the change is committed)."""
    event = {
        "type": "run.changed",
        "run_id": str(run_id),
        "thread_id": thread_id,
        "status": status,
    }
    for listener in list(_run_listeners):
        try:
            listener(event)
        except Exception:
            logger.exception("run listener %r failed", listener)
    send(run_group(run_id), event)
    if thread_id is not None:
        send(thread_group(thread_id), event)


def checkpoint_written(writes: Sequence[CheckpointWrite]) -> None:
    """The storage listener: one ``checkpoint.written`` event per committed checkpoint."""
    for write in writes:
        cp = write.checkpoint
        event = {
            "type": "checkpoint.written",
            "thread_id": cp.thread_id,
            "run_id": cp.run_id,
            "checkpoint_id": cp.id,
            "version": cp.version,
            "status": cp.status,
            "source": cp.source,
            "updates": write.updates or {},
        }
        send(thread_group(cp.thread_id), event)
        before = _previous_status(cp.thread_id, cp.parent_id)
        _remember(cp.id, cp.status)
        if cp.status == "suspended" or before == "suspended":
            send(INBOX_GROUP, event)


def install() -> None:
    """Register :func:`checkpoint_written` on the shared storage (once per process)."""
    global _installed_on
    from criogen.registry import storage

    with _install_lock:
        target = storage()
        if _installed_on is target:
            return
        target.add_listener(checkpoint_written)
        _installed_on = target


def _remember(checkpoint_id: str, status: str) -> None:
    with _status_lock:  # writer threads of several runs call this at once
        _last_status[checkpoint_id] = status
        while len(_last_status) > _LAST_STATUS_MAX:
            _last_status.popitem(last=False)


def _previous_status(thread_id: str, parent_id: str | None) -> str | None:
    """The status of the parent checkpoint: remembered when this process wrote it,
    else read once from the database."""
    if parent_id is None:
        return None
    with _status_lock:
        known = _last_status.get(parent_id)
    if known is not None:
        return known
    try:
        from criogen.storage.models import Checkpoint

        return Checkpoint.objects.filter(pk=parent_id).values_list("status", flat=True).first()
    except Exception:
        logger.exception("could not read the parent of a checkpoint on %r", thread_id)
        return None
