"""Graphs the dashboard tests run: a refunds agent whose one tool needs approval.

The model is a deterministic ``ChatModel`` (the engine's injectable client; no network):
on a person's message it asks to call ``issue_refund`` with the order id and amount it
finds in the text; once the tool has answered, it replies with the tool's result.
"""

from __future__ import annotations

import re
from typing import Any

from criogen import END, START, Workflow
from criogen.engine.agents import Agent
from criogen.engine.messages import ai
from criogen.engine.tools import tool


class RefundModel:
    """Asks for refunds on the first turn, then reports the tools' answers."""

    def complete(self, messages: list[dict[str, Any]], tools: Any = ()) -> dict[str, Any]:
        last = messages[-1]
        if last.get("type") == "tool":
            results = [m.get("content") for m in messages if m.get("type") == "tool"]
            return ai("Done: " + "; ".join(str(r) for r in results))
        text = str(last.get("content") or "")
        # One call per "order X of N EUR" in the message (several calls wait together).
        pairs = re.findall(r"order (\S+) of (\d+(?:\.\d+)?) ?EUR", text) or [
            ((re.search(r"order (\S+)", text) or [None, "42"])[1], "10")
        ]
        calls = [
            {"name": "issue_refund", "args": {"order_id": order, "amount": float(amount)}}
            for order, amount in pairs
        ]
        return ai("", calls)


@tool
def issue_refund(order_id: str, amount: float) -> str:
    """Refund ``amount`` EUR on order ``order_id``."""
    return f"refunded {amount:.2f} EUR on order {order_id}"


agent = Agent(
    RefundModel(),
    instructions="You issue refunds.",
    tools=[issue_refund],
    approve=["issue_refund"],
    name="refunds",
)


_declined: set[str] = set()


def _charge(state: dict[str, Any]) -> dict[str, Any]:
    # Declines each order once per process (``explode`` set): the first run fails, a
    # retry succeeds. Orders without an id decline every time.
    order = str(state.get("order") or "")
    if state.get("explode") and (not order or order not in _declined):
        _declined.add(order)
        raise RuntimeError("card declined <b>twice</b>")
    return {"charged": True}


flaky = Workflow(name="flaky")
flaky.add_node("charge", _charge)
flaky.add_edge(START, "charge")
flaky.add_edge("charge", END)
"""``flaky``: one node that fails once per order while ``explode`` is set (for Retry)."""
