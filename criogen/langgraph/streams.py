"""LangGraph's own stream for the runs of a bridged graph.

A run of a bridged graph (:mod:`criogen.langgraph.bridge`) drives the LangGraph graph
with ``stream`` (``astream_events`` for the ``events`` mode) in the stream modes the
run was created with, and hands each chunk on as LangGraph's server sends it:

- event names and shapes as that server's: ``values``, ``updates``, ``custom``,
  ``checkpoints``, ``tasks`` as LangGraph streams them; ``messages`` as ``[message
  chunk, metadata]`` for ``messages-tuple``, or ``messages/metadata`` then
  ``messages/partial`` (the message so far) for ``messages``; ``debug`` with each
  checkpoint's ``checkpoint`` / ``parent_checkpoint``; ``events`` every LangChain
  event but the graph's own stream; with ``stream_subgraphs`` a subgraph's chunks
  are named with their namespace (``updates|research:<task id>``);
- live, to the thread's Channels group (:func:`criogen.events.send_chunks`): whatever
  process runs the graph (a runner thread, a Celery worker), the web process that
  streams the run forwards them in order;
- when the run is streamed resumably, to the run's log as well
  (:func:`criogen.services.streams.append_to_stream_log`), by a writer thread, every
  chunk written before the turn returns (so before the run can end).
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
from dataclasses import dataclass
from typing import Any

__all__ = ["StreamOptions", "graph_modes", "run_options", "stream_turn"]

logger = logging.getLogger("criogen.langgraph.streams")


@dataclass(frozen=True)
class StreamOptions:
    """How a run asked to be streamed."""

    modes: tuple[str, ...]
    """Its stream modes, as the client gave them (``messages-tuple``, ``events``…)."""
    subgraphs: bool
    """``stream_subgraphs``: the subgraphs' chunks too, named by namespace."""
    resumable: bool
    """``stream_resumable``: its events are logged for ``Last-Event-ID``."""


def run_options(kwargs: dict[str, Any] | None) -> StreamOptions:
    """The stream options kept in a run's ``kwargs`` (``["values"]`` by default)."""
    kwargs = kwargs or {}
    modes = kwargs.get("stream_mode") or ["values"]
    if isinstance(modes, str):
        modes = [modes]
    return StreamOptions(
        modes=tuple(str(m) for m in modes),
        subgraphs=bool(kwargs.get("stream_subgraphs")),
        resumable=bool(kwargs.get("stream_resumable")),
    )


def graph_modes(modes: tuple[str, ...] | list[str]) -> list[str]:
    """The ``stream_mode`` LangGraph is driven with for the run's modes: ``messages``
    for either messages mode, ``events`` left to ``astream_events``."""
    out: list[str] = []
    for mode in modes:
        mode = "messages" if mode == "messages-tuple" else mode
        if mode != "events" and mode not in out:
            out.append(mode)
    return out


def stream_turn(
    compiled: Any,
    turn_input: Any,
    config: dict[str, Any],
    options: StreamOptions,
    *,
    run_id: str,
    thread_id: str,
    durability: dict[str, Any],
) -> None:
    """Run one turn of ``compiled`` as ``invoke`` would, streaming its chunks in the
    run's modes as it goes (see the module's docstring)."""
    config = {**config, "run_id": run_id}  # LangChain's root run: the events' own id
    convert = _Converter(options)
    sink = _Sink(run_id, thread_id, options.resumable)
    modes = graph_modes(options.modes) or ["values"]
    try:
        if "events" in options.modes:
            asyncio.run(
                _stream_events(
                    compiled, turn_input, config, modes, options, convert, sink, durability
                )
            )
        else:
            for part in compiled.stream(
                turn_input, config, stream_mode=modes, subgraphs=options.subgraphs, **durability
            ):
                ns, mode, chunk = part if options.subgraphs else ((), *part)
                sink.put(convert(ns, mode, chunk))
    finally:
        sink.close()


async def _stream_events(
    compiled: Any,
    turn_input: Any,
    config: dict[str, Any],
    modes: list[str],
    options: StreamOptions,
    convert: _Converter,
    sink: _Sink,
    durability: dict[str, Any],
) -> None:
    # As LangGraph's server: the graph's own stream arrives as its root run's
    # on_chain_stream events; every other event is an ``events`` event.
    root = str(config["run_id"])
    async for event in compiled.astream_events(
        turn_input,
        config,
        version="v2",
        stream_mode=modes,
        subgraphs=options.subgraphs,
        **durability,
    ):
        if "langsmith:hidden" in (event.get("tags") or ()):
            continue
        if event.get("event") == "on_chain_stream" and str(event.get("run_id")) == root:
            part = event["data"]["chunk"]
            ns, mode, chunk = part if options.subgraphs else ((), *part)
            sink.put(convert(ns, mode, chunk))
        else:
            sink.put([("events", "events", event)])


class _Converter:
    """LangGraph chunks as the server's SSE events: ``(mode, event name, data)``."""

    def __init__(self, options: StreamOptions) -> None:
        self.modes = set(options.modes)
        self.subgraphs = options.subgraphs
        self.messages: dict[Any, Any] = {}

    def __call__(self, ns: Any, mode: str, chunk: Any) -> list[tuple[str, str, Any]]:
        suffix = "|" + "|".join(ns) if self.subgraphs and ns else ""
        if mode == "debug" and isinstance(chunk, dict) and chunk.get("type") == "checkpoint":
            chunk = {**chunk, "payload": _debug_checkpoint(chunk.get("payload"))}
        if mode == "messages":
            if "messages-tuple" in self.modes:
                return [("messages-tuple", "messages" + suffix, chunk)]
            if "messages" in self.modes:
                return self._legacy_messages(chunk)
            return []
        if mode in self.modes:
            return [(mode, mode + suffix, chunk)]
        return []

    def _legacy_messages(self, chunk: Any) -> list[tuple[str, str, Any]]:
        """``messages``: the message's metadata once, then the whole message so far
        (``messages/partial`` while it streams, ``messages/complete`` for a message
        that came whole)."""
        from langchain_core.messages import BaseMessageChunk, message_chunk_to_message

        message, meta = chunk
        out: list[tuple[str, str, Any]] = []
        if message.id in self.messages:
            self.messages[message.id] += message
        else:
            self.messages[message.id] = message
            out.append(("messages", "messages/metadata", {message.id: {"metadata": meta}}))
        name = "messages/partial" if isinstance(message, BaseMessageChunk) else "messages/complete"
        out.append(("messages", name, [message_chunk_to_message(self.messages[message.id])]))
        return out


def _checkpoint_of(config: Any) -> dict[str, Any] | None:
    """A LangGraph config as the server's ``checkpoint`` object."""
    configurable = (config or {}).get("configurable") or {}
    if not configurable.get("thread_id") or not configurable.get("checkpoint_id"):
        return None
    out = {"checkpoint_id": configurable["checkpoint_id"], "thread_id": configurable["thread_id"]}
    if "checkpoint_ns" in configurable:
        out["checkpoint_ns"] = configurable["checkpoint_ns"] or ""
    if "checkpoint_map" in configurable:
        out["checkpoint_map"] = configurable["checkpoint_map"]
    return out


def _debug_checkpoint(payload: Any) -> Any:
    """A debug ``checkpoint`` payload with ``checkpoint`` and ``parent_checkpoint``
    next to its configs, and its tasks' ``state`` config as ``checkpoint``."""
    if not payload:
        return None
    tasks = []
    for task in payload.get("tasks") or ():
        state = task.get("state") if isinstance(task, dict) else None
        if isinstance(state, dict) and state.get("configurable"):
            task = {k: v for k, v in task.items() if k != "state"}
            task["checkpoint"] = state["configurable"]
        tasks.append(task)
    return {
        **payload,
        "checkpoint": _checkpoint_of(payload.get("config")),
        "parent_checkpoint": _checkpoint_of(payload.get("parent_config")),
        "tasks": tasks,
    }


def _text(data: Any) -> str:
    from criogen.langgraph.bridge import _default

    return json.dumps(data, default=_default, separators=(",", ":"))


class _Sink:
    """Where a run's events go: live to the thread's group, and to the run's log when
    it is resumable (by a writer thread, in order; :meth:`close` waits for it)."""

    def __init__(self, run_id: str, thread_id: str, resumable: bool) -> None:
        self.run_id = run_id
        self.thread_id = thread_id
        self.log: queue.SimpleQueue[tuple[str, str, str] | None] | None = None
        self.writer: threading.Thread | None = None
        if resumable:
            self.log = queue.SimpleQueue()
            self.writer = threading.Thread(
                target=self._write, name=f"criogen-stream-log-{run_id}", daemon=True
            )
            self.writer.start()

    def put(self, events: list[tuple[str, str, Any]]) -> None:
        if not events:
            return
        from criogen.events import send_chunks

        items = [(mode, name, _text(data)) for mode, name, data in events]
        send_chunks(run_id=self.run_id, thread_id=self.thread_id, items=items)
        if self.log is not None:
            for item in items:
                self.log.put(item)

    def close(self) -> None:
        if self.log is not None and self.writer is not None:
            self.log.put(None)
            self.writer.join()

    def _write(self) -> None:
        from django.db import connections

        from criogen.events import send, stream_group
        from criogen.services.streams import append_to_stream_log

        assert self.log is not None
        done = False
        try:
            while not done:
                batch = [self.log.get()]
                while True:
                    try:
                        batch.append(self.log.get_nowait())
                    except queue.Empty:
                        break
                done = None in batch
                items = [item for item in batch if item is not None]
                if not items:
                    continue
                try:
                    append_to_stream_log(run_id=self.run_id, thread_id=self.thread_id, events=items)
                except Exception:
                    logger.exception("could not log the stream of run %s", self.run_id)
                send(stream_group(self.run_id), {"type": "stream.appended"})
        finally:
            connections.close_all()  # this thread's own connections
