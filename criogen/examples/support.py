"""``support``: a support agent that looks up orders and refunds them with approval.

The ``issue_refund`` tool needs a person's approval; ``lookup_order`` is a read-only,
idempotent tool. Without ``OPENAI_API_KEY`` the model is a :class:`ScriptedModel`
playing one conversation (look the order up, ask to refund it, confirm), so the demo
and the tests run offline; with the key set it is ``OpenAIChat`` (model from
``CRIOGEN_MODEL``, default ``gpt-4o-mini``). The scripted replies are read off
the transcript (:func:`respond`), so it serves any number of turns.

``agent`` is unbound (its own in-memory storage); the server binds it to its database
with ``agent.with_storage(Storage.default())``. ``make_agent(storage)`` builds one on
a given storage (tests and other processes use it).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from criogen import Agent, Memory, tool
from criogen.engine.tools import ToolContext
from criogen.llms import OpenAIChat, ScriptedModel

ORDERS: dict[str, dict[str, Any]] = {
    "42": {"order_id": "42", "item": "kettle", "amount": 10.0, "status": "delivered"},
    "43": {"order_id": "43", "item": "toaster", "amount": 25.0, "status": "shipped"},
}
REFUNDS: list[dict[str, Any]] = []
"""Refunds issued in this process (a stand-in for a payment provider), with the
idempotency key each was issued under: a key seen twice is refunded once."""


@tool(idempotent=True)
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order by its id.

    Args:
        order_id: The order's id, e.g. "42".
    """
    order = ORDERS.get(order_id)
    if order is None:
        raise ValueError(f"there is no order {order_id!r}")
    return order


@tool
def issue_refund(order_id: str, amount: float, ctx: ToolContext) -> str:
    """Refund an order (needs a person's approval).

    Args:
        order_id: The order to refund.
        amount: Amount in euros.
    """
    if not any(r["key"] == ctx.idempotency_key for r in REFUNDS):
        REFUNDS.append({"order_id": order_id, "amount": amount, "key": ctx.idempotency_key})
    return f"Refunded {amount:.2f} EUR on order {order_id}."


INSTRUCTIONS = (
    "You are a support agent for a small shop. Look orders up before acting. Refunds "
    "need a person's approval: call issue_refund and the operator decides."
)


def respond(messages: list[dict[str, Any]]) -> dict[str, Any] | str:
    """The scripted model's next reply, read off the transcript: look the order up,
    ask to refund it, then report what the refund's tool result says."""
    last = messages[-1]
    if last.get("type") == "human":
        found = re.search(r"\d+", str(last.get("content")))
        order_id = found.group(0) if found else "42"
        return {"tool_calls": [{"name": "lookup_order", "args": {"order_id": order_id}}]}
    if last.get("type") == "tool" and last.get("name") == "lookup_order":
        if last.get("status") == "error":
            return "I could not find that order: " + str(last.get("content"))
        order = json.loads(last["content"])
        args = {"order_id": order["order_id"], "amount": order["amount"]}
        return {"tool_calls": [{"name": "issue_refund", "args": args}]}
    if last.get("type") == "tool" and last.get("status") == "error":
        return "The refund was not made: " + str(last.get("content"))
    if last.get("type") == "tool":
        return "Done: " + str(last.get("content"))
    return "How can I help?"


def make_model() -> Any:
    """``OpenAIChat`` when ``OPENAI_API_KEY`` is set, else a fresh ``ScriptedModel``."""
    if os.environ.get("OPENAI_API_KEY"):
        return OpenAIChat(os.environ.get("CRIOGEN_MODEL", "gpt-4o-mini"))
    # One stateless item per call, so the demo agent serves any number of turns.
    return ScriptedModel([respond] * 100_000)


def make_agent(storage: Any = None, **options: Any) -> Agent:
    """A support agent on ``storage`` (default: its own in-memory storage)."""
    return Agent(
        model=options.pop("model", None) or make_model(),
        instructions=INSTRUCTIONS,
        tools=[lookup_order, issue_refund],
        approve=["issue_refund"],
        memory=Memory.by_state("user_id"),
        storage=storage,
        name="support",
        **options,
    )


agent = make_agent()
