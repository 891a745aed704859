"""A LangChain agent for the HITL tests: ``create_agent`` with a fake chat model (no
network), two tools and ``HumanInTheLoopMiddleware`` on one of them.

The model answers from the conversation alone (the same answer for the same messages,
in any process): after a person's message it looks the order up; after the lookup it
asks to refund; after the refund (or its rejection) it says what happened. Message
and tool call ids are derived from the conversation, so two runs of the same inputs
give the same state.

Each tool appends a JSON line to the file named by ``SUPPORT_LEDGER`` when it runs:
the tests count real executions there. With ``SUPPORT_SLOW_AFTER_REFUND`` (seconds)
the model takes that long to reply after a refund, and says so in the ledger first.

``graph`` lets a person approve, edit or reject a refund; ``strict_graph`` only
approve or reject it.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool


def _record(entry: dict[str, Any]) -> None:
    path = os.environ.get("SUPPORT_LEDGER")
    if path:
        with open(path, "a", encoding="utf-8") as ledger:
            ledger.write(json.dumps(entry, sort_keys=True) + "\n")


@tool
def lookup_order(order_id: int) -> str:
    """Look an order up by its number."""
    _record({"tool": "lookup_order", "order_id": order_id})
    return f"order {order_id}: 30 EUR, paid"


@tool
def issue_refund(order_id: int, amount: int) -> str:
    """Refund ``amount`` euros on an order."""
    _record({"tool": "issue_refund", "order_id": order_id, "amount": amount})
    return f"refunded {amount} EUR on order {order_id}"


class SupportModel(FakeMessagesListChatModel):
    """A scripted support model: its reply depends on the messages only."""

    responses: list[BaseMessage] = []

    def bind_tools(self, tools: Any, **kwargs: Any) -> SupportModel:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.reply(messages))])

    @staticmethod
    def reply(messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1]
        slow = os.environ.get("SUPPORT_SLOW_AFTER_REFUND")
        if slow and isinstance(last, ToolMessage) and last.name == "issue_refund":
            # A slow model call after the refund: the crash tests kill the worker here.
            _record({"tool": "model", "after": "issue_refund"})
            time.sleep(float(slow))
        return SupportModel._reply(messages)

    @staticmethod
    def _reply(messages: list[BaseMessage]) -> AIMessage:
        humans = [m for m in messages if isinstance(m, HumanMessage)]
        turn = len(humans)
        numbers = [int(n) for n in re.findall(r"\d+", str(humans[-1].content))] + [0, 0]
        order, amount = numbers[0], numbers[1]
        last = messages[-1]
        if isinstance(last, ToolMessage) and last.name == "lookup_order":
            return AIMessage(
                "",
                id=f"ai-{turn}-refund",
                tool_calls=[
                    {
                        "name": "issue_refund",
                        "args": {"order_id": order, "amount": amount},
                        "id": f"call-{turn}-refund",
                    }
                ],
            )
        if isinstance(last, ToolMessage):
            return AIMessage(f"done: {last.content}", id=f"ai-{turn}-final")
        return AIMessage(
            "",
            id=f"ai-{turn}-lookup",
            tool_calls=[
                {"name": "lookup_order", "args": {"order_id": order}, "id": f"call-{turn}-lookup"}
            ],
        )

    @property
    def _llm_type(self) -> str:
        return "support-fake"


def build(allowed: list[str], model: Any = None) -> Any:
    """The agent, with ``allowed`` decisions on ``issue_refund`` (``model``: another
    chat model than :class:`SupportModel`)."""
    return create_agent(
        model or SupportModel(),
        [lookup_order, issue_refund],
        system_prompt="You are a support agent.",
        middleware=[
            HumanInTheLoopMiddleware(interrupt_on={"issue_refund": {"allowed_decisions": allowed}})
        ],
    )


graph = build(["approve", "edit", "reject"])
strict_graph = build(["approve", "reject"])


def build_per_call() -> Any:
    """The agent with ``interrupt_mode="per_call"``: one interrupt per gated call."""
    return create_agent(
        SupportModel(),
        [lookup_order, issue_refund],
        middleware=[
            HumanInTheLoopMiddleware(
                interrupt_on={"issue_refund": {"allowed_decisions": ["approve", "reject"]}},
                interrupt_mode="per_call",
            )
        ],
    )
