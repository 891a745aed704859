"""The turn loop: a new turn, a retry, and the walk model → tools → model.

Checkpoints: ``input`` when a message (or a decision) arrives; ``step`` after every
model call and every finished tool call; ``suspend`` before an approval-gated tool
runs (one interrupt listing every pending gated call); ``failure`` when the model
fails or ``max_steps`` is exceeded. ``next`` is ``["model"]`` or ``["tools"]``.
"""

from __future__ import annotations

from typing import Any

from criogen.engine.agents.effects import EffectTurn
from criogen.engine.agents.reply import MODEL, REDUCERS, RESERVED_KEY, TOOLS, Reply, open_calls
from criogen.engine.agents.run import Suspended
from criogen.engine.errors import (
    MaxStepsExceeded,
    NothingToRetry,
    ThreadInterrupted,
    ThreadSuspended,
)
from criogen.engine.messages import Message, system, tool_result
from criogen.engine.records import TakenDecision
from criogen.engine.state import apply_update
from criogen.engine.threads import check_expected, check_state_size

__all__ = ["Turn"]


class Turn(EffectTurn):
    """One run of an agent thread: holds the lease and walks model → tools → model."""

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
                for c in open_calls(state)
            ]
            if closing:
                update = {**update, "messages": closing + list(update.get("messages", []))}
            if RESERVED_KEY not in state:
                update[RESERVED_KEY] = {
                    "steps": 0,
                    "tool_calls": 0,
                    "usage": {"input_tokens": 0, "output_tokens": 0},
                }
            state, delta = apply_update(state, update, REDUCERS, origin="input")
            check_state_size(self.storage, tid, state, delta)
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

    # -- the loop -------------------------------------------------------------------------

    def _loop(self, state: dict[str, Any], phase: str, tasks: dict[str, Any]) -> Reply:
        try:
            while True:
                self._check_stop(state, phase, tasks)
                if phase == MODEL:
                    state, phase, tasks = self._model_step(state)
                    if phase == "":
                        return self._reply("completed", state)
                else:
                    state, phase, tasks = self._tool_step(state, tasks)
        except Suspended as stop:
            return stop.reply

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
            state, {"messages": [reply], RESERVED_KEY: counters}, REDUCERS, origin="model"
        )
        calls = reply.get("tool_calls") or []
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
        anchor = written.id if written is not None else self.run._tip_id
        tasks: dict[str, Any] = {"anchor": anchor, "decisions": {}}
        return state, TOOLS, tasks

    def _tool_step(
        self, state: dict[str, Any], tasks: dict[str, Any]
    ) -> tuple[dict[str, Any], str, dict[str, Any]]:
        calls = open_calls(state)
        if not calls:
            return state, MODEL, {}
        decisions: dict[str, Any] = tasks.get("decisions", {})
        call = calls[0]
        taken = decisions.get(call["id"])
        decision = TakenDecision.from_dict(taken) if taken is not None else None
        if decision is None and self._gated(call, state, tasks):
            waiting = [
                c for c in calls if c["id"] not in decisions and self._gated(c, state, tasks)
            ]
            self._suspend(state, tasks, "approval", waiting)
        message = self._run_call(state, tasks, call, decision)
        counters = self._counters(state)
        counters["tool_calls"] += 1
        state, delta = apply_update(
            state, {"messages": [message], RESERVED_KEY: counters}, REDUCERS, origin="tools"
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
