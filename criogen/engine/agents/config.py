"""An agent's configuration: its model, tools, instructions, approval rule, memory,
hooks and run options (:class:`Agent`). Threads of the agent are :class:`AgentThread`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from criogen.engine.active_run import (
    DEFAULT_BUSY_TIMEOUT,
    DEFAULT_LEASE_SECONDS,
    Durability,
    OnBusy,
    check_durability,
    check_on_busy,
)
from criogen.engine.agents.reply import Reply
from criogen.engine.agents.run import in_worker
from criogen.engine.agents.thread import AgentThread
from criogen.engine.checkpoints import check_thread_id, new_id
from criogen.engine.errors import InvalidArgument
from criogen.engine.memory import Memory
from criogen.engine.state import check_json
from criogen.engine.store import Storage
from criogen.engine.tools import Tool

__all__ = ["DEADLINE_DEFAULTS", "SUSPENSION_OPTIONS", "Agent", "ApproveRule", "Hook"]

Hook = Callable[..., Any]
"""A hook: a function called with the state (see :class:`Agent`)."""
ApproveRule = (
    Sequence[str]
    | Mapping[str, Mapping[str, Any]]
    | Callable[[dict[str, Any], dict[str, Any]], bool]
    | bool
)
"""Which tool calls wait for a person: names, ``{name: options}``, a rule, or all."""
SUSPENSION_OPTIONS = ("deadline", "default", "remind")
"""What ``approve={tool: {...}}`` may set on a tool's suspension (see deadlines)."""
DEADLINE_DEFAULTS = ("approve", "reject", "fail", "wait")


def _hooks(value: Hook | Sequence[Hook] | None, name: str) -> tuple[Hook, ...]:
    if value is None:
        return ()
    items = (value,) if callable(value) else tuple(value)
    for item in items:
        if not callable(item):
            raise InvalidArgument(f"{name} must be a function or a list of them.", field=name)
    return items


class Agent:
    """A model with tools, instructions, approvals and memory, run on threads.

    Args:
        model: a ``ChatModel`` (``OpenAIChat``, ``ScriptedModel``…).
        instructions: the system prompt, sent first with every model call.
        tools: ``Tool`` objects (``@tool``) or plain functions (wrapped with ``Tool``).
        approve: tool names that need a person's approval before they run, a callable
            ``(call, state) -> bool`` deciding per call, ``True`` for every tool, or a
            dict ``{tool: {"deadline": "24h", "default": "reject", "remind": "1h"}}``
            whose options go on that tool's suspension (on a server, the deadline
            service applies ``default`` once the deadline passes; ``{}`` for none).
        memory: ``Memory.by_state("user_id")`` to keep facts per person.
        storage: where threads live; default: a private in-memory storage.
        max_steps: model calls allowed per run before it fails ``max_steps_exceeded``.
        before_model / after_model / before_tool / after_tool: hooks (a function or a
            list), called with the state (including ``send`` values):
            ``before_model(state, messages)`` may return a list of messages to send
            instead; ``after_model(state, message)``; ``before_tool(state, call)``;
            ``after_tool(state, call, result_message)``. A hook that raises fails the run.
        durability, on_busy, busy_timeout, lease_seconds: as for workflows.
    """

    def __init__(
        self,
        model: Any,
        *,
        instructions: str = "",
        tools: Sequence[Tool | Callable[..., Any]] = (),
        approve: ApproveRule = (),
        memory: Memory | None = None,
        storage: Any = None,
        name: str = "agent",
        max_steps: int = 25,
        before_model: Hook | Sequence[Hook] | None = None,
        after_model: Hook | Sequence[Hook] | None = None,
        before_tool: Hook | Sequence[Hook] | None = None,
        after_tool: Hook | Sequence[Hook] | None = None,
        durability: Durability = "async",
        on_busy: OnBusy = "wait",
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        if not callable(getattr(model, "complete", None)):
            raise InvalidArgument(
                f"model {model!r} has no complete(messages, tools) method: use OpenAIChat, "
                "ScriptedModel or another ChatModel.",
                field="model",
            )
        if not isinstance(instructions, str):
            raise InvalidArgument("instructions must be a string.", field="instructions")
        if not isinstance(max_steps, int) or max_steps < 1:
            raise InvalidArgument("max_steps must be a positive integer.", field="max_steps")
        if memory is not None and not isinstance(memory, Memory):
            raise InvalidArgument("memory must be a Memory (Memory.by_state(...)).", field="memory")
        self.model = model
        self.instructions = instructions
        self.name = name
        self.max_steps = max_steps
        self.durability = check_durability(durability)
        self.on_busy = check_on_busy(on_busy)
        self.busy_timeout = busy_timeout
        self.lease_seconds = lease_seconds
        self._tool_list = list(tools)
        self._approve = approve
        self.hooks = {
            "before_model": _hooks(before_model, "before_model"),
            "after_model": _hooks(after_model, "after_model"),
            "before_tool": _hooks(before_tool, "before_tool"),
            "after_tool": _hooks(after_tool, "after_tool"),
        }
        if storage is None:
            from criogen.engine.memory_store import MemoryStorage

            storage = MemoryStorage()
        self.storage: Storage = storage
        self.memory = memory.bind(storage) if memory is not None else None
        self.tools: dict[str, Tool] = {}
        for item in self._tool_list:
            t = item if isinstance(item, Tool) else Tool.from_function(item)
            if t.name in self.tools:
                raise InvalidArgument(f"two tools are named {t.name!r}.", field="tools")
            self.tools[t.name] = t
        if self.memory is not None:
            mem_tool = self.memory.tool()
            if mem_tool.name in self.tools:
                raise InvalidArgument(
                    f"a tool is named {mem_tool.name!r}, like the memory tool; rename one.",
                    field="tools",
                )
            self.tools[mem_tool.name] = mem_tool
        self._approve_options: dict[str, dict[str, Any]] = {}
        self._approve_rule: Callable[[dict[str, Any], dict[str, Any]], bool] | None = None
        if isinstance(approve, bool):
            self._approve_names: frozenset[str] | None = (
                frozenset(self.tools) if approve else frozenset()
            )
        elif callable(approve):
            self._approve_names = None
            self._approve_rule = approve
        else:
            if isinstance(approve, str):
                approve = [approve]
            if isinstance(approve, Mapping):
                self._approve_options = {
                    name: _check_suspension_options(name, options)
                    for name, options in approve.items()
                }
            unknown = [n for n in approve if n not in self.tools]
            if unknown:
                raise InvalidArgument(
                    f"approve names {unknown}, which are not tools of this agent "
                    f"(tools: {sorted(self.tools)}).",
                    field="approve",
                )
            self._approve_names = frozenset(approve)

    supports_should_stop = True
    """The runner may pass ``should_stop=`` to stop a run between two steps."""

    def __repr__(self) -> str:
        return f"<Agent {self.name!r} tools={sorted(self.tools)}>"

    def with_storage(self, storage: Any, **overrides: Any) -> Agent:
        """The same agent on another storage (the server binds it to its database);
        ``overrides`` change other options (durability, max_steps…)."""
        options: dict[str, Any] = {
            "instructions": self.instructions,
            "tools": self._tool_list,
            "approve": self._approve,
            "memory": self.memory,
            "name": self.name,
            "max_steps": self.max_steps,
            "durability": self.durability,
            "on_busy": self.on_busy,
            "busy_timeout": self.busy_timeout,
            "lease_seconds": self.lease_seconds,
            **{k: list(v) for k, v in self.hooks.items()},
            **overrides,
        }
        return Agent(self.model, storage=storage, **options)

    def needs_approval(self, call: Mapping[str, Any], state: Mapping[str, Any]) -> bool:
        """Whether a tool call waits for a person before it runs."""
        if call.get("name") not in self.tools:
            return False
        if self._approve_rule is None:
            return call["name"] in (self._approve_names or ())
        return bool(self._approve_rule(dict(call), dict(state)))

    def suspension_options(self, tools: Iterable[str]) -> dict[str, Any]:
        """The deadline options of a suspension holding calls of ``tools`` (in the
        model's order): those of the first tool that has some, else ``{}``."""
        return next(
            (dict(self._approve_options[t]) for t in tools if self._approve_options.get(t)), {}
        )

    def thread(self, thread_id: str) -> AgentThread:
        """The conversation with this id (created by its first message)."""
        return AgentThread(self, check_thread_id(thread_id))

    def run(self, message: Any, **options: Any) -> Reply:
        """One answer on a fresh thread (a new UUID, no history). Options as for send."""
        return self.thread(new_id()).send(message, **options)

    async def arun(self, message: Any, **options: Any) -> Reply:
        """``run`` from async code (the turn goes on a worker thread)."""
        return await asyncio.to_thread(in_worker, self.storage, self.run, message, **options)


def _check_suspension_options(tool: str, options: Any) -> dict[str, Any]:
    """Validate ``approve={tool: options}``: only deadline options, JSON values."""
    where = f"approve[{tool!r}]"
    if not isinstance(options, Mapping):
        raise InvalidArgument(
            f"{where} must be a dict of {', '.join(SUSPENSION_OPTIONS)} (or {{}}).", field="approve"
        )
    unknown = sorted(set(options) - set(SUSPENSION_OPTIONS))
    if unknown:
        raise InvalidArgument(
            f"{where} has {unknown}; use {', '.join(SUSPENSION_OPTIONS)}.", field="approve"
        )
    if options.get("default") not in (None, *DEADLINE_DEFAULTS):
        raise InvalidArgument(
            f"{where}['default'] is {options['default']!r}; use one of "
            f"{', '.join(DEADLINE_DEFAULTS)}.",
            field="approve",
        )
    check_json(dict(options), where)
    return dict(options)
