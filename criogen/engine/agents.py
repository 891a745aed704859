"""Agents: a model that calls tools in a loop, durably, on threads of checkpoints.

::

    agent = Agent(
        model=ScriptedModel([...]),            # or OpenAIChat("gpt-4o-mini")
        instructions="You are a support agent.",
        tools=[lookup_order, issue_refund],
        approve=["issue_refund"],              # names, or a callable(call, state) -> bool
        memory=Memory.by_state("user_id"),
        storage=Storage("sqlite://ops.db"),
    )
    t = agent.thread("ticket-7")
    reply = t.send("Refund order 42", user_id="42")
    if reply.status == "suspended":
        t.approve(by="alice")                  # or reject(reason) / decide({...}) / respond(text)

A run is a thread of the same engine as workflows (:class:`ActiveRun`: lease,
heartbeat, durability, checkpoint numbering). The state holds the transcript under
``messages`` (appended, so storage grows by the new messages only), the values passed
with ``send`` (overwritten), and the engine's counters under ``__criogen__``.

Checkpoints: ``input`` when a message (or a decision) arrives; ``step`` after every
model call and every finished tool call; ``suspend`` before an approval-gated tool
runs (one interrupt listing every pending gated call); ``failure`` when the model
fails or ``max_steps`` is exceeded. ``next`` is ``["model"]`` or ``["tools"]``.

Approvals are server-side records (:class:`DecisionRecord`) bound to the thread, the
suspended checkpoint's version, the call id and a SHA-256 digest of the call's
canonical arguments, inserted in the same transaction as the checkpoint that resumes
the run. A decision for another version, an unknown call or other arguments fails
closed (:class:`StaleDecision`); a suspension already answered fails with
:class:`AlreadyDecided`.

The effect ledger: before an approved or side-effecting (not ``idempotent``) tool runs,
an intent row keyed by (thread, checkpoint of the model step, call id) is committed;
the outcome is committed when it returns. See ``docs/python-api.md`` for each crash
point.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

from criogen.engine.active_run import (
    DEFAULT_BUSY_TIMEOUT,
    DEFAULT_LEASE_SECONDS,
    ActiveRun,
    Durability,
    OnBusy,
    check_durability,
    check_on_busy,
)
from criogen.engine.checkpoints import (
    Checkpoint,
    CheckpointId,
    CheckpointWrite,
    ThreadId,
    check_thread_id,
    new_id,
    to_snapshot,
    utcnow,
)
from criogen.engine.errors import (
    AlreadyDecided,
    CriogenError,
    InvalidArgument,
    InvalidToolCall,
    MaxStepsExceeded,
    NothingToRetry,
    NotSuspended,
    RunCancelled,
    RunFailed,
    StaleDecision,
    ThreadBusy,
    ThreadInterrupted,
    ThreadSuspended,
)
from criogen.engine.memory import Memory
from criogen.engine.messages import (
    Message,
    normalize_messages,
    system,
    tool_result,
)
from criogen.engine.state import Delta, apply_update, check_json
from criogen.engine.threads import ThreadBase, check_door, check_expected, check_state_size
from criogen.engine.tools import Tool, ToolContext, build_idempotency_key

__all__ = [
    "RESERVED_KEY",
    "Agent",
    "AgentThread",
    "Reply",
    "StaleDecision",
    "args_digest",
]

RESERVED_KEY = "__criogen__"
"""The state key of the engine's counters: ``steps``, ``tool_calls``, ``usage``."""
MODEL, TOOLS = "model", "tools"
ALLOWED_DECISIONS = ["approve", "edit", "reject", "respond"]
_REDUCERS: dict[str, Any] = {"messages": "append"}

Hook = Callable[..., Any]
ApproveRule = (
    Sequence[str]
    | Mapping[str, Mapping[str, Any]]
    | Callable[[dict[str, Any], dict[str, Any]], bool]
    | bool
)
SUSPENSION_OPTIONS = ("deadline", "default", "remind")
"""What ``approve={tool: {...}}`` may set on a tool's suspension (see deadlines)."""
DEADLINE_DEFAULTS = ("approve", "reject", "fail", "wait")


def args_digest(args: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of a call's canonical arguments JSON (sorted keys, no spaces)."""
    text = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            b if isinstance(b, str) else str(b.get("text", ""))
            for b in content
            if isinstance(b, str) or (isinstance(b, Mapping) and b.get("type") == "text")
        )
    return ""


# -- the reply ------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """How an agent turn ended (a failure raises instead: ModelError, MaxStepsExceeded,
    RunFailed, each with ``.checkpoint``)."""

    status: Literal["completed", "suspended"]
    """``completed`` (a final answer) or ``suspended`` (waiting for a decision)."""
    text: str
    """The final answer's text (``""`` while suspended)."""
    pending: list[dict[str, Any]]
    """While suspended: the calls waiting for a decision, ``{"id", "name", "args",
    "digest"}``, in order."""
    state: dict[str, Any]
    """The state at the end of the turn (``messages``, send values, ``__criogen__``)."""
    checkpoint: Checkpoint
    """The thread's head after the turn."""
    thread_id: str
    """The thread."""
    run_id: str
    """The run that produced this reply."""

    @property
    def messages(self) -> list[Message]:
        """The transcript."""
        return list(self.state.get("messages", []))

    @property
    def interrupts(self) -> list[dict[str, Any]]:
        """The pending interrupt (at most one), as stored on the checkpoint."""
        return list(self.checkpoint.interrupts)

    @property
    def reason(self) -> str | None:
        """Why it is suspended: ``approval`` or ``outcome_unknown`` (None when completed)."""
        return self.checkpoint.interrupts[0].get("reason") if self.checkpoint.interrupts else None

    @property
    def usage(self) -> dict[str, int]:
        """Tokens used on this thread so far, ``{"input_tokens", "output_tokens"}``."""
        return dict(self.state.get(RESERVED_KEY, {}).get("usage", {}))

    @property
    def snapshot(self) -> dict[str, Any]:
        """The head checkpoint as plain JSON."""
        return to_snapshot(self.checkpoint)


# -- the agent -------------------------------------------------------------------------


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
        self.storage = storage
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
        if isinstance(approve, bool):
            self._approve_names: frozenset[str] | None = (
                frozenset(self.tools) if approve else frozenset()
            )
        elif callable(approve):
            self._approve_names = None
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
        if self._approve_names is not None:
            return call["name"] in self._approve_names
        return bool(self._approve(dict(call), dict(state)))  # type: ignore[operator]

    def thread(self, thread_id: str) -> AgentThread:
        """The conversation with this id (created by its first message)."""
        return AgentThread(self, check_thread_id(thread_id))

    def run(self, message: Any, **options: Any) -> Reply:
        """One answer on a fresh thread (a new UUID, no history). Options as for send."""
        return self.thread(new_id()).send(message, **options)

    async def arun(self, message: Any, **options: Any) -> Reply:
        """``run`` from async code (the turn goes on a worker thread)."""
        return await asyncio.to_thread(_in_worker, self.storage, self.run, message, **options)


# -- decisions -------------------------------------------------------------------------

_RUN_OPTIONS = (
    "durability",
    "on_busy",
    "busy_timeout",
    "run_id",
    "metadata",
    "should_stop",
    "door",
    "expected",
)


def _normalize_decision(
    raw: Any, call: Mapping[str, Any], index: int, thread_id: str
) -> dict[str, Any]:
    """One HITL decision dict -> ``{"type", "args"?, "message"?}``; InvalidArgument if bad."""
    where = f"decisions[{index}]"
    if isinstance(raw, str):
        raw = {"type": raw}
    if not isinstance(raw, Mapping):
        raise InvalidArgument(
            f"{where} must be 'approve', 'reject' or a dict with 'type'.", field=where
        )
    kind = raw.get("type")
    if kind is None and "args" in raw:
        kind = "edit"
    if kind not in ALLOWED_DECISIONS:
        raise InvalidArgument(
            f"{where} has type {kind!r}; use one of {ALLOWED_DECISIONS}.", field=f"{where}.type"
        )
    digest = raw.get("digest")
    if digest is not None and digest != call["digest"]:
        raise StaleDecision(
            f"{where} was made for other arguments of call {call['id']!r} than the ones "
            "pending (digest mismatch); reload the thread and decide again.",
            thread_id=thread_id,
            call_id=call["id"],
        )
    out: dict[str, Any] = {"type": kind}
    if kind == "edit":
        edited = raw.get("edited_action") or {}
        args = raw.get("args", edited.get("args") if isinstance(edited, Mapping) else None)
        if not isinstance(args, Mapping):
            raise InvalidArgument(
                f"{where} edits the call but gives no 'args' object.", field=f"{where}.args"
            )
        name = edited.get("name") if isinstance(edited, Mapping) else None
        if name not in (None, call["name"]):
            raise InvalidArgument(
                f"{where} renames the tool ({name!r}); an edit may change the arguments only.",
                field=f"{where}.edited_action.name",
            )
        check_json(dict(args), f"{where}.args")
        out["args"] = dict(args)
    if kind in ("reject", "respond"):
        message = raw.get("message", raw.get("reason", ""))
        if message is None:
            message = ""
        if not isinstance(message, str):
            raise InvalidArgument(f"{where}.message must be a string.", field=f"{where}.message")
        if kind == "respond" and not message.strip():
            raise InvalidArgument(
                f"{where} responds with an empty message.", field=f"{where}.message"
            )
        out["message"] = message
    return out


# -- a thread --------------------------------------------------------------------------


class AgentThread(ThreadBase):
    """One conversation with an agent: its turns, approvals, head and history."""

    def __init__(self, agent: Agent, thread_id: ThreadId) -> None:
        self.agent = agent
        self.id = thread_id

    def __repr__(self) -> str:
        return f"<AgentThread {self.id!r} of {self.agent.name!r}>"

    @property
    def storage(self) -> Any:
        """The agent's storage."""
        return self.agent.storage

    def _active(self, **options: Any) -> Any:
        return _Turn(self, options, None, None).lease()

    # -- reading ------------------------------------------------------------------------

    @property
    def messages(self) -> list[Message]:
        """The transcript at the head."""
        return list(self.state.get("messages", []))

    @property
    def pending(self) -> list[dict[str, Any]]:
        """The calls waiting for a decision (empty unless the head is suspended)."""
        head = self.head
        if head is None or head.status != "suspended" or not head.interrupts:
            return []
        return [dict(c) for c in head.interrupts[0].get("calls", [])]

    def decisions(self) -> list[Any]:
        """The decisions taken on this thread (``DecisionRecord``), newest first."""
        return self.storage.decisions(self.id)  # type: ignore[no-any-return]

    def effects(self) -> list[Any]:
        """The effect ledger of this thread (``EffectRecord``), oldest first."""
        return self.storage.effects(self.id)  # type: ignore[no-any-return]

    # -- turns --------------------------------------------------------------------------

    def send(
        self,
        message: Any = None,
        *,
        by: str | None = None,
        door: str = "python",
        durability: Durability | None = None,
        on_busy: OnBusy | None = None,
        busy_timeout: float | None = None,
        run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        should_stop: Callable[[], bool] | None = None,
        **values: Any,
    ) -> Reply:
        """Start a new turn: add ``message`` (a string, a message dict, or a list) and
        merge ``values`` into the state, then run the agent until it answers or
        suspends.

        Raises ThreadSuspended (answer it first), ThreadInterrupted (a run died: retry),
        ThreadBusy, InvalidMessage/InvalidArgument/InvalidState (nothing written),
        ModelError/MaxStepsExceeded/RunFailed (a failure checkpoint was written).
        """
        update = self._input_update(message, values)
        options = {
            "durability": durability,
            "on_busy": on_busy,
            "busy_timeout": busy_timeout,
            "run_id": run_id,
            "should_stop": should_stop,
            "door": door,
        }
        return _Turn(self, options, metadata, by).start_turn(update)

    def run(self, input: Any = None, **options: Any) -> Reply:
        """``send`` for the server: ``input`` is a string, a list of messages or a dict
        ``{"messages": [...], **values}``. Options: run_id, durability, on_busy,
        busy_timeout, metadata, should_stop, by."""
        values: dict[str, Any] = {}
        message: Any = input
        if isinstance(input, Mapping) and "type" not in input and "role" not in input:
            values = {k: v for k, v in input.items() if k != "messages"}
            message = input.get("messages")
            clash = [k for k in values if k in _RUN_OPTIONS or k in ("by", "door")]
            if clash:
                raise InvalidArgument(
                    f"input key(s) {clash} are reserved for run options.", field="input"
                )
        return self.send(message, **{k: v for k, v in options.items() if v is not None}, **values)

    async def asend(self, message: Any = None, **options: Any) -> Reply:
        """``send`` from async code (the turn goes on a worker thread)."""
        return await asyncio.to_thread(_in_worker, self.storage, self.send, message, **options)

    def _input_update(self, message: Any, values: Mapping[str, Any]) -> dict[str, Any]:
        for key in values:
            if key in ("messages", RESERVED_KEY):
                raise InvalidArgument(
                    f"{key!r} cannot be passed as a state value; send messages as the first "
                    "argument.",
                    field=key,
                )
        update: dict[str, Any] = dict(values)
        if message is not None:
            update["messages"] = normalize_messages(message)  # InvalidMessage names the field
        apply_update({}, update, _REDUCERS, origin="input")  # validate before the lease
        return update

    def retry(self, *, by: str | None = None, **options: Any) -> Reply:
        """Continue a failed or interrupted turn from its last checkpoint."""
        metadata = options.pop("metadata", None)
        return _Turn(self, options, metadata, by).start_retry()

    def resume(
        self,
        value: Any,
        *,
        by: str | None = None,
        version: int | None = None,
        **options: Any,
    ) -> Reply:
        """Answer the pending suspension with a HITL response
        ``{"decisions": [{"type": "approve"} | {"type": "edit", "edited_action":
        {"name", "args"}} | {"type": "reject", "message"} | {"type": "respond",
        "message"}, …]}`` in the order of the pending calls.

        ``"approve"`` or one decision dict answers every pending call the same way. The
        value may carry ``"version"`` (as ``version=`` does).
        ``version`` (optional): the suspended checkpoint's version the caller saw; a
        decision for another version fails closed. Each decision may carry the
        ``digest`` it was made for.

        Raises AlreadyDecided (someone answered first), StaleDecision, NotSuspended,
        InvalidArgument (nothing decided).
        """
        build, version = self._decisions_builder(value, version)
        return _Turn(self, options, None, by).start_decisions(build, "decide", version)

    def check_answer(self, value: Any) -> None:
        """Check ``value`` as :meth:`resume` would against the suspension pending now —
        its shape, one decision per call, edits that fit the tool's schema — without
        taking the thread or writing anything (the server checks an answer this way
        before it creates the run). A thread that does not wait passes: the answer
        itself is refused then, by name."""
        head = self.head
        if head is None or head.status != "suspended" or not head.interrupts:
            return
        build, _ = self._decisions_builder(value, None)
        calls = list(head.interrupts[0].get("calls", []))
        _Turn(self, {}, None, None)._check_edits(calls, build(calls))

    def _decisions_builder(
        self, value: Any, version: int | None
    ) -> tuple[Callable[[list[dict[str, Any]]], dict[str, dict[str, Any]]], int | None]:
        """The HITL response ``value`` parsed: a function from the pending calls to the
        decision per call id, and the version it is bound to (from ``value`` if given)."""
        every: Any = None
        if isinstance(value, Mapping) and "decisions" in value:
            raw = value["decisions"]
            # The version may travel in the value (a run's command), binding the
            # decisions to the suspension the operator saw.
            if version is None and value.get("version") is not None:
                version = value["version"]
                if not isinstance(version, int) or isinstance(version, bool):
                    raise InvalidArgument("version must be an integer.", field="version")
        elif isinstance(value, list):
            raw = value
        elif value in ALLOWED_DECISIONS or (isinstance(value, Mapping) and "type" in value):
            # One decision for every pending call: "approve", {"type": "reject", …}.
            raw, every = [], value
        else:
            raise InvalidArgument(
                'resume an agent with {"decisions": [...]}, one per pending call; or use '
                "approve(), reject(), decide() or respond().",
                field="decisions",
            )
        if not isinstance(raw, list):
            raise InvalidArgument("decisions must be a list.", field="decisions")

        def build(calls: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
            nonlocal raw
            if every is not None:
                raw = [every] * len(calls)
            if len(raw) != len(calls):
                raise InvalidArgument(
                    f"{len(calls)} call(s) are pending and {len(raw)} decision(s) were given; "
                    "give one per call, in order (or use decide({call_id: ...})).",
                    field="decisions",
                )
            return {
                c["id"]: _normalize_decision(d, c, i, self.id)
                for i, (c, d) in enumerate(zip(calls, raw, strict=True))
            }

        return build, version

    def approve(
        self, *, by: str | None = None, version: int | None = None, **options: Any
    ) -> Reply:
        """Approve every pending call: they run, and the agent continues."""
        return _Turn(self, options, None, by).start_decisions(
            lambda calls: {c["id"]: {"type": "approve"} for c in calls}, "approve", version
        )

    def reject(
        self,
        reason: str = "",
        *,
        by: str | None = None,
        version: int | None = None,
        **options: Any,
    ) -> Reply:
        """Reject every pending call: the model gets a tool result saying it was
        rejected, and why."""
        if not isinstance(reason, str):
            raise InvalidArgument("reason must be a string.", field="reason")
        return _Turn(self, options, None, by).start_decisions(
            lambda calls: {c["id"]: {"type": "reject", "message": reason} for c in calls},
            "reject",
            version,
        )

    def respond(
        self, text: str, *, by: str | None = None, version: int | None = None, **options: Any
    ) -> Reply:
        """Answer the model in place of the pending tool(s): ``text`` is the tool result."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidArgument("respond() needs a non-empty text.", field="text")
        return _Turn(self, options, None, by).start_decisions(
            lambda calls: {c["id"]: {"type": "respond", "message": text} for c in calls},
            "respond",
            version,
        )

    def decide(
        self,
        decisions: Mapping[str, Any],
        *,
        by: str | None = None,
        version: int | None = None,
        **options: Any,
    ) -> Reply:
        """Settle pending calls one by one: ``{call_id: "approve" | "reject" |
        {"args": {...}} | {"type": "reject", "message": ...} | {"type": "respond",
        "message": ...}}``. Calls left out stay pending (the run suspends again for
        them when it reaches them). An unknown call id fails closed (StaleDecision).
        """
        if not isinstance(decisions, Mapping) or not decisions:
            raise InvalidArgument("decide() needs {call_id: decision, …}.", field="decisions")

        def build(calls: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
            by_id = {c["id"]: (i, c) for i, c in enumerate(calls)}
            unknown = [cid for cid in decisions if cid not in by_id]
            if unknown:
                raise StaleDecision(
                    f"call(s) {unknown} are not pending on thread {self.id!r} (pending: "
                    f"{list(by_id)}); nothing was decided.",
                    thread_id=self.id,
                    call_ids=unknown,
                )
            return {
                cid: _normalize_decision(raw, by_id[cid][1], by_id[cid][0], self.id)
                for cid, raw in decisions.items()
            }

        return _Turn(self, options, None, by).start_decisions(build, "decide", version)

    def _prepare_update(
        self, values: Mapping[str, Any] | None, as_node: str | None
    ) -> dict[str, Any]:
        if as_node is not None:
            raise InvalidArgument(
                f"{self.agent.name!r} is an agent: update its state without as_node.",
                field="as_node",
            )
        values = values or {}
        if RESERVED_KEY in values:
            raise InvalidArgument(f"{RESERVED_KEY!r} is the engine's own key.", field=RESERVED_KEY)
        update = dict(values)
        if "messages" in update:
            update["messages"] = normalize_messages(update["messages"])
        apply_update({}, update, _REDUCERS, origin="update_state")
        return update

    def _merge(
        self, head: Checkpoint | None, update: dict[str, Any], as_node: str | None
    ) -> tuple[dict[str, Any], Any, str, list[str], Any, dict[str, Any]]:
        state, delta = apply_update(
            head.state if head else {}, update, _REDUCERS, origin="update_state"
        )
        if head is None:
            return state, delta, "completed", [], (), {}
        return state, delta, head.status, list(head.next), head.interrupts, dict(head.tasks)


# -- one run -----------------------------------------------------------------------------


class _Suspended(Exception):
    """Internal: the turn stopped at a suspend checkpoint."""

    def __init__(self, reply: Reply) -> None:
        super().__init__("suspended")
        self.reply = reply


class _Turn:
    """One run of an agent thread: holds the lease and walks model → tools → model."""

    def __init__(
        self,
        thread: AgentThread,
        options: Mapping[str, Any],
        metadata: dict[str, Any] | None,
        by: str | None,
    ) -> None:
        unknown = set(options) - set(_RUN_OPTIONS)
        if unknown:
            raise InvalidArgument(
                f"unknown option(s) {sorted(unknown)}; use {list(_RUN_OPTIONS)}.",
                field=sorted(unknown)[0],
            )
        self.thread = thread
        self.agent = thread.agent
        self.storage = thread.storage
        self.options = {k: v for k, v in options.items() if v is not None}
        self.metadata = dict(metadata or self.options.pop("metadata", None) or {})
        self.by = by
        self.door = check_door(self.options.pop("door", "python"))
        self.expected: str | None = self.options.pop("expected", None)
        self.active: ActiveRun | None = None
        self.steps = 0

    # -- lease ----------------------------------------------------------------------------

    def _make_active(self, on_busy: OnBusy | None = None) -> ActiveRun:
        agent, o = self.agent, self.options
        return ActiveRun(
            self.storage,
            self.thread.id,
            run_id=o.get("run_id"),
            durability=check_durability(o.get("durability") or agent.durability),
            on_busy=check_on_busy(on_busy or o.get("on_busy") or agent.on_busy),
            busy_timeout=o.get("busy_timeout", agent.busy_timeout),
            lease_seconds=agent.lease_seconds,
            should_stop=o.get("should_stop"),
        )

    def lease(self) -> _Lease:
        return _Lease(self, self._make_active())

    # -- entry points ------------------------------------------------------------------

    def start_turn(self, update: dict[str, Any]) -> Reply:
        with self.lease() as active:
            head = active.head
            tid = self.thread.id
            check_expected(tid, head, self.expected)
            status = head.status if head else None
            if status == "suspended":
                raise ThreadSuspended(
                    f"thread {tid!r} is suspended waiting for a decision; approve(), reject(), "
                    "decide() or respond() first (or rewind).",
                    thread_id=tid,
                    pending=[
                        c["id"]
                        for c in (
                            head.interrupts[0].get("calls", []) if head and head.interrupts else []
                        )
                    ],
                )
            if status == "in_progress" and head is not None and head.source != "fork":
                raise ThreadInterrupted(
                    f"thread {tid!r} stopped mid-run (its process died); call retry() to "
                    "continue it.",
                    thread_id=tid,
                )
            state = head.state if head else {}
            # A failed turn may have left tool calls without results; a model API
            # refuses such a transcript, so close them before the new message.
            closing = [
                tool_result(
                    c["id"], c["name"], "Not run: the turn failed before this call.", "error"
                )
                for c in _open_calls(state)
            ]
            if closing:
                update = {**update, "messages": closing + list(update.get("messages", []))}
            if RESERVED_KEY not in state:
                update[RESERVED_KEY] = {
                    "steps": 0,
                    "tool_calls": 0,
                    "usage": {"input_tokens": 0, "output_tokens": 0},
                }
            state, delta = apply_update(state, update, _REDUCERS, origin="input")
            check_state_size(self.storage, tid, state)
            active.audit = self.thread._audit_event(
                "input",
                by=self.by,
                door=self.door,
                details={
                    "run_id": active.run_id,
                    "messages": len(update.get("messages", [])),
                    "values": sorted(k for k in update if k not in ("messages", RESERVED_KEY)),
                },
            )
            active.write(
                source="input",
                status="in_progress",
                state=state,
                delta=delta,
                next=[MODEL],
                metadata={**self.metadata, "actor": self.by},
            )
            return self._loop(state, MODEL, {})

    def start_retry(self) -> Reply:
        with self.lease() as active:
            head = active.head
            tid = self.thread.id
            check_expected(tid, head, self.expected)
            if head is None or head.status not in ("failed", "in_progress") or not head.next:
                raise NothingToRetry(
                    f"thread {tid!r} has no failed or interrupted turn to retry (its head is "
                    f"{head.status if head else 'empty'}).",
                    thread_id=tid,
                )
            # Carried by the retried step's checkpoint: the event exists when the step does.
            active.audit = self.thread._audit_event(
                "retry",
                by=self.by,
                door=self.door,
                details={"run_id": active.run_id, "from": head.id, "status": head.status},
            )
            return self._loop(head.state, head.next[0], dict(head.tasks))

    def start_decisions(
        self,
        build: Callable[[list[dict[str, Any]]], dict[str, dict[str, Any]]],
        action: str,
        version: int | None,
    ) -> Reply:
        tid = self.thread.id
        seen = self.storage.head(tid)
        if seen is None or seen.status != "suspended":
            if self.expected is not None and (seen is None or seen.id != self.expected):
                self._moved_on_from(self.expected, seen)
            self._not_suspended(seen, version)
        assert seen is not None
        if version is not None and version != seen.version:
            self._moved_on(version)
        if self.expected is not None and self.expected != seen.id:
            self._moved_on_from(self.expected, seen)
        calls = list(seen.interrupts[0].get("calls", [])) if seen.interrupts else []
        # Validate before taking the thread: bad decisions change nothing.
        chosen = build(calls)
        self._check_edits(calls, chosen)
        active = self._lease_for_decision(seen.version)
        with _Lease(self, active, opened=True):
            head = active.head
            if head is None or head.version != seen.version:
                self._moved_on(seen.version)
            assert head is not None
            interrupt = head.interrupts[0]
            calls_by_id = {c["id"]: c for c in interrupt.get("calls", [])}
            when = utcnow()
            reason = interrupt.get("reason", "approval")
            records = []
            from criogen.engine.store import DecisionRecord

            for cid, d in chosen.items():
                call = calls_by_id[cid]
                records.append(
                    DecisionRecord(
                        thread_id=tid,
                        version=head.version,
                        checkpoint_id=head.id,
                        call_id=cid,
                        tool=call["name"],
                        digest=call["digest"],
                        decision=d["type"],
                        args=d.get("args"),
                        message=d.get("message"),
                        actor=self.by,
                        decided_at=when,
                    )
                )
            tasks = dict(head.tasks)
            decided = dict(tasks.get("decisions", {}))
            for cid, d in chosen.items():
                entry = {**d, "for": reason, "by": self.by, "version": head.version}
                if reason == "outcome_unknown":
                    entry["attempts"] = calls_by_id[cid].get("attempts", 1)
                decided[cid] = entry
            tasks["decisions"] = decided
            summary = [
                {"call_id": cid, "name": calls_by_id[cid]["name"], **d} for cid, d in chosen.items()
            ]
            metadata = {**self.metadata, "actor": self.by, "decisions": summary}
            audit = self.thread._audit_event(
                action,
                by=self.by,
                door=self.door,
                details={"version": head.version, "reason": reason, "decisions": summary},
            )
            self._write_decision_checkpoint(head, tasks, metadata, records, audit)
            return self._loop(head.state, TOOLS, tasks)

    def _not_suspended(self, head: Checkpoint | None, version: int | None) -> NoReturn:
        tid = self.thread.id
        latest = self.storage.decisions(tid, version=version)
        if latest:
            self._raise_decided(latest[0])
        if version is not None:
            self._moved_on(version)
        raise NotSuspended(
            f"thread {tid!r} is not suspended (its head is "
            f"{head.status if head else 'empty'}); there is nothing to decide.",
            thread_id=tid,
        )

    def _raise_decided(self, d: Any) -> NoReturn:
        raise AlreadyDecided(
            f"the suspension v{d.version} of thread {self.thread.id!r} was already decided "
            f"by {d.actor or 'someone'} at {d.decided_at.isoformat()}.",
            thread_id=self.thread.id,
            decided_by=d.actor,
            decided_at=d.decided_at.isoformat(),
            version=d.version,
        )

    def _moved_on_from(self, expected: str, head: Checkpoint | None) -> NoReturn:
        """The head is not the suspension ``expected`` the caller decided on: already
        decided (by whom, when) if it was, else StaleHead."""
        found = [d for d in self.storage.decisions(self.thread.id) if d.checkpoint_id == expected]
        if found:
            self._raise_decided(found[0])
        check_expected(self.thread.id, head, expected)
        raise AssertionError("unreachable: the head differs from expected")

    def _moved_on(self, version: int) -> NoReturn:
        found = self.storage.decisions(self.thread.id, version=version)
        if found:
            self._raise_decided(found[0])
        raise StaleDecision(
            f"thread {self.thread.id!r} is no longer at the suspension v{version} (it was "
            "rewound or changed); reload it and decide on what is pending now.",
            thread_id=self.thread.id,
            version=version,
        )

    def _check_edits(
        self, calls: list[dict[str, Any]], chosen: Mapping[str, dict[str, Any]]
    ) -> None:
        by_id = {c["id"]: c for c in calls}
        for cid, d in chosen.items():
            tool = self.agent.tools.get(by_id[cid]["name"])
            if d["type"] == "edit" and tool is not None:
                try:
                    # Cleaned as the tool will read them ("5" -> 5.0 for a number): the
                    # decision records what runs.
                    d["args"] = tool.validate_args(d["args"])
                except InvalidToolCall as exc:
                    raise InvalidArgument(
                        f"the edited arguments of call {cid!r} do not fit tool "
                        f"{tool.name!r}: {exc.message}",
                        field=f"decisions.{cid}.args",
                    ) from exc

    def _lease_for_decision(self, version: int) -> ActiveRun:
        """Take the thread, failing fast with AlreadyDecided when another decision on
        ``version`` commits while this one waits (two operators racing)."""
        timeout = self.options.get("busy_timeout", self.agent.busy_timeout)
        wait = self.options.get("on_busy") or self.agent.on_busy
        deadline = time.monotonic() + timeout
        delay = 0.005
        while True:
            found = self.storage.decisions(self.thread.id, version=version)
            if found:
                self._raise_decided(found[0])
            active = self._make_active(on_busy="fail")
            try:
                _open(active)
                return active
            except ThreadBusy:
                if wait == "fail" or time.monotonic() >= deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def _write_decision_checkpoint(
        self,
        head: Checkpoint,
        tasks: dict[str, Any],
        metadata: dict[str, Any],
        records: list[Any],
        audit: Any,
    ) -> None:
        """The ``input`` checkpoint that resumes the run, in one transaction with the
        decision records and the audit event (ActiveRun.write has no place for them)."""
        active = self.active
        assert active is not None
        active.flush()
        version = head.version + 1
        checkpoint = Checkpoint(
            id=CheckpointId(new_id()),
            thread_id=self.thread.id,
            run_id=active.run_id,
            version=version,
            source="input",
            status="in_progress",
            state=head.state,
            next=(TOOLS,),
            interrupts=(),
            tasks=tasks,
            parent_id=head.id,
            created_at=utcnow(),
            metadata=metadata,
            value_versions=dict(head.value_versions),
            value_bases=dict(head.value_bases),
        )
        audit = dataclasses.replace(audit, before=head.id, after=checkpoint.id)
        write = CheckpointWrite(checkpoint, {}, head.version, {}, audit=audit)
        self.storage.write_decisions([write], records, lease_id=active.run_id)
        self.storage.notify([write])
        active.start_from(checkpoint)
        active.last = checkpoint

    # -- the loop -------------------------------------------------------------------------

    def _loop(self, state: dict[str, Any], phase: str, tasks: dict[str, Any]) -> Reply:
        try:
            while True:
                self._check_stop()
                if phase == MODEL:
                    state, phase, tasks = self._model_step(state)
                    if phase == "":
                        return self._reply("completed", state)
                else:
                    state, phase, tasks = self._tool_step(state, tasks)
        except _Suspended as stop:
            return stop.reply

    def _check_stop(self) -> None:
        """Stop between two steps when the runner asks (cancel, shutdown): the head is
        the last step's checkpoint, and retry() continues from it."""
        active = self.active
        if active is not None and active.should_stop is not None and active.should_stop():
            raise RunCancelled(
                f"run {active.run_id} on thread {active.thread_id!r} was stopped before its "
                "next step; retry() continues it.",
                thread_id=active.thread_id,
                run_id=active.run_id,
            )

    def _counters(self, state: Mapping[str, Any]) -> dict[str, Any]:
        c = state.get(RESERVED_KEY) or {}
        usage = c.get("usage") or {}
        return {
            "steps": int(c.get("steps", 0)),
            "tool_calls": int(c.get("tool_calls", 0)),
            "usage": {
                "input_tokens": int(usage.get("input_tokens", 0)),
                "output_tokens": int(usage.get("output_tokens", 0)),
            },
        }

    def _model_input(self, state: dict[str, Any]) -> list[Message]:
        messages: list[Message] = []
        if self.agent.instructions:
            messages.append(system(self.agent.instructions))
        if self.agent.memory is not None:
            note = self.agent.memory.system_message(self.storage, state)
            if note is not None:
                messages.append(note)
        messages.extend(state.get("messages", []))
        return messages

    def _model_step(self, state: dict[str, Any]) -> tuple[dict[str, Any], str, dict[str, Any]]:
        self.steps += 1
        if self.steps > self.agent.max_steps:
            limit = self.agent.max_steps
            self._fail(
                state,
                [MODEL],
                {},
                MaxStepsExceeded(
                    f"the agent called the model {limit} times in this run without a final "
                    "answer; raise max_steps, or check the tools for a loop.",
                    max_steps=limit,
                ),
            )
        try:
            messages = self._model_input(state)
            for hook in self.agent.hooks["before_model"]:
                replaced = hook(dict(state), list(messages))
                if replaced is not None:
                    messages = list(replaced)
            reply = self.agent.model.complete(messages, list(self.agent.tools.values()))
            for hook in self.agent.hooks["after_model"]:
                hook(dict(state), dict(reply))
        except Exception as exc:  # noqa: BLE001 - a model or hook error fails the run
            self._fail(state, [MODEL], {}, exc)
        counters = self._counters(state)
        counters["steps"] += 1
        usage = reply.get("usage") or {}
        for key in ("input_tokens", "output_tokens"):
            counters["usage"][key] += int(usage.get(key, 0))
        state, delta = apply_update(
            state, {"messages": [reply], RESERVED_KEY: counters}, _REDUCERS, origin="model"
        )
        calls = reply.get("tool_calls") or []
        assert self.active is not None
        updates = {MODEL: {"messages": [reply]}}  # for listeners (streaming "updates")
        if not calls:
            self._write("step", "completed", state, delta, [], {}, updates=updates, final=True)
            return state, "", {}
        # A side-effecting or gated call needs its step durable before it runs (its
        # idempotency key names this checkpoint): write it now whatever the durability.
        durable = any(self._ledgered(c, state) for c in calls)
        written = self._write(
            "step", "in_progress", state, delta, [TOOLS], {}, updates=updates, final=durable
        )
        anchor = written.id if written is not None else self.active._tip_id
        tasks: dict[str, Any] = {"anchor": anchor, "decisions": {}}
        return state, TOOLS, tasks

    def _gated(
        self, call: Mapping[str, Any], state: dict[str, Any], tasks: dict[str, Any] | None = None
    ) -> bool:
        """The agent's approval rule; a rule that raises fails the run."""
        try:
            return self.agent.needs_approval(call, state)
        except Exception as exc:  # noqa: BLE001 - a broken rule fails the run, clearly
            self._fail(state, [TOOLS], tasks or {}, exc)

    def _ledgered(self, call: Mapping[str, Any], state: dict[str, Any]) -> bool:
        tool = self.agent.tools.get(call.get("name", ""))
        if tool is None:
            return False
        return self._gated(call, state) or not tool.idempotent

    def _tool_step(
        self, state: dict[str, Any], tasks: dict[str, Any]
    ) -> tuple[dict[str, Any], str, dict[str, Any]]:
        calls = _open_calls(state)
        if not calls:
            return state, MODEL, {}
        decisions: dict[str, Any] = tasks.get("decisions", {})
        call = calls[0]
        decision = decisions.get(call["id"])
        if decision is None and self._gated(call, state, tasks):
            waiting = [
                c for c in calls if c["id"] not in decisions and self._gated(c, state, tasks)
            ]
            self._suspend(state, tasks, "approval", waiting)
        message = self._run_call(state, tasks, call, decision)
        counters = self._counters(state)
        counters["tool_calls"] += 1
        state, delta = apply_update(
            state, {"messages": [message], RESERVED_KEY: counters}, _REDUCERS, origin="tools"
        )
        following = TOOLS if len(calls) > 1 else MODEL
        next_tasks = tasks if following == TOOLS else {}
        self._write(
            "step",
            "in_progress",
            state,
            delta,
            [following],
            next_tasks,
            updates={TOOLS: {"messages": [message]}},
        )
        return state, following, next_tasks

    def _run_call(
        self,
        state: dict[str, Any],
        tasks: dict[str, Any],
        call: dict[str, Any],
        decision: dict[str, Any] | None,
    ) -> Message:
        """Run one call (or answer it from a decision) and return its tool message."""
        name, cid = call["name"], call["id"]
        kind = decision["type"] if decision else "approve"
        if kind == "reject":
            reason = decision.get("message") if decision else ""
            text = f"Rejected by a person: {reason}" if reason else "Rejected by a person."
            text += " The tool was not run."
            return tool_result(cid, name, text, "error")
        if kind == "respond":
            return tool_result(cid, name, decision["message"] if decision else "")
        args = decision["args"] if decision and kind == "edit" else call["args"]
        tool = self.agent.tools.get(name)
        if tool is None:
            return tool_result(
                cid,
                name,
                f"Error: there is no tool named {name!r}; the tools are {sorted(self.agent.tools)}.",
                "error",
            )
        assert self.active is not None
        anchor = tasks.get("anchor") or self.active._tip_id
        key = build_idempotency_key(thread_id=self.thread.id, checkpoint_id=anchor, call_id=cid)
        ledgered = self._gated(call, state, tasks) or not tool.idempotent
        if ledgered:
            from criogen.engine.store import EffectRecord

            existing = self.storage.begin_effect(
                EffectRecord(
                    key=key,
                    thread_id=self.thread.id,
                    checkpoint_id=str(anchor),
                    call_id=cid,
                    tool=name,
                    args=dict(args),
                )
            )
            if existing is not None:
                if existing.status != "intent":
                    # Finished before a crash: its outcome is known, do not run it again.
                    return tool_result(cid, name, existing.result or "", existing.status)
                rerun = tool.idempotent or (
                    decision is not None
                    and decision.get("for") == "outcome_unknown"
                    and decision.get("attempts") == existing.attempts
                )
                if not rerun:
                    self._suspend(
                        state,
                        tasks,
                        "outcome_unknown",
                        [{**call, "args": dict(args)}],
                        attempts=existing.attempts,
                    )
                self.storage.retry_effect(key)
        ctx = ToolContext(
            call_id=cid,
            idempotency_key=key,
            thread_id=self.thread.id,
            run_id=self.active.run_id,
            state=state,
            storage=self.storage,
        )
        active_call = {"id": cid, "name": name, "args": dict(args)}
        try:
            for hook in self.agent.hooks["before_tool"]:
                hook(dict(state), dict(active_call))
        except Exception as exc:  # noqa: BLE001 - a hook error fails the run
            self._fail(state, [TOOLS], tasks, exc)
        try:
            result = tool.invoke(args, ctx)
            message = tool_result(cid, name, result)
            if kind == "edit":
                # The model's call above keeps its own arguments; say what ran instead,
                # so the model and whoever reads the transcript both see the change.
                ran = json.dumps(dict(args), ensure_ascii=False, sort_keys=True)
                message["content"] = (
                    f"[A person edited this call: {name} ran with {ran}, not with the "
                    f"arguments above.] {message['content']}"
                )
        except InvalidToolCall as exc:
            message = tool_result(cid, name, exc.message, "error")
        except Exception as exc:  # noqa: BLE001 - the model sees the error and may recover
            message = tool_result(cid, name, f"Error: {type(exc).__name__}: {exc}", "error")
        if ledgered:
            self.storage.finish_effect(key, status=message["status"], result=message["content"])
        try:
            for hook in self.agent.hooks["after_tool"]:
                hook(dict(state), dict(active_call), dict(message))
        except Exception as exc:  # noqa: BLE001 - a hook error fails the run
            self._fail(state, [TOOLS], tasks, exc)
        return message

    def _suspend(
        self,
        state: dict[str, Any],
        tasks: dict[str, Any],
        reason: str,
        calls: list[dict[str, Any]],
        attempts: int | None = None,
    ) -> NoReturn:
        requests, configs, listed = [], [], []
        for c in calls:
            tool = self.agent.tools.get(c["name"])
            args_text = json.dumps(c["args"], ensure_ascii=False, sort_keys=True)
            if reason == "approval":
                description = f"{c['name']}({args_text}) needs approval before it runs."
            else:
                description = (
                    f"The process stopped while {c['name']}({args_text}) was running: it may or "
                    "may not have taken effect. Approve to run it again (same idempotency "
                    "key), reject to tell the model it failed, or respond with what happened."
                )
            requests.append({"name": c["name"], "args": c["args"], "description": description})
            configs.append(
                {
                    "action_name": c["name"],
                    "allowed_decisions": list(ALLOWED_DECISIONS),
                    "args_schema": tool.parameters if tool else {},
                }
            )
            entry = {
                "id": c["id"],
                "name": c["name"],
                "args": c["args"],
                "digest": args_digest(c["args"]),
            }
            if attempts is not None:
                entry["attempts"] = attempts
            listed.append(entry)
        interrupt = {
            "id": new_id(),
            "node": TOOLS,
            "reason": reason,
            "payload": {"action_requests": requests, "review_configs": configs},
            "calls": listed,
        }
        if reason == "approval":
            # One suspension may hold calls of several tools: the first tool (in the
            # model's order) with deadline options sets them for the suspension.
            options = next(
                (
                    self.agent._approve_options[c["name"]]
                    for c in calls
                    if self.agent._approve_options.get(c["name"])
                ),
                {},
            )
            interrupt.update(options)
        checkpoint = self._write(
            "suspend", "suspended", state, {}, [TOOLS], tasks, interrupts=[interrupt], final=True
        )
        assert checkpoint is not None
        raise _Suspended(
            Reply(
                "suspended",
                "",
                [dict(c) for c in listed],
                state,
                checkpoint,
                self.thread.id,
                self.active.run_id if self.active else "",
            )
        )

    def _write(
        self,
        source: Any,
        status: Any,
        state: dict[str, Any],
        delta: Delta,
        next: list[str],
        tasks: dict[str, Any],
        *,
        interrupts: Sequence[dict[str, Any]] = (),
        error: dict[str, Any] | None = None,
        updates: dict[str, Any] | None = None,
        final: bool = False,
    ) -> Checkpoint | None:
        assert self.active is not None
        return self.active.write(
            source=source,
            status=status,
            state=state,
            delta=delta,
            next=next,
            interrupts=interrupts,
            tasks=tasks,
            error=error,
            metadata={**self.metadata, "step": self.active._tip_version + 1},
            updates=updates,
            final=final,
        )

    def _reply(self, status: Literal["completed", "suspended"], state: dict[str, Any]) -> Reply:
        assert self.active is not None
        self.active.flush()
        last = self.active.last
        assert last is not None
        messages = state.get("messages", [])
        text = _text_of(messages[-1].get("content")) if messages else ""
        return Reply(status, text, [], state, last, self.thread.id, self.active.run_id)

    def _fail(
        self, state: dict[str, Any], nxt: list[str], tasks: dict[str, Any], exc: BaseException
    ) -> NoReturn:
        """Write the failure checkpoint (state as before the failed step) and raise."""
        code = getattr(exc, "code", None) or "run_error"
        error = {
            "type": type(exc).__name__,
            "code": code,
            "message": str(exc),
            "node": nxt[0] if nxt else None,
            "traceback": "".join(traceback.format_exception(exc, limit=-8))[-4000:],
        }
        checkpoint = self._write(
            "failure", "failed", state, {}, nxt, tasks, error=error, final=True
        )
        assert checkpoint is not None
        if isinstance(exc, CriogenError):
            exc.checkpoint = checkpoint
            exc.snapshot = to_snapshot(checkpoint)
            raise exc
        raise RunFailed(
            f"the agent's {nxt[0] if nxt else 'run'} step raised {type(exc).__name__}: {exc}. "
            "The thread's head is now a failure checkpoint: retry() continues from it, "
            "send() starts a new turn.",
            checkpoint=checkpoint,
            snapshot=to_snapshot(checkpoint),
            thread_id=self.thread.id,
            node=nxt[0] if nxt else None,
        ) from exc


def _in_worker(storage: Any, fn: Callable[..., Reply], *args: Any, **kwargs: Any) -> Reply:
    """Run ``fn`` on an asyncio worker thread, then close that thread's database
    connection: the executor's threads end with the event loop, and a connection left
    open in a dead thread is never closed."""
    try:
        return fn(*args, **kwargs)
    finally:
        storage.close()


def _open(active: ActiveRun) -> None:
    """Open a run; if loading the head fails (a wrong encryption key…), give the lease
    back instead of leaving it held by the heartbeat."""
    try:
        active.open()
    except ThreadBusy:
        raise
    except BaseException:
        active.close(flush=False, raise_errors=False)
        raise


class _Lease:
    """Context manager: the turn holds ``active`` while inside."""

    def __init__(self, turn: _Turn, active: ActiveRun, *, opened: bool = False) -> None:
        self.turn = turn
        self.active = active
        self.opened = opened

    def __enter__(self) -> ActiveRun:
        if not self.opened:
            _open(self.active)
        self.turn.active = self.active
        return self.active

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.active.close(flush=True, raise_errors=exc is None)


def _open_calls(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tool calls of the last AI message that have no tool message yet, in order."""
    messages = state.get("messages") or []
    answered: set[str] = set()
    for message in reversed(messages):
        if message.get("type") == "tool":
            answered.add(message.get("tool_call_id"))
        elif message.get("type") == "ai":
            return [c for c in message.get("tool_calls") or [] if c["id"] not in answered]
        else:
            return []
    return []


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
