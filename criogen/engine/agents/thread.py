"""A conversation with an agent (:class:`AgentThread`): its turns, the answers to its
suspensions, and the thread verbs it shares with workflows (:class:`ThreadBase`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from criogen.engine.active_run import Durability, OnBusy
from criogen.engine.agents.approvals import (
    check_edits,
    normalize_decision,
    parse_answer,
    pending_calls,
)
from criogen.engine.agents.reply import REDUCERS, RESERVED_KEY, Reply, open_calls
from criogen.engine.agents.run import RUN_OPTIONS, Lease, in_worker
from criogen.engine.agents.turn import Turn
from criogen.engine.checkpoints import Checkpoint, Status, ThreadId
from criogen.engine.errors import InvalidArgument, StaleDecision
from criogen.engine.messages import Message, normalize_messages, tool_result
from criogen.engine.records import Decision, PendingCall
from criogen.engine.state import apply_update
from criogen.engine.store import DecisionRecord, EffectRecord, Storage
from criogen.engine.threads import ThreadBase

if TYPE_CHECKING:
    from criogen.engine.agents.config import Agent

__all__ = ["AgentThread"]


class AgentThread(ThreadBase):
    """One conversation with an agent: its turns, approvals, head and history."""

    id: ThreadId

    def __init__(self, agent: Agent, thread_id: ThreadId) -> None:
        self.agent = agent
        self.id = thread_id

    def __repr__(self) -> str:
        return f"<AgentThread {self.id!r} of {self.agent.name!r}>"

    @property
    def storage(self) -> Storage:
        """The agent's storage."""
        return self.agent.storage

    def _active(self, **options: Any) -> Lease:
        return Turn(self, options, None, None).lease()

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
        return [c.to_dict() for c in pending_calls(head)]

    def decisions(self) -> list[DecisionRecord]:
        """The decisions taken on this thread (``DecisionRecord``), newest first."""
        return self.storage.decisions(self.id)

    def effects(self) -> list[EffectRecord]:
        """The effect ledger of this thread (``EffectRecord``), oldest first."""
        return self.storage.effects(self.id)

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
        return Turn(self, options, metadata, by).start_turn(update)

    def run(self, input: Any = None, **options: Any) -> Reply:
        """``send`` for the server: ``input`` is a string, a list of messages or a dict
        ``{"messages": [...], **values}``. Options: run_id, durability, on_busy,
        busy_timeout, metadata, should_stop, by."""
        values: dict[str, Any] = {}
        message: Any = input
        if isinstance(input, Mapping) and "type" not in input and "role" not in input:
            values = {k: v for k, v in input.items() if k != "messages"}
            message = input.get("messages")
            clash = [k for k in values if k in RUN_OPTIONS or k in ("by", "door")]
            if clash:
                raise InvalidArgument(
                    f"input key(s) {clash} are reserved for run options.", field="input"
                )
        return self.send(message, **{k: v for k, v in options.items() if v is not None}, **values)

    async def asend(self, message: Any = None, **options: Any) -> Reply:
        """``send`` from async code (the turn goes on a worker thread)."""
        return await asyncio.to_thread(in_worker, self.storage, self.send, message, **options)

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
        apply_update({}, update, REDUCERS, origin="input")  # validate before the lease
        return update

    def retry(self, *, by: str | None = None, **options: Any) -> Reply:
        """Continue a failed or interrupted turn from its last checkpoint."""
        metadata = options.pop("metadata", None)
        return Turn(self, options, metadata, by).start_retry()

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
        build, version = parse_answer(value, version, self.id)
        return Turn(self, options, None, by).start_decisions(build, version)

    def check_answer(self, value: Any) -> None:
        """Check ``value`` as :meth:`resume` would against the suspension pending now —
        its shape, one decision per call, edits that fit the tool's schema — without
        taking the thread or writing anything (the server checks an answer this way
        before it creates the run). A thread that does not wait passes: the answer
        itself is refused then, by name."""
        head = self.head
        if head is None or head.status != "suspended" or not head.interrupts:
            return
        build, _ = parse_answer(value, None, self.id)
        calls = pending_calls(head)
        check_edits(self.agent.tools, calls, build(calls))

    def approve(
        self, *, by: str | None = None, version: int | None = None, **options: Any
    ) -> Reply:
        """Approve every pending call: they run, and the agent continues."""
        return Turn(self, options, None, by).start_decisions(
            lambda calls: {c.id: Decision("approve") for c in calls}, version
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
        return Turn(self, options, None, by).start_decisions(
            lambda calls: {c.id: Decision("reject", message=reason) for c in calls},
            version,
        )

    def respond(
        self, text: str, *, by: str | None = None, version: int | None = None, **options: Any
    ) -> Reply:
        """Answer the model in place of the pending tool(s): ``text`` is the tool result."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidArgument("respond() needs a non-empty text.", field="text")
        return Turn(self, options, None, by).start_decisions(
            lambda calls: {c.id: Decision("respond", message=text) for c in calls},
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

        def build(calls: list[PendingCall]) -> dict[str, Decision]:
            by_id = {c.id: (i, c) for i, c in enumerate(calls)}
            unknown = [cid for cid in decisions if cid not in by_id]
            if unknown:
                raise StaleDecision(
                    f"call(s) {unknown} are not pending on thread {self.id!r} (pending: "
                    f"{list(by_id)}); nothing was decided.",
                    thread_id=self.id,
                    call_ids=unknown,
                )
            return {
                cid: normalize_decision(raw, by_id[cid][1], by_id[cid][0], self.id)
                for cid, raw in decisions.items()
            }

        return Turn(self, options, None, by).start_decisions(build, version)

    def goto(
        self,
        node: str,
        *,
        by: str | None = None,
        door: str = "python",
        expected: str | None = None,
        **options: Any,
    ) -> Checkpoint:
        """``goto("__end__")`` is :meth:`resolve`; an agent has no other node to go to
        (InvalidArgument naming ``goto``)."""
        if node != "__end__":
            raise InvalidArgument(
                f"goto {node!r}: {self.agent.name!r} is an agent; the only place it can go "
                "is '__end__' (resolve the suspension without running the calls).",
                field="goto",
            )
        return self.resolve(by=by, door=door, expected=expected, **options)

    def _resolved_state(self, head: Checkpoint, by: str | None) -> tuple[dict[str, Any], Any]:
        """The pending calls get a tool result saying they were not run, so that the
        transcript stays whole for the model's next turn."""
        who = by or "a person"
        results = [
            tool_result(
                call["id"],
                call.get("name"),
                f"Not run: {who} marked this request as resolved.",
                status="error",
            )
            for call in open_calls(head.state)
        ]
        if not results:
            return head.state, {}
        return apply_update(head.state, {"messages": results}, REDUCERS, origin="resolve")

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
        apply_update({}, update, REDUCERS, origin="update_state")
        return update

    def _merge(
        self, head: Checkpoint | None, update: dict[str, Any], as_node: str | None
    ) -> tuple[dict[str, Any], Any, Status, list[str], Any, dict[str, Any]]:
        state, delta = apply_update(
            head.state if head else {}, update, REDUCERS, origin="update_state"
        )
        if head is None:
            return state, delta, "completed", [], (), {}
        return state, delta, head.status, list(head.next), head.interrupts, dict(head.tasks)
