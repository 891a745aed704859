"""Live events: checkpoint commits and run status changes, sent to the Channels layer.

Two event types (JSON-plain, the ``type`` maps to a consumer handler with ``.`` -> ``_``):

- ``{"type": "checkpoint.written", "thread_id", "run_id", "checkpoint_id", "version",
  "status", "source", "updates"}`` after each committed checkpoint, to
  :func:`thread_group` of its thread, and to the group ``"inbox"`` when the thread is
  suspended now or was suspended just before (it enters or leaves the inbox);
- ``{"type": "run.changed", "run_id", "thread_id", "status"}`` after a run's status
  changes, to :func:`run_group` and :func:`thread_group`;
- ``{"type": "stream.chunks", "run_id", "items": [[mode, event, data], ...]}``: what a
  bridged LangGraph graph streamed while its run executes (:func:`send_chunks`), to
  :func:`thread_group`, with each SSE event's stream mode, name and JSON data text;
- ``{"type": "stream.appended"}`` to :func:`stream_group` when a run's resumable
  stream log grew.

:func:`install` registers the checkpoint listener on the shared storage
(:func:`criogen.registry.storage`); the app does it in ``ready()`` when running inside
the Django project. Sending never blocks or raises: events are queued and sent in order
by one publisher thread per process; a broken channel layer is logged, and the run
goes on.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import hashlib
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from criogen.engine.checkpoints import CheckpointWrite

__all__ = [
    "INBOX_GROUP",
    "add_run_listener",
    "flush",
    "install",
    "run_changed",
    "run_group",
    "send",
    "send_chunks",
    "stream_group",
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


def stream_group(run_id: Any) -> str:
    """The Channels group told when a run's resumable stream log grows."""
    return "stream-" + run_group(run_id).removeprefix("run-")


def send(group: str, event: dict[str, Any] | Callable[[], dict[str, Any] | None]) -> None:
    """Queue ``event`` for ``group`` on the default channel layer; never blocks or raises.

    Events go out in the order they were sent, from one publisher per process (see
    :class:`_Publisher`): a run does not wait for the channel layer, and a channel
    layer that is down or slow costs the run nothing. ``event`` may be a function
    making the event when its turn to be sent comes (None: nothing to send), so that
    what piles up meanwhile travels as one message (:func:`send_chunks`).
    """
    try:
        _publisher.submit(group, event)
    except Exception:
        kind = event.get("type") if isinstance(event, dict) else "stream.chunks"
        logger.exception("could not queue %s for %s", kind, group)


class _Publisher:
    """Sends queued events to the channel layer from one event loop thread.

    ``async_to_sync`` from a thread that has no event loop (a runner thread, a Celery
    task) starts a thread and an event loop for each call: that was most of a short
    run's cost. Here one daemon thread keeps a loop and drains one FIFO queue, so the
    order of events is the order of :func:`send` calls in this process. When the
    channel layer is unreachable, each send gives up after ``SEND_TIMEOUT`` seconds;
    beyond ``MAX_QUEUED`` waiting events the newest are dropped (and counted): live
    pages re-read the database when they reconnect, so a lost event costs a refresh,
    never data. The in-memory layer (one process, tests and the demo) is driven from the
    ASGI server's own loop when one is known, because its queues belong to that loop.
    """

    SEND_TIMEOUT = 2.0
    MAX_QUEUED = 10_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[tuple[str, Any]] | None = None
        self._queued = 0
        self._idle = threading.Condition(self._lock)
        self.dropped = 0
        self.server_loop: asyncio.AbstractEventLoop | None = None

    def submit(
        self, group: str, event: dict[str, Any] | Callable[[], dict[str, Any] | None]
    ) -> None:
        server = _server_loop()
        with self._lock:
            if server is not None:
                self.server_loop = server
            if self._queued >= self.MAX_QUEUED:
                self.dropped += 1
                if self.dropped % 1000 == 1:
                    logger.warning(
                        "the channel layer is not keeping up: %d live events dropped",
                        self.dropped,
                    )
                return
            if self._loop is None:
                self._start()
            self._queued += 1
            loop, queue = self._loop, self._queue
        assert loop is not None and queue is not None
        loop.call_soon_threadsafe(queue.put_nowait, (group, event))

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued event was handed to the layer (tests, shutdown)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._queued == 0, timeout)

    def _start(self) -> None:
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            self._queue = asyncio.Queue()
            ready.set()
            loop.run_until_complete(self._drain(self._queue))

        threading.Thread(target=run, name="criogen-events", daemon=True).start()
        ready.wait()
        self._loop = loop
        # A worker or script that ends right after a run still sends its last events.
        atexit.register(self.flush, 1.0)

    async def _drain(self, queue: asyncio.Queue[tuple[str, Any]]) -> None:
        from channels.layers import InMemoryChannelLayer, get_channel_layer

        while True:
            group, event = await queue.get()
            try:
                if callable(event):
                    event = event()
                layer = get_channel_layer()
                if layer is None or event is None:
                    continue
                server = self.server_loop
                if isinstance(layer, InMemoryChannelLayer) and group not in layer.groups:
                    # No socket of this process listens: nothing to hand over, and no
                    # coroutine made for a loop that may be ending (a request's own
                    # loop, which would drop it unawaited).
                    continue
                if isinstance(layer, InMemoryChannelLayer) and server and server.is_running():
                    sent = _send_in(server, layer, group, event)
                    await asyncio.wait_for(asyncio.wrap_future(sent), self.SEND_TIMEOUT)
                else:
                    await asyncio.wait_for(layer.group_send(group, event), self.SEND_TIMEOUT)
            except (Exception, asyncio.CancelledError):
                # CancelledError is no Exception: the loop the send was handed to ended
                # (a request's own loop); uncaught, it would end this thread and with it
                # every later live event of the process.
                kind = event.get("type") if isinstance(event, dict) else event
                logger.warning("could not send %s to %s", kind, group, exc_info=True)
            finally:
                with self._idle:
                    self._queued -= 1
                    if self._queued == 0:
                        self._idle.notify_all()


def _send_in(
    loop: asyncio.AbstractEventLoop, layer: Any, group: str, event: dict[str, Any]
) -> concurrent.futures.Future[None]:
    """``layer.group_send(group, event)`` run on ``loop`` (another thread's).

    The coroutine is made on ``loop`` when it starts the send, not here: a loop that
    stops first (a request's own loop) drops a callback, where it would drop a
    coroutine never awaited (a RuntimeWarning when it is collected)."""
    result: concurrent.futures.Future[None] = concurrent.futures.Future()

    def finish(task: asyncio.Task[None]) -> None:
        if task.cancelled():
            result.set_exception(asyncio.CancelledError())
        elif (error := task.exception()) is not None:
            result.set_exception(error)
        else:
            result.set_result(None)

    def start() -> None:
        if result.set_running_or_notify_cancel():  # else: given up on meanwhile
            loop.create_task(layer.group_send(group, event)).add_done_callback(finish)

    loop.call_soon_threadsafe(start)
    return result


def _server_loop() -> asyncio.AbstractEventLoop | None:
    """The ASGI server's loop when this thread runs sync code for it (asgiref's
    ``sync_to_async`` marks its threads), else None."""
    from asgiref.sync import SyncToAsync

    local = SyncToAsync.threadlocal
    if getattr(local, "main_event_loop_pid", None) != os.getpid():
        return None
    loop = getattr(local, "main_event_loop", None)
    return loop if loop is not None and loop.is_running() else None


_publisher = _Publisher()


def flush(timeout: float = 5.0) -> bool:
    """Wait until the events sent so far were handed to the channel layer."""
    return _publisher.flush(timeout)


class _Chunks:
    """The stream chunks of one run waiting to be sent: a burst (tokens) that arrives
    while the publisher is busy leaves as one ``stream.chunks`` message, so the channel
    layer's per-channel capacity is not exhausted by a fast graph."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: dict[tuple[str, str], list[list[str]]] = {}


_chunks = _Chunks()


def send_chunks(*, run_id: Any, thread_id: str, items: Sequence[Sequence[str]]) -> None:
    """Queue a run's stream chunks (``[mode, event, data]`` each, ``data`` as JSON
    text) for the thread's group, after the events sent before; chunks queued while an
    earlier batch of the run waits are sent with it, in order."""
    key = (str(run_id), str(thread_id))
    with _chunks.lock:
        waiting = _chunks.items.get(key)
        if waiting is not None:
            waiting.extend([list(item) for item in items])
            return
        _chunks.items[key] = [list(item) for item in items]

    def take() -> dict[str, Any] | None:
        with _chunks.lock:
            batch = _chunks.items.pop(key, None)
        if not batch:
            return None
        return {"type": "stream.chunks", "run_id": key[0], "items": batch}

    send(thread_group(thread_id), take)


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


MAX_EVENT_UPDATES_BYTES = 64 * 1024
"""A step's updates larger than this (as JSON) are left out of its live event: the
channel layer copies an event once per subscriber, and a stream rebuilds the updates
from the stored checkpoint instead."""


def _small(updates: dict[str, Any]) -> dict[str, Any] | None:
    """``updates`` if they are small enough to travel in an event, else None."""
    try:
        size = len(json.dumps(updates, default=str))
    except (TypeError, ValueError):
        return None
    return updates if size <= MAX_EVENT_UPDATES_BYTES else None


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
            "updates": _small(write.updates or {}),
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
