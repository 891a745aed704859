"""Runs for the REST API: option checks, the ``Run`` JSON, wait results and the
Server-Sent Events stream.

Runs are created, waited for and cancelled by :mod:`criogen.services.runs`; this module
checks the fields the SDK sends that the services do not take (each is honoured or
refused with 422), turns runs into JSON, and streams a run's checkpoints as SSE.

Streaming: the stream subscribes to the thread's Channels group
(:func:`criogen.events.thread_group`) and, on each event, reads the run's new
checkpoints from the database in version order — so no checkpoint is missed even when
an event arrives before the subscription. Each checkpoint becomes one event per
requested mode::

    event: values        data: the state (with "__interrupt__" when it suspended)
    event: updates       data: {node: what it returned} ({"__interrupt__": [...]})
    event: debug         data: {"type": "checkpoint", "step", "timestamp", "payload"}
    event: checkpoints   data: the debug payload alone
    event: tasks         data: {"id", "name", "error", "interrupts", "result"} per node
    event: events        data: {"event": "on_chain_stream", "name": node, "data": {...}}
    event: messages      data: [message, metadata] for each new state message
                         ("messages-tuple"; mode "messages" sends messages/complete)
    custom               nothing: Criogen nodes have no custom stream writer yet

It starts with ``event: metadata`` (``{"run_id", "attempt"}``), sends ``event: error``
if the run fails, and always ends with ``event: end``.

A run of a bridged LangGraph graph streams LangGraph's own chunks instead, as
LangGraph's server does (:mod:`criogen.langgraph.streams`): they arrive on the
thread's group as ``stream.chunks`` events while the graph runs, whatever process runs
it, and are forwarded as they are; its checkpoints make no stream events.

Resumable streams (``stream_resumable``): the same events, written once to the run's
log in the database by a producer task and read back by every client with their ids
(``id: 1``, ``id: 2``…), so that ``Last-Event-ID`` resumes on any process; see the
section "resumable streams" below.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, get_args

from django.conf import settings

from api import threads
from api.aio import db
from api.auth import Principal
from api.schemas import StreamModeName
from criogen import selectors
from criogen.engine.checkpoints import Checkpoint
from criogen.engine.errors import InvalidArgument, TooManyStreams
from criogen.services.runs import ENDED, check_after_seconds

if TYPE_CHECKING:
    from criogen.storage.models import Run

__all__ = [
    "RESULT_FIELDS",
    "STREAM_MODES",
    "advance_log",
    "check_options",
    "has_log",
    "last_event_id",
    "log_stream",
    "open_log",
    "run_out",
    "run_result",
    "sse_stream",
    "start_producer",
    "stream_group",
    "stream_modes",
    "thread_stream",
]

logger = logging.getLogger("api.runs")

STREAM_MODES: tuple[str, ...] = get_args(StreamModeName)


def heartbeat_seconds() -> float:
    """How long a stream stays silent before it sends a heartbeat comment
    (``CRIOGEN_STREAM_HEARTBEAT_SECONDS``)."""
    return float(getattr(settings, "CRIOGEN_STREAM_HEARTBEAT_SECONDS", 5))


def stream_modes(value: Any, field: str = "stream_mode") -> list[str]:
    """``stream_mode`` as a list of known modes (default ``["values"]``)."""
    if value is None:
        return ["values"]
    modes = [value] if isinstance(value, str) else list(value)
    for mode in modes:
        if mode not in STREAM_MODES:
            raise InvalidArgument(
                f"{field} has {mode!r}; use {', '.join(STREAM_MODES)}.", field=field
            )
    return modes or ["values"]


HELD_AFTER_SECONDS = 60
"""The longest delay (``after_seconds``) a wait or a stream takes: they hold the request
until the run has ended, and a client's or a proxy's timeout would cut it first."""


def check_options(payload: Any, *, stream: bool = False, held: bool = False) -> None:
    """Refuse (422, naming the field) what the SDK may send and Criogen cannot do.
    ``held``: the request waits for the run to end (``wait``, ``stream``)."""
    # interrupt_before / interrupt_after (breakpoints) are checked against the graph's
    # nodes by criogen.services.runs.create_run.
    if getattr(payload, "feedback_keys", None):
        raise InvalidArgument("feedback_keys (LangSmith) is not supported.", field="feedback_keys")
    if getattr(payload, "langsmith_tracer", None):
        raise InvalidArgument("langsmith_tracer is not supported.", field="langsmith_tracer")
    # A delayed run: a non-negative whole number of seconds (422 naming it otherwise).
    delay = check_after_seconds(getattr(payload, "after_seconds", None))
    if held and delay > HELD_AFTER_SECONDS:
        raise InvalidArgument(
            f"after_seconds is {delay}; a wait or a stream holds the request until the run "
            f"ends, so it takes at most {HELD_AFTER_SECONDS} s: create the run in the "
            "background (POST /threads/{thread_id}/runs or /runs) and join it later.",
            field="after_seconds",
        )
    stream_modes(payload.stream_mode)


def cancel_reason(run: Run) -> str | None:
    """Why an ``interrupted`` run stopped: None when it waits for a person."""
    if run.status != "interrupted" or not run.cancelled_by:
        return None
    return f"cancelled by {run.cancelled_by}"


def run_out(run: Run) -> dict[str, Any]:
    """A run as the SDK's ``Run``.

    ``status`` ``interrupted`` covers both "waiting for a person" and "cancelled";
    ``cancel_reason`` / ``cancelled_by`` tell them apart (null when waiting).
    """
    kwargs = dict(run.kwargs or {})
    return {
        "run_id": str(run.run_id),
        "thread_id": run.thread_id,
        "assistant_id": str(run.assistant_id),
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "status": run.status,
        "metadata": run.metadata or {},
        "multitask_strategy": run.multitask_strategy,
        "kwargs": {
            **kwargs,
            "input": run.input,
            "command": run.command,
            "checkpoint_id": run.checkpoint_id,
            "durability": run.durability,
        },
        "cancel_reason": cancel_reason(run),
        "cancelled_by": run.cancelled_by,
        "error": run.error,
    }


RESULT_FIELDS = ("status", "error")
"""What :func:`run_result` reads of a run besides its thread (which never changes)."""


def run_result(run: Run) -> dict[str, Any]:
    """What ``runs.wait`` / ``runs.join`` answer: the thread's values at the end.

    A suspended thread adds ``"__interrupt__": [...]``; a failed run answers
    ``{"__error__": {"error", "message"}}`` (the SDK raises it unless
    ``raise_error=False``).
    """
    if run.status == "error":
        error = run.error or {}
        return {
            "__error__": {
                "error": error.get("type") or error.get("code") or "Error",
                "message": error.get("message") or "the run failed",
                "code": error.get("code"),
            }
        }
    head = threads.storage().head(run.thread_id) if run.thread_id else None
    values: dict[str, Any] = dict(head.state) if head is not None else {}
    if head is not None and head.status == "suspended" and run.status != "success":
        values["__interrupt__"] = [threads.interrupt_out(i) for i in head.interrupts]
    return values


def load_run(
    who: Principal, thread_id: str, run_id: str, fields: Sequence[str] | None = None
) -> Run:
    """The run on a thread the caller may see (404 otherwise); only ``fields`` of it
    (and its ids) when given (:func:`criogen.selectors.get_run`)."""
    threads.check_visible(who, thread_id)
    return selectors.get_run(run_id=run_id, thread_id=thread_id, fields=fields)


def claim_owner(who: Principal, thread_id: str | None, *, created: bool) -> None:
    """For a thread a run has just created (``if_not_exists="create"``, stateless):
    record the caller as ``owner`` and give it the server's default TTL."""
    from criogen.services.threads import adopt_thread

    if thread_id is None or not created:
        return
    adopt_thread(thread_id=thread_id, owner=who.user)


# -- streaming ------------------------------------------------------------------------


def _json(data: Any) -> str:
    return json.dumps(data, default=_default, separators=(",", ":"))


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {_json(data)}\n\n".encode()


def _default(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def _new_checkpoints(thread_id: str, run_id: str, after: int) -> list[Checkpoint]:
    versions = selectors.run_checkpoint_ids(thread_id=thread_id, run_id=run_id, after=after)
    store = threads.storage()
    return [store.get_checkpoint(thread_id, cid) for cid in versions]


def _state_at_version(thread_id: str, version: int) -> dict[str, Any]:
    if version <= 0:
        return {}
    found = threads.storage().history(thread_id, limit=1, before=version + 1)
    return found[0].state if found else {}


def _diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What changed between two states (appended list items only, for lists)."""
    out: dict[str, Any] = {}
    for key, value in after.items():
        old = before.get(key)
        if old == value:
            continue
        if isinstance(old, list) and isinstance(value, list) and value[: len(old)] == old:
            out[key] = value[len(old) :]
        else:
            out[key] = value
    return out


def _updates_of(
    cp: Checkpoint,
    known: dict[str, Any] | None,
    previous: Checkpoint | None,
    before: dict[str, Any],
) -> dict[str, Any]:
    """What the step that wrote ``cp`` changed, ``{node: update}``: from the live event
    when it arrived, else rebuilt from the state before it."""
    if cp.status == "suspended":
        return {"__interrupt__": [threads.interrupt_out(i) for i in cp.interrupts]}
    if known:
        return known
    if cp.source == "input":
        return {"__start__": _diff(before, cp.state)}
    node = previous.next[0] if previous is not None and previous.next else cp.source
    return {node: _diff(before, cp.state)}


def _debug_payload(cp: Checkpoint) -> dict[str, Any]:
    state = threads.state_out(cp.thread_id, cp)
    config = {"configurable": {**state["checkpoint"]}}
    parent = state["parent_checkpoint"]
    return {
        "config": config,
        "parent_config": {"configurable": parent} if parent else None,
        "values": cp.state,
        "metadata": state["metadata"],
        "next": list(cp.next),
        "tasks": state["tasks"],
    }


def _events_for(
    cp: Checkpoint,
    modes: list[str],
    updates: dict[str, Any],
    run_id: str,
    before: dict[str, Any],
) -> list[bytes]:
    return [
        _sse(event, data) for _, event, data in _event_items(cp, modes, updates, run_id, before)
    ]


def _event_items(
    cp: Checkpoint,
    modes: list[str],
    updates: dict[str, Any],
    run_id: str,
    before: dict[str, Any],
) -> list[tuple[str, str, Any]]:
    """The events of one checkpoint in ``modes``: ``(mode, event name, data)`` each."""
    out: list[tuple[str, str, Any]] = []
    step = cp.metadata.get("step", cp.version - 1)
    stamp = cp.created_at.isoformat()
    for mode in modes:
        if mode == "values":
            values = dict(cp.state)
            if cp.status == "suspended":
                values["__interrupt__"] = [threads.interrupt_out(i) for i in cp.interrupts]
            out.append((mode, "values", values))
        elif mode == "updates":
            out.append((mode, "updates", updates))
        elif mode == "debug":
            payload = {"type": "checkpoint", "step": step, "timestamp": stamp}
            out.append((mode, "debug", {**payload, "payload": _debug_payload(cp)}))
        elif mode == "checkpoints":
            out.append((mode, "checkpoints", _debug_payload(cp)))
        elif mode == "tasks":
            for node, result in updates.items():
                if node.startswith("__"):
                    continue
                out.append(
                    (
                        mode,
                        "tasks",
                        {
                            "id": threads.task_id(cp.parent_id or cp.id, node),
                            "name": node,
                            "error": None,
                            "interrupts": [],
                            "result": result,
                        },
                    )
                )
        elif mode == "events":
            for node, result in updates.items():
                out.append(
                    (
                        mode,
                        "events",
                        {
                            "event": "on_chain_stream",
                            "name": node,
                            "run_id": run_id,
                            "tags": [],
                            "metadata": {"langgraph_step": step, "thread_id": cp.thread_id},
                            "data": {"chunk": result},
                        },
                    )
                )
        elif mode in ("messages", "messages-tuple"):
            messages = cp.state.get("messages")
            if not isinstance(messages, list):
                continue
            old = before.get("messages")
            start = len(old) if isinstance(old, list) else 0
            node = next((n for n in updates if not n.startswith("__")), "")
            for message in messages[start:]:
                meta = {"langgraph_node": node, "langgraph_step": step, "run_id": run_id}
                if mode == "messages-tuple":
                    out.append((mode, "messages", [message, meta]))
                else:
                    out.append((mode, "messages/metadata", {str(id(message)): {"metadata": meta}}))
                    out.append((mode, "messages/complete", [message]))
    return out


async def sse_stream(
    *,
    run_id: str,
    thread_id: str,
    modes: list[str],
    channel: tuple[Any, str] | None = None,
    cancel_on_disconnect: bool = False,
    cancelled_by: str | None = None,
    after_end: Any = None,
) -> AsyncIterator[bytes]:
    """The SSE body of one run, from its first checkpoint to ``event: end``.

    ``channel`` is ``(layer, name)`` of a channel already in the thread's group (the
    caller subscribes before creating the run so that no event is lost); without it
    one is made here. ``after_end`` is called (sync) once the run has ended.
    """
    from channels.layers import get_channel_layer

    from criogen.events import thread_group

    layer, name = channel if channel is not None else (get_channel_layer(), None)
    if name is None:
        name = await layer.new_channel()
        await layer.group_add(thread_group(thread_id), name)
    ended = False
    try:
        yield _sse("metadata", {"run_id": run_id, "attempt": 1})
        if await db(from_langgraph, run_id):
            async for chunk in _chunks_stream(layer, name, run_id, modes):
                yield chunk
            ended = True
            for chunk in await db(_closing_events, run_id):
                yield chunk
            return
        known_updates: dict[str, dict[str, Any]] = {}
        last_version = await db(_start_version, thread_id, run_id)
        before = await db(_state_at_version, thread_id, last_version)
        previous: Checkpoint | None = None
        while True:
            status = await db(_status, run_id)
            for cp in await db(_new_checkpoints, thread_id, run_id, last_version):
                updates = _updates_of(cp, known_updates.pop(cp.id, None), previous, before)
                for chunk in await db(_events_for, cp, modes, updates, run_id, before):
                    yield chunk
                last_version, previous, before = cp.version, cp, cp.state
            if status is None or status in ENDED:
                break
            try:
                event = await asyncio.wait_for(layer.receive(name), timeout=heartbeat_seconds())
            except TimeoutError:
                yield b": heartbeat\n\n"
                continue
            if event.get("type") == "checkpoint.written" and event.get("run_id") == run_id:
                known_updates[str(event.get("checkpoint_id"))] = event.get("updates") or {}
        ended = True
        for chunk in await db(_closing_events, run_id):
            yield chunk
    finally:
        await layer.group_discard(thread_group(thread_id), name)
        if not ended and cancel_on_disconnect:
            await db(_cancel_quietly, run_id, cancelled_by)
        if after_end is not None:
            await db(
                after_end,
            )


def _closing_events(run_id: str) -> list[bytes]:
    """A stream's last events: ``error`` when the run failed, then ``end``."""
    return [_sse(event, json.loads(data)) for _, event, data in _closing_items(run_id)]


def _closing_items(run_id: str) -> list[tuple[str, str, str]]:
    run = selectors.find_run(run_id)
    items: list[tuple[str, str, str]] = []
    if run is not None and run.status in ("error", "timeout"):
        error = run.error or {}
        failure = {
            "error": error.get("type") or error.get("code") or "Error",
            "message": error.get("message") or "the run failed",
        }
        items.append(("", "error", _json(failure)))
    items.append(("", "end", "null"))
    return items


_langgraph_runs: OrderedDict[str, bool] = OrderedDict()
_langgraph_lock = threading.Lock()


def from_langgraph(run_id: str) -> bool:
    """Whether the run streams LangGraph's own chunks (a bridged LangGraph graph's);
    remembered per run (a run's graph does not change)."""
    with _langgraph_lock:
        known = _langgraph_runs.get(run_id)
    if known is None:
        known = selectors.streams_from_langgraph(run_id)
        with _langgraph_lock:
            _langgraph_runs[run_id] = known
            while len(_langgraph_runs) > 10_000:
                _langgraph_runs.popitem(last=False)
    return known


def _chunk_sse(item: Any) -> bytes:
    """A ``stream.chunks`` item, ``[mode, event, data text]``, as an SSE event."""
    return f"event: {item[1]}\ndata: {item[2]}\n\n".encode()


async def _chunks_stream(
    layer: Any, name: str, run_id: str, modes: list[str]
) -> AsyncIterator[bytes]:
    """A LangGraph run's chunks in ``modes`` from the thread's group, until the run
    has ended.

    The runner publishes the run's chunks and then its final ``run.changed`` in one
    order, so the stream ends when that event arrives, after every chunk. A run that
    ended elsewhere (cancelled by another process, taken back by the sweep) or
    whose event was lost is seen ended in the database after a silent heartbeat."""
    status = await db(_status, run_id)
    ended = status is None or status in ENDED  # joined after it ended: nothing comes
    while not ended:
        try:
            event = await asyncio.wait_for(layer.receive(name), timeout=heartbeat_seconds())
        except TimeoutError:
            yield b": heartbeat\n\n"
            status = await db(_status, run_id)
            ended = status is None or status in ENDED
            continue
        if event.get("run_id") != run_id:
            continue
        if event.get("type") == "stream.chunks":
            for item in event.get("items") or ():
                if item[0] in modes:
                    yield _chunk_sse(item)
        elif event.get("type") == "run.changed" and event.get("status") in ENDED:
            ended = True


class _StreamSlots:
    """Live thread streams open in this process, counted per user and per thread, so
    that one user cannot hold the server's memory with idle subscribers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: Counter[Any] = Counter()
        self._threads: Counter[str] = Counter()

    def take(self, user: Any, thread_id: str) -> Callable[[], None]:
        """Take a slot for ``user`` on ``thread_id`` (TooManyStreams over a cap); return
        the function that gives it back (once, however often it is called)."""
        per_user = int(getattr(settings, "CRIOGEN_STREAMS_PER_USER", 20))
        per_thread = int(getattr(settings, "CRIOGEN_STREAMS_PER_THREAD", 20))
        with self._lock:
            if per_user and self._users[user] >= per_user:
                raise TooManyStreams(
                    f"you already follow {per_user} live streams on this server "
                    "(CRIOGEN_STREAMS_PER_USER); close one first.",
                    limit=per_user,
                )
            if per_thread and self._threads[thread_id] >= per_thread:
                raise TooManyStreams(
                    f"thread {thread_id!r} already has {per_thread} live streams "
                    "(CRIOGEN_STREAMS_PER_THREAD); close one first.",
                    thread_id=thread_id,
                    limit=per_thread,
                )
            self._users[user] += 1
            self._threads[thread_id] += 1
        given_back = threading.Event()

        def give_back() -> None:
            if not given_back.is_set():
                given_back.set()
                self._give_back(user, thread_id)

        return give_back

    def _give_back(self, user: Any, thread_id: str) -> None:
        with self._lock:
            self._users[user] -= 1
            self._threads[thread_id] -= 1
            if self._users[user] <= 0:
                del self._users[user]
            if self._threads[thread_id] <= 0:
                del self._threads[thread_id]


stream_slots = _StreamSlots()

SLICE_BYTES = 64 * 1024
"""Stream events are written in slices of this size: the server's flow control then
holds back a subscriber that does not read instead of buffering the whole event."""


async def thread_stream(
    *, thread_id: str, modes: list[str], release: Callable[[], None] | None = None
) -> AsyncIterator[bytes]:
    """The live SSE feed of a thread (``threads.join_stream``): it starts with
    ``event: metadata`` (``{"thread_id"}``) and then, as they happen,

    - ``lifecycle``: ``event: lifecycle``, ``{"run_id", "status"}`` per run status change;
    - ``state_update``: ``event: values``, the state after each checkpoint;
    - ``run_modes``: each checkpoint in the stream modes of the run that wrote it.

    It has no end: it stops when the client disconnects. Nothing is replayed. Each
    event is serialised once for all the thread's subscribers in this process
    (:func:`_shared_thread_event`) and written in slices, so idle subscribers cost
    the server one copy of an event, not one each. The caller takes a slot of
    :data:`stream_slots` first; ``release`` gives it back at the end.
    """
    from channels.layers import get_channel_layer

    from criogen.events import thread_group

    layer = get_channel_layer()
    name = await layer.new_channel()
    await layer.group_add(thread_group(thread_id), name)
    try:
        yield _sse("metadata", {"thread_id": thread_id})
        while True:
            try:
                event = await asyncio.wait_for(layer.receive(name), timeout=heartbeat_seconds())
            except TimeoutError:
                yield b": heartbeat\n\n"
                continue
            for chunk in await db(_shared_thread_event, thread_id, event, modes):
                view = memoryview(chunk)
                for at in range(0, len(view), SLICE_BYTES):
                    yield bytes(view[at : at + SLICE_BYTES])
    finally:
        await layer.group_discard(thread_group(thread_id), name)
        if release is not None:
            release()


class _SharedEvents:
    """The serialised SSE chunks of recent checkpoint events, computed once per
    (checkpoint, modes) however many subscribers ask, and kept within a byte budget."""

    def __init__(self, budget: int = 32 * 1024 * 1024) -> None:
        self.budget = budget
        self._lock = threading.Lock()
        self._done: OrderedDict[tuple[Any, ...], list[bytes]] = OrderedDict()
        self._size = 0
        self._pending: dict[tuple[Any, ...], threading.Event] = {}

    def get(self, key: tuple[Any, ...], make: Callable[[], list[bytes]]) -> list[bytes]:
        while True:
            with self._lock:
                if key in self._done:
                    self._done.move_to_end(key)
                    return self._done[key]
                waiting = self._pending.get(key)
                if waiting is None:
                    self._pending[key] = threading.Event()
                    break
            waiting.wait(30)
        try:
            chunks = make()
        except BaseException:
            with self._lock:
                self._pending.pop(key).set()
            raise
        size = sum(len(c) for c in chunks)
        with self._lock:
            if size <= self.budget:
                self._done[key] = chunks
                self._size += size
                while self._size > self.budget:
                    _, old = self._done.popitem(last=False)
                    self._size -= sum(len(c) for c in old)
            self._pending.pop(key).set()
        return chunks


_shared_events = _SharedEvents()


def _shared_thread_event(thread_id: str, event: dict[str, Any], modes: list[str]) -> list[bytes]:
    if event.get("type") != "checkpoint.written":
        return _thread_event(thread_id, event, modes)
    key = (thread_id, str(event.get("checkpoint_id")), tuple(modes))
    return _shared_events.get(key, lambda: _thread_event(thread_id, event, modes))


def _thread_event(thread_id: str, event: dict[str, Any], modes: list[str]) -> list[bytes]:
    out: list[bytes] = []
    if event.get("type") == "stream.chunks":
        if "run_modes" in modes:
            out.extend(_chunk_sse(item) for item in event.get("items") or ())
        return out
    if event.get("type") == "run.changed":
        if "lifecycle" in modes:
            out.append(
                _sse("lifecycle", {"run_id": event.get("run_id"), "status": event.get("status")})
            )
        return out
    if event.get("type") != "checkpoint.written":
        return out
    try:
        cp = threads.storage().get_checkpoint(thread_id, str(event.get("checkpoint_id")))
    except Exception:  # noqa: BLE001 - deleted meanwhile (rollback, thread delete)
        return out
    if "state_update" in modes:
        out.extend(_events_for(cp, ["values"], {}, str(cp.run_id), {}))
    if "run_modes" in modes and cp.run_id and not from_langgraph(str(cp.run_id)):
        run_modes = stream_modes(selectors.run_stream_mode(cp.run_id))
        updates = _updates_of(cp, event.get("updates") or None, None, {})
        out.extend(_events_for(cp, run_modes, updates, str(cp.run_id), {}))
    return out


def _start_version(thread_id: str, run_id: str) -> int:
    """The version after which the run's checkpoints start: before its first one, or
    the head now (a run that has not written yet writes after it)."""
    # Read the head before looking for the run's checkpoints: if the run writes in
    # between, its first checkpoint is found; the other order could skip all of them.
    info = threads.storage().thread_info(thread_id)
    head = info.head_version if info is not None else 0
    first = selectors.first_run_version(thread_id=thread_id, run_id=run_id)
    return first - 1 if first is not None else head


def _status(run_id: str) -> str | None:
    return selectors.run_status(run_id)


def _cancel_quietly(run_id: str, by: str | None) -> None:
    from criogen.services.runs import cancel_run

    run = selectors.find_run(run_id)
    if run is not None and run.status in ("pending", "running"):
        try:
            cancel_run(run=run, action="interrupt", by=by or "client disconnected")
        except Exception:
            logger.exception("could not cancel run %s after its client left", run_id)


# -- resumable streams ------------------------------------------------------------------------
#
# A run streamed (or created) with ``stream_resumable: true`` has a producer: a task on
# the event loop of the web process that accepted it, which follows the run until it
# ends and writes every event to the run's log in the database
# (:mod:`criogen.services.streams`), whether or not a client is listening. Clients read
# the log — the one that started the run as well as any that reconnects, to this or to
# another process, with ``Last-Event-ID`` — and are woken by a ``stream.appended``
# message on :func:`stream_group` of the run (the channel layer: Redis across
# processes). A reader that hears nothing for a heartbeat fills the log in from the
# run's checkpoints itself (the producer's process may have gone), so a log is never
# left unfinished.

_producers: set[asyncio.Task[None]] = set()
PRODUCER_ATTEMPTS = 60
"""A producer gives up after this many failures in a row, a second apart (the
database away for a minute); readers finish the log from the checkpoints."""


def stream_group(run_id: str) -> str:
    """The Channels group told when a run's log grows."""
    from criogen.events import stream_group as group

    return group(run_id)


def last_event_id(value: str | None) -> int:
    """``Last-Event-ID`` as the id to read after (absent, ``-1`` or ``0``: all)."""
    if value is None or not value.strip():
        return 0
    try:
        number = int(value.strip())
    except ValueError:
        raise InvalidArgument(
            f"Last-Event-ID is {value!r}; send the id of the last event received "
            "(a whole number), or -1 for all of them.",
            field="last_event_id",
        ) from None
    return max(number, 0)


def open_log(run_id: str, thread_id: str) -> None:
    """Start the run's log with ``event: metadata`` (once; a second call does nothing)."""
    from criogen.services.streams import open_stream_log, stream_tail

    if stream_tail(run_id=run_id) is not None:
        return
    open_stream_log(run_id=run_id, thread_id=thread_id, version=_start_version(thread_id, run_id))


def has_log(run_id: str) -> bool:
    """Whether the run was streamed resumably (its log exists)."""
    from criogen.services.streams import stream_tail

    return stream_tail(run_id=run_id) is not None


def _checkpoint_at(thread_id: str, version: int) -> Checkpoint | None:
    if version <= 0:
        return None
    found = threads.storage().history(thread_id, limit=1, before=version + 1)
    return found[0] if found else None


def advance_log(
    run_id: str, thread_id: str, modes: list[str], known: dict[str, dict[str, Any]]
) -> tuple[bool, bool, bool]:
    """Write the events of the run's checkpoints its log lacks, and ``error`` / ``end``
    once it has ended. ``known`` holds the updates live events carried, by checkpoint
    id (else they are rebuilt from the states). Returns ``(appended, ended, raced)``:
    ``raced`` when another process appended first, so that nothing was written here and
    the caller should look again."""
    from criogen.services.streams import append_stream_events, stream_tail

    tail = stream_tail(run_id=run_id)
    if tail is None or tail.ended:
        return False, True, False
    # The status first, then the checkpoints: a run that ends in between has its last
    # checkpoints read here too (the other order could write `end` without them).
    status = _status(run_id)
    # A LangGraph run writes its own chunks to the log (criogen.langgraph.streams), all
    # of them before it ends: only error and end are left to write here.
    found = [] if from_langgraph(run_id) else _new_checkpoints(thread_id, run_id, tail.version)
    # What the first checkpoint changed is measured from the one just before it (a run
    # queued behind another starts after that one's last checkpoint, not at the head
    # seen when its log was opened).
    first = tail.seq == 1 and bool(found)
    base = _checkpoint_at(thread_id, found[0].version - 1 if first else tail.version)
    before: dict[str, Any] = base.state if base is not None else {}
    previous = base if base is not None and str(base.run_id) == run_id else None
    items: list[tuple[int, str, str, str]] = []
    for cp in found:
        updates = _updates_of(cp, known.pop(cp.id, None), previous, before)
        items.extend(
            (cp.version, mode, event, _json(data))
            for mode, event, data in _event_items(cp, modes, updates, run_id, before)
        )
        previous, before = cp, cp.state
    version = found[-1].version if found else tail.version
    ended = status is None or status in ENDED
    if ended:
        items.extend((version, *item) for item in _closing_items(run_id))
    if not items:
        return False, False, False
    seqs = append_stream_events(run_id=run_id, thread_id=thread_id, after=tail.seq, events=items)
    if seqs is None:
        return False, False, True
    return True, ended, False


async def _tell_readers(run_id: str) -> None:
    from channels.layers import get_channel_layer

    try:
        await get_channel_layer().group_send(stream_group(run_id), {"type": "stream.appended"})
    except Exception:  # noqa: BLE001 - readers also look again at every heartbeat
        logger.warning("could not tell the readers of run %s", run_id, exc_info=True)


def start_producer(
    *,
    run_id: str,
    thread_id: str,
    modes: list[str],
    channel: tuple[Any, str] | None = None,
    after_end: Any = None,
) -> None:
    """Follow the run on this process's event loop and write its log until it ends
    (the log must have been opened with :func:`open_log`)."""
    task = asyncio.get_running_loop().create_task(
        _produce(run_id, thread_id, modes, channel, after_end),
        name=f"criogen-stream-{run_id}",
    )
    _producers.add(task)  # the loop keeps only weak references to tasks
    task.add_done_callback(_producers.discard)


async def _next_event(layer: Any, name: str) -> dict[str, Any] | None:
    """The channel's next event but stream chunks (a LangGraph run logs those
    itself), or None after a silent heartbeat."""
    while True:
        try:
            event: dict[str, Any] = await asyncio.wait_for(
                layer.receive(name), timeout=heartbeat_seconds()
            )
        except TimeoutError:
            return None
        if event.get("type") != "stream.chunks":
            return event


async def _produce(
    run_id: str,
    thread_id: str,
    modes: list[str],
    channel: tuple[Any, str] | None,
    after_end: Any,
) -> None:
    from channels.layers import get_channel_layer

    from criogen.events import thread_group

    layer, name = channel if channel is not None else (get_channel_layer(), None)
    if name is None:
        name = await layer.new_channel()
        await layer.group_add(thread_group(thread_id), name)
    known: dict[str, dict[str, Any]] = {}
    failures = 0
    try:
        while True:
            try:
                appended, ended, raced = await db(advance_log, run_id, thread_id, modes, known)
                failures = 0
            except Exception:
                failures += 1
                logger.exception("could not write the stream log of run %s", run_id)
                if failures >= PRODUCER_ATTEMPTS:
                    # Readers fill the log in from the checkpoints when it is back.
                    break
                await asyncio.sleep(1.0)
                continue
            if appended:
                await _tell_readers(run_id)
            if ended:
                break
            if raced:
                # Another process wrote first (a reader filling in): read its tail again.
                await asyncio.sleep(0.05)
                continue
            event = await _next_event(layer, name)
            if event is None:
                continue
            if event.get("type") == "checkpoint.written" and event.get("run_id") == run_id:
                known[str(event.get("checkpoint_id"))] = event.get("updates") or {}
    finally:
        await layer.group_discard(thread_group(thread_id), name)
        if after_end is not None:
            await db(after_end)


async def log_stream(
    *,
    run_id: str,
    thread_id: str,
    after: int,
    modes: list[str] | None,
    run_modes: list[str],
    cancel_on_disconnect: bool = False,
    cancelled_by: str | None = None,
) -> AsyncIterator[bytes]:
    """The SSE body of a resumable run read from its log: the events after id
    ``after`` (only ``modes``' events when given), each with its ``id:`` line, then the
    new ones as they are written, until ``event: end``; a heartbeat comment when
    nothing was sent for :func:`heartbeat_seconds`. ``run_modes`` are the modes the log
    records (to fill it in when its producer is gone)."""
    from channels.layers import get_channel_layer

    from criogen.services.streams import stream_events_after

    layer = get_channel_layer()
    name = await layer.new_channel()
    # Subscribe before reading: an append between the read and the wait still wakes us.
    await layer.group_add(stream_group(run_id), name)
    ended = False
    cursor = after
    clock = asyncio.get_running_loop().time
    sent = clock()
    try:
        while True:
            rows = await db(stream_events_after, run_id=run_id, after=cursor, modes=modes)
            for row in rows:
                yield f"id: {row.seq}\nevent: {row.event}\ndata: {row.data}\n\n".encode()
                cursor, sent = row.seq, clock()
                if row.event == "end":
                    ended = True
                    return
            if rows:
                continue
            if cursor == after and not await db(has_log, run_id):
                # The log was pruned (past its retention) between the request's look and
                # this read: the events are rebuilt from the checkpoints, as they are for
                # a request that comes after the pruning.
                ended = True
                async for chunk in sse_stream(
                    run_id=run_id,
                    thread_id=thread_id,
                    modes=modes or run_modes,
                    cancel_on_disconnect=cancel_on_disconnect,
                    cancelled_by=cancelled_by,
                ):
                    yield chunk
                return
            # Silent since the last event sent (not the last wake-up: a filtered replay
            # can be woken often and send nothing).
            quiet = max(0.0, heartbeat_seconds() - (clock() - sent))
            try:
                await asyncio.wait_for(layer.receive(name), timeout=quiet)
            except TimeoutError:
                yield b": heartbeat\n\n"
                sent = clock()
                # Nothing for a while: if the producer is gone, write what it would have.
                try:
                    _, over, _ = await db(advance_log, run_id, thread_id, run_modes, {})
                except Exception:  # noqa: BLE001 - the next heartbeat tries again
                    logger.warning("could not fill in the log of run %s", run_id, exc_info=True)
                else:
                    if over and not await db(has_log, run_id):
                        return  # pruned while this reader waited: nothing more will come
    finally:
        await layer.group_discard(stream_group(run_id), name)
        if not ended and cancel_on_disconnect:
            await db(_cancel_quietly, run_id, cancelled_by)
