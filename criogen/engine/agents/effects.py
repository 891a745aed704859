"""The effect ledger: running one tool call so that a crash never runs it twice unseen.

Before an approved or side-effecting (not ``idempotent``) tool runs, an intent row
keyed by (thread, checkpoint of the model step, call id) is committed; the outcome is
committed when it returns. On a rerun of the same step, a finished row answers the
call from its stored outcome, and an intent row without an outcome (the process died
while the tool ran) suspends the turn with ``outcome_unknown`` for a person to settle.
See ``docs/python-api.md`` for each crash point.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from criogen.engine.agents.approvals import ApprovalTurn
from criogen.engine.agents.reply import TOOLS
from criogen.engine.errors import InvalidToolCall
from criogen.engine.messages import Message, tool_result
from criogen.engine.records import TakenDecision
from criogen.engine.store import EffectRecord
from criogen.engine.tools import ToolContext, build_idempotency_key

__all__ = ["EffectTurn"]


class EffectTurn(ApprovalTurn):
    """A turn's tool calls, through the effect ledger."""

    def _ledgered(self, call: Mapping[str, Any], state: dict[str, Any]) -> bool:
        """Whether the call goes through the ledger: gated, or not idempotent."""
        tool = self.agent.tools.get(call.get("name", ""))
        if tool is None:
            return False
        return self._gated(call, state) or not tool.idempotent

    def _run_call(
        self,
        state: dict[str, Any],
        tasks: dict[str, Any],
        call: dict[str, Any],
        decision: TakenDecision | None,
    ) -> Message:
        """Run one call (or answer it from a decision) and return its tool message."""
        name, cid = call["name"], call["id"]
        chosen = decision.decision if decision is not None else None
        kind = chosen.type if chosen is not None else "approve"
        if kind == "reject":
            reason = chosen.message if chosen is not None else ""
            text = f"Rejected by a person: {reason}" if reason else "Rejected by a person."
            text += " The tool was not run."
            return tool_result(cid, name, text, "error")
        if kind == "respond":
            return tool_result(cid, name, (chosen.message if chosen is not None else "") or "")
        args: dict[str, Any] = call["args"]
        if chosen is not None and kind == "edit" and chosen.args is not None:
            args = chosen.args
        tool = self.agent.tools.get(name)
        if tool is None:
            return tool_result(
                cid,
                name,
                f"Error: there is no tool named {name!r}; the tools are {sorted(self.agent.tools)}.",
                "error",
            )
        active = self.run
        anchor = tasks.get("anchor") or active._tip_id
        key = build_idempotency_key(thread_id=self.thread.id, checkpoint_id=anchor, call_id=cid)
        ledgered = self._gated(call, state, tasks) or not tool.idempotent
        if ledgered:
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
                    return tool_result(
                        cid,
                        name,
                        existing.result or "",
                        "error" if existing.status == "error" else "success",
                    )
                rerun = tool.idempotent or (
                    decision is not None
                    and decision.reason == "outcome_unknown"
                    and decision.attempts == existing.attempts
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
            run_id=active.run_id,
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
