"""A workflow whose suspension takes its deadline options from the input."""

from __future__ import annotations

from typing import Any

from criogen import END, START, Workflow, suspend


def ask(state: dict[str, Any]) -> dict[str, Any]:
    answer = suspend("approve refund", {"amount": 10}, **state.get("options", {}))
    return {"answer": answer}


workflow = Workflow(name="deadlines")
workflow.add_node("ask", ask)
workflow.add_edge(START, "ask")
workflow.add_edge("ask", END)


def _refund_agent() -> Any:
    from criogen import Agent, tool
    from criogen.llms import ScriptedModel

    @tool
    def issue_refund(order_id: str) -> str:
        """Refund an order."""
        return f"refunded {order_id}"

    def reply(messages: list[dict[str, Any]], tools: Any = None) -> Any:
        last = messages[-1]
        if last["type"] == "tool":
            return f"done: {last['content']}"
        return {"tool_calls": [{"name": "issue_refund", "args": {"order_id": "42"}}]}

    return Agent(
        model=ScriptedModel([reply] * 50),
        tools=[issue_refund],
        approve={"issue_refund": {"deadline": "24h", "default": "reject"}},
        name="refunds-with-deadline",
    )


agent = _refund_agent()
